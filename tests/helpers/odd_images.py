"""Inputs that are not plain images, each with the outcome fastdecode owes it
(tests/core/test_fallback_odd.py at the decode layer, tests/data/
test_odd_tree.py at the dataset layer).

Every case is made here from a few bytes or by Pillow (nothing is stored but
issue 27's BUFR file, a regression input). ``ODD`` maps a readable name to an
:class:`Odd`: the bytes, a file suffix an ImageFolder accepts, and either an
expected error (class and message pattern of the decode functions' error)
or None: it decodes, to what ``PIL.Image.open(f).convert(mode)`` gives (the
first frame of an animation).
"""

from __future__ import annotations

import io
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from PIL import Image

import fastdecode as fd

REGRESSIONS = Path(__file__).resolve().parents[1] / "core" / "regressions"

# The three frames of the animated cases: distinct, flat, exact in every codec
FRAMES = ((255, 0, 0), (0, 255, 0), (0, 0, 255))


@dataclass(frozen=True)
class Odd:
    make: Callable[[], bytes]
    suffix: str  # what the file is called in an ImageFolder tree
    error: Optional[type] = None  # None: it decodes
    match: str = ""
    filters: tuple[str, ...] = ()  # pytest filterwarnings the case runs under
    skip: Optional[str] = None  # why the case cannot run here, if it cannot


