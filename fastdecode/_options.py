"""The decode options: their one type (DecodeOptions) and their defaults.

Private. `api.decode_image`/`read_image`, the Pillow fallback, the binding's
signatures (``_native.pyx`` takes its defaults from here) and the stubs
(``_native.pyi``) are written against this; tests/api checks that every
entry point's keywords and defaults are these. Imports nothing beyond the
standard library, so numpy-only installs load it.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Tuple, TypedDict, Union

from fastdecode._types import Layout, Mode

__all__: list[str] = []  # private

# Pillow's Image.MAX_IMAGE_PIXELS (its decompression-bomb threshold). The C
# core's FD_DEFAULT_MAX_PIXELS (for C callers) is checked against it when the
# binding loads.
DEFAULT_MAX_PIXELS = 178956970
# The work budget, in 8x8 blocks of decoding per byte of input (a block of
# each component once per scan that codes it; 64 pixels for formats without
# blocks). DESIGN.md "Robustness" has the measurements behind the value; the
# C core's FD_DEFAULT_MAX_WORK_PER_BYTE is checked against it too.
DEFAULT_MAX_WORK_PER_BYTE = 2048


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
