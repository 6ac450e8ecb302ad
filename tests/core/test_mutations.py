"""Seeded mutations of small valid files: only typed errors, no crash, no hang.

Complements test_jpeg.py (truncation of 3 JPEGs with default options, random
bit flips of a 4:2:0 file, a huge SOF, a scan bomb) and test_bmp.py (its own
writer's layouts truncated and randomly rewritten) with:

* JPEG: named rewrites of every header field that sizes or indexes
  something (SOF dimensions, precision, component counts, sampling factors,
  table selectors; DHT classes, ids, code-length counts, symbols; DQT
  precision, ids, values; SOS components, selectors, spectral/approximation
  parameters; DRI; segment lengths; EXIF orientation IFDs), each with a
  documented outcome; every header byte and every segment length rewritten;
  truncation at every offset and bit flips of more variants (restart
  markers, arithmetic coding, 4:1:1, CMYK, EXIF-rotated) under the crop,
  scale, resize, L, CHW, flip, fast and strict paths.
* BMP (files written by Pillow, plus hand-written RLE4/RLE8, bitfields, OS/2
  and top-down layouts): named rewrites of sizes, offsets, bit counts,
  compression, palette sizes and masks; every header byte; truncation at
  every offset and bit flips under the same options.

Outcome rule: pixels of the promised shape, or fastdecode.DecodeError (or a
subclass); ValueError only where the options themselves no longer fit (a
crop outside an image whose size was rewritten). A truncated file that still
decodes must give exactly the intact file's pixels.
"""

from __future__ import annotations

import io
import struct
from typing import NamedTuple

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd

from fuzz.bounded import bounded, hang_guard  # noqa: F401  (hang_guard: the fallback fixture)
from fuzz.seeds import hand_bmps
from helpers.jpeg_samples import CJPEG, encode, with_exif_orientation
from helpers.mutate import flip_bits

NEEDS_CJPEG = pytest.mark.skipif(CJPEG is None, reason="cjpeg (libjpeg-turbo-progs) not installed")
# Generous: each test takes well under a few seconds; the bound is a hang guard.
pytestmark = bounded(120)

# A rewritten header may declare a large image; keep every decode small.
MAX_PIXELS = 1 << 22

# Option sets every mutation runs through: the default path, the crop path
# (jpeg_crop_scanline / skip_scanlines), DCT scaling, the resampler, and the
# remaining switches.
OPTION_SETS = [
    pytest.param({}, id="default"),
    pytest.param({"crop": (3, 5, 11, 17), "mode": "L", "flip": True}, id="crop-L-flip"),
    pytest.param({"scale": 0.25, "layout": "CHW"}, id="scale-CHW"),
    pytest.param({"size": (9, 13), "interpolation": "bicubic", "crop": (1, 2, 15, 20)},
                 id="crop-resize"),
    pytest.param({"exif": True, "fast": True, "min_size": (5, 7)}, id="exif-fast-min"),
    pytest.param({"strict": True, "size": (30, 7), "interpolation": "nearest"}, id="strict-resize"),
]
# (The smallest BMP variant is 2 x 8, one other is 3 x 4: the crops fit all.)
BMP_OPTION_SETS = [
    pytest.param({}, id="default"),
    pytest.param({"crop": (1, 1, 1, 3), "mode": "L", "flip": True}, id="crop-L-flip"),
    pytest.param({"size": (7, 5), "layout": "CHW", "crop": (0, 1, 2, 2)}, id="crop-resize-CHW"),
]


def expected_shape(kw: dict, hw: tuple[int, int] | None) -> tuple[int, ...] | None:
    channels = 1 if kw.get("mode") == "L" else 3
    if "size" in kw:
        hw = kw["size"]
    elif "crop" in kw and "scale" not in kw and "min_size" not in kw:
        hw = kw["crop"][2:]
    if hw is None:
        return None
    return (channels, *hw) if kw.get("layout") == "CHW" else (*hw, channels)


