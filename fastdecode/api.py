"""The public decode functions: format dispatch, files and the Pillow fallback.

The native formats go straight to the C core through ``_native``; this module
only decides *which* decoder runs and attaches file names to errors.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from fastdecode import _fallback, _native
from fastdecode._native import DEFAULT_MAX_PIXELS, decode_bmp, decode_jpeg
from fastdecode._types import ImageInfo
from fastdecode._version import __version__
from fastdecode.errors import DecodeError, FastDecodeError, UnsupportedFormatError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "decode_bmp",
    "decode_image",
    "decode_jpeg",
    "info",
    "read_header",
    "read_image",
]

# Files at least this large are mapped rather than read: the decoder then
# pulls pages straight from the page cache without a copy.
MMAP_THRESHOLD = 1 << 20


def read_header(data: Any) -> ImageInfo:
    """Reads the header of an encoded image without decoding any pixel."""
    header = _native.read_native_header(data)
    if header is None:
        header = _fallback.read_header(data)
    return header


def decode_image(
    data: Any,
    *,
    mode: str = "RGB",
    scale: float | None = None,
    min_size: tuple[int, int] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    size: tuple[int, int] | None = None,
    interpolation: str = "bilinear",
    flip: bool = False,
    layout: str = "HWC",
    out: Any = None,
    exif: bool = False,
    fast: bool = False,
    strict: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> np.ndarray:
    """Decodes any image, natively for JPEG and BMP, through Pillow otherwise.

    Every option means what it means for :func:`decode_jpeg`. Formats without
    DCT scaling resize from full resolution when ``size`` is given; without a
    size, ``scale``/``min_size`` box-filter the image to the size libjpeg would
    have produced.
    """
    common = dict(mode=mode, crop=crop, size=size, interpolation=interpolation, flip=flip,
                  layout=layout, out=out, max_pixels=max_pixels)
    fmt = _native.sniff(data)
    if fmt == "jpeg":
        try:
            return decode_jpeg(data, scale=scale, min_size=min_size, exif=exif, fast=fast,
                               strict=strict, **common)
        except UnsupportedFormatError as native_error:
            # A JPEG variant libjpeg-turbo was built without (lossless, 12-bit):
            # Pillow's own libjpeg may have it, so a mixed dataset keeps loading.
            try:
                return _fallback.decode(data, fmt=None, scale=scale, min_size=min_size,
                                        exif=exif, **common)
            except DecodeError:
                raise native_error from None
    if fmt == "bmp" and (size is not None or (scale in (None, 1) and min_size is None)):
        return decode_bmp(data, **common)
    return _fallback.decode(data, fmt=fmt, scale=scale, min_size=min_size, exif=exif, **common)


def read_image(path: str | os.PathLike[str], **options: Any) -> np.ndarray:
    """Reads and decodes the image file at ``path``; errors name the file."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size >= MMAP_THRESHOLD:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    return decode_image(mapped, **options)
            data = f.read()
        return decode_image(data, **options)
    except FastDecodeError as exc:
        if exc.path is not None:
            raise
        raise type(exc)(exc.reason, path=os.fspath(path)) from exc


def info() -> dict[str, Any]:
    """Versions and capabilities of the running library (not of its headers)."""
    version, simd = _native.library_info()
    return {
        "version": __version__,
        "libjpeg_turbo": version,
        "simd": simd,
        "openmp": False,
    }
