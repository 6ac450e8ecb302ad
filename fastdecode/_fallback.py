"""Pillow for the formats the C core does not decode, with the same options.

Pillow is imported lazily: it is only needed when a dataset mixes in such
formats, or when a native format without DCT scaling (BMP) is asked for at a
reduced scale.

What Pillow opens is not always a plain image; each case has one outcome:

- empty data (a zero-byte file) is a :class:`DecodeError`, "Empty input
  file", as :func:`~fastdecode.decode_jpeg` says it;
- a stub plugin without a registered handler (BUFR, GRIB, HDF5, WMF off
  Windows: Pillow names the format, reports 0x0 and has no decoder) is an
  :class:`UnsupportedFormatError` from the header on; any size that is not
  positive is a :class:`DecodeError`;
- an animation or a multi-page file (GIF, APNG, WebP, TIFF) gives its first
  frame, as ``PIL.Image.open(f).convert(mode)`` does (what torchvision's
  ImageFolder loader returns);
- the other modes (1, L, LA, I;16, I, F, P, PA, RGBA, CMYK, LAB...) are
  converted as ``convert(mode)`` converts them: 16- and 32-bit values are
  clipped to 0..255, alpha and transparency are dropped (a palette whose
  transparency is a byte string goes through RGBA, the same pixels without
  Pillow's warning about it; LAB, which Pillow cannot convert to L, goes
  through RGB, as ImageFolder's RGB image then ``Grayscale`` does);
- a truncated file, a plugin that fails (or needs a program that is not
  installed, as EPS's Ghostscript) is a :class:`DecodeError`;
- a decompression bomb Pillow refuses (``DecompressionBombError``, or its
  ``DecompressionBombWarning`` when the warnings filter makes it an error)
  is an :class:`ImageTooLargeError`, as are sizes above 32 bits.

See docs/decisions/robustness.md and docs/decisions/datasets.md (issue 27).
"""

from __future__ import annotations

import functools
import io
from typing import Any

import numpy as np

from fastdecode import _formats
from fastdecode._native import check_work, fill_out, plan_shape, resize
from fastdecode._options import DEFAULTS, DecodeOptions
from fastdecode._types import ImageInfo
from fastdecode.errors import DecodeError, ImageTooLargeError, UnsupportedFormatError

_COLOR_SPACES = {"L": "gray", "1": "gray", "LA": "gray", "I": "gray", "F": "gray",
                 "RGB": "rgb", "RGBA": "rgb", "CMYK": "cmyk", "YCbCr": "ycbcr", "P": "palette"}
# the largest side the C planner takes (plan_shape: a positive 32-bit size)
_MAX_SIDE = 0xFFFFFFFF
# EXIF orientation -> PIL.Image.Transpose, as PIL.ImageOps.exif_transpose has it
_TRANSPOSE = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
              6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}


def _open(data: Any):
    if memoryview(data).nbytes == 0:  # as decode_jpeg says it, not Pillow's "cannot identify"
        raise DecodeError("Empty input file")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:  # pragma: no cover - exercised only without Pillow
        raise UnsupportedFormatError(
            f"not a {_formats.LISTED}, and Pillow (needed for other formats) is not installed"
        ) from exc
    try:
        im = Image.open(io.BytesIO(memoryview(data).cast("B").tobytes()))
    except UnidentifiedImageError:
        raise UnsupportedFormatError(
            f"unrecognized image format: not {_formats.LISTED}, and Pillow cannot identify it"
        ) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageTooLargeError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Pillow's plugins raise anything on bad data
        raise DecodeError(f"cannot read image header: {type(exc).__name__}: {exc}") from None
    try:
        _check_opened(im)
    except BaseException:
        im.close()
        raise
    return im


def _check_opened(im: Any) -> None:
    """What Pillow opened has pixels that can be decoded (see the module doc)."""
    from PIL import ImageFile

    fmt = im.format or "image"
    if isinstance(im, ImageFile.StubImageFile) and getattr(im, "_handler", None) is None:
        raise UnsupportedFormatError(
            f"{fmt}: Pillow identifies the format but has no decoder for it (a stub "
            f"plugin without a registered handler)"
        )
    width, height = im.size
    if width <= 0 or height <= 0:
        raise DecodeError(f"{fmt} image of {width}x{height} pixels: nothing to decode")
    if width > _MAX_SIDE or height > _MAX_SIDE:
        raise ImageTooLargeError(f"{fmt} image of {width}x{height} pixels: a side above 32 bits")


