"""Decompression bombs: refused by max_pixels before anything is allocated;
progressive files stopped by the scan limit, legitimate ones still decoded.

The 65500 x 65500 files are a real JPEG with its SOF rewritten and a bare
BMP header (no pixel data): both declare 4.29 G pixels (12.9 GB as RGB).
"""

from __future__ import annotations

import ctypes
import io
import json
import mmap
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
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


# The bound on a rejection's work (until issue 55 a time bound, best of 30
# under 10 ms): the bytes after a file's header sit on unreadable pages, so a
# decoder that read any of them (to decode, scan or copy the data) would die
# of SIGSEGV. Run in child processes: the control, a small image laid out the
# same way, must die there, which proves the guard bites.
GUARDED_CHILD = r"""
import sys
sys.path[:0] = sys.argv[2:]
from core import test_bombs as tb
tb.guarded_child(sys.argv[1])
"""


def split_header(data: bytes) -> tuple[bytes, bytes]:
    """A JPEG up to the end of its SOS segment, a BMP up to its pixel data;
    and the rest (the giant BMP has none: 64 bytes stand in)."""
    if data[:2] == b"\xff\xd8":
        sos = data.index(b"\xff\xda")
        end = sos + 2 + struct.unpack(">H", data[sos + 2:sos + 4])[0]
    else:
        end = struct.unpack("<I", data[10:14])[0]
    return data[:end], data[end:] or bytes(64)


def guarded(data: bytes) -> tuple[mmap.mmap, memoryview]:
    """``data`` in an anonymous map, its header ending where a page ends and
    the pages after it made unreadable (mprotect PROT_NONE); the map and a
    view of ``data`` in it."""
    head, rest = split_header(data)
    size = mmap.PAGESIZE
    head_pages, rest_pages = -(-len(head) // size), -(-len(rest) // size)
    mm = mmap.mmap(-1, (head_pages + rest_pages) * size)
    start = head_pages * size - len(head)
    mm[start:start + len(head) + len(rest)] = head + rest
    address = ctypes.addressof(ctypes.c_char.from_buffer(mm)) + head_pages * size
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mprotect(ctypes.c_void_p(address), ctypes.c_size_t(rest_pages * size), 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    return mm, memoryview(mm)[start:start + len(head) + len(rest)]


def small_bmp() -> bytes:
    out = io.BytesIO()
    Image.fromarray(natural_image(8, 12, seed=3)).save(out, format="BMP")
    return out.getvalue()


def guarded_child(case: str) -> None:
    """In a child process: ``bombs`` prints, as JSON, what each decoder
    raised on each bomb (guarded) under each option; ``jpeg``/``bmp`` decode a
    small guarded image, which must not return."""
    if case in ("jpeg", "bmp"):
        mm, view = guarded(encode(24, 40) if case == "jpeg" else small_bmp())
        print("reading past the header", flush=True)
        native_decoder(giant_jpeg if case == "jpeg" else giant_bmp)(view)
        print("decoded without reading past the header", flush=True)
        return
    out = {}
    scaled = [{"scale": 0.125}, {"min_size": (8, 8)}]
    for make in (giant_jpeg, giant_bmp):
        mm, view = guarded(make())
        for decode in (native_decoder(make), fd.decode_image):
            for options in [p.values[0] for p in OPTIONS] + (scaled if make is giant_jpeg else []):
                try:
                    decode(view, **options)
                    got = "decoded"
                except Exception as exc:
                    got = f"{type(exc).__name__}: {exc}"
                out[f"{make.__name__} {decode.__name__} {options}"] = got
        view.release()
        mm.close()
    print(json.dumps(out))


def run_guarded(case: str) -> subprocess.CompletedProcess:
    tests = str(Path(__file__).resolve().parent.parent)  # tests/: core, helpers, fuzz
    root = str(Path(fd.__file__).resolve().parent.parent)
    return subprocess.run([sys.executable, "-c", GUARDED_CHILD, case, tests, root],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.no_sanitize  # the controls die of SIGSEGV, which ASan turns into its own exit
def test_bomb_is_refused_having_read_nothing_past_its_header():
    proc = run_guarded("bombs")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == 2 * (2 * len(OPTIONS)) + 2 * 2
    for case, result in got.items():
        assert re.fullmatch(f"ImageTooLargeError: .*{GIANT_MESSAGE}.*", result), (case, result)
    for control in ("jpeg", "bmp"):  # the guard bites: reading the data kills the decode
        proc = run_guarded(control)
        assert proc.stdout == "reading past the header\n", (control, proc.stdout, proc.stderr)
        assert proc.returncode in (-signal.SIGSEGV, -signal.SIGBUS), (control, proc.returncode)


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
