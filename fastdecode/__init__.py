"""fastdecode: fast, safe image decoding for PyTorch data loading."""

from typing import TYPE_CHECKING

from fastdecode._checkpoint import load_state, save_state
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
    from fastdecode.data.datasets import FastDatasetFolder, FastImageFolder, FastImageList
    from fastdecode.data.loader import FastLoader, collate, worker_init_fn
    from fastdecode.transforms import fuse

# torch-dependent parts load on first use, so `import fastdecode` stays light.
_LAZY = {
    "FastDatasetFolder": "fastdecode.data.datasets",
    "FastImageFolder": "fastdecode.data.datasets",
    "FastImageList": "fastdecode.data.datasets",
    "FastLoader": "fastdecode.data.loader",
    "collate": "fastdecode.data.loader",
    "worker_init_fn": "fastdecode.data.loader",
    "fuse": "fastdecode.transforms",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fastdecode' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
