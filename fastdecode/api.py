"""The public decode functions: format dispatch, files and the Pillow fallback.

A format the C core decodes goes to its native decoder (the row of
``fastdecode._formats``), anything else to Pillow (``_fallback``); this
module only decides *which* decoder runs and attaches file names to errors.
See docs/decisions/core.md.
"""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from fastdecode import _decode_paths, _fallback, _formats, _native
from fastdecode._native import DEFAULT_MAX_PIXELS, decode_bmp, decode_jpeg
from fastdecode._options import DEFAULTS as _D
from fastdecode._options import DecodeOptions, Interpolation, LayoutName, ModeName
from fastdecode._types import ImageInfo
from fastdecode._version import __version__
from fastdecode.errors import DecodeError, FastDecodeError, UnsupportedFormatError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "decode_bmp",
    "decode_image",
    "decode_jpeg",
    "info",
    "read_header",
    "read_image",
]

def check_limits(max_pixels: int | None, max_work_per_byte: int | None) -> dict:
    """The decode limits as decode_image's keywords, checked now by the
    binding's own parsers (ValueError/TypeError as a decode would raise):
    for callers that keep limits for later decodes (fuse, the datasets)."""
    _native.plan_shape(1, 1, max_pixels=max_pixels)
    _native.check_work(0, 1, max_work_per_byte)
    return {"max_pixels": max_pixels, "max_work_per_byte": max_work_per_byte}


# Files at least this large are mapped rather than read: the decoder then
# pulls pages straight from the page cache without a copy.
MMAP_THRESHOLD = 1 << 20


def _check_encoded(data: Any) -> None:
    """TypeError for a decoded image (an image array, a tensor, a PIL image)
    given where an encoded file is expected: the bytes would otherwise be
    sniffed and refused as an unrecognized format."""
    if isinstance(data, np.ndarray) and (data.ndim != 1 or data.dtype != np.uint8):
        got = f"a {data.dtype} array of shape {data.shape}"
    elif type(data).__module__.split(".")[0] in ("torch", "PIL"):
        got = f"a {type(data).__module__.split('.')[0]} {type(data).__name__}"
    else:
        return
    raise TypeError(
        f"data must be an encoded image file (bytes, bytearray, memoryview, mmap or a 1-D "
        f"uint8 numpy array), got {got}: for decoded pixels use fastdecode.transforms.fuse(chain)"
        f"(pixels), which takes uint8 arrays, tensors and PIL images"
    )


def read_header(data: Any) -> ImageInfo:
    """Reads an encoded image's header: its size and format, without decoding any pixel.

    JPEG, BMP, PNG and WebP headers are parsed natively; other formats through Pillow
    (its header only, never the pixels).

    Parameters
    ----------
    data : bytes-like
        The encoded file: bytes, bytearray, memoryview, mmap or a 1-D uint8
        numpy array.

    Returns
    -------
    ImageInfo
        ``format`` ('jpeg', 'bmp', or Pillow's name in lower case), ``width``
        and ``height`` as stored (before any EXIF orientation),
        ``channels``, ``color_space``, ``subsampling`` (JPEG; None
        otherwise), ``progressive`` and the EXIF ``orientation`` (1 when
        absent).

    Raises
    ------
    UnsupportedFormatError
        Neither the native decoders nor Pillow recognise the data (a variant
        the native decoder lacks, such as lossless JPEG, is read by Pillow).
    DecodeError
        The header is corrupt or truncated, or the data is empty ("Empty
        input file").
    TypeError
        ``data`` is not bytes-like, or is a decoded image (an image array,
        a tensor, a PIL image).
    """
    _check_encoded(data)
    try:
        header = _native.read_native_header(data)
    except UnsupportedFormatError as native_error:
        # A variant the native decoder lacks (lossless JPEG): the header
        # Pillow reads, as decode_format decodes it with Pillow.
        row = _formats.native(_native.sniff(data))
        if row is None or not row.pillow_variants:
            raise
        try:
            return _fallback.read_header(data)
        except (DecodeError, UnsupportedFormatError):
            raise native_error from None
    if header is None:
        header = _fallback.read_header(data)
    return header


