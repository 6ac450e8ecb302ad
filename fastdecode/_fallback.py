"""Pillow for the formats the C core does not decode, with the same options.

Pillow is imported lazily: it is only needed when a dataset mixes in such
formats, or when a BMP is asked for at a reduced scale.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from fastdecode._native import check_options, decode_bmp, fill_out, resize
from fastdecode._types import ImageInfo
from fastdecode.errors import DecodeError, ImageTooLargeError, UnsupportedFormatError

_COLOR_SPACES = {"L": "gray", "1": "gray", "LA": "gray", "I": "gray", "F": "gray",
                 "RGB": "rgb", "RGBA": "rgb", "CMYK": "cmyk", "YCbCr": "ycbcr", "P": "palette"}


def _open(data: Any):
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:  # pragma: no cover - exercised only without Pillow
        raise UnsupportedFormatError(
            "not a JPEG or BMP, and Pillow (needed for other formats) is not installed"
        ) from exc
    try:
        return Image.open(io.BytesIO(memoryview(data).cast("B").tobytes()))
    except UnidentifiedImageError as exc:
        raise UnsupportedFormatError(f"unrecognized image format: {exc}") from None
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Pillow's plugins raise anything on bad data
        raise DecodeError(f"cannot read image header: {type(exc).__name__}: {exc}") from None


def read_header(data: Any) -> ImageInfo:
    with _open(data) as im:
        try:
            orientation = im.getexif().get(0x0112, 1)
        except Exception as exc:  # noqa: BLE001 - a broken EXIF block, a closed file
            raise DecodeError(f"cannot read image header: {type(exc).__name__}: {exc}") from None
        return ImageInfo(
            format=(im.format or "unknown").lower(),
            width=im.width,
            height=im.height,
            channels=len(im.getbands()),
            color_space=_COLOR_SPACES.get(im.mode, "other"),
            subsampling=None,
            progressive=bool(im.info.get("progressive") or im.info.get("interlace")),
            orientation=orientation if orientation in range(1, 9) else 1,
        )


def scaled_extent(full: int, scale_num: int) -> int:
    """The size libjpeg gives a full extent at M/8."""
    return (full * scale_num + 7) // 8


def scaled_span(start: int, length: int, scale_num: int, extent: int) -> slice:
    """The pixels a full-resolution span covers at M/8 (floor, ceil, clipped)."""
    return slice(start * scale_num // 8, min(extent, -(-(start + length) * scale_num // 8)))


def pick_scale(height: int, width: int, crop, min_size) -> int:
    """Smallest M/8 whose (cropped) output still covers min_size."""
    top, left, ch, cw = crop if crop is not None else (0, 0, height, width)
    for m in range(1, 8):
        rows = scaled_span(top, ch, m, scaled_extent(height, m))
        cols = scaled_span(left, cw, m, scaled_extent(width, m))
        if rows.stop - rows.start >= min_size[0] and cols.stop - cols.start >= min_size[1]:
            return m
    return 8


def decode(data: Any, *, fmt, mode, scale, min_size, crop, size, interpolation, flip, layout,
           out, exif, max_pixels) -> np.ndarray:
    scale_num = check_options(mode, scale, min_size, crop, layout, max_pixels, size,
                              interpolation)
    mode = getattr(mode, "value", mode)
    if fmt == "bmp":  # native pixels, Pillow only for the rescale
        from PIL import Image

        arr = decode_bmp(data, mode=mode, max_pixels=max_pixels)
        im = Image.fromarray(arr[:, :, 0] if mode == "L" else arr)
    else:
        from PIL import Image

        im = _open(data)
        if max_pixels and im.width * im.height > max_pixels:
            raise ImageTooLargeError(
                f"image is {im.width}x{im.height} = {im.width * im.height} pixels, "
                f"above max_pixels={max_pixels}"
            )
        try:
            im.load()
            if exif:
                from PIL import ImageOps

                im = ImageOps.exif_transpose(im)
            im = im.convert(mode)
        except Image.DecompressionBombError as exc:
            raise ImageTooLargeError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise anything on bad data
            raise DecodeError(f"cannot decode {im.format or 'image'}: {exc}") from None
    height, width = im.height, im.width
    if crop is not None:
        top, left, ch, cw = crop
        if top + ch > height or left + cw > width:
            raise ValueError(
                f"crop (top={top}, left={left}, height={ch}, width={cw}) is outside the "
                f"{width}x{height} image"
            )
    if size is not None:  # from full resolution: the most faithful for these formats
        arr = np.asarray(im).reshape(height, width, -1)
        box = None if crop is None else (crop[1], crop[0], crop[1] + crop[3], crop[0] + crop[2])
        return resize(arr, size, interpolation=interpolation, box=box, flip=flip,
                      layout=layout, out=out)
    if min_size is not None:
        scale_num = pick_scale(height, width, crop, min_size)
    if scale_num != 8:
        from PIL import Image

        size = (scaled_extent(width, scale_num), scaled_extent(height, scale_num))
        im = im.resize(size, Image.Resampling.BOX)
    arr = np.asarray(im)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if crop is not None:
        top, left, ch, cw = crop
        arr = arr[scaled_span(top, ch, scale_num, arr.shape[0]),
                  scaled_span(left, cw, scale_num, arr.shape[1])]
    if flip:
        arr = arr[:, ::-1]
    if layout == "CHW":
        arr = arr.transpose(2, 0, 1)
    arr = np.ascontiguousarray(arr)
    return arr if out is None else fill_out(arr, out)
