"""Type stubs for the Cython binding (fastdecode/_native.pyx).

The public decoders' docstrings are the .pyx's own, word for word (so
documentation tools that read stubs show them); tests/api/test_docstrings.py
checks that they agree, and that the defaults written here are the binding's.
"""

import os
from typing import Any, Dict, Iterable, Optional, Tuple, Union

import numpy as np

from fastdecode._options import Interpolation, LayoutName, ModeName
from fastdecode._types import ImageInfo, PlannedShape

DEFAULT_MAX_PIXELS: int
NATIVE_FORMATS: Tuple[str, ...]
COLOR_BRIGHTNESS: int
COLOR_CONTRAST: int
COLOR_SATURATION: int
COLOR_HUE: int
COLOR_MAX_STEPS: int
AUG_COLOR: int
AUG_AFFINE: int
AUG_LUT: int
AUG_AUTOCONTRAST: int
AUG_EQUALIZE: int
AUG_SHARPNESS: int
AUG_BLUR: int
AUG_MAX_STEPS: int

def decode_jpeg(
    data: Any,
    *,
    mode: ModeName = "RGB",
    scale: Optional[float] = None,
    min_size: Optional[Tuple[int, int]] = None,
    crop: Optional[Tuple[int, int, int, int]] = None,
    size: Optional[Tuple[int, int]] = None,
    interpolation: Interpolation = "bilinear",
    flip: bool = False,
    layout: LayoutName = "HWC",
    out: Any = None,
    exif: bool = False,
    fast: bool = False,
    strict: bool = False,
    max_pixels: Optional[int] = 178956970,
    max_work_per_byte: Optional[int] = 2048,
) -> np.ndarray:
    """Decodes a JPEG into a uint8 array, with its crop, scale, resize and flip done in the same call.

    With the default options the pixels are those of
    ``PIL.Image.open(f).convert(mode)``: the same libjpeg-turbo IDCT and
    upsampling, bit for bit. The options run in one pass, in this order: EXIF
    orientation (``exif``), ``crop``, the DCT scale (``scale`` / ``min_size``,
    or picked for ``size``), the resample to ``size``, ``flip``, written in
    ``layout``. Only the rows the crop covers are decoded, and the decode stops
    after its last one. The GIL is released while pixels are decoded, so threads
    decode in parallel.

    Parameters
    ----------
    data : bytes-like
        The encoded file: bytes, bytearray, memoryview, mmap or a 1-D uint8
        numpy array (any C-contiguous buffer), read in place without a copy.
    mode : {'RGB', 'L'}, default 'RGB'
        'RGB' gives 3 channels; 'L' one channel of Pillow's luma
        (ITU-R 601-2), as ``convert('L')``. Grayscale, CMYK and YCCK files are
        converted as Pillow converts them. :class:`Mode` members work too.
    scale : float, optional
        Decode at M/8 of the full size, M in 1..8 (1, 0.5, 0.25, 0.125, 0.375,
        ...): libjpeg's DCT scaling, far cheaper than a full decode and a
        resize. The image is then ceil(H * M / 8) x ceil(W * M / 8) pixels.
        None (default) is 1, or with ``size`` the scale picked for it. Give
        ``scale`` or ``min_size``, not both.
    min_size : (int, int), optional
        (height, width): picks the smallest M/8 whose output (the crop's, with
        ``crop``) is still at least this large in both dimensions; full size
        when none is.
    crop : (int, int, int, int), optional
        (top, left, height, width) of the region to keep, in pixels of the
        full-resolution image (upright, with ``exif``): the same numbers for
        every scale. At a scale below 1 the output is the crop's footprint in
        the scaled image (start rounded down, end rounded up). It must lie
        inside the image.
    size : (int, int), optional
        (height, width) of the output: the crop (or the whole image) is
        resampled to exactly this size, as Pillow's ``Image.resize(size,
        box=crop)`` resamples (antialiased when shrinking). Without ``scale``
        or ``min_size`` the decode first takes the smallest of the 1/8, 1/4,
        1/2 and 1 scales that still covers ``size``.
    interpolation : {'bilinear', 'bicubic', 'nearest'}, default 'bilinear'
        The resample filter for ``size`` (torchvision's ``InterpolationMode``
        works too); unused without ``size``.
    flip : bool, default False
        Mirror the output left to right (what RandomHorizontalFlip does),
        written as the rows are, with no extra pass.
    layout : {'HWC', 'CHW'}, default 'HWC'
        'HWC' gives (height, width, channels), Pillow's and numpy's order;
        'CHW' gives (channels, height, width), torch's, written directly.
        :class:`Layout` members work too.
    out : numpy.ndarray or torch.Tensor, optional
        Where to write the pixels instead of a new array: a writable
        C-contiguous uint8 numpy array of the output's shape, a contiguous CPU
        ``torch.uint8`` tensor of that shape (for instance ``batch[i]`` of a
        preallocated (N, C, H, W) batch with ``layout='CHW'``), or any writable
        flat buffer of exactly the output's size in bytes.
    exif : bool, default False
        Apply the EXIF orientation tag (the upright image, as
        ``PIL.ImageOps.exif_transpose`` gives it); ``crop`` is then in the
        upright frame. Off by default, as in torchvision's ImageFolder loader.
    fast : bool, default False
        Use libjpeg-turbo's fast integer IDCT and plain chroma upsampling:
        faster, slightly less accurate, and no longer Pillow's exact pixels.
    strict : bool, default False
        Make every libjpeg warning (damage it would otherwise recover from,
        such as a corrupt Huffman code or extraneous bytes) a DecodeError. By
        default such a file decodes as Pillow decodes it. A truncated file is
        an error either way.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        Refuse an image whose declared width x height is above this, before
        anything is allocated. The default is Pillow's decompression-bomb
        limit (178956970); None disables it.
    max_work_per_byte : int or None, default 2048
        Refuse a file whose decoding work, in 8x8 blocks (a block of each
        component once per scan that codes it), is above this many per byte of
        data, before the work is done. The default passes every real photo and
        refuses files of a few hundred bytes that declare a huge image; None
        disables it.

    Returns
    -------
    numpy.ndarray
        uint8 pixels of shape (H, W, C) for 'HWC' or (C, H, W) for 'CHW', with
        C = 3 for 'RGB' and 1 for 'L'. When ``out`` is given, ``out`` itself
        (the same numpy array or tensor), filled.

    Raises
    ------
    DecodeError
        The data is corrupt or truncated (with ``strict``, damaged at all).
    UnsupportedFormatError
        The data is not a JPEG, or a variant libjpeg-turbo was built without
        (lossless or 12-bit); :func:`decode_image` tries Pillow for those.
    ImageTooLargeError
        The image is above ``max_pixels`` or ``max_work_per_byte``.
    ValueError
        An option out of range: an unknown mode, layout or interpolation, a
        scale that is not M/8, both ``scale`` and ``min_size``, a crop outside
        the image, a non-positive size; or an ``out`` of the wrong size, shape
        or dtype, read-only, not C-contiguous, or a tensor on another device.
    TypeError
        ``data`` is not bytes-like, ``out`` is neither a buffer nor a tensor,
        or ``crop`` / ``size`` / ``min_size`` is not a tuple of ints.
    MemoryError
        The output or the decoder's working memory could not be allocated.
    """