def pixels_or_typed_error(fn, data: bytes, **kw) -> np.ndarray | None:
    """The decode's pixels, or None for a documented error; anything else fails."""
    kw.setdefault("max_pixels", MAX_PIXELS)
    try:
        out = fn(data, **kw)
    except fd.DecodeError:
        return None
    except ValueError as exc:
        # An argument problem is possible only where the options depend on
        # the (rewritten) image size.
        if "crop" in kw and "outside the" in str(exc):
            return None
        raise
    assert out.dtype == np.uint8 and out.ndim == 3 and out.flags.c_contiguous
    shape = expected_shape(kw, None)
    if shape is not None:
        assert out.shape == shape, kw
    return out


def header_or_typed_error(data: bytes):
    try:
        info = fd.read_header(data)
    except fd.DecodeError:
        return None
    # a header without pixels is a DecodeError; a JPEG's sides are 16-bit fields
    assert info.width > 0 and info.height > 0 and 1 <= info.orientation <= 8, info
    assert info.format != "jpeg" or max(info.width, info.height) <= 65535, info
    return info


# ---------------------------------------------------------------------------
# JPEG structure


class Segment(NamedTuple):
    marker: int
    pos: int  # offset of the 0xFF
    length: int  # the length field (counts itself)


def segments(data: bytes) -> list[Segment]:
    """The marker segments of a well-formed JPEG, entropy-coded data skipped."""
    out = []
    pos = 2
    while pos + 4 <= len(data):
        assert data[pos] == 0xFF, pos
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker == 0xD9:
            break
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        out.append(Segment(marker, pos, length))
        pos += 2 + length
        if marker == 0xDA:
            while True:
                pos = data.index(b"\xff", pos)
                nxt = data[pos + 1]
                if nxt == 0 or 0xD0 <= nxt <= 0xD7:
                    pos += 2
                elif nxt == 0xFF:
                    pos += 1
                else:
                    break
    return out


def first(data: bytes, *markers: int) -> Segment:
    return next(s for s in segments(data) if s.marker in markers)