def save(im: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _ramp(height: int = 12, width: int = 16) -> Image.Image:
    return Image.fromarray((np.arange(height * width * 3).reshape(height, width, 3) * 7 % 256)
                           .astype(np.uint8))


def _animated(fmt: str, **kwargs) -> bytes:
    frames = [Image.new("RGB", (16, 12), c) for c in FRAMES]
    return save(frames[0], fmt, save_all=True, append_images=frames[1:], **kwargs)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_header_only(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IEND", b"")


def _gif_screen(width: int, height: int) -> bytes:
    return (b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00,"
            + struct.pack("<HHHH", 0, 0, width, height) + b"\x00\x02\x02\x44\x01\x00;")


def _wmf(x1: int, inch: int) -> bytes:
    """A placeable WMF header: 'bbox' 0,0 .. x1,50 at ``inch`` units per inch."""
    return (b"\xd7\xcd\xc6\x9a\x00\x00" + struct.pack("<hhhhH", 0, 0, x1, 50, inch) + bytes(6)
            + b"\x01\x00\t\x00" + bytes(18))


def _emf_zero_frame() -> bytes:
    """An EMF header whose frame is empty: Pillow divides by its width."""
    return b"\x01\x00\x00\x00" + bytes(4) + struct.pack("<8i", 0, 0, 10, 10, 0, 0, 0, 0) + b" EMF"


def _bmp_header(width: int, height: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + 16, 0, 0, 14 + len(info)) + info + bytes(16)


def _bufr_jfif() -> bytes:
    return (REGRESSIONS / "decode_image-bufr-stub-jfif.bin").read_bytes()


def _i16() -> Image.Image:
    return Image.fromarray((np.arange(12 * 16).reshape(12, 16) * 300).astype(np.uint16))


def _float32() -> Image.Image:
    return Image.fromarray(np.linspace(-1, 300, 192, dtype=np.float32).reshape(12, 16))


# ImageFolder's IMG_EXTENSIONS has no .gif: a GIF in a tree is named .png
# (what the bytes are decides the decoder, never the name)
GIF = ".png"
STUB = "Pillow identifies the format but has no decoder"
UNIDENTIFIED = "Pillow cannot identify it"
NO_GS = None if shutil.which("gs") is None else "Ghostscript is installed: EPS decodes"
WMF_NATIVE = "Pillow draws WMF here (Windows)" if hasattr(Image.core, "drawwmf") else None

ODD: dict[str, Odd] = {
    # stub plugins: Pillow names the format, reports 0x0, has no decoder
    "stub-bufr-jfif": Odd(_bufr_jfif, ".jpg", fd.UnsupportedFormatError, f"BUFR: {STUB}"),
    "stub-bufr": Odd(lambda: b"BUFR" + bytes(60), ".png", fd.UnsupportedFormatError,
                     f"BUFR: {STUB}"),
    "stub-grib": Odd(lambda: b"GRIB\x00\x00\x00\x01" + bytes(60), ".png",
                     fd.UnsupportedFormatError, f"GRIB: {STUB}"),
    "stub-hdf5": Odd(lambda: b"\x89HDF\r\n\x1a\n" + bytes(60), ".png",
                     fd.UnsupportedFormatError, f"HDF5: {STUB}"),
    "stub-wmf": Odd(lambda: _wmf(100, 72), ".png", fd.UnsupportedFormatError, f"WMF: {STUB}",
                    skip=WMF_NATIVE),
    "wmf-zero-inch": Odd(lambda: _wmf(100, 0), ".png", fd.DecodeError, "Invalid inch"),
    "emf-zero-frame": Odd(_emf_zero_frame, ".png", fd.DecodeError, "ZeroDivisionError"),
    # no pixels at all
    "png-0x0": Odd(lambda: _png_header_only(0, 0), ".png", fd.DecodeError,
                   "PNG of 0x0 pixels"),  # the native header (issue 53)
    "gif-0x5": Odd(lambda: _gif_screen(0, 5), GIF, fd.UnsupportedFormatError, UNIDENTIFIED),
    "bmp-0x0": Odd(lambda: _bmp_header(0, 0), ".bmp", fd.DecodeError, "invalid BMP width 0"),
    "bmp-4x0": Odd(lambda: _bmp_header(4, 0), ".bmp", fd.DecodeError, "invalid BMP height 0"),
    "empty-file": Odd(lambda: b"", ".jpg", fd.DecodeError, "Empty input file$"),
    "text-file": Odd(lambda: b"not an image, named .png\n", ".png", fd.UnsupportedFormatError,
                     UNIDENTIFIED),
    # one pixel: a real image
    "png-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "PNG"), ".png"),
    "gif-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "GIF"), GIF),
    "webp-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "WEBP", lossless=True),
                    ".webp"),
    "tiff-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "TIFF"), ".tif"),
    "bmp-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "BMP"), ".bmp"),
    "jpeg-1x1": Odd(lambda: save(Image.new("RGB", (1, 1), (9, 8, 7)), "JPEG"), ".jpg"),
    # animations and pages: the first frame
    "gif-animated": Odd(lambda: _animated("GIF"), GIF),
    "apng": Odd(lambda: _animated("PNG"), ".png"),
    "webp-animated": Odd(lambda: _animated("WEBP", lossless=True), ".webp"),
    "tiff-pages": Odd(lambda: _animated("TIFF"), ".tif"),
    # 16- and 32-bit modes
    "png-I;16": Odd(lambda: save(_i16(), "PNG"), ".png"),
    "tiff-I;16": Odd(lambda: save(_i16(), "TIFF"), ".tif"),
    "tiff-I": Odd(lambda: save(_i16().convert("I"), "TIFF"), ".tif"),
    "tiff-F": Odd(lambda: save(_float32(), "TIFF"), ".tif"),
    # palettes with transparency, alpha, other modes
    "png-P-trns-bytes": Odd(lambda: save(_ramp().convert("P"), "PNG",
                                         transparency=bytes(range(256))), ".png"),
    "png-P-trns-index": Odd(lambda: save(_ramp().convert("P"), "PNG", transparency=3), ".png"),
    "gif-P-trns": Odd(lambda: save(_ramp().convert("P"), "GIF", transparency=3), GIF),
    "png-LA": Odd(lambda: save(_ramp().convert("LA"), "PNG"), ".png"),
    "png-RGBA": Odd(lambda: save(_ramp().convert("RGBA"), "PNG"), ".png"),
    "png-1bit": Odd(lambda: save(_ramp().convert("1"), "PNG"), ".png"),
    "tiff-CMYK": Odd(lambda: save(_ramp().convert("CMYK"), "TIFF"), ".tif"),
    "tiff-LAB": Odd(lambda: save(_ramp().convert("LAB"), "TIFF"), ".tif"),
    # truncated
    "png-truncated": Odd(lambda: save(_ramp(), "PNG")[:60], ".png", fd.DecodeError,
                         "image file is truncated"),
    "gif-truncated": Odd(lambda: _animated("GIF")[:40], GIF, fd.DecodeError,
                         "image file is truncated"),
    "webp-truncated": Odd(lambda: save(_ramp(), "WEBP")[:40], ".webp", fd.DecodeError,
                          "truncated WebP"),
    "tiff-truncated": Odd(lambda: save(_ramp(), "TIFF")[:300], ".tif", fd.DecodeError,
                          "image file is truncated"),
    "jpeg-truncated": Odd(lambda: save(_ramp(), "JPEG")[:300], ".jpg", fd.DecodeError,
                          "truncated JPEG"),
    "bmp-truncated": Odd(lambda: save(_ramp(), "BMP")[:80], ".bmp", fd.DecodeError,
                         "truncated BMP"),
    # a program Pillow needs and does not find
    "eps-no-ghostscript": Odd(lambda: b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n"
                              b"showpage\n", ".png", fd.DecodeError, "Ghostscript", skip=NO_GS),
    # decompression bombs Pillow itself raises on
    "gif-bomb-error": Odd(lambda: _gif_screen(40000, 45000), GIF, fd.ImageTooLargeError,
                          r"Image size \(1800000000 pixels\) exceeds limit"),
    "png-bomb-warning-as-error": Odd(
        lambda: _png_header_only(10000, 10000), ".png", fd.ImageTooLargeError,
        "above max_work_per_byte",  # the native decoder's budget, before Pillow's limit
        filters=("error::PIL.Image.DecompressionBombWarning",)),
    "png-bomb-warning-ignored": Odd(
        lambda: _png_header_only(10000, 10000), ".png", fd.ImageTooLargeError,
        "above max_work_per_byte", filters=("ignore::PIL.Image.DecompressionBombWarning",)),
}

ERRORS = [name for name, odd in ODD.items() if odd.error is not None]
DECODES = [name for name, odd in ODD.items() if odd.error is None]
ANIMATED = ("gif-animated", "apng", "webp-animated", "tiff-pages")


def params(names, **extra):
    """pytest.params over ``names``, with each case's warning filters and skip."""
    import pytest

    out = []
    for name in names:
        odd = ODD[name]
        marks = [pytest.mark.filterwarnings(f) for f in odd.filters]
        if odd.skip:
            marks.append(pytest.mark.skip(reason=odd.skip))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def pil_reference(data: bytes, mode: str = "RGB") -> np.ndarray:
    """What ImageFolder's PIL loader gives (its convert, its first frame), HWC."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the P + bytes-transparency warning
        with Image.open(io.BytesIO(data)) as im:
            if im.mode == "LAB" and mode == "L":  # no LAB -> L in Pillow: ImageFolder + Grayscale
                im = im.convert("RGB")
            arr = np.asarray(im.convert(mode))
    return arr if arr.ndim == 3 else arr[:, :, None]