def decode_bmp(
    data: Any,
    *,
    mode: ModeName = "RGB",
    crop: Optional[Tuple[int, int, int, int]] = None,
    size: Optional[Tuple[int, int]] = None,
    interpolation: Interpolation = "bilinear",
    flip: bool = False,
    layout: LayoutName = "HWC",
    out: Any = None,
    max_pixels: Optional[int] = 178956970,
    max_work_per_byte: Optional[int] = 2048,
) -> np.ndarray:
    """Decodes a BMP into a uint8 array, with its crop, resize and flip done in the same call.

    Every header version and pixel layout of the BMP Suite is read natively
    (1/2/4/8-bit palettes, 16/24/32/64-bit, bit fields, RLE4/RLE8/RLE24, an
    embedded JPEG), with the pixels ``PIL.Image.open(f).convert(mode)`` gives
    wherever Pillow decodes the file. Alpha is dropped, as ``convert('RGB')``
    drops it. The headers are checked in full before anything is allocated, and
    the GIL is released while pixels are decoded. BMP has no DCT scaling:
    ``scale``, ``min_size``, ``exif``, ``fast`` and ``strict`` are
    :func:`decode_jpeg`'s only (:func:`decode_image` emulates the scales).

    Parameters
    ----------
    data : bytes-like
        The encoded file, any C-contiguous buffer, as for :func:`decode_jpeg`.
    mode : {'RGB', 'L'}, default 'RGB'
        'RGB' gives 3 channels; 'L' one channel of Pillow's luma
        (ITU-R 601-2), as ``convert('L')``. :class:`Mode` members work too.
    crop : (int, int, int, int), optional
        (top, left, height, width) of the region to keep, in pixels from the
        top-left corner of the image as displayed (bottom-up files too). Only
        its rows are read. It must lie inside the image.
    size : (int, int), optional
        (height, width) of the output: the crop (or the whole image) is
        resampled to exactly this size, as Pillow's ``Image.resize(size,
        box=crop)`` resamples (antialiased when shrinking).
    interpolation : {'bilinear', 'bicubic', 'nearest'}, default 'bilinear'
        The resample filter for ``size`` (torchvision's ``InterpolationMode``
        works too); unused without ``size``.
    flip : bool, default False
        Mirror the output left to right, written as the rows are.
    layout : {'HWC', 'CHW'}, default 'HWC'
        'HWC' gives (height, width, channels); 'CHW' gives (channels, height,
        width), written directly. :class:`Layout` members work too.
    out : numpy.ndarray or torch.Tensor, optional
        Where to write the pixels instead of a new array: a writable
        C-contiguous uint8 numpy array of the output's shape, a contiguous CPU
        ``torch.uint8`` tensor of that shape, or any writable flat buffer of
        exactly the output's size in bytes.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        Refuse an image whose declared width x height is above this, right
        after the dimensions are read. The default is Pillow's
        decompression-bomb limit (178956970); None disables it.
    max_work_per_byte : int or None, default 2048
        Refuse a file whose decoding work (64 pixels counting as one 8x8
        block) is above this many blocks per byte of data: an RLE file of a
        few hundred bytes that declares a huge image. None disables it.

    Returns
    -------
    numpy.ndarray
        uint8 pixels, as :func:`decode_jpeg` returns them: (H, W, C) or
        (C, H, W), ``out`` itself when given.

    Raises
    ------
    DecodeError
        The data is corrupt or truncated (pixel data missing, a bad header).
    UnsupportedFormatError
        The data is not a BMP, or uses a variant not read natively (BI_PNG,
        CMYK, OS/2 Huffman); :func:`decode_image` tries Pillow for those.
    ImageTooLargeError
        The image is above ``max_pixels`` or ``max_work_per_byte``.
    ValueError
        An option out of range (an unknown mode, layout or interpolation, a
        crop outside the image, a non-positive size), or an ``out`` of the
        wrong size, shape or dtype, read-only, not C-contiguous, or a tensor on
        another device.
    TypeError
        ``data`` is not bytes-like, ``out`` is neither a buffer nor a tensor,
        or ``crop`` / ``size`` is not a tuple of ints.
    MemoryError
        The output could not be allocated.
    """
