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

The paced rows (``--pace-ms``, 1.5 by default: a photo's train-chain decode)
take the files as a decoding worker does: batches of 64 submitted at once,
each file taken in order, then the consumer sleeps the pace (its decode; a
sleep, so the CPU counted is the reading's, with one wake-up per file in
every way). Ways: each file read inline by the consumer (read-ahead off),
and the read-ahead window at depth 16 on Python threads (``ReadAhead``, what
reads remote stores) and on threads in C (``_NativeWindow`` over the read
pool, src_c/fd_readahead.c: no GIL, no Python condition variables in its
threads; what reads local files). They report the process's CPU per file,
the median of 5 interleaved passes, on page-cached files and through
latencyfs at 0 and 5 ms. Then the two windows again through latencyfs at 0,
5 and 20 ms, the consumer holding the GIL for the pace (a Python transform):
a Python read thread needs the GIL after each of its syscalls, so it waits
for the consumer's switch interval; the rows report files/s and the takes
that waited for their read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TypeVar

from fastdecode.datasets import ReadAheadOptions
from fastdecode.storage._reads import _NativeWindow
from fastdecode.storage._window import ReadAhead

from . import _common as common
from . import _latencyfs

HERE = Path(__file__).resolve().parent
URING = HERE / "uring_read"
PACE_BATCH = 64
PACE_DEPTH = 16
T = TypeVar("T")


def _compiled(source: Path, out: Path, flags: list[str]) -> bool:
    """Whether ``out`` is built from ``source`` (gcc -O2 -Wall SOURCE FLAGS),
    compiled when missing or older, into a temporary name first so
    concurrent builds never see half a file; False without gcc or on a
    failed build."""
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return True
    if shutil.which("gcc") is None:
        return False
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    done = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(partial), str(source), *flags],
                          check=False, capture_output=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return False
    partial.replace(out)
    return True


def build_uring() -> Optional[str]:
    """The io_uring reader's path, built if needed; None without gcc/liburing."""
    if not Path("/usr/include/liburing.h").exists() and not URING.exists():
        return None
    return str(URING) if _compiled(HERE / "uring_read.c", URING, ["-luring"]) else None


def _cpu() -> float:
    """This process's CPU seconds, every thread's (getrusage: microseconds,
    where os.times counts 10 ms ticks)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


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


def _batches(paths: list[str]) -> list[list[str]]:
    return [paths[i:i + PACE_BATCH] for i in range(0, len(paths), PACE_BATCH)]


def paced_inline(paths: list[str], pace_s: float) -> None:
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            f.read()
        time.sleep(pace_s)


def hold_gil(seconds: float) -> None:
    """A consumer's Python work: ``seconds`` of bytecode, the GIL held
    (released only at the interpreter's switch interval)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def paced_window(native: bool, pace: Callable[[float], None] = time.sleep
                 ) -> Callable[[list[str], float], int]:
    """The read-ahead window at depth PACE_DEPTH, a batch submitted at once:
    on threads in C (``native``) or on Python threads; the consumer spends
    ``pace`` after each take. A run returns its waited takes."""
    kind = _NativeWindow if native else ReadAhead

    def run(paths: list[str], pace_s: float) -> int:
        window = kind(ReadAheadOptions(PACE_DEPTH, 64 << 20))
        for batch in _batches(paths):
            window.submit(batch)
            for p in batch:
                window.take(p)
                pace(pace_s)
        waited = window.stats()["waited"]
        window.close()
        return waited
    return run


def interleaved(names: list[str], passes: int, measure: Callable[[str], T]
                ) -> dict[str, list[T]]:
    """``measure(name)`` of each of ``names`` in ``passes`` passes, every
    other pass in the reverse order."""
    got: dict[str, list[T]] = {name: [] for name in names}
    for r in range(passes):
        for name in common.round_order(names, r):
            got[name].append(measure(name))
    return got


