"""How to keep many file reads in flight: the read-ahead threads against
io_uring, a serial read and preadv, on page-cached files and through
latencyfs at 0, 5 and 20 ms per open (issue 28's "measure whether io_uring
or preadv helps, and choose"; docs/decisions/storage.md has the result).

    python -m benchmarks.bench_io_ways [--data PATH] [--json PATH]

Every way opens and reads each JPEG of ``--data`` whole; files/s is the best
of 3 passes and CPU is the process's own (io_uring's: the C reader's, its
io-wq workers included). io_uring runs in benchmarks/uring_read.c, built
here with gcc and liburing-dev (skipped without them); latencyfs rows are
skipped without FUSE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from fastdecode.data._readahead import ReadAhead, ReadAheadOptions

from . import _common as common
from . import _latencyfs

HERE = Path(__file__).resolve().parent
URING = HERE / "uring_read"


def build_uring() -> Optional[str]:
    """The io_uring reader's path, built if needed; None without gcc/liburing."""
    if URING.exists():
        return str(URING)
    if shutil.which("gcc") is None or not Path("/usr/include/liburing.h").exists():
        return None
    done = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(URING), str(HERE / "uring_read.c"),
                           "-luring"], check=False, capture_output=True)
    return str(URING) if done.returncode == 0 else None


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def serial(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            f.read()


def preadv(paths: list[str]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.preadv(fd, [bytearray(os.fstat(fd).st_size + 1)], 0)
        finally:
            os.close(fd)


def threads(depth: int) -> Callable[[list[str]], None]:
    def run(paths: list[str]) -> None:
        window = ReadAhead(ReadAheadOptions(depth, 64 << 20))
        window.submit(paths)
        for p in paths:
            window.take(p)
        window.close()
    return run


def uring(binary: str, depth: int) -> Callable[[list[str]], tuple[float, float]]:
    def run(paths: list[str]) -> tuple[float, float]:
        out = subprocess.run([binary, str(depth), *paths], check=True, capture_output=True,
                             text=True).stdout.split()
        return float(out[1]), float(out[2])
    return run


def timed(fn: Callable, paths: list[str]) -> dict[str, float]:
    best: Optional[tuple[float, float]] = None
    for _ in range(3):
        c0, t0 = _cpu(), time.perf_counter()
        own = fn(paths)
        took = own if own is not None else (time.perf_counter() - t0, _cpu() - c0)
        if best is None or took[0] < best[0]:
            best = took
    assert best is not None
    return {"files_per_s": len(paths) / best[0], "cpu_us_per_file": best[1] / len(paths) * 1e6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an ImageFolder tree of JPEGs")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    data = Path(args.data or common.default_data())
    ways: dict[str, Callable] = {"serial read": serial, "serial preadv": preadv,
                                 "threads depth 16": threads(16), "threads depth 64": threads(64)}
    binary = build_uring()
    if binary is not None:
        ways.update({"io_uring depth 16": uring(binary, 16), "io_uring depth 64": uring(binary, 64)})
    rows = []
    local = sorted(str(p) for p in data.glob("*/*.JPEG"))
    serial(local)  # into the page cache
    for name, fn in ways.items():
        rows.append({"storage": "page cache", "way": name, **timed(fn, local * 4)})
    if _latencyfs.unavailable() is None:
        with _latencyfs.LatencyFS(data) as fs:
            paths = sorted(str(p) for p in Path(fs.path).glob("*/*.JPEG"))
            for delay in (0, 5, 20):
                fs.set_delay(delay)
                for name, fn in ways.items():
                    rows.append({"storage": f"latencyfs {delay} ms", "way": name,
                                 **timed(fn, paths)})
                    fs.settle()
    lines = ["| storage | way | files/s | CPU us/file |", "|---|---|---:|---:|"]
    lines += [f"| {r['storage']} | {r['way']} | {r['files_per_s']:,.0f} | "
              f"{r['cpu_us_per_file']:,.0f} |" for r in rows]
    common.emit("\n".join(lines) + ("" if binary else "\n- io_uring: skipped (gcc + liburing-dev)"))
    if args.json:
        args.json.write_text(json.dumps({"command": common.command_line(__name__, argv),
                                         "io_uring": binary is not None, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