def decode_png(
    data: Any,
    *,
    mode: ModeName = "RGB",
    crop: Optional[Tuple[int, int, int, int]] = None,
    size: Optional[Tuple[int, int]] = None,
    interpolation: Interpolation = "bilinear",
    flip: bool = False,
    layout: LayoutName = "HWC",
    out: Any = None,
    exif: bool = False,
    max_pixels: Optional[int] = 178956970,
    max_work_per_byte: Optional[int] = 2048,
) -> np.ndarray:
    """Decodes a PNG (libspng): Pillow's convert(mode) pixels; see docs/decisions/png-webp.md."""

def decode_webp(
    data: Any,
    *,
    mode: ModeName = "RGB",
    scale: Optional[float] = None,
    min_size: Optional[Tuple[int, int]] = None,
    crop: Optional[Tuple[int, int, int, int]] = None,
    size: Optional[Tuple[int, int]] = None,
    interpolation: Interpolation = "bilinear",
    flip: bool = False,
    layout: LayoutName = "HWC",
    out: Any = None,
    exif: bool = False,
    max_pixels: Optional[int] = 178956970,
    max_work_per_byte: Optional[int] = 2048,
) -> np.ndarray:
    """Decodes a WebP (libwebp), crop and M/8 scale by libwebp; see docs/decisions/png-webp.md."""

