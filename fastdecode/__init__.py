"""fastdecode: fast, safe image decoding for PyTorch data loading."""

from typing import TYPE_CHECKING

from fastdecode._checkpoint import load_state, save_state
from fastdecode._lazy import lazy_attributes
from fastdecode._types import ImageInfo, Layout, Mode
from fastdecode._version import __version__
from fastdecode.api import (
    DEFAULT_MAX_PIXELS,
    decode_bmp,
    decode_image,
    decode_jpeg,
    info,
    read_header,
    read_image,
)
from fastdecode.errors import (
    DecodeError,
    FastDecodeError,
    ImageFileError,
    ImageFileTooLargeError,
    ImageTooLargeError,
    UnsupportedFormatError,
    UnsupportedImageFileError,
)

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers
    from fastdecode.datasets import FastDatasetFolder, FastImageFolder, FastImageList
    from fastdecode.loader import FastLoader, collate, worker_init_fn
    from fastdecode.transforms import fuse

# torch-dependent parts load on first use, so `import fastdecode` stays light.
_LAZY = {
    "FastDatasetFolder": "fastdecode.datasets",
    "FastImageFolder": "fastdecode.datasets",
    "FastImageList": "fastdecode.datasets",
    "FastLoader": "fastdecode.loader",
    "collate": "fastdecode.loader",
    "worker_init_fn": "fastdecode.loader",
    "fuse": "fastdecode.transforms",
}


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)


__all__ = [
    "__version__",
    "FastDatasetFolder",
    "FastImageFolder",
    "FastImageList",
    "FastLoader",
    "collate",
    "fuse",
    "worker_init_fn",
    "DEFAULT_MAX_PIXELS",
    "DecodeError",
    "FastDecodeError",
    "ImageFileError",
    "ImageFileTooLargeError",
    "ImageInfo",
    "ImageTooLargeError",
    "Layout",
    "Mode",
    "UnsupportedFormatError",
    "UnsupportedImageFileError",
    "decode_bmp",
    "decode_image",
    "decode_jpeg",
    "info",
    "load_state",
    "read_header",
    "read_image",
    "save_state",
]
