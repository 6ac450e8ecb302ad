"""Per-image cost of the fused train and eval chains against the C crop-decode floor.

    python -m benchmarks.bench_floor [--photos DIR] [--images N] [--rounds R] [--seed S]
                                     [--callgrind N] [--json PATH]

Issue 16's per-image limit, measured the way it is stated: for each chain
(train: RandomResizedCrop(224) + PILToTensor, boxes drawn from torch's RNG
with a fixed seed; eval: Resize(256) + CenterCrop(224) + PILToTensor) the
fused transform runs once per photo while its native calls are recorded
(decode_image's crop, scale, size, flip, layout and interpolation, and any
_native.resize after it). Those calls are then replayed, so the numbers are
the native calls the fused chain makes, without its per-call Python:

- "C floor": benchmarks/c_floor --boxes, a plain C loop over libjpeg-turbo
  decoding the same crop at the same scale with the same early abort;
- "crop": fastdecode's decode_image(crop=, scale=) alone, no resampling;
- "fused": the recorded calls (decode + resample, flip and layout);
- "target": the C floor + 0.1 ms, the allowance for a SIMD resample of a crop
  at most twice the output size; efficiency = target / fused (goal >= 0.95).

Times are CPU milliseconds per image (the thread's CPU time, less exposed to
a shared machine than the wall clock), the median over --rounds interleaved
rounds (each contender takes its turn on the whole set in a rotating order).
--callgrind N also counts instructions (valgrind --tool=callgrind, collected
only inside the native entry points: fd_plan/fd_decode/fd_resample, and
c_floor's decode) on the first N images: repeatable on a loaded machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import fastdecode
from fastdecode import _native, api

ROOT = Path(__file__).resolve().parent.parent

C_FLOOR = ROOT / "benchmarks" / "c_floor"
PHOTOS = Path("/work/shared/corpus/photos")
ALLOWANCE_MS = 0.1  # issue 16: a SIMD resample of a crop <= 2x the output size
DECODE_ONLY = ("mode", "crop", "scale")  # the decode_image options of the "crop" row

Call = tuple[str, dict[str, Any]]  # (kind, kwargs), kind one of DECODES or "resize"
# decode_image (the format dispatch) or _native.decode_jpeg (the fused renderer
# calls it directly for JPEGs): replayed through the same function
DECODES = {"decode": lambda data, **kw: api.decode_image(data, **kw),
           "decode_jpeg": lambda data, **kw: _native.decode_jpeg(data, **kw)}


def chains() -> dict[str, Any]:
    import torchvision.transforms as T
    return {"train": T.Compose([T.RandomResizedCrop(224), T.PILToTensor()]),
            "eval": T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])}


def record(chain, files: list[bytes], seed: int) -> list[list[Call]]:
    """The native calls fuse(chain) makes for each file, in order."""
    import torch

    from fastdecode.transforms import fuse
    fused = fuse(chain)
    calls: list[Call] = []
    decode, decode_jpeg, resize = api.decode_image, _native.decode_jpeg, _native.resize

    @functools.wraps(decode)  # the fused renderer inspects the signature
    def rec_decode(data, **kw):
        calls.append(("decode", {k: v for k, v in kw.items() if k != "out"}))
        return decode(data, **kw)

    @functools.wraps(decode_jpeg)
    def rec_decode_jpeg(data, **kw):
        calls.append(("decode_jpeg", {k: v for k, v in kw.items() if k != "out"}))
        return decode_jpeg(data, **kw)

    def rec_resize(arr, size, **kw):
        calls.append(("resize", {"size": tuple(size), **{k: v for k, v in kw.items()
                                                          if k != "out"}}))
        return resize(arr, size, **kw)

    torch.manual_seed(seed)
    per_file = []
    api.decode_image, _native.resize = rec_decode, rec_resize  # type: ignore[assignment]
    _native.decode_jpeg = rec_decode_jpeg
    try:
        for data in files:
            calls.clear()
            fused(data)
            per_file.append(list(calls))
    finally:
        api.decode_image, _native.resize = decode, resize
        _native.decode_jpeg = decode_jpeg
    return per_file


def replayer(files: list[bytes], per_file: list[list[Call]], what: str) -> Callable[[], None]:
    """A pass over the files making the recorded calls ("fused") or only
    their decodes without resampling ("crop"). For callgrind, whose toggles
    cannot nest (decode(size=) calls fd_resample itself), the fused calls
    also split in two: "fused-decodes" (every decode as recorded, resizes
    left out) and "fused-resizes" (only the files with a separate resize:
    their decodes, which then have no size=, and the resize)."""
    plans = []
    for data, calls in zip(files, per_file):
        steps = []
        has_resize = any(kind == "resize" for kind, _ in calls)
        if what == "fused-resizes" and not has_resize:
            continue
        for kind, kw in calls:
            if kind in DECODES and what == "crop":
                steps.append((kind, {k: v for k, v in kw.items() if k in DECODE_ONLY}))
            elif kind in DECODES or what in ("fused", "fused-resizes"):
                steps.append((kind, kw))
        plans.append((data, steps))

    def run() -> None:
        for data, steps in plans:
            arr = None
            for kind, kw in steps:
                if kind in DECODES:
                    arr = DECODES[kind](data, **kw)
                else:
                    kw = dict(kw)
                    assert arr is not None, "a resize without a decode before it"
                    arr = _native.resize(arr, kw.pop("size"), **kw)
    return run


def floor_boxes(per_file: list[list[Call]]) -> str:
    """c_floor --boxes lines: each file's decode crop and scale."""
    lines = []
    for calls in per_file:
        kw = next(kw for kind, kw in calls if kind in DECODES)
        m = 8 if kw.get("scale") is None else int(round(kw["scale"] * 8))
        top, left, h, w = kw.get("crop") or (0, 0, 0, 0)
        lines.append(f"{top} {left} {h} {w} {m}")
    return "\n".join(lines) + "\n"