def _orientation(im: Any) -> int:
    """The EXIF orientation (1-8; 1 when absent or out of range) from what
    Pillow read with the header, never loading the pixels: PNG's own
    ``getexif`` decodes the whole image (past every limit) to look for an
    eXIf chunk after it, so a PNG's EXIF counts where Pillow writes it,
    before the pixels, in read_header and decode alike. A TIFF's is 1:
    Pillow itself gives its size and, on load, its pixels oriented."""
    from PIL import Image

    if im.format == "TIFF":
        return 1
    try:
        orientation = Image.Image.getexif(im).get(0x0112, 1)
    except Exception as exc:  # noqa: BLE001 - a broken EXIF block, a closed file
        raise DecodeError(f"cannot read image header: {type(exc).__name__}: {exc}") from None
    return orientation if orientation in range(1, 9) else 1


def read_header(data: Any) -> ImageInfo:
    with _open(data) as im:
        return ImageInfo(
            format=(im.format or "unknown").lower(),
            width=im.width,
            height=im.height,
            channels=len(im.getbands()),
            color_space=_COLOR_SPACES.get(im.mode, "other"),
            subsampling=None,
            progressive=bool(im.info.get("progressive") or im.info.get("interlace")),
            orientation=_orientation(im),
        )


def decode(data: Any, fmt: str | None, options: DecodeOptions) -> np.ndarray:
    """Decodes `data` (no native format; or, ``fmt`` naming one without DCT
    scaling, at a reduced scale from its native pixels) with every option of
    decode_image; ``fast`` and ``strict`` are libjpeg's and do not apply. The
    geometry is the C planner's."""
    o: DecodeOptions = {**DEFAULTS, **options}
    mode = getattr(o["mode"], "value", o["mode"])
    crop, size, max_pixels = o["crop"], o["size"], o["max_pixels"]
    plan = functools.partial(plan_shape, mode=mode, scale=o["scale"], min_size=o["min_size"],
                             crop=crop, size=size, interpolation=o["interpolation"],
                             layout=o["layout"], max_pixels=max_pixels)
    row = _formats.native(fmt)
    if row is not None:  # native pixels, Pillow only for the rescale
        from PIL import Image

        arr = row.decode(data, mode=mode, max_pixels=max_pixels,
                         max_work_per_byte=o["max_work_per_byte"])
        im = Image.fromarray(arr[:, :, 0] if mode == "L" else arr)
    else:
        from PIL import Image

        im = _open(data)
        orientation = _orientation(im) if o["exif"] else 1
        plan(im.height, im.width, crop=None)  # the options and max_pixels, before loading
        # The work budget, as the native decoders count it: 64 pixels a block.
        # Only the first frame of an animation is ever decoded (module doc).
        check_work(-(-im.width * im.height // 64), memoryview(data).nbytes,
                   o["max_work_per_byte"], im.format or "image")
        try:
            im.load()
            if orientation != 1:
                im = im.transpose(Image.Transpose[_TRANSPOSE[orientation]])
            if im.mode == "P" and isinstance(im.info.get("transparency"), bytes):
                im = im.convert("RGBA")  # convert(mode)'s pixels, without its warning
            elif im.mode == "LAB" and mode == "L":
                im = im.convert("RGB")  # Pillow has no LAB -> L
            im = im.convert(mode)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageTooLargeError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise anything on bad data
            raise DecodeError(f"cannot decode {im.format or 'image'}: {exc}") from None
    height, width = im.height, im.width
    planned = plan(height, width)  # the crop against the (oriented) image
    if size is not None:  # from full resolution: the most faithful for these formats
        arr = np.asarray(im).reshape(height, width, -1)
        box = None if crop is None else (crop[1], crop[0], crop[1] + crop[3], crop[0] + crop[2])
        return resize(arr, size, interpolation=o["interpolation"], box=box, flip=o["flip"],
                      layout=o["layout"], out=o["out"])
    if planned.scale_num != 8:
        scaled_h, scaled_w = planned.scaled_size
        im = im.resize((scaled_w, scaled_h), Image.Resampling.BOX)
    arr = np.asarray(im)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    top, left, region_h, region_w = planned.region
    arr = arr[top:top + region_h, left:left + region_w]
    if o["flip"]:
        arr = arr[:, ::-1]
    if getattr(o["layout"], "value", o["layout"]) == "CHW":
        arr = arr.transpose(2, 0, 1)
    arr = np.ascontiguousarray(arr)
    return arr if o["out"] is None else fill_out(arr, o["out"], o["layout"])