def codec_versions() -> Dict[str, Optional[str]]: ...
def sniff(data: Any) -> Optional[str]: ...
def read_native_header(data: Any) -> Optional[ImageInfo]: ...
def plan_shape(
    height: int,
    width: int,
    *,
    mode: ModeName = ...,
    scale: Optional[float] = ...,
    min_size: Optional[Tuple[int, int]] = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: Interpolation = ...,
    layout: LayoutName = ...,
    max_pixels: Optional[int] = ...,
) -> PlannedShape: ...
def check_work(
    blocks: int, nbytes: int, max_work_per_byte: Optional[int] = ..., what: str = ...
) -> None: ...
def fill_out(arr: np.ndarray, out: Any, layout: LayoutName = ...) -> Any: ...
def library_info() -> Tuple[str, bool]: ...
def resize(
    image: np.ndarray,
    size: Tuple[int, int],
    *,
    interpolation: Interpolation = ...,
    box: Optional[Tuple[float, float, float, float]] = ...,
    flip: bool = ...,
    layout: LayoutName = ...,
    out: Any = ...,
) -> np.ndarray: ...
def lut_to_float(src: np.ndarray, lut: np.ndarray, out: Optional[np.ndarray] = ...) -> np.ndarray: ...
def adjust_colors(
    image: np.ndarray, steps: Iterable[Tuple[int, float]], layout: LayoutName = ...
) -> np.ndarray: ...
def augment(
    pixels: np.ndarray, layout: LayoutName, steps: Iterable[Tuple[Any, ...]]
) -> np.ndarray: ...


class _ReadJob:
    """One submitted file of a :class:`ReadPool` (a handle: taken or dropped once)."""


class LocalFile:
    """A local file opened for one whole read in the calling thread, its size
    asked for alone (src_c/fd_readahead.h, ``fd_file_size``); a file over
    ``max_size`` bytes (None: the per-file limit, ``FASTDECODE_MAX_FILE_BYTES``)
    refused from its size; OSError naming ``path`` on failure."""

    def __init__(self, path: Union[str, bytes, "os.PathLike[str]"],
                 max_size: Optional[int] = None) -> None: ...
    @property
    def path(self) -> Union[str, bytes, "os.PathLike[str]"]: ...
    @property
    def size(self) -> int: ...
    def read(self) -> bytes: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


def read_file(path: Union[str, bytes, "os.PathLike[str]"],
              max_size: Optional[int] = None) -> bytes:
    """The bytes of the local file ``path``, read whole by :class:`LocalFile`
    (a FIFO or a device refused, a file over the limit refused from its size);
    OSError naming ``path``."""
    ...


class ReadPool:
    """Threads in C that open and read whole local files ahead, within a
    count bound and a byte bound, each file within ``max_file`` bytes (None:
    the per-file limit), taken in submission order by one consumer
    (src_c/fd_readahead.h; fastdecode.storage._readahead owns the policy)."""

    def __init__(self, max_bytes: int, max_file: Optional[int] = None) -> None: ...
    def submit(self, path: Union[str, bytes, "os.PathLike[str]"], size: int = ...) -> _ReadJob: ...
    def configure(self, depth: int, holding: bool) -> None: ...
    def take(self, handle: _ReadJob, path: str) -> Tuple[bytes, float, bool]: ...
    def drop(self, handle: _ReadJob) -> None: ...
    def stats(self) -> Dict[str, int]: ...
    def close(self, wait_s: float = ...) -> None: ...


# COCO masks at sampled rows and columns (src_c/fd_raster.h; fastdecode.targets.masks).
def raster_polygons(polygons: Iterable[Iterable[float]], h: int, w: int, rows: Any, cols: Any,
                    out: Any) -> None: ...
def raster_rle(counts: Any, h: int, w: int, rows: Any, cols: Any, out: Any) -> None: ...
def rle_from_string(s: Union[str, bytes]) -> Any: ...
