"""fastdecode: fast, safe image decoding for PyTorch data loading."""

from fastdecode._version import __version__
from fastdecode._types import ImageInfo, Layout, Mode
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
    ImageTooLargeError,
    UnsupportedFormatError,
)

__all__ = [
    "__version__",
    "DEFAULT_MAX_PIXELS",
    "DecodeError",
    "FastDecodeError",
    "ImageInfo",
    "ImageTooLargeError",
    "Layout",
    "Mode",
    "UnsupportedFormatError",
    "decode_bmp",
    "decode_image",
    "decode_jpeg",
    "info",
    "read_header",
    "read_image",
]
