"""Decompression bombs: refused by max_pixels before anything is allocated;
progressive files stopped by the scan limit, legitimate ones still decoded.

The 65500 x 65500 files are a real JPEG with its SOF rewritten and a bare
BMP header (no pixel data): both declare 4.29 G pixels (12.9 GB as RGB).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd

from fuzz.bounded import bounded, hang_guard  # noqa: F401
from helpers.jpeg_samples import CJPEG, encode, natural_image, pillow_rgb

NEEDS_CJPEG = pytest.mark.skipif(CJPEG is None, reason="cjpeg (libjpeg-turbo-progs) not installed")
pytestmark = bounded(120)

GIANT = 65500
GIANT_MESSAGE = r"65500x65500 = 4290250000 pixels, above max_pixels=178956970"


def giant_jpeg() -> bytes:
    data = encode(24, 40)
    i = data.index(b"\xff\xc0")
    return data[:i + 5] + struct.pack(">HH", GIANT, GIANT) + data[i + 9:]


def giant_bmp() -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, GIANT, GIANT, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(info), 0, 0, 14 + len(info)) + info


BOMBS = [pytest.param(giant_jpeg, id="jpeg"), pytest.param(giant_bmp, id="bmp")]


def native_decoder(make):
    return fd.decode_jpeg if make is giant_jpeg else fd.decode_bmp


# Options that must not get around the check: a tiny crop, a tiny resize, a
# small scale (JPEG), grey output.
OPTIONS = [
    pytest.param({}, id="default"),
    pytest.param({"crop": (0, 0, 8, 8)}, id="crop"),
    pytest.param({"size": (8, 8)}, id="size"),
    pytest.param({"mode": "L", "layout": "CHW", "flip": True}, id="L-CHW-flip"),
]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("make", BOMBS)
def test_bomb_is_image_too_large(make, options):
    data = make()
    for decode in (native_decoder(make), fd.decode_image):
        with pytest.raises(fd.ImageTooLargeError, match=GIANT_MESSAGE):
            decode(data, **options)
    info = fd.read_header(data)  # the header alone is fine to read
    assert (info.width, info.height) == (GIANT, GIANT)


@pytest.mark.parametrize("options", [pytest.param({"scale": 0.125}, id="scale-1/8"),
                                     pytest.param({"min_size": (8, 8)}, id="min-size")])
def test_jpeg_bomb_is_refused_at_any_scale(options):
    """max_pixels counts the declared size, not the DCT-scaled output."""
    with pytest.raises(fd.ImageTooLargeError, match=GIANT_MESSAGE):
        fd.decode_jpeg(giant_jpeg(), **options)


@pytest.mark.no_sanitize  # a time bound; ASan makes everything slower
@pytest.mark.parametrize("make", BOMBS)
def test_bomb_is_refused_in_under_10_ms(make):
    data = make()
    decode = native_decoder(make)
    best = float("inf")
    for _ in range(30):  # best of N: a shared 2-core machine has stalls
        t0 = time.perf_counter()
        try:
            decode(data)
        except fd.ImageTooLargeError:
            pass
        best = min(best, time.perf_counter() - t0)
    assert best < 0.010, f"best of 30 rejections took {best * 1e3:.2f} ms"


@pytest.mark.parametrize("make", BOMBS)
def test_bomb_allocates_nothing_on_the_python_side(make):
    """numpy reports its array allocations to tracemalloc: a 12.9 GB (or any
    image-sized) buffer would show in the peak."""
    data = make()
    decode = native_decoder(make)
    tracemalloc.start()
    try:
        for _ in range(20):
            with pytest.raises(fd.ImageTooLargeError, match=GIANT_MESSAGE):
                decode(data, size=(8, 8))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10, f"peak Python-side allocation {peak} bytes"


@pytest.mark.no_sanitize  # measures memory
@pytest.mark.parametrize("make", BOMBS)
def test_bomb_rejections_do_not_grow_rss(make):
    data = make()
    decode = native_decoder(make)

    def reject(n):
        for _ in range(n):
            try:
                decode(data)
            except fd.ImageTooLargeError:
                pass

    reject(200)  # warm up: thread-local decoder, exception machinery
    before = rss_bytes()
    reject(5000)
    growth = rss_bytes() - before
    assert growth < 1 << 20, f"RSS grew by {growth} bytes over 5000 rejections"


# Run in a child process whose address space is capped just above what it
# already maps: any attempt to allocate the image (even untouched, lazily
# mapped memory that RSS would not show) fails there. The control decode
# with max_pixels=None (and no work budget) proves the cap bites.
CAPPED_CHILD = r"""
import json, resource, sys
sys.path[:0] = sys.argv[2:]
import fastdecode as fd
from core import test_bombs as tb
with open("/proc/self/statm") as f:
    vm = int(f.read().split()[0]) * resource.getpagesize()
