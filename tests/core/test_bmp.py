"""The raw BMP reader (src_c/fd_bmp.c).

* Conformance with the BMP Suite v2.8 (../shared/corpus/bmpsuite, skipped when
  absent): Pillow's pixels wherever Pillow decodes a file, the suite's
  reference rendering where it does not and the format is well defined, and a
  typed error otherwise. A session summary line counts the files where we go
  beyond Pillow.
* BMPs written here (by Pillow and by the small writer below) for every header
  size and bit depth, checked against an independent numpy model of the format
  and against Pillow wherever Pillow reads them.
* Options (crop, flip, layout, mode, out=, max_pixels), and robustness:
  truncation at every offset, random header rewrites, random RLE streams.
"""

from __future__ import annotations

import io
import math
import struct
import threading
import tracemalloc
import warnings
import zlib
from collections import Counter
from typing import NamedTuple

import numpy as np
import pytest
from PIL import Image

import fastdecode
from fastdecode import DecodeError, ImageTooLargeError, UnsupportedFormatError

from helpers.corpus import corpus_dir, corpus_params, read_manifest

decode_bmp = fastdecode.decode_bmp

# ---------------------------------------------------------------------------
# Oracles


def pillow_pixels(data, mode="RGB"):
    """Pillow's decode as (H, W, C) uint8, or None where Pillow refuses."""
    src = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a bomb warning counts as a refusal
            with Image.open(src) as im:
                arr = np.asarray(im.convert(mode))
    except Exception:  # noqa: BLE001 - anything Pillow raises is a refusal
        return None
    return arr[..., None] if arr.ndim == 2 else arr


def luma(rgb):
    """Pillow's RGB -> L (ITU-R 601-2 in 16-bit fixed point)."""
    r, g, b = (rgb[..., k].astype(np.uint32) for k in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]