class Floor:
    """c_floor --serve on the same files and boxes: one timed pass per request."""

    def __init__(self, listing: Path, boxes: Path):
        self.proc = subprocess.Popen([str(C_FLOOR), "--boxes", str(boxes), "--serve",
                                      str(listing)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            raise RuntimeError(f"c_floor did not start: {first!r}")

    def cpu_seconds(self, n: int) -> float:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"0 {n}\n")
        self.proc.stdin.flush()
        assert self.proc.stdin and self.proc.stdout
        reply: dict[str, str] = {}
        for _ in range(4):
            key, _, value = self.proc.stdout.readline().strip().partition("=")
            reply[key] = value
        if int(reply["images"]) != n:
            raise RuntimeError(f"c_floor decoded {reply['images']} of {n} files")
        return float(reply["cpu_seconds"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def timed(fn: Callable[[], None]) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def time_rounds(contenders: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median seconds per pass, the contenders interleaved in a rotating order."""
    names = list(contenders)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds[name].append(contenders[name]())
    return {n: statistics.median(v) for n, v in seconds.items()}


def callgrind(argv: list[str], toggles: list[str]) -> int:
    """Instructions collected inside `toggles` while running argv."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
               "--collect-atstart=no"] + [f"--toggle-collect={t}" for t in toggles] + argv
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, cwd=ROOT)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode or not found:
            raise RuntimeError(f"callgrind failed ({done.returncode}): {done.stderr[-2000:]}")
        return int(found.group(1))


def count_instructions(state: Path, chain: str, n: int, listing: Path,
                       boxes: Path) -> dict[str, float]:
    """Instructions per image of the C floor, the crop decode and the fused calls."""
    per_file = json.loads(state.read_text())[chain][:n]
    if any(k in DECODES and "size" in kw and any(k2 == "resize" for k2, _ in c)
           for c in per_file for k, kw in c):
        raise RuntimeError("a file with both decode(size=) and a resize: toggles would nest")
    me = [sys.executable, "-m", "benchmarks.bench_floor", "--replay", str(state),
          "--chain", chain, "--images", str(n)]  # run from ROOT (callgrind's cwd)
    out = {"C floor": callgrind([str(C_FLOOR), "--boxes", str(boxes), "--check", str(listing)],
                                ["decode"]) / n / 1e6}
    out["crop"] = callgrind(me + ["--what", "crop"], ["fd_plan", "fd_decode"]) / n / 1e6
    fused = callgrind(me + ["--what", "fused-decodes"], ["fd_plan", "fd_decode"])
    if any(k == "resize" for c in per_file for k, _ in c):
        fused += callgrind(me + ["--what", "fused-resizes"], ["fd_resample"])
    out["fused"] = fused / n / 1e6
    return out


def replay_main(args) -> None:
    """--replay: one untimed pass of the recorded calls (run under callgrind)."""
    state = json.loads(Path(args.replay).read_text())
    names = state["files"][:args.images]
    per_file = [[(k, _tuples(kw)) for k, kw in c] for c in state[args.chain[0]][:args.images]]
    files = [Path(p).read_bytes() for p in names]
    replayer(files, per_file, args.what)()


def _tuples(kw: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}


def photo_files(root: Path, n: int) -> list[Path]:
    rows = (root / "MANIFEST.tsv").read_text().splitlines()[1:]
    paths = [root / r.split("\t")[0] for r in rows if r.strip()]
    return paths[:n] if n else paths


def report(chain: str, n: int, ms: dict[str, float], ir: dict[str, float] | None) -> str:
    target = ms["C floor"] + ALLOWANCE_MS
    lines = [f"{chain} chain, {n} photos, CPU ms per image (median of rounds)"
             f"{'; Minstr per image (callgrind)' if ir else ''}:"]
    for name in ("C floor", "crop", "fused"):
        extra = f"  {ir[name]:7.3f} Minstr" if ir else ""
        lines.append(f"  {name:<8} {ms[name]:6.3f} ms{extra}")
    lines.append(f"  target   {target:6.3f} ms   (C floor + {ALLOWANCE_MS} ms resample)")
    lines.append(f"  fused / target: {ms['fused'] / target:.3f}   efficiency target/fused: "
                 f"{target / ms['fused']:.3f}   resample share: "
                 f"{ms['fused'] - ms['crop']:.3f} ms" +
                 (f", {ir['fused'] - ir['crop']:.3f} Minstr" if ir else ""))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--photos", type=Path, default=PHOTOS)
    p.add_argument("--images", type=int, default=0, help="first N photos (default all)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--callgrind", type=int, default=0, metavar="N",
                   help="count instructions on the first N images (0: no)")
    p.add_argument("--chain", choices=("train", "eval"), action="append")
    p.add_argument("--json", type=Path)
    p.add_argument("--replay", help=argparse.SUPPRESS)
    p.add_argument("--what", choices=("crop", "fused", "fused-decodes", "fused-resizes"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.replay:
        return replay_main(args)
    if not C_FLOOR.exists():
        subprocess.run(["make", "-s", "-C", str(ROOT), "benchmarks/c_floor"], check=True)
    paths = photo_files(args.photos, args.images)
    files = [q.read_bytes() for q in paths]
    print(f"fastdecode {fastdecode.__version__} from {Path(fastdecode.__file__).parent}; "
          f"{len(files)} photos from {args.photos}; seed {args.seed}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        listing, state_path = Path(tmp) / "files.txt", Path(tmp) / "state.json"
        listing.write_text("\n".join(str(q) for q in paths) + "\n")
        state: dict[str, Any] = {"files": [str(q) for q in paths]}
        for chain, transform in chains().items():
            if args.chain and chain not in args.chain:
                continue
            per_file = record(transform, files, args.seed)
            state[chain] = per_file
            boxes = Path(tmp) / f"{chain}.boxes"
            boxes.write_text(floor_boxes(per_file))
            floor = Floor(listing, boxes)
            crop, fused = replayer(files, per_file, "crop"), replayer(files, per_file, "fused")
            crop(), fused()  # warm-up: scratch buffers, caches
            sec = time_rounds({"C floor": functools.partial(floor.cpu_seconds, len(files)),
                               "crop": functools.partial(timed, crop),
                               "fused": functools.partial(timed, fused)}, args.rounds)
            floor.close()
            ms = {k: v / len(files) * 1e3 for k, v in sec.items()}
            ir = None
            if args.callgrind:
                state_path.write_text(json.dumps(state))
                cg_list = Path(tmp) / f"{chain}.cg.txt"
                cg_list.write_text("\n".join(str(q) for q in paths[:args.callgrind]) + "\n")
                cg_boxes = Path(tmp) / f"{chain}.cg.boxes"
                cg_boxes.write_text(floor_boxes(per_file[:args.callgrind]))
                ir = count_instructions(state_path, chain, args.callgrind, cg_list, cg_boxes)
            results[chain] = {"ms": ms, "minstr": ir, "target_ms": ms["C floor"] + ALLOWANCE_MS}
            print(report(chain, len(files), ms, ir), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    if not shutil.which("valgrind") and "--callgrind" in sys.argv:
        sys.exit("--callgrind needs valgrind on PATH")
    main()