def poke(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


def drop(data: bytes, marker: int) -> bytes:
    """Without every segment of this marker (before the first scan)."""
    out = data
    for s in reversed([s for s in segments(data) if s.marker == marker]):
        out = out[:s.pos] + out[s.pos + 2 + s.length:]
    return out


def insert_before(data: bytes, marker: int, segment: bytes) -> bytes:
    pos = first(data, marker).pos
    return data[:pos] + segment + data[pos:]


def sof(data: bytes) -> int:
    return first(data, 0xC0, 0xC1, 0xC2).pos


def sof_field(offset: int, value: bytes):
    """SOF fields: +4 precision, +5 height, +7 width, +9 components,
    +10 + 3i component i's id, sampling (h << 4 | v), quant table."""
    return lambda d: poke(d, sof(d) + offset, value)


def dht_field(offset: int, value: bytes, index: int = 0):
    """DHT fields: +4 class << 4 | id, +5..+20 counts of codes of length 1..16."""
    def rewrite(d):
        seg = [s for s in segments(d) if s.marker == 0xC4][index]
        return poke(d, seg.pos + offset, value)
    return rewrite


def dqt_field(offset: int, value: bytes):
    """DQT fields: +4 precision << 4 | id, +5.. the 64 values."""
    return lambda d: poke(d, first(d, 0xDB).pos + offset, value)


def sos_field(offset: int, value: bytes):
    """SOS fields: +4 components, +5 + 2i id and tables (dc << 4 | ac), then Ss, Se, Ah << 4 | Al."""
    return lambda d: poke(d, first(d, 0xDA).pos + offset, value)


def seg_length(marker: int, delta: int | None = None, value: int | None = None):
    def rewrite(d):
        s = first(d, marker)
        n = value if value is not None else s.length + delta
        return poke(d, s.pos + 2, struct.pack(">H", n & 0xFFFF))
    return rewrite


def dht_counts(counts: list[int]):
    """The first DHT's 16 counts replaced (the symbols left as they are)."""
    return dht_field(5, bytes(counts))


def exif_segment(tiff: bytes) -> bytes:
    body = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def tiff_ifd(entries: list[tuple[int, int, int, bytes]], *, ifd: int = 8, count=None,
             le=True) -> bytes:
    e = "<" if le else ">"
    head = (b"II" if le else b"MM") + struct.pack(e + "HI", 42, ifd)
    body = struct.pack(e + "H", len(entries) if count is None else count)
    for tag, typ, n, value in entries:
        body += struct.pack(e + "HHI", tag, typ, n) + value.ljust(4, b"\0")
    pad = ifd - 8 if 8 <= ifd < 64 else 0  # an offset past the end gets no padding
    return head + bytes(pad) + body


def with_exif(tiff: bytes):
    return lambda d: d[:2] + exif_segment(tiff) + d[2:]


def short(v: int, le=True) -> bytes:
    return struct.pack("<H" if le else ">H", v)


def base_jpeg(kind: str) -> bytes:
    return {
        "baseline": lambda: encode(24, 40),
        "progressive": lambda: encode(24, 40, subsampling="4:4:4", coding="progressive"),
        "gray": lambda: encode(24, 40, subsampling="gray"),
    }[kind]()


# (base, rewrite, outcome): outcome is ("pixels", (h, w)) for a file that still
# decodes at that size, or (exception, message pattern).
E = fd.DecodeError
U = fd.UnsupportedFormatError
T = fd.ImageTooLargeError
JPEG_REWRITES = [
    # SOF: sizes
    ("baseline", "sof-height-0", sof_field(5, b"\0\0"), (E, "Empty JPEG image|Bogus")),
    ("baseline", "sof-width-0", sof_field(7, b"\0\0"), (E, "Empty JPEG image|Bogus")),
    ("baseline", "sof-height-1", sof_field(5, b"\0\1"), ("pixels", (1, 40))),
    ("baseline", "sof-height-65535", sof_field(5, b"\xff\xff"),
     (E, "Maximum supported image dimension is 65500 pixels")),
    ("baseline", "sof-both-65500", sof_field(5, b"\xff\xdc\xff\xdc"), (T, "65500x65500")),
    ("baseline", "sof-width-3", sof_field(7, b"\0\3"), ("pixels", (24, 3))),
    # SOF: precision and component count
    ("baseline", "sof-precision-12", sof_field(4, b"\x0c"), (U, "precision 12")),
    ("baseline", "sof-precision-0", sof_field(4, b"\x00"), (U, "precision 0")),
    ("baseline", "sof-precision-16", sof_field(4, b"\x10"), (U, "precision 16")),
    ("baseline", "sof-components-0", sof_field(9, b"\x00"), (E, "Empty JPEG image")),
    ("baseline", "sof-components-2", sof_field(9, b"\x02"), (E, "Bogus marker length")),
    ("baseline", "sof-components-4", sof_field(9, b"\x04"), (E, "Bogus marker length")),
    ("baseline", "sof-components-255", sof_field(9, b"\xff"), (E, "Bogus marker length")),
    # SOF: sampling factors and table selectors
    ("baseline", "sof-sampling-0x0", sof_field(11, b"\x00"), (E, "Bogus sampling factors")),
    ("baseline", "sof-sampling-5x5", sof_field(11, b"\x55"), (E, "Bogus sampling factors")),
    ("baseline", "sof-sampling-15x1", sof_field(11, b"\xf1"), (E, "Bogus sampling factors")),
    ("baseline", "sof-sampling-4x4", sof_field(11, b"\x44"),
     (E, "Sampling factors too large for interleaved scan")),
    ("baseline", "sof-sampling-1x3", sof_field(11, b"\x13"), ("pixels", (24, 40))),
    ("baseline", "sof-chroma-above-luma", sof_field(14, b"\x22"), ("pixels", (24, 40))),
    ("baseline", "sof-quant-table-4", sof_field(12, b"\x04"), (E, "table 0x04 was not defined")),
    ("baseline", "sof-quant-table-3", sof_field(12, b"\x03"), (E, "table 0x03 was not defined")),
    ("baseline", "sof-duplicate-component-id", sof_field(13, b"\x01"),
     (E, "Invalid component ID 2 in SOS")),
    # SOF: marker type
    ("baseline", "sof-lossless", sof_field(1, b"\xc3"), (U, "Unsupported JPEG process")),
    ("baseline", "sof-hierarchical", sof_field(1, b"\xc5"), (U, "Unsupported JPEG process")),
    ("baseline", "sof-arithmetic-on-huffman-data", sof_field(1, b"\xc9"), ("pixels", (24, 40))),
    ("baseline", "sof-progressive-on-baseline-data", sof_field(1, b"\xc2"),
     (E, "Invalid progressive parameters Ss=0 Se=63")),
    ("baseline", "sof-length-short", seg_length(0xC0, -3), (E, "Bogus marker length")),
    ("baseline", "sof-length-2", seg_length(0xC0, value=2), (E, "Bogus marker length")),
    # DHT
    ("baseline", "dht-id-4", dht_field(4, b"\x04"), (E, "Bogus DHT index 4")),
    ("baseline", "dht-class-2", dht_field(4, b"\x20"), (E, "Bogus DHT index")),
    # DC table 0 undefined: libjpeg lends its standard table (as for Motion-JPEG)
    ("baseline", "dht-id-2", dht_field(4, b"\x02"), ("pixels", (24, 40))),
    ("baseline", "dht-counts-above-256", dht_counts([0] * 8 + [255, 255] + [0] * 6),
     (E, "Bogus Huffman table definition|Bogus marker length")),
    ("baseline", "dht-counts-overfull", dht_counts([3] + [0] * 15), (E, "Bogus marker length")),
    ("baseline", "dht-counts-zero", dht_counts([0] * 16), (E, "Bogus marker length")),
    ("baseline", "dht-counts-one-long-code", dht_counts([0] * 15 + [1]), (E, "Bogus marker length")),
    ("baseline", "dht-dc-symbols-255", dht_field(21, b"\xff" * 12),
     (E, "Bogus Huffman table definition")),
    ("baseline", "dht-length-2", seg_length(0xC4, value=2), ("pixels", (24, 40))),
    ("baseline", "dht-length-long", seg_length(0xC4, 40), (E, "Bogus Huffman table definition")),
    ("baseline", "dht-removed", lambda d: drop(d, 0xC4), ("pixels", (24, 40))),
    # DQT
    ("baseline", "dqt-id-4", dqt_field(4, b"\x04"), (E, "Bogus DQT index 4")),
    ("baseline", "dqt-16-bit-in-8-bit-length", dqt_field(4, b"\x10"), (E, "Bogus marker length")),
    ("baseline", "dqt-precision-15", dqt_field(4, b"\xf0"), (E, "Bogus marker length")),
    ("baseline", "dqt-all-255", dqt_field(5, b"\xff" * 64), ("pixels", (24, 40))),
    ("baseline", "dqt-all-zero", dqt_field(5, bytes(64)), (E, "table 0x00 was not defined")),
    ("baseline", "dqt-length-one-short", seg_length(0xDB, -1), (E, "Bogus marker length")),
    ("baseline", "dqt-length-2", seg_length(0xDB, value=2), (E, "table 0x00 was not defined")),
    ("baseline", "dqt-removed", lambda d: drop(d, 0xDB), (E, "table 0x00 was not defined")),
    # SOS
    ("baseline", "sos-components-0", sos_field(4, b"\x00"), (E, "Bogus marker length")),
    ("baseline", "sos-components-4", sos_field(4, b"\x04"), (E, "Bogus marker length")),
    ("baseline", "sos-unknown-component", sos_field(5, b"\x09"), (E, "Invalid component ID 9")),
    ("baseline", "sos-tables-4", sos_field(6, b"\x44"), (E, "Huffman table 0x04 was not defined")),
    ("baseline", "sos-tables-2-undefined", sos_field(6, b"\x22"), (E, "table 0x02 was not defined|Bogus")),
    ("baseline", "sos-spectral-1-62", sos_field(11, b"\x01\x3e"), ("pixels", (24, 40))),
    ("baseline", "sos-length-3", seg_length(0xDA, value=3), (E, "Bogus marker length")),
    ("progressive", "sos-dc-scan-with-ac", sos_field(11, b"\x00\x05"), (E, "Invalid progressive parameters")),
    ("progressive", "sos-al-14", sos_field(13, b"\x0e"), (E, "Invalid progressive parameters")),
    ("progressive", "sos-refine-first", sos_field(13, b"\x21"), ("pixels", (24, 40))),
    ("progressive", "sos-ss-after-se", sos_field(11, b"\x0a\x05"), (E, "Invalid progressive parameters")),
    # DRI
    ("baseline", "dri-1-without-markers", lambda d: insert_before(d, 0xC0, b"\xff\xdd\0\4\0\1"),
     ("pixels", (24, 40))),
    ("baseline", "dri-65535", lambda d: insert_before(d, 0xC0, b"\xff\xdd\0\4\xff\xff"),
     ("pixels", (24, 40))),
    ("baseline", "dri-length-5", lambda d: insert_before(d, 0xC0, b"\xff\xdd\0\5\0\1\0"),
     (E, "Bogus marker length")),
    # EXIF: the orientation parser is ours (fd_jpeg_exif_orientation)
    ("gray", "exif-ifd-beyond-end", with_exif(tiff_ifd([], ifd=0xFFFFFFF0)), ("pixels", (24, 40))),
    ("gray", "exif-ifd-at-last-two-bytes", with_exif(b"II*\0\x08\0\0\0\xff\xff"),
     ("pixels", (24, 40))),
    ("gray", "exif-65535-entries", with_exif(tiff_ifd([(0x0112, 3, 1, short(6))], count=0xFFFF)),
     ("pixels", (40, 24))),
    ("gray", "exif-65535-entries-none-there", with_exif(tiff_ifd([], count=0xFFFF)),
     ("pixels", (24, 40))),
    ("gray", "exif-orientation-0", with_exif(tiff_ifd([(0x0112, 3, 1, short(0))])),
     ("pixels", (24, 40))),
    ("gray", "exif-orientation-9", with_exif(tiff_ifd([(0x0112, 3, 1, short(9))])),
     ("pixels", (24, 40))),
    ("gray", "exif-orientation-long-6", with_exif(tiff_ifd([(0x0112, 4, 1, struct.pack("<I", 6))])),
     ("pixels", (40, 24))),
    ("gray", "exif-orientation-big-endian-8",
     with_exif(tiff_ifd([(0x0112, 3, 1, short(8, le=False))], le=False)), ("pixels", (40, 24))),
    ("gray", "exif-orientation-ascii-type", with_exif(tiff_ifd([(0x0112, 2, 1, b"6")])),
     ("pixels", (24, 40))),
    ("gray", "exif-bad-byte-order", with_exif(b"XX*\0\x08\0\0\0\1\0"), ("pixels", (24, 40))),
    ("gray", "exif-no-tiff", with_exif(b""), ("pixels", (24, 40))),
    ("gray", "exif-segment-length-past-end",
     lambda d: d[:2] + b"\xff\xe1\xff\xf0Exif\0\0II*\0" + d[2:], (E, "truncated JPEG")),
]


@pytest.mark.parametrize(
    "base,rewrite,outcome",
    [pytest.param(b, r, o, id=name) for b, name, r, o in JPEG_REWRITES],
)
def test_jpeg_header_rewrite(base, rewrite, outcome):
    data = rewrite(base_jpeg(base))
    if outcome[0] == "pixels":
        out = fd.decode_jpeg(data, exif=True, max_pixels=MAX_PIXELS)
        assert out.shape == (*outcome[1], 3)
    else:
        error, match = outcome
        with pytest.raises(error, match=match):
            fd.decode_jpeg(data, exif=True, max_pixels=MAX_PIXELS)
    # Whatever the full decode does, no other path may do worse.
    header_or_typed_error(data)
    for params in OPTION_SETS:
        pixels_or_typed_error(fd.decode_jpeg, data, **params.values[0])


def jpeg_variant(name: str) -> bytes:
    buf = io.BytesIO()
    if name == "cmyk":
        from helpers.jpeg_samples import natural_image

        Image.fromarray(natural_image(16, 24, seed=5)).convert("CMYK").save(buf, "JPEG", quality=90)
        return buf.getvalue()
    return {
        "420-baseline": lambda: encode(24, 40),
        "444-progressive": lambda: encode(24, 40, subsampling="4:4:4", coding="progressive"),
        "exif6-422": lambda: with_exif_orientation(encode(24, 40, subsampling="4:2:2"), 6),
        "422-restart": lambda: encode(24, 40, subsampling="4:2:2", coding="restart"),
        "411-arithmetic": lambda: encode(24, 40, subsampling="4:1:1", coding="arithmetic"),
        "gray-optimized": lambda: encode(24, 40, subsampling="gray", coding="optimized"),
    }[name]()


JPEG_VARIANTS = [
    pytest.param(v, id=v, marks=[NEEDS_CJPEG] if v in ("422-restart", "411-arithmetic") else [])
    for v in ("420-baseline", "444-progressive", "exif6-422", "cmyk", "422-restart",
              "411-arithmetic", "gray-optimized")
]


@pytest.mark.parametrize("options", OPTION_SETS)
@pytest.mark.parametrize("variant", JPEG_VARIANTS)
def test_jpeg_truncated_at_every_offset(variant, options):
    """A cut file fails with DecodeError or, where the options never need the
    missing part (a crop above the cut, a missing EOI), gives exact pixels."""
    data = jpeg_variant(variant)
    intact = pixels_or_typed_error(fd.decode_jpeg, data, **options)
    assert intact is not None
    for cut in range(len(data)):
        out = pixels_or_typed_error(fd.decode_jpeg, data[:cut], **options)
        if out is not None:
            assert cut >= segments(data)[-1].pos, f"pixels from a file cut in its headers at {cut}"
            np.testing.assert_array_equal(out, intact, err_msg=f"cut at {cut}")


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in range(2)])
@pytest.mark.parametrize("variant", JPEG_VARIANTS)
def test_jpeg_bit_flips_with_options(variant, seed):
    rng = np.random.default_rng(seed)
    data = jpeg_variant(variant)
    for i in range(600):
        corrupt = flip_bits(data, rng, int(rng.integers(1, 5)))
        pixels_or_typed_error(fd.decode_jpeg, corrupt, **OPTION_SETS[i % len(OPTION_SETS)].values[0])
        header_or_typed_error(corrupt)