def widen(values, mask, floor=False):
    """A bit field scaled to 0..255: round to nearest, or Pillow's floor."""
    shift = (mask & -mask).bit_length() - 1
    top = mask >> shift
    v = (values.astype(np.int64) >> shift) & top
    return (v * 255 // top) if floor else (v * 510 + top) // (2 * top)


def masks_to_rgb(values, masks, floor=False):
    return np.stack([widen(values, m, floor) for m in masks[:3]], -1).astype(np.uint8)


def _srgb(x):
    return x * 12.92 if x <= 0.0031308 else 1.055 * math.pow(x, 1 / 2.4) - 0.055


SRGB_OF_LINEAR = np.array([math.floor(255 * _srgb(v / 8192) + 0.5) for v in range(8193)], np.uint8)


def rgba64_to_rgb(values):
    """values (H, W, 4) int16 B, G, R, A in s2.13 linear light -> sRGB."""
    v = np.clip(values.astype(np.int64), 0, 8192)
    return SRGB_OF_LINEAR[v[..., [2, 1, 0]]]


# ---------------------------------------------------------------------------
# A BMP writer


def stride_of(width, bpp):
    return ((width * bpp + 31) // 32) * 4


def pack_rows(values, bpp, topdown=False):
    """Stored pixel data for samples in image row order: indices (bpp <= 8),
    integers 0xRRGGBB-style (16/24/32, little-endian) or (H, W, 4) int16 (64)."""
    width = values.shape[1]
    stride = stride_of(width, bpp)
    out = []
    for row in values if topdown else values[::-1]:
        if bpp < 8:
            bits = (row[:, None] >> np.arange(bpp - 1, -1, -1)) & 1
            raw = np.packbits(bits.astype(np.uint8).reshape(-1)).tobytes()
        elif bpp == 8:
            raw = row.astype(np.uint8).tobytes()
        elif bpp == 16:
            raw = row.astype("<u2").tobytes()
        elif bpp == 24:
            raw = row.astype("<u4").view(np.uint8).reshape(width, 4)[:, :3].tobytes()
        elif bpp == 32:
            raw = row.astype("<u4").tobytes()
        else:
            raw = row.astype("<i2").tobytes()
        out.append(raw.ljust(stride, b"\0"))
    return b"".join(out)


def make_bmp(width, height, bpp, pixels, *, header=40, compression=0, palette=(),
             colors=None, masks=None, topdown=False, gap=0, offset=None, size_image=None,
             planes=1):
    """File header + info header (+ masks) + palette + gap + pixel data."""
    entry = 3 if header == 12 else 4
    pal = b"".join(bytes((b, g, r)) + b"\0" * (entry - 3) for r, g, b in palette)
    after = b""
    if header == 12:
        info = struct.pack("<IHHHH", 12, width, height, planes, bpp)
    else:
        info = struct.pack(
            "<IiiHHIIiiII", header, width, -height if topdown else height, planes, bpp,
            compression, len(pixels) if size_image is None else size_image, 2835, 2835,
            len(palette) if colors is None else colors, 0,
        )[: min(header, 40)]
        if masks is not None:
            if header == 40:
                after = struct.pack("<4I", *masks)[: 16 if compression == 6 else 12]
            elif header in (52, 56, 108, 124):
                info += struct.pack("<4I", *masks)[: 12 if header == 52 else 16]
        info = info.ljust(header, b"\0")
    off = 14 + len(info) + len(after) + len(pal) + gap
    if offset is not None:
        off = offset
    body = info + after + pal + b"\x5a" * gap + pixels
    return b"BM" + struct.pack("<IHHI", 14 + len(body), 0, 0, off) + body


def rle_encode(rows, kind, *, skip_zero_runs=False, end=True):
    """RLE4/RLE8/RLE24 of `rows` (bottom row first): encoded runs, absolute
    runs, optional deltas over runs of zero (undefined) pixels, EOL, EOB."""
    out = bytearray()
    for row in rows:
        x, n = 0, len(row)
        while x < n:
            same = 1
            while x + same < n and same < 255 and np.array_equal(row[x + same], row[x]):
                same += 1
            zero = skip_zero_runs and not np.any(row[x])
            if zero and same >= 2:
                out += bytes((0, 2, same, 0))
            elif same >= 3 or n - x < 3:
                out.append(same)
                if kind == "rle24":
                    out += bytes(int(c) for c in row[x])
                elif kind == "rle4":
                    out.append((int(row[x]) << 4) | int(row[x]))
                else:
                    out.append(int(row[x]))
            else:
                lit = 3
                while x + lit < n and lit < 255:
                    nxt = row[x + lit]
                    if x + lit + 2 < n and np.array_equal(nxt, row[x + lit + 1]) \
                            and np.array_equal(nxt, row[x + lit + 2]):
                        break
                    lit += 1
                out += bytes((0, lit))
                seg = row[x: x + lit]
                if kind == "rle24":
                    data = bytes(int(c) for px in seg for c in px)
                elif kind == "rle4":
                    vals = [int(v) for v in seg] + [0]
                    data = bytes((vals[i] << 4) | vals[i + 1] for i in range(0, lit, 2))
                else:
                    data = bytes(int(v) for v in seg)
                out += data + b"\0" * (len(data) & 1)
                same = lit
            x += same
        out += b"\0\0"
    if end:
        out += b"\0\1"
    return bytes(out)


def random_palette(rng, n):
    """Colours that are never a grey ramp (which Pillow special-cases)."""
    pal = rng.integers(0, 256, (n, 3))
    pal[:, 0] |= 1  # red odd and green != red: never black, white or grey
    pal[:, 1] = pal[:, 0] ^ 0x40
    return [tuple(int(c) for c in p) for p in pal]


class Sample(NamedTuple):
    data: bytes
    expected: np.ndarray  # (H, W, 3) uint8, from the numpy model


def paletted(rng, w, h, bpp, *, header=40, topdown=False, ncolors=None, **kw):
    n = ncolors or (1 << bpp)
    pal = random_palette(rng, n)
    idx = rng.integers(0, n, (h, w))
    data = make_bmp(w, h, bpp, pack_rows(idx, bpp, topdown), header=header, palette=pal,
                    topdown=topdown, **kw)
    return Sample(data, np.array(pal, np.uint8)[idx])


def rle_sample(rng, w, h, kind, *, header=40, skip_zero_runs=True):
    if kind == "rle24":
        vals = rng.integers(0, 4, (h, w, 1)) * np.array([50, 20, 70])  # B, G, R
        vals[rng.random((h, w)) < 0.2] = 0
        rows = [vals[y].astype(np.uint8) for y in range(h - 1, -1, -1)]
        data = make_bmp(w, h, 24, rle_encode(rows, kind, skip_zero_runs=skip_zero_runs),
                        header=64, compression=4)
        return Sample(data, vals[..., ::-1].astype(np.uint8))
    bpp = 4 if kind == "rle4" else 8
    n = 1 << bpp
    pal = random_palette(rng, n)
    idx = rng.integers(0, 5, (h, w)) * (n // 8 + 1)
    idx[rng.random((h, w)) < 0.3] = rng.integers(0, n)
    idx[:, w // 3: w // 3 + 3] = 0  # runs of index 0, written as deltas
    rows = [idx[y] for y in range(h - 1, -1, -1)]
    comp = 2 if kind == "rle4" else 1
    data = make_bmp(w, h, bpp, rle_encode(rows, kind, skip_zero_runs=skip_zero_runs),
                    header=header, compression=comp, palette=pal)
    return Sample(data, np.array(pal, np.uint8)[idx])


def masked(rng, w, h, bpp, masks, *, header=40, compression=3, topdown=False, floor=False):
    values = rng.integers(0, 1 << min(bpp, 32), (h, w), dtype=np.int64)
    if bpp == 32:
        values = values & 0xFFFFFFFF
    data = make_bmp(w, h, bpp, pack_rows(values, bpp, topdown), header=header,
                    compression=compression, masks=None if compression == 0 else masks,
                    topdown=topdown)
    return Sample(data, masks_to_rgb(values, masks, floor))


def rgba64(rng, w, h, *, header=40):
    values = rng.integers(-300, 8600, (h, w, 4))
    data = make_bmp(w, h, 64, pack_rows(values, 64), header=header)
    return Sample(data, rgba64_to_rgb(values))


def jpeg_in_bmp(rng, w, h):
    img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    jpeg = buf.getvalue()
    data = make_bmp(w, h, 0, jpeg, header=124, compression=4)
    return Sample(data, fastdecode.decode_jpeg(jpeg))


RGB555 = (0x7C00, 0x3E0, 0x1F, 0)
RGB565 = (0xF800, 0x7E0, 0x1F, 0)
BGR888 = (0xFF0000, 0xFF00, 0xFF, 0)

# One small image per storage layout; 23 wide (every row padded) by 11.
SAMPLE_BUILDERS = {
    "pal1": lambda rng: paletted(rng, 23, 11, 1),
    "pal2": lambda rng: paletted(rng, 23, 11, 2),
    "pal4": lambda rng: paletted(rng, 23, 11, 4),
    "pal8": lambda rng: paletted(rng, 23, 11, 8),
    "pal8-short-palette": lambda rng: paletted(rng, 23, 11, 8, ncolors=20),
    "pal8-os2v1": lambda rng: paletted(rng, 23, 11, 8, header=12),
    "pal4-topdown": lambda rng: paletted(rng, 23, 11, 4, topdown=True),
    "rle4": lambda rng: rle_sample(rng, 23, 11, "rle4"),
    "rle8": lambda rng: rle_sample(rng, 23, 11, "rle8"),
    "rle24": lambda rng: rle_sample(rng, 23, 11, "rle24"),
    "rgb16-555": lambda rng: masked(rng, 23, 11, 16, RGB555, compression=0, floor=True),
    "rgb16-565": lambda rng: masked(rng, 23, 11, 16, RGB565, floor=True),
    "rgb16-4444": lambda rng: masked(rng, 23, 11, 16, (0xF00, 0xF0, 0xF, 0xF000), header=56),
    "rgb24": lambda rng: masked(rng, 23, 11, 24, BGR888, compression=0),
    "rgb24-topdown": lambda rng: masked(rng, 23, 11, 24, BGR888, compression=0, topdown=True),
    "rgb24-bitfields-rgb": lambda rng: masked(rng, 23, 11, 24, (0xFF, 0xFF00, 0xFF0000, 0)),
    "rgb32": lambda rng: masked(rng, 23, 11, 32, BGR888, compression=0),
    "rgb32-topdown": lambda rng: masked(rng, 23, 11, 32, BGR888, compression=0, topdown=True),
    "rgb32-xbgr": lambda rng: masked(rng, 23, 11, 32, (0xFF000000, 0xFF0000, 0xFF00, 0)),
    "rgb32-101010": lambda rng: masked(rng, 23, 11, 32, (0x3FF00000, 0xFFC00, 0x3FF, 0xC0000000),
                                       header=124),
    "rgb32-alphabitfields": lambda rng: masked(
        rng, 23, 11, 32, (0xFF0000, 0xFF00, 0xFF, 0xFF000000), compression=6),
    "rgba64": lambda rng: rgba64(rng, 23, 11),
    "jpeg-in-bmp": lambda rng: jpeg_in_bmp(rng, 24, 16),
}
SAMPLES = {name: build(np.random.default_rng(i)) for i, (name, build)
           in enumerate(SAMPLE_BUILDERS.items())}
SAMPLE_IDS = list(SAMPLES)


# ---------------------------------------------------------------------------
# BMP Suite conformance

BMPSUITE = corpus_dir("bmpsuite")
SUITE_ROWS = read_manifest("bmpsuite")


class Ref(NamedTuple):
    name: str
    tol: int = 0  # 1 where the file has more or less precision than the 8-bit reference


# Pillow refuses these; we decode them to the suite's reference rendering.
BEYOND_PILLOW = {
    "g/rgb32bf.bmp": Ref("rgb24.png"),
    "q/pal2.bmp": Ref("pal2.png"),
    "q/pal2color.bmp": Ref("pal2color.png"),
    "q/pal4rlecut.bmp": Ref("pal4rlecut-0.png"),  # what EOB leaves undefined = index 0
    "q/pal8rlecut.bmp": Ref("pal8rlecut-0.png"),
    "q/pal8os2v2-16.bmp": Ref("pal8.png"),
    "q/pal8oversizepal.bmp": Ref("pal8.png"),
    "q/rgb16-231.bmp": Ref("rgb16-231.png"),
    "q/rgb16-3103.bmp": Ref("rgb16-3103.png"),
    "q/rgb24jpeg.bmp": Ref("rgb24.jpg"),
    "q/rgb24rle24.bmp": Ref("pal8.png"),
    "q/rgb32-111110.bmp": Ref("rgb24.png", tol=1),  # 11-bit samples vs an 8-bit original
    "q/rgb32-7187.bmp": Ref("rgb32-7187.png"),
    "q/rgba16-1924.bmp": Ref("rgba16-1924.png"),
    "q/rgba16-4444.bmp": Ref("rgba16-4444.png"),
    "q/rgba32-1010102.bmp": Ref("rgba32-1010102.png"),
    "q/rgba32-61754.bmp": Ref("rgba32-61754.png"),
    "q/rgba32-81284.bmp": Ref("rgba32-81284.png"),
    "q/rgba32abf.bmp": Ref("rgba32.png"),
    "q/rgba64.bmp": Ref("rgba32.png", tol=1),  # 13-bit linear samples vs an 8-bit original
}

# Typed errors: (exception, message pattern). Pillow refuses all of these but
# rletopdown.bmp, which we refuse on purpose (RLE cannot be top-down).
REJECTED = {
    "b/badbitcount.bmp": (DecodeError, "unsupported BMP bit depth 30000"),
    "b/badheadersize.bmp": (DecodeError, "unsupported BMP info header size 66"),
    "b/badpalettesize.bmp": (DecodeError, "invalid BMP palette size 305402420"),
    "b/badwidth.bmp": (DecodeError, "invalid BMP width -127"),
    "b/reallybig.bmp": (ImageTooLargeError, r"3000000x2000000 .* above max_pixels"),
    "b/rgb16-880.bmp": (DecodeError, "the blue mask is zero"),
    "b/rletopdown.bmp": (DecodeError, "top-down bitmap .* cannot be compressed"),
    "b/shortfile.bmp": (DecodeError, "truncated BMP: .* holds 13 of 64 rows"),
    "q/pal1huffmsb.bmp": (UnsupportedFormatError, "Huffman 1D"),
    "q/rgb24png.bmp": (UnsupportedFormatError, "BI_PNG"),
    "x/ba-bm.bmp": (UnsupportedFormatError, "no 'BM' signature"),
}
STRICTER_THAN_PILLOW = {"b/rletopdown.bmp"}


def png16_rgba(path):
    """A 16-bit RGB/RGBA PNG at full precision (Pillow truncates to the high
    byte), rounded to 8 bits; non-interlaced only, as the suite's are."""
    raw = path.read_bytes()
    pos, idat = 8, b""
    while pos < len(raw):
        n, kind = struct.unpack(">I4s", raw[pos: pos + 8])
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", raw[pos + 8: pos + 21])
        elif kind == b"IDAT":
            idat += raw[pos + 8: pos + 8 + n]
        pos += 12 + n
    assert depth == 16 and interlace == 0 and ctype in (2, 6)
    ch = 3 if ctype == 2 else 4
    bpp, stride = 2 * ch, w * 2 * ch
    flat = zlib.decompress(idat)
    prev = np.zeros(stride, np.int64)
    rows = []
    for y in range(h):
        ftype = flat[y * (stride + 1)]
        line = np.frombuffer(flat, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if ftype == 0:
            cur = line
        elif ftype == 2:
            cur = (line + prev) & 255
        else:
            cur = np.zeros(stride, np.int64)
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                if ftype == 1:
                    pred = a
                elif ftype == 3:
                    pred = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (line[i] + pred) & 255
        rows.append(cur)
        prev = cur
    v16 = (np.array(rows)[:, 0::2] << 8) | np.array(rows)[:, 1::2]
    v8 = ((v16 * 510 + 65535) // (2 * 65535)).reshape(h, w, ch).astype(np.uint8)
    if ch == 3:
        v8 = np.concatenate([v8, np.full((h, w, 1), 255, np.uint8)], -1)
    return v8


def reference_rgba(name):
    path = BMPSUITE / "ref" / name
    if name.endswith(".png") and path.read_bytes()[24] == 16:
        return png16_rgba(path)
    with Image.open(path) as im:
        return np.asarray(im.convert("RGBA"))


@pytest.fixture(scope="session")
def suite_tally(request):
    """Outcome per BMP Suite file; a summary line is printed at the end."""
    tally: dict[str, str] = {}
    yield tally
    if not tally:
        return
    by_class = Counter((name.split("/")[0], outcome) for name, outcome in tally.items())
    parts = []
    for cls in ("g", "q", "b", "x", "pillow-legacy"):
        got = {o: n for (c, o), n in by_class.items() if c == cls}
        if got:
            parts.append(f"{cls}/: " + ", ".join(f"{n} {o}" for o, n in sorted(got.items())))
    beyond = sum(1 for o in tally.values() if o == "beyond-pillow")
    line = (f"bmpsuite: {len(tally)} files; {beyond} decoded beyond Pillow "
            f"(to the reference rendering). " + "; ".join(parts))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)


def check_suite_file(row) -> str:
    """Checks one BMP Suite file (Pillow's pixels, the reference rendering or
    the typed error); returns its outcome for the tally."""
    name = row["file"]
    data = (BMPSUITE / name).read_bytes()
    pil = pillow_pixels(BMPSUITE / name)
    if name in REJECTED:
        exc, pattern = REJECTED[name]
        with pytest.raises(exc, match=pattern):
            decode_bmp(data)
        if name in STRICTER_THAN_PILLOW:
            assert pil is not None, f"{name}: Pillow no longer decodes it; update the table"
        else:
            assert pil is None, f"{name}: Pillow decodes it now; compare instead of refusing"
        return "DecodeError"
    ours = decode_bmp(data)
    header = fastdecode.read_header(data)
    assert (header.format, header.height, header.width) == ("bmp",) + ours.shape[:2]
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)
        return "match-Pillow"
    assert name in BEYOND_PILLOW, f"{name}: Pillow refuses it and no reference is listed"
    ref = BEYOND_PILLOW[name]
    assert ref.name in row["reference_rendering"]
    rgba = reference_rgba(ref.name)
    visible = rgba[..., 3] > 0  # a fully transparent reference pixel has no colour
    diff = np.abs(ours.astype(int) - rgba[..., :3])[visible]
    assert diff.max() <= ref.tol, f"max |diff| {diff.max()} against ref/{ref.name}"
    return "beyond-pillow"


@pytest.mark.parametrize("row", corpus_params("bmpsuite", SUITE_ROWS, "file"))
def test_bmpsuite_file(row, suite_tally):
    suite_tally[row["file"]] = check_suite_file(row)


@pytest.mark.parametrize("row", corpus_params("bmpsuite", SUITE_ROWS, "file"))
def test_bmpsuite_file_in_mode_l(row):
    """Pillow's convert('L') where Pillow decodes; else the luma of our RGB."""
    name = row["file"]
    data = (BMPSUITE / name).read_bytes()
    if name in REJECTED:
        exc, pattern = REJECTED[name]
        with pytest.raises(exc, match=pattern):
            decode_bmp(data, mode="L")
        return
    ours = decode_bmp(data, mode="L")
    pil = pillow_pixels(BMPSUITE / name, "L")
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)
    elif name == "q/rgb24jpeg.bmp":  # grey straight from the JPEG decoder
        jpeg = (BMPSUITE / "ref" / "rgb24.jpg").read_bytes()
        np.testing.assert_array_equal(ours, fastdecode.decode_jpeg(jpeg, mode="L"))
    else:
        np.testing.assert_array_equal(ours, luma(decode_bmp(data)))


@pytest.mark.skipif(not SUITE_ROWS, reason="shared corpus 'bmpsuite' not present")
@pytest.mark.parametrize("expected", [pytest.param(len(BEYOND_PILLOW),
                                                   id=f"{len(BEYOND_PILLOW)}-files")])
def test_bmpsuite_beyond_pillow_count(expected):
    """The files measured as decoded beyond Pillow are exactly the table's:
    every file of the suite checked in this one test (an aggregate: a sampled
    or split matrix cannot hold it)."""
    outcomes = {row["file"]: check_suite_file(row) for row in SUITE_ROWS}
    measured = sorted(n for n, o in outcomes.items() if o == "beyond-pillow")
    assert measured == sorted(BEYOND_PILLOW)
    assert len(measured) == expected


# ---------------------------------------------------------------------------
# Generated files: every header size x bit depth


def header_matrix():
    params = []
    for header in (12, 16, 40, 52, 56, 64, 108, 124):
        for bpp in (1, 2, 4, 8, 16, 24, 32, 64):
            for topdown in (False, True) if header != 12 else (False,):
                params.append(pytest.param(header, bpp, 0, topdown,
                                           id=f"h{header}-{bpp}bpp-rgb{'-topdown' * topdown}"))
    for header in (40, 52, 56, 108, 124):
        for bpp in (16, 24, 32):
            params.append(pytest.param(header, bpp, 3, False, id=f"h{header}-{bpp}bpp-bitfields"))
    for header in (40, 56, 108, 124):
        for bpp in (16, 32):
            params.append(pytest.param(header, bpp, 6, True, id=f"h{header}-{bpp}bpp-alphabf-td"))
    for header in (40, 52, 56, 64, 108, 124):
        params.append(pytest.param(header, 8, 1, False, id=f"h{header}-rle8"))
        params.append(pytest.param(header, 4, 2, False, id=f"h{header}-rle4"))
    params.append(pytest.param(64, 24, 4, False, id="h64-rle24"))
    return params


MATRIX_MASKS = {16: (0x7C00, 0x3E0, 0x1F, 0x8000), 24: (0xFF, 0xFF00, 0xFF0000, 0),
                32: (0xFF00, 0xFF0000, 0xFF000000, 0xFF)}


@pytest.mark.parametrize("header, bpp, compression, topdown", header_matrix())
def test_header_and_depth_matrix(header, bpp, compression, topdown):
    rng = np.random.default_rng(header * 1000 + bpp * 10 + compression)
    w, h = 13, 6
    if compression in (1, 2):
        sample = rle_sample(rng, w, h, "rle8" if compression == 1 else "rle4", header=header)
    elif compression == 4:
        sample = rle_sample(rng, w, h, "rle24")
    elif bpp <= 8:
        sample = paletted(rng, w, h, bpp, header=header, topdown=topdown)
    elif bpp == 64:
        values = rng.integers(-300, 8600, (h, w, 4))
        data = make_bmp(w, h, 64, pack_rows(values, 64, topdown), header=header, topdown=topdown)
        sample = Sample(data, rgba64_to_rgb(values))
    elif compression == 0:
        masks = RGB555 if bpp == 16 else BGR888
        sample = masked(rng, w, h, bpp, masks, header=header, compression=0, topdown=topdown,
                        floor=bpp == 16)
    else:
        masks = MATRIX_MASKS[bpp]
        if compression == 3 and header in (40, 52):
            masks = masks[:3] + (0,)
        sample = masked(rng, w, h, bpp, masks, header=header, compression=compression,
                        topdown=topdown, floor=bpp == 16)
    ours = decode_bmp(sample.data)
    np.testing.assert_array_equal(ours, sample.expected)
    pil = pillow_pixels(sample.data)
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)
    info = fastdecode.read_header(sample.data)
    assert (info.format, info.width, info.height) == ("bmp", w, h)
    assert (info.subsampling, info.progressive, info.orientation) == (None, False, 1)
    if bpp <= 8:
        assert (info.channels, info.color_space) == (1, "palette")
    else:
        has_alpha = bpp == 64 or (compression in (3, 6) and header not in (40, 52)
                                  and MATRIX_MASKS[bpp][3] != 0) or compression == 6
        assert (info.channels, info.color_space) == (4 if has_alpha else 3, "rgb")


@pytest.mark.parametrize("bpp", [1, 2, 4, 8, 16, 24, 32, 64])
@pytest.mark.parametrize("size", [(1, 1), (1, 17), (17, 1), (2, 3), (3, 3), (5, 2), (6, 2),
                                  (7, 2), (9, 2), (31, 2), (33, 2)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_row_padding_and_thin_images(bpp, size):
    w, h = size
    rng = np.random.default_rng(bpp * 100 + w * 7 + h)
    if bpp <= 8:
        sample = paletted(rng, w, h, bpp)
    elif bpp == 64:
        values = rng.integers(0, 8193, (h, w, 4))
        sample = Sample(make_bmp(w, h, 64, pack_rows(values, 64)), rgba64_to_rgb(values))
    else:
        sample = masked(rng, w, h, bpp, RGB555 if bpp == 16 else BGR888, compression=0,
                        floor=bpp == 16)
    ours = decode_bmp(sample.data)
    np.testing.assert_array_equal(ours, sample.expected)
    pil = pillow_pixels(sample.data)
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)


PILLOW_WRITER_MODES = ["1", "L", "P", "RGB", "RGBA"]


@pytest.mark.parametrize("mode", PILLOW_WRITER_MODES)
@pytest.mark.parametrize("size", [(1, 1), (1, 9), (9, 1), (7, 5), (33, 17), (64, 3)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_pillow_writer_round_trip(mode, size):
    rng = np.random.default_rng(len(mode) * 1000 + size[0] * 31 + size[1])
    w, h = size
    rgba = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    img = Image.fromarray(rgba, "RGBA")
    img = img.convert(mode) if mode != "P" else img.convert("RGB").quantize(37)
    buf = io.BytesIO()
    img.save(buf, "BMP")
    data = buf.getvalue()
    ours = decode_bmp(data)
    np.testing.assert_array_equal(ours, np.asarray(img.convert("RGB")))
    np.testing.assert_array_equal(ours, pillow_pixels(data))
    np.testing.assert_array_equal(decode_bmp(data, mode="L"), pillow_pixels(data, "L"))


# ---------------------------------------------------------------------------
# Every storage layout: model, Pillow, options


@pytest.mark.parametrize("kind", SAMPLE_IDS)
def test_sample_matches_model_and_pillow(kind):
    sample = SAMPLES[kind]
    ours = decode_bmp(sample.data)
    assert ours.dtype == np.uint8 and ours.flags.c_contiguous
    np.testing.assert_array_equal(ours, sample.expected)
    pil = pillow_pixels(sample.data)
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)


@pytest.mark.parametrize("kind", SAMPLE_IDS)
def test_mode_l(kind):
    sample = SAMPLES[kind]
    ours = decode_bmp(sample.data, mode="L")
    assert ours.shape == sample.expected.shape[:2] + (1,)
    if kind == "jpeg-in-bmp":  # the JPEG decoder's own grey output
        jpeg = sample.data[struct.unpack_from("<I", sample.data, 10)[0]:]
        np.testing.assert_array_equal(ours, fastdecode.decode_jpeg(jpeg, mode="L"))
        return
    np.testing.assert_array_equal(ours, luma(decode_bmp(sample.data)))
    pil = pillow_pixels(sample.data, "L")
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)


def random_boxes(rng, h, w, n):
    boxes = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 1, h, 1), (h - 1, 0, 1, w)]
    for _ in range(n):
        top, left = int(rng.integers(0, h)), int(rng.integers(0, w))
        boxes.append((top, left, int(rng.integers(1, h - top + 1)),
                      int(rng.integers(1, w - left + 1))))
    return boxes


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("kind", SAMPLE_IDS)
def test_crop_equals_slicing(kind, mode):
    data = SAMPLES[kind].data
    full = decode_bmp(data, mode=mode)
    rng = np.random.default_rng(7)
    for top, left, ch, cw in random_boxes(rng, *full.shape[:2], 20):
        got = decode_bmp(data, mode=mode, crop=(top, left, ch, cw))
        np.testing.assert_array_equal(got, full[top: top + ch, left: left + cw],
                                      err_msg=f"crop {(top, left, ch, cw)}")


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("kind", SAMPLE_IDS)
def test_flip_and_chw(kind, mode):
    data = SAMPLES[kind].data
    full = decode_bmp(data, mode=mode)
    h, w = full.shape[:2]
    box = (h // 3, w // 4, h - h // 3, w // 2)
    part = full[box[0]: box[0] + box[2], box[1]: box[1] + box[3]]
    np.testing.assert_array_equal(decode_bmp(data, mode=mode, flip=True), full[:, ::-1])
    np.testing.assert_array_equal(decode_bmp(data, mode=mode, flip=True, crop=box), part[:, ::-1])
    np.testing.assert_array_equal(decode_bmp(data, mode=mode, layout="CHW"),
                                  full.transpose(2, 0, 1))
    np.testing.assert_array_equal(decode_bmp(data, mode=mode, layout="CHW", flip=True, crop=box),
                                  part[:, ::-1].transpose(2, 0, 1))


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("kind", ["pal4", "rle8", "rgb24", "rgb32-xbgr"])
def test_out_is_filled_in_place(kind, layout):
    data = SAMPLES[kind].data
    want = decode_bmp(data, layout=layout, crop=(1, 2, 5, 9))
    out = np.full(want.shape, 77, np.uint8)
    got = decode_bmp(data, layout=layout, crop=(1, 2, 5, 9), out=out)
    assert got is out
    np.testing.assert_array_equal(out, want)


def test_out_errors():
    data = SAMPLES["rgb24"].data
    with pytest.raises(ValueError, match=r"out has 12 bytes, expected 759 bytes"):
        decode_bmp(data, out=np.empty(12, np.uint8))
    with pytest.raises(ValueError, match="dtype uint8"):
        decode_bmp(data, out=np.empty((11, 23, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        decode_bmp(data, out=np.empty((11, 46, 3), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="read-only"):
        decode_bmp(data, out=np.frombuffer(bytes(759), np.uint8).reshape(11, 23, 3))
    with pytest.raises(TypeError, match="buffer protocol"):
        decode_bmp(data, out=[0] * 759)


def test_decode_image_and_read_image_dispatch(tmp_path):
    data = SAMPLES["rgb24"].data
    np.testing.assert_array_equal(fastdecode.decode_image(data), decode_bmp(data))
    # Over 1 MiB, read_image maps the file instead of reading it.
    rng = np.random.default_rng(3)
    big = masked(rng, 700, 520, 24, BGR888, compression=0)
    path = tmp_path / "big.bmp"
    path.write_bytes(big.data)
    np.testing.assert_array_equal(fastdecode.read_image(path, flip=True), big.expected[:, ::-1])
    info = fastdecode.read_header(big.data)
    assert tuple(info) == ("bmp", 700, 520, 3, "rgb", None, False, 1)


def test_threads_share_nothing():
    names = ["pal4", "rle8", "rgb16-565", "rgb24", "rgb32-101010", "rgba64"]
    want = {n: decode_bmp(SAMPLES[n].data, mode="L", flip=True) for n in names}
    failures = []

    def work(k):
        for i in range(40):
            name = names[(k + i) % len(names)]
            got = decode_bmp(SAMPLES[name].data, mode="L", flip=True)
            if not np.array_equal(got, want[name]):
                failures.append(name)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---------------------------------------------------------------------------
# Pillow's palette and offset quirks, reproduced


def tiny_pal8(indices, palette, **kw):
    idx = np.array([indices])
    return make_bmp(idx.shape[1], 1, 8, pack_rows(idx, 8), palette=palette, **kw)


def test_index_beyond_palette_is_black():
    data = tiny_pal8([0, 1, 2, 200], [(10, 20, 30), (40, 50, 60)])
    want = [[[10, 20, 30], [40, 50, 60], [0, 0, 0], [0, 0, 0]]]
    np.testing.assert_array_equal(decode_bmp(data), want)
    np.testing.assert_array_equal(decode_bmp(data), pillow_pixels(data))


def test_grey_ramp_palette_reads_every_index_as_grey():
    # Pillow opens an 8-bit file whose palette is 0,1,2,... as mode L.
    data = tiny_pal8([0, 1, 2, 200], [(0, 0, 0), (1, 1, 1), (2, 2, 2)])
    np.testing.assert_array_equal(decode_bmp(data)[..., 0], [[0, 1, 2, 200]])
    np.testing.assert_array_equal(decode_bmp(data), pillow_pixels(data))


def test_one_bit_black_only_palette_reads_index_one_as_white():
    idx = np.array([[0, 1, 0, 1]])
    data = make_bmp(4, 1, 1, pack_rows(idx, 1), palette=[(0, 0, 0)])
    np.testing.assert_array_equal(decode_bmp(data)[..., 0], [[0, 255, 0, 255]])
    np.testing.assert_array_equal(decode_bmp(data), pillow_pixels(data))
    other = make_bmp(4, 1, 1, pack_rows(idx, 1), palette=[(9, 9, 9)])
    np.testing.assert_array_equal(decode_bmp(other)[..., 0], [[9, 0, 9, 0]])
    np.testing.assert_array_equal(decode_bmp(other), pillow_pixels(other))


def test_four_bit_grey_ramp_uses_the_palette():
    # Pillow reads this as 8-bit L data (a Pillow bug); we use the palette.
    idx = np.array([[1, 2, 3, 15]])
    data = make_bmp(4, 1, 4, pack_rows(idx, 4), palette=[(i, i, i) for i in range(16)])
    np.testing.assert_array_equal(decode_bmp(data)[..., 0], [[1, 2, 3, 15]])


@pytest.mark.parametrize("offset", [pytest.param("after-header", id="bfOffBits-at-palette"),
                                    pytest.param(0, id="bfOffBits-zero"),
                                    pytest.param("gap", id="bfOffBits-after-gap")])
@pytest.mark.parametrize("header", [12, 40, 124])
def test_pixel_offset_rules(offset, header):
    rng = np.random.default_rng(header)
    pal = random_palette(rng, 7)
    idx = rng.integers(0, 7, (5, 9))
    gap = 6 if offset == "gap" else 0
    off = 14 + header if offset == "after-header" else (0 if offset == 0 else None)
    data = make_bmp(9, 5, 8, pack_rows(idx, 8), header=header, palette=pal + [(0, 0, 0)] * (
        249 if header == 12 else 0), colors=None, offset=off, gap=gap)
    full_pal = np.array(pal + [(0, 0, 0)] * 249, np.uint8)
    np.testing.assert_array_equal(decode_bmp(data), full_pal[idx])
    np.testing.assert_array_equal(decode_bmp(data), pillow_pixels(data))


@pytest.mark.parametrize("alpha", [0xFF00, 0xFF000000, 0x80008000],
                         ids=["overlaps-green", "outside-16-bits", "not-contiguous"])
def test_unusable_alpha_mask_is_ignored(alpha):
    rng = np.random.default_rng(alpha % 1000)
    values = rng.integers(0, 1 << 16, (4, 5))
    data = make_bmp(5, 4, 16, pack_rows(values, 16), header=124, compression=3,
                    masks=RGB565[:3] + (alpha,))
    np.testing.assert_array_equal(decode_bmp(data), masks_to_rgb(values, RGB565, floor=True))
    assert fastdecode.read_header(data).channels == 3
    pil = pillow_pixels(data)  # Pillow ignores the alpha mask of 16-bit files
    np.testing.assert_array_equal(decode_bmp(data), pil)


def test_os2_64_byte_header_with_bit_masks_reads_them_like_pillow():
    rng = np.random.default_rng(64)
    values = rng.integers(0, 1 << 16, (4, 5))
    data = bytearray(make_bmp(5, 4, 16, pack_rows(values, 16), header=64, compression=3))
    struct.pack_into("<4I", data, 14 + 40, *RGB565)
    want = masks_to_rgb(values, RGB565, floor=True)
    np.testing.assert_array_equal(decode_bmp(bytes(data)), want)
    np.testing.assert_array_equal(pillow_pixels(bytes(data)), want)


def test_sixteen_bit_scaling_follows_pillow_for_555_and_565_and_rounds_otherwise():
    values = np.arange(64).reshape(1, 64)
    rgb565 = make_bmp(64, 1, 16, pack_rows(values << 5, 16), compression=3, masks=RGB565)
    np.testing.assert_array_equal(decode_bmp(rgb565)[0, :, 1], values[0] * 255 // 63)
    np.testing.assert_array_equal(decode_bmp(rgb565), pillow_pixels(rgb565))
    odd = make_bmp(64, 1, 16, pack_rows(values << 5, 16), compression=3,
                   masks=(0xF800, 0x7E0, 0xF, 0))
    np.testing.assert_array_equal(decode_bmp(odd)[0, :, 1], (values[0] * 510 + 63) // 126)


# ---------------------------------------------------------------------------
# RLE


def rle_file(stream, w, h, kind="rle8", palette=None):
    bpp = 4 if kind == "rle4" else 8
    palette = palette or [(i * 5 % 256, (i * 7 + 1) % 256, (i * 3 + 2) % 256) for i in
                          range(1 << bpp)]
    return make_bmp(w, h, bpp, bytes(stream), compression=2 if kind == "rle4" else 1,
                    palette=palette)


RLE_PALETTES = {
    "black-white": [(0, 0, 0), (255, 255, 255)],  # Pillow: mode "1", nonzero -> white
    "black-only": [(0, 0, 0)],
    "grey-ramp": [(i, i, i) for i in range(3)],  # Pillow: mode "L", index -> grey
    "colour": [(10, 20, 30), (40, 50, 60), (70, 80, 90)],
}


@pytest.mark.parametrize("palette", list(RLE_PALETTES))
@pytest.mark.parametrize("bpp", [1, 4, 8])
@pytest.mark.parametrize("kind", ["rle4", "rle8"])
def test_rle_with_any_palette_depth_matches_pillow(kind, bpp, palette):
    """Pillow reads RLE4/RLE8 whatever the bit count says; so do we."""
    stream = bytes([3, 1, 0, 0, 2, 2, 1, 0, 0, 0, 3, 0x21, 0, 1])
    data = make_bmp(3, 3, bpp, stream, compression=1 if kind == "rle8" else 2,
                    palette=RLE_PALETTES[palette])
    pil = pillow_pixels(data)
    assert pil is not None
    np.testing.assert_array_equal(decode_bmp(data), pil)


@pytest.mark.parametrize("kind", ["rle4", "rle8"])
@pytest.mark.parametrize("seed", range(12))
def test_random_rle_streams_match_pillow(kind, seed):
    """Runs that overflow rows, deltas past the end, odd absolute runs: where
    Pillow decodes the stream, we give its pixels; otherwise a DecodeError or
    (end of bitmap before the last pixel) the rest as index 0."""
    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(1, 12)), int(rng.integers(1, 6))
    stream = bytearray()
    for _ in range(int(rng.integers(1, 30))):
        op = rng.integers(0, 6)
        if op <= 1:
            stream += bytes((int(rng.integers(1, 2 * w + 3)), int(rng.integers(0, 256))))
        elif op == 2:
            stream += b"\0\0"
        elif op == 3:
            stream += bytes((0, 2, int(rng.integers(0, w + 2)), int(rng.integers(0, 2))))
        else:
            n = int(rng.integers(3, 2 * w + 4))
            nbytes = (n + 1) // 2 if kind == "rle4" else n
            stream += bytes((0, n)) + rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
            stream += b"\0" * (nbytes & 1)
    if rng.random() < 0.5:
        stream += b"\0\1"
    data = rle_file(stream, w, h, kind)
    pil = pillow_pixels(data)
    try:
        ours = decode_bmp(data)
    except DecodeError as exc:
        assert pil is None, f"Pillow decodes it, we raised {exc}"
        assert "RLE data ends" in str(exc)
        return
    if pil is not None:
        np.testing.assert_array_equal(ours, pil)


def test_rle_end_of_bitmap_early_leaves_index_zero():
    # Pillow: "not enough image data". We keep what was decoded.
    pal = [(10, 20, 30)] + [(200, 100, 50)] * 255
    data = rle_file([3, 1, 0, 0, 2, 1, 0, 1], 4, 3, palette=pal)
    got = decode_bmp(data)
    want = np.zeros((3, 4), int)
    want[2, :3] = 1  # bottom row (first in the file)
    want[1, :2] = 1
    np.testing.assert_array_equal(got, np.array(pal, np.uint8)[want])
    assert pillow_pixels(data) is None


@pytest.mark.parametrize("stream", [
    pytest.param([4, 1, 0], id="cut-in-pair"),
    pytest.param([0, 2, 1], id="cut-in-delta"),
    pytest.param([0, 5, 1, 2], id="cut-in-absolute"),
    pytest.param([4, 1], id="no-end-marker"),
])
def test_rle_running_out_of_data_is_a_decode_error(stream):
    with pytest.raises(DecodeError, match=r"truncated BMP: the RLE data ends after \d+ of 12"):
        decode_bmp(rle_file(stream, 4, 3))


@pytest.mark.parametrize("stream", [
    pytest.param([255, 7, 0, 2, 255, 255, 0, 1], id="long-run-then-huge-delta"),
    pytest.param([1, 7, 0, 255] + [9] * 255 + [0, 1], id="absolute-run-past-the-end"),
    pytest.param([0, 4, 1, 2, 3, 4, 2, 5, 0, 0], id="absolute-run-wraps-a-row"),
])
def test_rle_runs_and_deltas_are_clamped_like_pillow(stream):
    data = rle_file(stream, 3, 2)
    ours = decode_bmp(data)
    pil = pillow_pixels(data)
    assert pil is not None
    np.testing.assert_array_equal(ours, pil)


# ---------------------------------------------------------------------------
# Errors


def rgb24_file(w=4, h=3, **kw):
    return make_bmp(w, h, 24, bytes(stride_of(w, 24) * h), **kw)


def patch(data, offset, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


@pytest.mark.parametrize("data, exc, pattern", [
    pytest.param(b"", UnsupportedFormatError, "no 'BM' signature", id="empty"),
    pytest.param(b"\x89PNG\r\n\x1a\n" + bytes(40), UnsupportedFormatError, "no 'BM' signature",
                 id="png"),
    pytest.param(b"BM" + bytes(10), DecodeError, "truncated BMP: 12 bytes", id="file-header"),
    pytest.param(rgb24_file()[:40], DecodeError, "40-byte info header needs 54 bytes",
                 id="info-header"),
    pytest.param(patch(rgb24_file(), 14, "<I", 66), DecodeError, "info header size 66",
                 id="header-size"),
    pytest.param(patch(rgb24_file(), 18, "<i", 0), DecodeError, "invalid BMP width 0",
                 id="zero-width"),
    pytest.param(patch(rgb24_file(), 18, "<i", -4), DecodeError, "invalid BMP width -4",
                 id="negative-width"),
    pytest.param(patch(rgb24_file(), 22, "<i", 0), DecodeError, "invalid BMP height 0",
                 id="zero-height"),
    pytest.param(patch(rgb24_file(), 22, "<i", -2 ** 31), DecodeError,
                 "invalid BMP height -2147483648", id="int-min-height"),
    pytest.param(patch(rgb24_file(), 28, "<H", 12), DecodeError, "unsupported BMP bit depth 12",
                 id="bit-depth"),
    pytest.param(patch(rgb24_file(), 30, "<I", 1), DecodeError,
                 r"RLE8 compression needs a palette \(at most 8 bits per pixel\), the header "
                 "says 24", id="rle8-on-24bpp"),
    pytest.param(patch(SAMPLES["rle8"].data, 22, "<i", -11), DecodeError,
                 "top-down bitmap .* cannot be compressed", id="rle-topdown"),
    pytest.param(patch(rgb24_file(), 30, "<I", 9), DecodeError, "unknown BMP compression 9",
                 id="compression"),
    pytest.param(patch(rgb24_file(), 30, "<I", 5), UnsupportedFormatError, "BI_PNG",
                 id="bi-png"),
    pytest.param(patch(rgb24_file(), 30, "<I", 11), UnsupportedFormatError, "CMYK",
                 id="cmyk"),
    pytest.param(make_bmp(4, 3, 1, bytes(12), header=64, compression=3,
                          palette=[(0, 0, 0), (9, 9, 9)]),
                 UnsupportedFormatError, "Huffman 1D", id="os2-huffman"),
    pytest.param(make_bmp(4, 3, 8, bytes(12), compression=3, masks=BGR888), DecodeError,
                 "bit masks need 16, 24 or 32 bits per pixel", id="masks-on-8bpp"),
    pytest.param(make_bmp(4, 3, 16, bytes(24), compression=3, masks=(0xF800, 0x7E0, 0, 0)),
                 DecodeError, "the blue mask is zero", id="zero-mask"),
    pytest.param(make_bmp(4, 3, 16, bytes(24), compression=3, masks=(0xF800, 0xFE0, 0x1F, 0)),
                 DecodeError, "overlap", id="overlapping-masks"),
    pytest.param(make_bmp(4, 3, 16, bytes(24), compression=3, masks=(0xF801, 0x7E0, 0x1E, 0)),
                 DecodeError, "not contiguous", id="non-contiguous-mask"),
    pytest.param(make_bmp(4, 3, 16, bytes(24), compression=3, masks=(0x1F0000, 0x7E0, 0x1F, 0)),
                 DecodeError, "does not fit in 16 bits", id="mask-too-wide"),
    pytest.param(make_bmp(4, 3, 16, bytes(24), compression=3, masks=RGB565)[:60], DecodeError,
                 "bit masks after the header are cut off", id="masks-cut"),
    pytest.param(patch(paletted(np.random.default_rng(0), 4, 3, 8).data, 46, "<I", 70000),
                 DecodeError, "invalid BMP palette size 70000", id="palette-size"),
    pytest.param(rgb24_file()[:-5], DecodeError, r"truncated BMP: .* holds 2 of 3 rows",
                 id="pixels-cut"),
    pytest.param(patch(rgb24_file(), 10, "<I", 10 ** 6), DecodeError,
                 r"truncated BMP: the pixel data at offset 1000000 holds 0 of 3 rows",
                 id="offset-past-end"),
])
def test_documented_errors(data, exc, pattern):
    with pytest.raises(exc, match=pattern):
        decode_bmp(data)


def test_read_header_reports_the_same_errors():
    with pytest.raises(DecodeError, match="unsupported BMP bit depth 12"):
        fastdecode.read_header(patch(rgb24_file(), 28, "<H", 12))
    # The pixel data is not read: a truncated file still has a header.
    assert fastdecode.read_header(rgb24_file()[:-5]).width == 4


@pytest.mark.parametrize("crop", [(0, 0, 4, 1), (0, 4, 1, 1), (2, 0, 2, 1), (0, 0, 1, 5)],
                         ids=lambda c: "-".join(map(str, c)))
def test_crop_outside_the_image(crop):
    with pytest.raises(ValueError, match=r"crop .* is outside the 4x3 image"):
        decode_bmp(rgb24_file(), crop=crop)


def test_jpeg_in_bmp_errors():
    sample = SAMPLES["jpeg-in-bmp"]
    with pytest.raises(DecodeError, match="the JPEG is 24x16, the BMP header says 25x16"):
        decode_bmp(patch(sample.data, 18, "<i", 25))
    with pytest.raises(DecodeError, match="embedded JPEG has"):
        decode_bmp(sample.data[:-100])
    with pytest.raises(DecodeError, match="BMP with an embedded JPEG"):
        decode_bmp(patch(sample.data[:138], 34, "<I", 0) + b"not a jpeg" * 10)


# ---------------------------------------------------------------------------
# max_pixels


def huge_header(kind="rgb24", w=65500, h=65500):
    if kind == "rle8":
        return make_bmp(w, h, 8, b"\0\1", compression=1, palette=[(1, 2, 3)])
    return make_bmp(w, h, 24, b"\0" * 64, size_image=0)


@pytest.mark.no_sanitize
@pytest.mark.parametrize("kind", ["rgb24", "rle8"])
def test_declared_giant_is_refused_before_allocating(kind):
    data = huge_header(kind)
    tracemalloc.start()
    try:
        with pytest.raises(ImageTooLargeError, match=r"65500x65500 = 4290250000 pixels, above "
                                                      r"max_pixels=178956970"):
            decode_bmp(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_max_pixels_boundary_and_none():
    data = SAMPLES["rgb24"].data  # 23 x 11 = 253 pixels
    assert decode_bmp(data, max_pixels=253).shape == (11, 23, 3)
    with pytest.raises(ImageTooLargeError, match="23x11 = 253 pixels, above max_pixels=252"):
        decode_bmp(data, max_pixels=252)
    with pytest.raises(ImageTooLargeError, match="above max_pixels"):
        fastdecode.decode_image(data, max_pixels=252)
    # No limit: the giant header is then refused for its missing pixel data,
    # still before anything is allocated.
    with pytest.raises(DecodeError, match=r"truncated BMP: .* holds 0 of 65500 rows"):
        decode_bmp(huge_header(), max_pixels=None)
    assert fastdecode.read_header(huge_header()).width == 65500


# ---------------------------------------------------------------------------
# Robustness: truncation, header rewrites


ROBUST_KINDS = ["pal1", "pal4", "pal8-os2v1", "rle4", "rle8", "rle24", "rgb16-565", "rgb24",
                "rgb32-101010", "rgb32-alphabitfields", "rgba64"]


@pytest.mark.parametrize("kind", ROBUST_KINDS)
def test_truncation_at_every_offset(kind):
    data = SAMPLES[kind].data
    full = decode_bmp(data)
    for cut in range(len(data)):
        part = data[:cut]
        try:
            got = decode_bmp(part)
        except DecodeError:
            continue
        # Only a cut inside the last row's padding (or after the RLE data
        # that fills the image) can still decode, to the same pixels.
        np.testing.assert_array_equal(got, full, err_msg=f"cut at {cut}")
        pil = pillow_pixels(part)
        if pil is not None:
            np.testing.assert_array_equal(got, pil)


@pytest.mark.parametrize("kind", ROBUST_KINDS)
def test_random_header_rewrites_raise_only_typed_errors(kind):
    data = SAMPLES[kind].data
    rng = np.random.default_rng(sum(map(ord, kind)))
    header_end = min(len(data), 14 + 124 + 16 + 64)
    for _ in range(300):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 5))):
            pos = int(rng.integers(0, header_end))
            b[pos] = int(rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.integers(0, 256)]))
        for op in (lambda d: decode_bmp(d, max_pixels=1 << 16),
                   lambda d: decode_bmp(d, max_pixels=1 << 16, mode="L", flip=True,
                                        layout="CHW"),
                   fastdecode.read_header):
            try:
                op(bytes(b))
            except DecodeError:
                pass


@pytest.mark.parametrize("kind", ["rle4", "rle8", "rle24"])
def test_random_rle_data_rewrites_raise_only_typed_errors(kind):
    data = SAMPLES[kind].data
    start = struct.unpack_from("<I", data, 10)[0]
    rng = np.random.default_rng(len(kind))
    for _ in range(300):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(start, len(b)))] = int(rng.integers(0, 256))
        try:
            decode_bmp(bytes(b), crop=(1, 1, 5, 5))
        except DecodeError:
            pass
