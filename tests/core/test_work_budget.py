"""The work budget (max_work_per_byte): small files that declare a huge
image are refused before the decode pays for it; real files are not.

The photos and the jpeg-edge/bmpsuite 'decodes' files decoding at the
default budget is checked by the corpus tests (test_jpeg, test_bmp).
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd
from fastdecode import _native
from fastdecode._options import DEFAULT_MAX_WORK_PER_BYTE

from fuzz.bounded import bounded, hang_guard  # noqa: F401
from helpers.jpeg_samples import CJPEG, encode

pytestmark = bounded(120)
DECLARED = 13000  # 13000 x 13000 = 169 M pixels: inside the default max_pixels
BUDGET_MESSAGE = (rf"above max_work_per_byte={DEFAULT_MAX_WORK_PER_BYTE}: "
                  r"a likely decompression bomb")


def tiny_jpeg(progressive: bool = True, declared: int = DECLARED) -> bytes:
    """A 16 x 16 JPEG with its SOF rewritten to declare declared x declared."""
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=90, progressive=progressive)
    data = buf.getvalue()
    i = data.index(b"\xff\xc2" if progressive else b"\xff\xc0")
    return data[:i + 5] + struct.pack(">HH", declared, declared) + data[i + 9:]


def tiny_rle_bmp(declared: int = DECLARED) -> bytes:
    """An RLE8 BMP with a 2-colour palette whose data is end-of-bitmap."""
    pal, pix = bytes(8), b"\x00\x01"
    info = struct.pack("<IiiHHIIiiII", 40, declared, declared, 1, 8, 1, len(pix), 2835, 2835, 2, 0)
    off = 14 + len(info) + len(pal)
    return b"BM" + struct.pack("<IHHI", off + len(pix), 0, 0, off) + info + pal + pix


def tiny_gif(declared: int = 5000) -> bytes:
    """A 1 x 1 GIF frame on a declared x declared logical screen (5000: under
    the size at which Pillow's DecompressionBombWarning, an error under
    pytest, fires at open)."""
    buf = io.BytesIO()
    Image.new("P", (1, 1)).save(buf, "GIF")
    data = bytearray(buf.getvalue())
    data[6:10] = struct.pack("<HH", declared, declared)
    return bytes(data)


BOMBS = {
    "jpeg-progressive": (tiny_jpeg, fd.decode_jpeg, "JPEG needs"),
    "jpeg-baseline": (lambda: tiny_jpeg(progressive=False), fd.decode_jpeg, "JPEG needs"),
    "bmp-rle8": (tiny_rle_bmp, fd.decode_bmp, "RLE BMP needs"),
    "gif-screen": (tiny_gif, fd.decode_image, "GIF needs"),
}
OPTIONS = {"default": {}, "crop": {"crop": (0, 0, 8, 8)}, "size": {"size": (8, 8)},
           "L-CHW": {"mode": "L", "layout": "CHW"}}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("make, decode, what", BOMBS.values(), ids=BOMBS.keys())
def test_small_file_declaring_a_huge_image_is_refused(make, decode, what, options):
    data = make()
    assert len(data) < 2048
    for entry in {decode, fd.decode_image}:
        with pytest.raises(fd.ImageTooLargeError, match=f"^{what} .*{BUDGET_MESSAGE}$"):
            entry(data, **options)


@pytest.mark.parametrize("make, decode, what", BOMBS.values(), ids=BOMBS.keys())
def test_read_image_refuses_and_names_the_file(tmp_path, make, decode, what):
    path = tmp_path / "bomb.img"
    path.write_bytes(make())
    with pytest.raises(fd.ImageTooLargeError, match=f"^{path}: {what} .*{BUDGET_MESSAGE}$"):
        fd.read_image(path)


@pytest.mark.parametrize("make, decode, what", BOMBS.values(), ids=BOMBS.keys())
def test_no_budget_decodes_what_the_budget_refuses(make, decode, what):
    """The same kind of file, declaring 1000 x 1000 (cheap to decode): refused
    by a budget of 1 block a byte, decoded with None."""
    data = make(declared=1000) if make is not BOMBS["jpeg-baseline"][0] else tiny_jpeg(
        progressive=False, declared=1000)
    with pytest.raises(fd.ImageTooLargeError, match="above max_work_per_byte=1:"):
        decode(data, max_work_per_byte=1)
    assert decode(data, max_work_per_byte=None).shape == (1000, 1000, 3)


MEASURE_CHILD = r"""
import json, resource, sys, time, tracemalloc
sys.path[:0] = sys.argv[1:]
import fastdecode as fd
from core import test_work_budget as t
data = t.tiny_jpeg()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
t0 = time.perf_counter()
try:
    fd.decode_image(data)
    outcome = "decoded"