@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in
                                     ("420-baseline", "444-progressive", "exif6-422", "cmyk")])
def test_jpeg_every_header_byte_rewritten(variant):
    """Each byte before the first scan's data (every marker, length and table
    entry), and every byte of the later DHT/SOS segments of a progressive
    file, set to 0x00, 0xFF, its bit 7 flipped, and plus one."""
    data = jpeg_variant(variant)
    offsets = [o for s in segments(data) for o in range(s.pos, s.pos + 2 + s.length)]
    i = 0
    for offset in offsets:
        b = data[offset]
        for value in {0x00, 0xFF, b ^ 0x80, (b + 1) & 0xFF} - {b}:
            variant_data = poke(data, offset, bytes([value]))
            pixels_or_typed_error(fd.decode_jpeg, variant_data,
                                  **OPTION_SETS[i % len(OPTION_SETS)].values[0])
            i += 1
        header_or_typed_error(poke(data, offset, bytes([b ^ 0xFF])))


@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in
                                     ("420-baseline", "444-progressive", "cmyk")])
def test_jpeg_every_segment_length_rewritten(variant):
    data = jpeg_variant(variant)
    for s in segments(data):
        for n in (0, 1, 2, 3, s.length - 1, s.length + 1, s.length + 64, 0xFFFF):
            bad = poke(data, s.pos + 2, struct.pack(">H", n & 0xFFFF))
            for params in OPTION_SETS[:3]:
                pixels_or_typed_error(fd.decode_jpeg, bad, **params.values[0])
            header_or_typed_error(bad)