def decode_image(
    data: Any,
    *,
    mode: ModeName = _D["mode"],
    scale: float | None = _D["scale"],
    min_size: tuple[int, int] | None = _D["min_size"],
    crop: tuple[int, int, int, int] | None = _D["crop"],
    size: tuple[int, int] | None = _D["size"],
    interpolation: Interpolation = _D["interpolation"],
    flip: bool = _D["flip"],
    layout: LayoutName = _D["layout"],
    out: Any = _D["out"],
    exif: bool = _D["exif"],
    fast: bool = _D["fast"],
    strict: bool = _D["strict"],
    max_pixels: int | None = _D["max_pixels"],
    max_work_per_byte: int | None = _D["max_work_per_byte"],
) -> np.ndarray:
    """Decodes any image, natively for JPEG, BMP, PNG and WebP, through Pillow otherwise.

    Every option means what it means for :func:`decode_jpeg` (see its
    Parameters for each). Formats without
    DCT scaling resize from full resolution when ``size`` is given; without a
    size, ``scale``/``min_size`` box-filter the image to the size libjpeg would
    have produced. An animation or a multi-page file gives its first frame,
    and other modes (16-bit, float, palette, alpha...) the pixels of
    ``PIL.Image.open(f).convert(mode)``; a file Pillow names but cannot
    decode (a stub plugin such as BUFR) is an :class:`UnsupportedFormatError`
    (fastdecode/_fallback.py lists each case).

    ``max_work_per_byte`` bounds the decoding work (and with it the memory) a
    file may cost per byte of its data, in 8x8 blocks (a block of each
    component once per scan that codes it; 64 pixels for formats without
    blocks): a file over it raises :class:`ImageTooLargeError` before the cost
    is paid. The default passes every real photo and refuses files of a few
    hundred bytes that declare a huge image; None disables it.

    Parameters
    ----------
    data : bytes-like
        The encoded file (bytes, bytearray, memoryview, mmap, a 1-D uint8
        numpy array).
    mode, scale, min_size, crop, size, interpolation, flip, layout : optional
        As for :func:`decode_jpeg`; ``crop=(top, left, height, width)`` in
        full-resolution pixels.
    out : numpy.ndarray or torch.Tensor, optional
        A writable C-contiguous uint8 array, or a contiguous CPU
        ``torch.uint8`` tensor, of the output's shape; filled and returned.
    exif, fast, strict : bool, default False
        As for :func:`decode_jpeg` (``fast`` and ``strict`` apply to JPEG).
    max_pixels, max_work_per_byte : int or None
        The decode limits (above).

    Returns
    -------
    numpy.ndarray
        uint8 (H, W, C) or (C, H, W) pixels, or ``out`` itself when given.

    Raises
    ------
    DecodeError
        The data is corrupt or truncated, or empty ("Empty input file").
    UnsupportedFormatError
        No decoder reads the format (or a stub plugin names it).
    ImageTooLargeError
        Above ``max_pixels`` or ``max_work_per_byte``.
    ValueError, TypeError
        Options out of range, or an ``out`` that does not fit (as for
        :func:`decode_jpeg`); TypeError also for a decoded image given as
        ``data`` (an image array, a tensor, a PIL image).
    """
    options = DecodeOptions(mode=mode, scale=scale, min_size=min_size, crop=crop, size=size,
                            interpolation=interpolation, flip=flip, layout=layout, out=out,
                            exif=exif, fast=fast, strict=strict, max_pixels=max_pixels,
                            max_work_per_byte=max_work_per_byte)
    _check_encoded(data)
    return decode_format(data, _native.sniff(data), options)


def decode_format(data: Any, fmt: Optional[str], options: DecodeOptions) -> np.ndarray:
    """decode_image of ``data`` whose format is known already (the sniff, or
    the header's ``ImageInfo.format``): its native decoder (``_formats``), or
    Pillow. ``options`` may leave keywords out (their defaults)."""
    row = _formats.native(fmt)
    if row is None:
        pixels = _fallback.decode(data, None, options)
        _decode_paths.record(fmt, native=False)
        return pixels
    if not row.dct_scaling and options.get("size") is None and (
            options.get("scale") not in (None, 1) or options.get("min_size") is not None):
        pixels = _fallback.decode(data, row.name, options)  # Pillow's box filter of its pixels
        _decode_paths.record(fmt, native=True)
        return pixels
    try:
        pixels = row.decode(data, **row.keywords(options))
    except UnsupportedFormatError as native_error:
        # A variant the native decoder lacks (JPEG: lossless, 12-bit): Pillow's
        # own decoder may have it, so a mixed dataset keeps loading.
        if not row.pillow_variants:
            raise
        try:
            pixels = _fallback.decode(data, None, options)
        except DecodeError:
            raise native_error from None
        _decode_paths.record(fmt, native=False)
        return pixels
    _decode_paths.record(fmt, native=True)
    return pixels


def read_image(path: str | os.PathLike[str], **options: Unpack[DecodeOptions]) -> np.ndarray:
    """Reads and decodes the image file at ``path``; errors name the file.

    Files of 1 MiB and more are memory-mapped rather than read. A path that
    is no regular file (a FIFO, a device) is refused rather than waited for
    or read without end, and a file over the per-file limit (1 GiB;
    ``FASTDECODE_MAX_FILE_BYTES`` sets it, e.g. ``4GiB``) is refused from
    its size.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    **options
        The keywords of :func:`decode_image`.

    Returns
    -------
    numpy.ndarray
        uint8 pixels, as :func:`decode_image` returns them.

    Raises
    ------
    FastDecodeError
        Any of :func:`decode_image`'s errors, with ``path`` set to the file.
    OSError
        The file cannot be opened or read, is no regular file, or is larger
        than the per-file limit (``errno.EFBIG``); it names the file.
    """
    try:
        file = _native.LocalFile(path)
        try:
            if file.size >= MMAP_THRESHOLD:
                with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    return decode_image(mapped, **options)
            data = file.read()
        finally:
            file.close()
        return decode_image(data, **options)
    except FastDecodeError as exc:
        if exc.path is not None:
            raise
        raise type(exc)(exc.reason, path=os.fspath(path)) from exc


def info() -> dict[str, Any]:
    """Versions and capabilities of the running library (not of its headers).

    Returns
    -------
    dict
        ``version`` (fastdecode's), ``libjpeg_turbo`` (the loaded
        library's version), ``simd`` (whether its SIMD code is in use),
        ``libspng`` and ``libwebp`` (their versions; None where the
        extension was built without one, and that format decodes through
        Pillow) and ``native`` (the formats decoded natively).
    """
    version, simd = _native.library_info()
    codecs = _native.codec_versions()
    return {
        "version": __version__,
        "libjpeg_turbo": version,
        "simd": simd,
        "libspng": codecs["png"],
        "libwebp": codecs["webp"],
        "native": list(_native.NATIVE_FORMATS),
    }
