"""Measures the work budget (max_work_per_byte): what small hostile files
cost with and without it, and the budget each corpus file needs.

    PYTHONPATH=. python tests/fuzz/budget.py bombs [NAMES]   # one child process per decode
    PYTHONPATH=. python tests/fuzz/budget.py corpus          # needs ../shared/corpus

`bombs` prints one JSON line per (file, budget): bytes, outcome, wall ms,
tracemalloc peak and the growth of the child's peak RSS. `corpus` prints,
per corpus, the files needing the largest budget (found by bisection) and
any file whose outcome differs between the default budget and none.
Numbers are in DESIGN.md ("Robustness") and RESULTS.md.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent


def sof_rewrite(data: bytes, h: int, w: int) -> bytes:
    for marker in (b"\xff\xc2", b"\xff\xc0"):
        i = data.find(marker)
        if i >= 0:
            return data[:i + 5] + struct.pack(">HH", h, w) + data[i + 9:]
    raise ValueError("no SOF0/SOF2")


def tiny_jpeg(progressive: bool = True, declared: int = 13000) -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=90, progressive=progressive)
    return sof_rewrite(buf.getvalue(), declared, declared)


def rle8(declared: int = 13000) -> bytes:
    """RLE8, 256-entry palette, data = end of bitmap."""
    pal, pix = bytes(4 * 256), b"\x00\x01"
    info = struct.pack("<IiiHHIIiiII", 40, declared, declared, 1, 8, 1, len(pix), 2835, 2835,
                       256, 0)
    off = 14 + len(info) + len(pal)
    return b"BM" + struct.pack("<IHHI", off + len(pix), 0, 0, off) + info + pal + pix


def gif_screen(declared: int = 13000) -> bytes:
    buf = io.BytesIO()
    Image.new("P", (1, 1)).save(buf, "GIF")
    data = bytearray(buf.getvalue())
    data[6:10] = struct.pack("<HH", declared, declared)
    return bytes(data)


def png_zlib(declared: int = 13000) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (declared, declared)).save(buf, "PNG")
    return buf.getvalue()


def gif_frames(n: int = 3000) -> bytes:
    rng = np.random.default_rng(1)
    frames = [Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8), "L").convert("P")
              for _ in range(n)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


MAKERS = {"jpeg-progressive": tiny_jpeg, "jpeg-baseline": lambda: tiny_jpeg(False),
          "bmp-rle8": rle8, "gif-screen": gif_screen, "png-zlib": png_zlib,
          "gif-3000-frames": gif_frames}

CHILD = r"""
import json, resource, sys, time, tracemalloc
sys.path.insert(0, sys.argv[3])
import budget
import fastdecode as fd
data = budget.MAKERS[sys.argv[1]]()
kw = json.loads(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
t0 = time.perf_counter()
try:
    fd.decode_image(data, **kw)
    out = "decoded"
except Exception as e:
    out = type(e).__name__ + ": " + str(e)[:160]
ms = (time.perf_counter() - t0) * 1e3
peak = tracemalloc.get_traced_memory()[1]
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"file": sys.argv[1], "bytes": len(data), "options": kw, "outcome": out,
                  "ms": round(ms, 3), "traced_MB": round(peak / 2**20, 2),
                  "maxrss_growth_MB": round(grown / 1024, 1)}))
"""


def bombs(names: list[str]) -> None:
    for name in names or list(MAKERS):
        for kw in ({}, {"max_work_per_byte": None}):
            proc = subprocess.run([sys.executable, "-c", CHILD, name, json.dumps(kw), str(HERE)],
                                  capture_output=True, text=True)
            print(proc.stdout.strip() or proc.stderr[-500:], flush=True)


def corpus() -> None:
    sys.path.insert(0, str(HERE.parent))
    import fastdecode as fd

    from helpers.corpus import CORPUS, read_manifest

    def outcome(data, **kw):
        try:
            fd.decode_image(data, **kw)
            return "ok"
        except Exception as exc:  # noqa: BLE001 - the outcome is what is measured
            return type(exc).__name__

    def least_budget(data):
        lo, hi = 0, 1 << 22  # outcome(lo) fails, outcome(hi) decodes
        if outcome(data, max_work_per_byte=1) == "ok":
            return 1
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if outcome(data, max_work_per_byte=mid) == "ok" else (mid, hi)
        return hi

    for name in ("photos", "jpeg-edge", "bmpsuite"):
        base = CORPUS / name
        expected = {r["file"]: r.get("expected", "") for r in read_manifest(name)}
        needs, changed = [], []
        for path in sorted(p for p in base.rglob("*") if p.is_file() and p.suffix != ".md"):
            if path.name == "MANIFEST.tsv":
                continue
            rel, data = str(path.relative_to(base)), path.read_bytes()
            default, unlimited = outcome(data), outcome(data, max_work_per_byte=None)
            if default != unlimited:
                changed.append((rel, expected.get(rel), default, unlimited))
            if unlimited == "ok":
                needs.append((least_budget(data), rel, expected.get(rel), len(data)))
        needs.sort()
        print(json.dumps({"corpus": name, "decoded": len(needs), "largest_needs": needs[-5:],
                          "changed_by_default_budget": changed}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["bombs"]:
        bombs(sys.argv[2].split(",") if len(sys.argv) > 2 else [])
    elif sys.argv[1:2] == ["corpus"]:
        corpus()
    else:
        sys.exit(__doc__)