except fd.ImageTooLargeError:
    outcome = "refused"
seconds = time.perf_counter() - t0
peak = tracemalloc.get_traced_memory()[1]
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"outcome": outcome, "ms": seconds * 1e3, "traced": peak, "maxrss_kb": grown}))
"""


@pytest.mark.no_sanitize  # measures memory
def test_progressive_bomb_is_refused_with_almost_no_memory():
    """In a fresh process: the refusal allocates (tracemalloc peak, growth of
    the peak RSS) well under the 64 MB the issue allows; time is reported,
    not asserted (a shared machine), beyond the module's hang guard."""
    tests = str(Path(__file__).resolve().parent.parent)
    root = str(Path(fd.__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", MEASURE_CHILD, tests, root],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"refused in {got['ms']:.3f} ms, tracemalloc peak {got['traced']} B, "
          f"max RSS grew {got['maxrss_kb']} KB")
    assert got["outcome"] == "refused"
    assert got["traced"] < 1 << 20
    assert got["maxrss_kb"] < 64 << 10


@pytest.mark.skipif(CJPEG is None, reason="cjpeg (libjpeg-turbo-progs) not installed")
def test_scans_are_counted_as_they_are_read():
    """A budget that one pass over the blocks fits but the file's scans do
    not: refused while the scans are read ('JPEG scans'), not at the header."""
    from core.test_bombs import cjpeg_with_scans, many_scan_script

    data = cjpeg_with_scans(many_scan_script(), height=64, width=96)
    blocks = (64 // 8) * (96 // 8) * 3 // 2  # 4:2:0: Y plus two quarter-size planes
    one_pass = -(-blocks // len(data))
    with pytest.raises(fd.ImageTooLargeError, match=r"^JPEG scans needs \d+ 8x8 blocks"):
        fd.decode_jpeg(data, max_work_per_byte=one_pass)
    fd.decode_jpeg(data, max_work_per_byte=one_pass * 95)  # every scan fits


@pytest.mark.parametrize(
    "value, error, match",
    [(0, ValueError, "max_work_per_byte must be a positive int, or None for no limit, got 0"),
     (-5, ValueError, "max_work_per_byte must be a positive int"),
     (1.5, TypeError, "integer")],
    ids=["zero", "negative", "float"])
def test_bad_budget_values(value, error, match):
    for decode in (fd.decode_jpeg, fd.decode_bmp, fd.decode_image):
        with pytest.raises(error, match=match):
            decode(encode(8, 8), max_work_per_byte=value)


def test_check_work_is_the_c_rule():
    _native.check_work(2048 * 10, 10)  # exactly at the budget
    with pytest.raises(fd.ImageTooLargeError,
                       match=r"^PNG needs 20481 8x8 blocks of decoding work from 10 bytes "
                             r"\(2049 per byte\), above max_work_per_byte=2048"):
        _native.check_work(2048 * 10 + 1, 10, what="PNG")
    _native.check_work(10 ** 18, 1, max_work_per_byte=None)
