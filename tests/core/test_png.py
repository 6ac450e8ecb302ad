"""Native PNG (src_c/fd_png.c, libspng): Pillow's pixels for every file of the
PNG corpus, typed errors for the corrupt ones (issue 53).

* ``../shared/corpus/png`` (PngSuite and libpng's test PNGs: every colour
  type, bit depth, transparency, interlacing, and crashers), each file x
  {decode RGB, decode L, a native crop}: Pillow's ``convert()`` pixels, or a
  typed error where Pillow refuses the file. Skipped when the corpus is
  absent. The fused chains: tests/transforms/test_formats_fused.py.
* Which files the native decoder hands to Pillow (palette indices past the
  palette).
* Crafted files: bad CRCs, truncated IDAT, huge IHDR, zlib bombs, a stream
  longer than the image.

Also run against the ASan/UBSan build by `make test-sanitize`.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

import fastdecode as fd
from fastdecode import _formats, _native

from helpers.png_webp import (
    SIGNATURE,
    chunk,
    corpus_files,
    ihdr,
    pillow_pixels,
    png,
    rgb_rows,
)

pytestmark = pytest.mark.skipif("png" not in _native.NATIVE_FORMATS,
                                reason="built without libspng: PNG decodes through Pillow")

FILES = corpus_files("png", ".png")
# Files the native decoder hands to Pillow (UnsupportedFormatError), and why.
TO_PILLOW = {"badpal": "palette index past"}

def rel(path) -> str:
    return str(path).split("/corpus/png/", 1)[1]


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("path", FILES)
def test_corpus_decode(path, mode):
    data = path.read_bytes()
    ref = pillow_pixels(data, mode)
    name = rel(path)
    if ref is None:
        with pytest.raises(fd.DecodeError, match=r"\w"):
            fd.decode_image(data, mode=mode)
        return
    np.testing.assert_array_equal(fd.decode_image(data, mode=mode), ref)
    routed = next((why for part, why in TO_PILLOW.items() if part in name), None)
    if routed:
        with pytest.raises(fd.UnsupportedFormatError, match=routed):
            _native.decode_png(data, mode=mode)
    else:  # the native decoder's own pixels
        np.testing.assert_array_equal(_native.decode_png(data, mode=mode), ref)


@pytest.mark.parametrize("path", FILES)
def test_corpus_native_crop_is_the_crop(path):
    """decode_png's crop, flip and CHW layout: the slice of its full decode."""
    data = path.read_bytes()
    try:
        full = _native.decode_png(data)
    except fd.DecodeError:
        pytest.skip("not decoded natively (covered by test_corpus_decode)")
    h, w = full.shape[:2]
    crop = (h // 3, w // 4, max(1, h // 2), max(1, w // 2))
    top, left, ch, cw = crop
    got = _native.decode_png(data, crop=crop, flip=True, layout="CHW")
    np.testing.assert_array_equal(got, full[top:top + ch, left:left + cw][:, ::-1].transpose(2, 0, 1))


def test_header_is_native():
    data = png(5, 3, rgb_rows(5, 3))
    assert fd.read_header(data) == fd.ImageInfo("png", 5, 3, 3, "rgb", None, False, 1)
    assert _formats.native("png").pillow_variants


# --- crafted files --------------------------------------------------------------

def with_ihdr_crc(data: bytes, crc: int) -> bytes:
    return data[:29] + struct.pack(">I", crc) + data[33:]


def test_bad_ihdr_crc():
    data = with_ihdr_crc(png(4, 4, rgb_rows(4, 4)), 0)
    with pytest.raises(fd.DecodeError, match="IHDR CRC mismatch"):
        fd.decode_image(data)


def test_bad_ancillary_crc_before_the_pixels():
    """Pillow refuses a bad CRC in any chunk before IDAT; so does the decoder."""
    rows = rgb_rows(4, 4)
    data = png(4, 4, rows, extra=chunk(b"tEXt", b"a\x00b", crc=1))
    assert pillow_pixels(data) is None
    with pytest.raises(fd.DecodeError, match="CRC mismatch"):
        fd.decode_image(data)


def test_bad_idat_crc_is_pillows_pixels():
    """Pillow does not check IDAT CRCs, nor does the native decoder."""
    rows = rgb_rows(6, 5)
    stream = zlib.compress(rows, 9)
    good = fd.decode_image(png(6, 5, rows))
    split = SIGNATURE + ihdr(6, 5) + chunk(b"IDAT", stream[:20], crc=0) + \
        chunk(b"IDAT", stream[20:], crc=5) + chunk(b"IEND", b"")
    np.testing.assert_array_equal(_native.decode_png(split), good)
    np.testing.assert_array_equal(pillow_pixels(split), good)


@pytest.mark.parametrize("cut", [40, 60, 100, -30])
def test_truncated_idat(cut):
    data = png(40, 40, rgb_rows(40, 40))
    stream = zlib.compress(rgb_rows(40, 40), 9)
    end = len(SIGNATURE) + 25 + 8 + (cut if cut > 0 else len(stream) + cut)
    with pytest.raises(fd.DecodeError, match="truncated|Truncated|broken PNG"):
        fd.decode_image(data[:end])


def test_truncated_chunk_before_the_pixels():
    data = SIGNATURE + ihdr(4, 4) + chunk(b"tEXt", b"key\x00value")[:10]
    with pytest.raises(fd.DecodeError, match="Truncated File Read"):
        fd.read_header(data)


@pytest.mark.parametrize("size", [(0x7FFFFFFF, 0x7FFFFFFF), (65535, 65535), (200000, 1000)])
def test_huge_ihdr_is_refused_before_allocation(size):
    w, h = size
    data = SIGNATURE + ihdr(w, h) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + \
        chunk(b"IEND", b"")
    with pytest.raises(fd.ImageTooLargeError, match="max_pixels|above"):
        fd.decode_image(data)


def test_zlib_bomb_within_max_pixels_is_refused_by_the_work_budget():
    """12000 x 12000 zeros: 140 KB of zlib for 144 M pixels."""
    n = 12000
    stream = zlib.compress(b"\x00" * ((n + 1) * n), 9)
    data = SIGNATURE + ihdr(n, n, color_type=0) + chunk(b"IDAT", stream) + chunk(b"IEND", b"")
    with pytest.raises(fd.ImageTooLargeError, match="max_work_per_byte=8"):
        fd.decode_image(data, max_work_per_byte=8)


def test_stream_longer_than_the_image_stops_at_the_image():
    """50 MiB of zeros after the rows: only the image's rows are inflated."""
    rows = rgb_rows(32, 32)
    stream = zlib.compress(rows + b"\x00" * (50 << 20), 9)
    data = SIGNATURE + ihdr(32, 32) + chunk(b"IDAT", stream) + chunk(b"IEND", b"")
    np.testing.assert_array_equal(fd.decode_image(data), pillow_pixels(data))


def test_crop_stops_at_its_last_row():
    """Rows below the crop are never inflated: a file cut below them decodes."""
    rows = rgb_rows(16, 64)
    whole = png(16, 64, rows)
    stream = zlib.compress(rows, 0)  # stored: the cut falls inside row 40's data
    data = SIGNATURE + ihdr(16, 64) + chunk(b"IDAT", stream[:2 + 5 + 49 * 40]) + \
        chunk(b"IEND", b"")
    got = _native.decode_png(data, crop=(10, 3, 20, 8))
    np.testing.assert_array_equal(got, _native.decode_png(whole)[10:30, 3:11])
    with pytest.raises(fd.DecodeError):
        _native.decode_png(data)


def test_exif_chunk_goes_to_pillow():
    exif = b"MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00" \
        b"\x00\x00\x00\x00"
    rows = rgb_rows(6, 4)
    data = png(6, 4, rows, extra=chunk(b"eXIf", exif))
    assert fd.read_header(data).orientation == 6  # Pillow's header
    with pytest.raises(fd.UnsupportedFormatError, match="eXIf"):
        _native.decode_png(data, exif=True)
    assert fd.decode_image(data, exif=True).shape == (6, 4, 3)  # Pillow, rotated
    np.testing.assert_array_equal(_native.decode_png(data), pillow_pixels(data))