cap = vm + (256 << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
out = {}
for name in ("jpeg", "bmp"):
    make = getattr(tb, "giant_" + name)
    decode = tb.native_decoder(make)
    no_limit = {"max_pixels": None, "max_work_per_byte": None}
    for label, kw in (("default", {}), ("no-limit", no_limit)):
        try:
            decode(make(), **kw)
            out[name + "/" + label] = "decoded"
        except BaseException as exc:
            out[name + "/" + label] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.no_sanitize  # ASan reserves terabytes of shadow memory: no RLIMIT_AS under it
def test_bomb_is_refused_without_reserving_address_space():
    tests = str(Path(__file__).resolve().parent.parent)  # tests/: core, helpers, fuzz
    root = str(Path(fd.__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", CAPPED_CHILD, "x", tests, root],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["jpeg/default"] == "ImageTooLargeError"
    assert got["bmp/default"] == "ImageTooLargeError"
    # Control: with the limit off, the 12.9 GB output cannot be had under the cap.
    assert got["jpeg/no-limit"] == "MemoryError"
    assert got["bmp/no-limit"] in ("MemoryError", "DecodeError")  # BMP: no pixel data either


# ---------------------------------------------------------------------------
# Progressive scans


def cjpeg_with_scans(script: list[str], height=32, width=48) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "scans.txt").write_text("\n".join(script) + "\n")
        Image.fromarray(natural_image(height, width, seed=11)).save(Path(tmp) / "in.ppm")
        return subprocess.run(
            [CJPEG, "-quality", "90", "-sample", "2x2", "-scans", str(Path(tmp) / "scans.txt"),
             str(Path(tmp) / "in.ppm")], check=True, capture_output=True).stdout


def many_scan_script() -> list[str]:
    """95 scans, every one legal: DC first pass, luma's 63 AC coefficients one
    scan each, chroma in bands of six, luma's AC refinements in 8 bands, DC
    refinement. (cjpeg takes at most 100 scans.)"""
    script = ["0,1,2: 0-0, 0, 1 ;"]
    script += [f"0: {k}-{k}, 0, 1 ;" for k in range(1, 64)]
    script += [f"{c}: {k}-{min(k + 5, 63)}, 0, 0 ;" for c in (1, 2) for k in range(1, 64, 6)]
    script += [f"0: {k}-{k + 7}, 1, 0 ;" for k in range(1, 57, 8)] + ["0: 57-63, 1, 0 ;"]
    script += ["0,1,2: 0-0, 1, 0 ;"]
    return script


@NEEDS_CJPEG
def test_progressive_file_with_95_scans_decodes_like_pillow():
    data = cjpeg_with_scans(many_scan_script())
    assert data.count(b"\xff\xda") == 95  # 0xFFDA only ever starts a scan
    assert fd.read_header(data).progressive
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))
    np.testing.assert_array_equal(fd.decode_jpeg(data, crop=(5, 9, 20, 30)),
                                  pillow_rgb(data)[5:25, 9:39])


def scans_repeated(total: int) -> tuple[bytes, bytes]:
    """(base, file): a progressive file whose first luma AC scan is repeated
    right after itself until the file has `total` scans. A repeated AC first
    scan sets the same coefficients again, so the pixels are the base's;
    libjpeg only warns that the progression is inconsistent."""
    base = encode(24, 40, subsampling="4:4:4", coding="progressive")
    starts = [i for i in range(len(base) - 1) if base[i] == 0xFF and base[i + 1] == 0xDA]
    for start in starts:
        length = struct.unpack(">H", base[start + 2:start + 4])[0]
        ncomp = base[start + 4]
        ss = base[start + 5 + 2 * ncomp]
        if ncomp == 1 and ss > 0:
            break
    end = base.index(b"\xff", start + 2 + length)
    while base[end + 1] == 0 or 0xD0 <= base[end + 1] <= 0xD7:
        end = base.index(b"\xff", end + 2)
    scan = base[start:end]
    extra = total - len(starts)
    return base, base[:end] + scan * extra + base[end:]


def test_scan_limit_allows_exactly_1000_scans():
    base, data = scans_repeated(1000)
    assert data.count(b"\xff\xda") == 1000
    np.testing.assert_array_equal(fd.decode_jpeg(data), fd.decode_jpeg(base))
    with pytest.raises(fd.DecodeError, match="Inconsistent progression sequence.*strict mode"):
        fd.decode_jpeg(data, strict=True)


@pytest.mark.parametrize("options", [pytest.param({}, id="default"),
                                     pytest.param({"crop": (0, 0, 8, 8)}, id="crop"),
                                     pytest.param({"size": (4, 4)}, id="size")])
def test_scan_limit_refuses_the_1001st_scan(options):
    _, data = scans_repeated(1001)
    assert data.count(b"\xff\xda") == 1001
    with pytest.raises(fd.DecodeError, match="more than 1000 scans"):
        fd.decode_jpeg(data, **options)
    with pytest.raises(fd.DecodeError, match="more than 1000 scans"):
        fd.decode_image(data, **options)