# ---------------------------------------------------------------------------
# BMP


def bmp_variant(name: str) -> bytes:
    if name.startswith("pillow-"):
        from helpers.jpeg_samples import natural_image

        im = Image.fromarray(natural_image(11, 23, seed=7)).convert(name[len("pillow-"):])
        buf = io.BytesIO()
        im.save(buf, "BMP")
        return buf.getvalue()
    return hand_bmps()[f"hand-{name}.bmp"]


BMP_VARIANTS = ["pillow-1", "pillow-L", "pillow-P", "pillow-RGB", "pillow-RGBA", "rle8", "rle4",
                "565", "os2-24", "os2-pal2", "topdown-v5"]
# Those with a BITMAPINFOHEADER (or later) whose fields sit at the usual offsets.
BMP_INFO_VARIANTS = [v for v in BMP_VARIANTS if not v.startswith("os2")]
UNCOMPRESSED = [v for v in BMP_VARIANTS if not v.startswith("rle")]


def u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def u16(v: int) -> bytes:
    return struct.pack("<H", v & 0xFFFF)


# field: (offset, packer, values); `None` in values means len(file) and len(file) - 1.
BMP_FIELDS = {
    "file-size": (2, u32, [0, 1, 0xFFFFFFFF]),
    "pixel-offset": (10, u32, [0, 1, 13, 14, 53, 54, None, 0x7FFFFFFF, 0xFFFFFFFF]),
    "header-size": (14, u32, [0, 11, 12, 13, 16, 39, 40, 41, 52, 56, 64, 108, 124, 125,
                              0xFFFFFFFF]),
    "width": (18, u32, [0, 1, -1, 2, 24, 65500, 0x7FFFFFFF, -0x80000000]),
    "height": (22, u32, [0, 1, -1, 12, -11, -12, 65500, 0x7FFFFFFF, -0x80000000, -0x7FFFFFFF]),
    "planes": (26, u16, [0, 2, 0xFFFF]),
    "bit-count": (28, u16, [0, 1, 2, 3, 4, 5, 8, 15, 16, 24, 32, 48, 64, 0xFFFF]),
    "compression": (30, u32, [0, 1, 2, 3, 4, 5, 6, 11, 12, 13, 0xFFFFFFFF]),
    "image-size": (34, u32, [0, 1, 0xFFFFFFFF]),
    "palette-size": (46, u32, [0, 1, 2, 15, 16, 255, 256, 257, 0x40000000, 0xFFFFFFFF]),
    "important-colors": (50, u32, [0, 1, 0xFFFFFFFF]),
    "red-mask": (54, u32, [0, 0xFFFFFFFF, 0x0F0F, 0x8001, 0x07E0, 0x80000000]),
    "green-mask": (58, u32, [0, 0xFFFFFFFF, 0x0F0F, 0x8001, 0xF800]),
    "blue-mask": (62, u32, [0, 0xFFFFFFFF, 0x1, 0x7FFFFFFF]),
    "alpha-mask": (66, u32, [0, 0xFFFFFFFF, 0xFF, 0xFF000000]),
}
OS2_FIELDS = {
    "os2-width": (18, u16, [0, 1, 0xFFFF, 0x8000]),
    "os2-height": (20, u16, [0, 1, 0xFFFF, 0x8000]),
    "os2-planes": (22, u16, [0, 2]),
    "os2-bit-count": (24, u16, [0, 1, 2, 3, 4, 8, 16, 24, 32, 64, 0xFFFF]),
}


