"""The decode options: their one type (DecodeOptions), their defaults and the input limits.

Private. `api.decode_image`/`read_image`, the Pillow fallback, the binding's
signatures (``_native.pyx`` takes its defaults from here) and the stubs
(``_native.pyi``) are written against this; tests/api checks that every
entry point's keywords and defaults are these. Imports nothing beyond the
standard library, so numpy-only installs load it.
"""

from __future__ import annotations

import errno
import functools
import os
import re
from typing import Any, Optional, Protocol, Tuple, TypedDict, Union

from fastdecode._types import Layout, Mode

__all__: list[str] = []  # private

# Pillow's Image.MAX_IMAGE_PIXELS (its decompression-bomb threshold). The C
# core's FD_DEFAULT_MAX_PIXELS (for C callers) is checked against it when the
# binding loads.
DEFAULT_MAX_PIXELS = 178956970
# The work budget, in 8x8 blocks of decoding per byte of input (a block of
# each component once per scan that codes it; 64 pixels for formats without
# blocks). docs/decisions/robustness.md, "Work budget", has the measurements behind the value; the
# C core's FD_DEFAULT_MAX_WORK_PER_BYTE is checked against it too.
DEFAULT_MAX_WORK_PER_BYTE = 2048
# The largest file read whole as one image (bytes), before anything decodes
# it: the largest uncompressed BMP within DEFAULT_MAX_PIXELS (32 bits a
# pixel) is 716 MB. A larger file (a video or an archive named like an
# image, a sparse file) is an OSError (EFBIG) naming it, refused from its
# size before anything is allocated. MAX_FILE_BYTES_ENV overrides it.
DEFAULT_MAX_FILE_BYTES = 1 << 30
MAX_FILE_BYTES_ENV = "FASTDECODE_MAX_FILE_BYTES"

_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1 << 10, "M": 1000**2, "MB": 1000**2,
          "MIB": 1 << 20, "G": 1000**3, "GB": 1000**3, "GIB": 1 << 30, "T": 1000**4,
          "TB": 1000**4, "TIB": 1 << 40}


def parse_bytes(value: Union[int, str]) -> int:
    """A byte count: an int, or a string such as '64MiB', '2GiB', '1.5GB', '4096'."""
    if isinstance(value, bool):
        raise TypeError(f"a byte count must be an int or a string like '2GiB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a byte count must be >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"a byte count must be an int or a string like '2GiB', got {value!r}")
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", value)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a byte count (e.g. '64MiB', '2GiB', 4096)")
    return int(float(match.group(1)) * _UNITS[unit])


def over_file_limit(path: Any, limit: int) -> OSError:
    """The error of a file larger than the per-file limit ``limit``: EFBIG,
    naming ``path`` and the variable that raises the limit."""
    return OSError(errno.EFBIG, f"larger than the per-file limit of {limit:,} bytes (set "
                                f"{MAX_FILE_BYTES_ENV} to read larger files)", path)


def max_file_bytes() -> int:
    """The per-file limit in force: ``$FASTDECODE_MAX_FILE_BYTES`` (a byte
    count, e.g. '4GiB'; read at each call, so workers see the parent's), else
    DEFAULT_MAX_FILE_BYTES. ValueError naming the variable for a value that
    is no byte count or is 0."""
    return _file_limit_of(os.environ.get(MAX_FILE_BYTES_ENV, ""))


@functools.lru_cache(maxsize=8)
def _file_limit_of(text: str) -> int:
    """max_file_bytes() of the variable's value ``text``, parsed once per value
    (it is asked at every inline open; a bad value raises each time)."""
    text = text.strip()
    if not text:
        return DEFAULT_MAX_FILE_BYTES
    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise ValueError(f"{MAX_FILE_BYTES_ENV}={text!r}: {exc}") from None
    if value <= 0:
        raise ValueError(f"{MAX_FILE_BYTES_ENV}={text!r}: the limit must be at least one byte")
    return value


class NamedInterpolation(Protocol):
    """torchvision's InterpolationMode (or any enum whose value is a name)."""

    @property
    def value(self) -> str: ...


ModeName = Union[Mode, str]
LayoutName = Union[Layout, str]
Interpolation = Union[str, NamedInterpolation]


class DecodeOptions(TypedDict, total=False):
    """Every keyword of decode_image/read_image (decode_jpeg takes them all,
    decode_bmp those in BMP_OPTIONS)."""

    mode: ModeName
    scale: Optional[float]
    min_size: Optional[Tuple[int, int]]
    crop: Optional[Tuple[int, int, int, int]]
    size: Optional[Tuple[int, int]]
    interpolation: Interpolation
    flip: bool
    layout: LayoutName
    out: Any
    exif: bool
    fast: bool
    strict: bool
    max_pixels: Optional[int]
    max_work_per_byte: Optional[int]


# In signature order (the public order of decode_jpeg and decode_image).
DEFAULTS: DecodeOptions = {
    "mode": "RGB",
    "scale": None,
    "min_size": None,
    "crop": None,
    "size": None,
    "interpolation": "bilinear",
    "flip": False,
    "layout": "HWC",
    "out": None,
    "exif": False,
    "fast": False,
    "strict": False,
    "max_pixels": DEFAULT_MAX_PIXELS,
    "max_work_per_byte": DEFAULT_MAX_WORK_PER_BYTE,
}

# The options BMP decoding has (no DCT scaling, no EXIF, no IDCT choice).
BMP_OPTIONS = ("mode", "crop", "size", "interpolation", "flip", "layout", "out", "max_pixels",
               "max_work_per_byte")
# PNG: BMP's, and exif (a file with an eXIf chunk goes to Pillow when it is set).
PNG_OPTIONS = BMP_OPTIONS + ("exif",)
# WebP: every option but libjpeg's IDCT choices (its scales are libwebp's rescaler).
WEBP_OPTIONS = tuple(name for name in DEFAULTS if name not in ("fast", "strict"))