def held(paths: list[str], pace_s: float, passes: int = 3) -> dict[str, dict[str, float]]:
    """The two windows under a consumer that holds the GIL for ``pace_s``
    per file: files/s and waited takes, the medians of ``passes``
    interleaved passes."""
    ways = {"Python threads": paced_window(False, hold_gil),
            "threads in C": paced_window(True, hold_gil)}

    def measure(name: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        waited = ways[name](paths, pace_s)
        return len(paths) / (time.perf_counter() - t0), waited

    got = interleaved(list(ways), passes, measure)
    return {name: {"files_per_s": statistics.median(r for r, _ in v),
                   "waited": statistics.median(w for _, w in v)} for name, v in got.items()}


def paced(ways: dict[str, Callable[[list[str], float], object]], paths: list[str],
          pace_s: float, passes: int = 5) -> dict[str, float]:
    """Each way's CPU us per file, the median of ``passes`` interleaved
    passes."""
    def measure(name: str) -> float:
        c0 = _cpu()
        ways[name](paths, pace_s)
        return (_cpu() - c0) / len(paths) * 1e6

    return {name: statistics.median(v)
            for name, v in interleaved(list(ways), passes, measure).items()}


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
    parser.add_argument("--pace-ms", type=float, default=1.5,
                        help="the paced rows' consumer time per file (0: no paced rows)")
    args = parser.parse_args(argv)
    data = Path(args.data or common.default_data())
    ways: dict[str, Callable] = {"serial read": serial, "serial preadv": preadv,
                                 "threads depth 16": threads(16), "threads depth 64": threads(64)}
    binary = build_uring()
    if binary is not None:
        ways.update({"io_uring depth 16": uring(binary, 16), "io_uring depth 64": uring(binary, 64)})
    pace_ways: dict[str, Callable[[list[str], float], object]] = {}
    if args.pace_ms > 0:
        pace_ways = {"inline (read-ahead off)": paced_inline,
                     f"window, Python threads {PACE_DEPTH}": paced_window(False),
                     f"window, threads in C {PACE_DEPTH}": paced_window(True)}
    rows, pace_rows, held_rows = [], [], []
    local = sorted(str(p) for p in data.glob("*/*.JPEG"))
    serial(local)  # into the page cache
    for name, fn in ways.items():
        rows.append({"storage": "page cache", "way": name, **timed(fn, local * 4)})
    if pace_ways:
        pace_rows.append({"storage": "page cache",
                          **paced(pace_ways, local * 2, args.pace_ms / 1000)})
    if _latencyfs.unavailable() is None:
        with _latencyfs.LatencyFS(data) as fs:
            paths = sorted(str(p) for p in Path(fs.path).glob("*/*.JPEG"))
            for delay in (0, 5, 20):
                fs.set_delay(delay)
                for name, fn in ways.items():
                    rows.append({"storage": f"latencyfs {delay} ms", "way": name,
                                 **timed(fn, paths)})
                    fs.settle()
                if pace_ways and delay <= 5:
                    pace_rows.append({"storage": f"latencyfs {delay} ms",
                                      **paced(pace_ways, paths, args.pace_ms / 1000)})
                    fs.settle()
                if pace_ways:
                    held_rows.append({"storage": f"latencyfs {delay} ms",
                                      **held(paths, args.pace_ms / 1000)})
                    fs.settle()
    lines = ["| storage | way | files/s | CPU us/file |", "|---|---|---:|---:|"]
    lines += [f"| {r['storage']} | {r['way']} | {r['files_per_s']:,.0f} | "
              f"{r['cpu_us_per_file']:,.0f} |" for r in rows]
    text = "\n".join(lines) + ("" if binary else "\n- io_uring: skipped (gcc + liburing-dev)")
    if pace_rows:
        names = list(pace_ways)
        text += (f"\n\nPaced ({args.pace_ms:g} ms per file, batches of {PACE_BATCH}): "
                 "CPU us per file, median of 5 interleaved passes\n\n"
                 f"| storage | {' | '.join(names)} |\n|---|{'---:|' * len(names)}\n")
        text += "\n".join(f"| {r['storage']} | " + " | ".join(f"{r[n]:,.0f}" for n in names)
                           + " |" for r in pace_rows)
    if held_rows:
        text += (f"\n\nThe consumer holding the GIL ({args.pace_ms:g} ms of Python per file, "
                 f"batches of {PACE_BATCH}, depth {PACE_DEPTH}; at most "
                 f"{1000 / args.pace_ms:,.0f} files/s): files/s (takes that waited for their "
                 "read), median of 3 interleaved passes\n\n"
                 "| storage | Python threads | threads in C |\n|---|---:|---:|\n")
        text += "\n".join(f"| {r['storage']} | " + " | ".join(
            f"{r[n]['files_per_s']:,.0f} ({r[n]['waited']:g})"
            for n in ("Python threads", "threads in C")) + " |" for r in held_rows)
    common.emit(text)
    if args.json:
        args.json.write_text(json.dumps({"command": common.command_line(__name__, argv),
                                         "io_uring": binary is not None, "rows": rows,
                                         "pace_ms": args.pace_ms, "paced": pace_rows,
                                         "gil_held": held_rows},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