# Boundary values with a documented outcome, on Pillow's 23 x 11 24-bit BMP:
# (name, offset, bytes, outcome) as in JPEG_REWRITES.
BMP_REWRITES = [
    ("width-0", 18, u32(0), (E, "invalid BMP width 0")),
    ("width-minus-1", 18, u32(-1), (E, "invalid BMP width -1")),
    ("width-int-min", 18, u32(-0x80000000), (E, "invalid BMP width -2147483648")),
    ("width-int-max", 18, u32(0x7FFFFFFF), (T, "2147483647x11 = 23622320117 pixels")),
    ("width-65500", 18, u32(65500), (E, "truncated BMP")),
    ("height-0", 22, u32(0), (E, "invalid BMP height 0")),
    ("height-int-min", 22, u32(-0x80000000), (E, "invalid BMP height -2147483648")),
    ("height-minus-int-max", 22, u32(-0x7FFFFFFF), (T, "23x2147483647")),
    ("height-minus-1-top-down", 22, u32(-1), ("pixels", (1, 23))),
    ("height-minus-11-top-down", 22, u32(-11), ("pixels", (11, 23))),
    ("height-one-more", 22, u32(12), (E, "truncated BMP: .* holds 11 of 12 rows")),
    ("pixel-offset-past-end", 10, u32(0xFFFFFFFF), (E, "truncated BMP: the pixel data at offset 4294967295")),
    ("header-size-0", 14, u32(0), (E, "info header size 0")),
    ("header-size-huge", 14, u32(0xFFFFFFFF), (E, "info header size 4294967295")),
    ("bit-count-0", 28, u16(0), (E, "bit depth 0")),
    ("bit-count-65535", 28, u16(0xFFFF), (E, "bit depth 65535")),
    ("bit-count-8-without-palette", 28, u16(8), (E, "truncated BMP")),
    ("compression-rle8-on-24-bit", 30, u32(1), (E, "RLE8 compression needs a palette")),
    ("compression-png", 30, u32(5), (U, "PNG")),
    ("compression-cmyk", 30, u32(11), (U, "CMYK")),
    ("compression-unknown", 30, u32(0xFFFFFFFF), (E, "compression 4294967295")),
    ("palette-size-huge-on-24-bit", 46, u32(0xFFFFFFFF), ("pixels", (11, 23))),
]


@pytest.mark.parametrize("offset,value,outcome",
                         [pytest.param(o, v, out, id=n) for n, o, v, out in BMP_REWRITES])
def test_bmp_header_rewrite(offset, value, outcome):
    data = poke(bmp_variant("pillow-RGB"), offset, value)
    if outcome[0] == "pixels":
        assert fd.decode_bmp(data).shape == (*outcome[1], 3)
    else:
        error, match = outcome
        with pytest.raises(error, match=match):
            fd.decode_bmp(data)
    header_or_typed_error(data)
    for params in BMP_OPTION_SETS:
        pixels_or_typed_error(fd.decode_bmp, data, **params.values[0])


@pytest.mark.parametrize("field", [pytest.param(f, id=f) for f in {**BMP_FIELDS, **OS2_FIELDS}])
def test_bmp_header_field_rewrites(field):
    """Every value of the field, in every layout it belongs to, under every
    option set: pixels or a typed error."""
    offset, pack, values = {**BMP_FIELDS, **OS2_FIELDS}[field]
    variants = [v for v in BMP_VARIANTS if v.startswith("os2")] if field.startswith("os2") \
        else BMP_INFO_VARIANTS
    for variant in variants:
        data = bmp_variant(variant)
        for value in values:
            for v in ([len(data), len(data) - 1] if value is None else [value]):
                bad = poke(data, offset, pack(v))
                for params in BMP_OPTION_SETS:
                    pixels_or_typed_error(fd.decode_bmp, bad, **params.values[0])
                pixels_or_typed_error(fd.decode_image, bad)
                header_or_typed_error(bad)


@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in BMP_VARIANTS])
def test_bmp_every_header_byte_rewritten(variant):
    """Each byte of the headers, masks and the first palette entries."""
    data = bmp_variant(variant)
    header_size = struct.unpack("<I", data[14:18])[0]
    end = min(len(data), 14 + header_size + 64)
    i = 0
    for offset in range(end):
        b = data[offset]
        for value in {0x00, 0xFF, b ^ 0x80, (b + 1) & 0xFF} - {b}:
            bad = poke(data, offset, bytes([value]))
            pixels_or_typed_error(fd.decode_bmp, bad,
                                  **BMP_OPTION_SETS[i % len(BMP_OPTION_SETS)].values[0])
            i += 1
        header_or_typed_error(poke(data, offset, bytes([b ^ 0xFF])))


@pytest.mark.parametrize("options", BMP_OPTION_SETS)
@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in BMP_VARIANTS])
def test_bmp_truncated_at_every_offset(variant, options):
    data = bmp_variant(variant)
    intact = pixels_or_typed_error(fd.decode_bmp, data, **options)
    assert intact is not None
    for cut in range(len(data)):
        out = pixels_or_typed_error(fd.decode_bmp, data[:cut], **options)
        if out is not None and variant in UNCOMPRESSED:
            np.testing.assert_array_equal(out, intact, err_msg=f"cut at {cut}")


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in range(2)])
@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in BMP_VARIANTS])
def test_bmp_bit_flips_with_options(variant, seed):
    rng = np.random.default_rng(seed)
    data = bmp_variant(variant)
    for i in range(600):
        corrupt = flip_bits(data, rng, int(rng.integers(1, 5)))
        pixels_or_typed_error(fd.decode_bmp, corrupt,
                              **BMP_OPTION_SETS[i % len(BMP_OPTION_SETS)].values[0])
        header_or_typed_error(corrupt)
