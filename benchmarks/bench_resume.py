"""Resume benchmark (issue 30): FastLoader's time from ``load_state_dict`` to
the first batch when the state resumes at an epoch's first batch against
its last, and the state's size, at dataset sizes up to ImageNet's 1.28M.

    python -m benchmarks.bench_resume [--data DIR] [--sizes 1000 50000 1281167]
        [--rounds 9] [--batch 256] [--workers 0] [--quick] [--json PATH]

The datasets: a FastImageList of N samples, every one the same image (the
first of --data, the generated ImageNet-like set by default), with targets
over 1,000 classes: the two resume points then decode batches of the same
cost, which batches of different photos are not. Building a 1.28M-file
tree would take far longer than what is measured; a list of N (path,
target) pairs is what the loader and its state see of a dataset either
way: its length, classes and file list (fingerprinted, each path as it is
listed).

What it measures, per size:

- resume time: per round, for the first and the last resume point in turn
  (the order flipped every other round), a fresh FastLoader (shuffle=True,
  its own seeded generator, ``resumable=``, RandomResizedCrop + flip) is
  built (not timed), then ``load_state_dict(state)`` and ``next(iter(loader))``
  are timed together: the first batch after the resume. "first" is a state
  saved after the epoch's first batch (the resumed loader yields batch 2),
  "last" one saved before the epoch's last batch (it yields batch N // B;
  ``drop_last=True``: the last batch is as full as the first).
  Medians over the rounds and the median of the per-round ratios
  last / first (acceptance: at most 1.2).
- the states are made without decoding the batches before them
  (``fastdecode.integrations.accelerate.skip_first_batches``, then one
  batch taken: tests/data/test_resume_frameworks.py checks that such a state
  resumes exactly), so the 1.28M epoch is not read to reach its end.
- state size: ``torch.save`` of the state, in bytes, per dataset size (it
  holds no per-sample list: the size must not grow with the dataset).
- fingerprint: per round, the seconds a fresh loader spends on the
  dataset's fingerprint (its file list hashed), which ``load_state_dict``
  checks: the part of the resume time that grows with the dataset, the same
  at any resume point.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

from . import _common as common

EXTENSIONS = (".jpg", ".jpeg", ".png")
DEFAULT_SIZES = (1_000, 50_000, 1_281_167)
QUICK_SIZES = (1_000, 50_000)


def photos(data: Path) -> list[str]:
    found = sorted(str(p) for p in Path(data).rglob("*")
                   if p.is_file() and p.name.lower().endswith(EXTENSIONS))
    if not found:
        raise SystemExit(f"bench_resume: no image under {data}")
    return found


def dataset(images: list[str], n: int, size: int = 64) -> Any:
    """A FastImageList of ``n`` samples of ``images[0]``."""
    from torchvision import transforms as T

    from fastdecode import FastImageList

    chain = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])
    paths = [images[0]] * n
    return FastImageList(paths=paths, targets=[i % 1000 for i in range(n)], transform=chain,
                         readahead=0)


def loader(ds: Any, batch: int, workers: int) -> Any:
    import torch

    from fastdecode import FastLoader

    # drop_last: every batch full, the last one as big as the first
    return FastLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                      generator=torch.Generator().manual_seed(7), resumable=True)


def state_at(ds: Any, batch: int, taken: int) -> dict:
    """The state after ``taken`` batches of epoch 0 (the ``taken - 1``
    before the last one skipped, not decoded)."""
    from fastdecode.integrations.accelerate import skip_first_batches

    made = loader(ds, batch, 0)
    skip_first_batches(made, taken - 1)
    next(iter(made))
    state = made.state_dict()
    assert state["batches"] == taken and state["epoch"] == 0
    return state


def state_bytes(state: dict) -> int:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return len(buf.getvalue())


def time_resume(ds: Any, state: dict, batch: int, workers: int) -> float:
    """Seconds from load_state_dict to the first batch, a fresh loader."""
    made = loader(ds, batch, workers)
    start = time.perf_counter()
    made.load_state_dict(state)
    it = iter(made)
    first = next(it)
    seconds = time.perf_counter() - start
    del first, it
    return seconds


def time_fingerprint(ds: Any, batch: int) -> float:
    """Seconds a fresh loader spends on the dataset's fingerprint (size,
    class list, file list), which load_state_dict checks: the part of a
    resume that grows with the dataset, whatever the resume point."""
    made = loader(ds, batch, 0)
    start = time.perf_counter()
    made._tracker.fingerprint()
    return time.perf_counter() - start


def measure_size(images: list[str], n: int, rounds: int, batch: int, workers: int,
                 bar: Any) -> dict[str, Any]:
    start = time.perf_counter()
    ds = dataset(images, n)
    built = time.perf_counter() - start
    length = n // batch
    points = {"first": 1, "last": length - 1}
    states = {name: state_at(ds, batch, taken) for name, taken in points.items()}
    times: dict[str, list[float]] = {"first": [], "last": []}
    fingerprints: list[float] = []
    time_resume(ds, states["first"], batch, workers)  # warm: imports, the files' pages
    for r in range(rounds):
        for name in common.round_order(("first", "last"), r):
            times[name].append(time_resume(ds, states[name], batch, workers))
        fingerprints.append(time_fingerprint(ds, batch))
        bar.update()
    ratios = [last / first for first, last in zip(times["first"], times["last"])]
    return {"samples": n, "batches": length, "batch": batch, "workers": workers,
            "dataset_build_s": built, "resume_batches": points,
            "state_bytes": {name: state_bytes(s) for name, s in states.items()},
            "seconds": times,
            "first_s_median": statistics.median(times["first"]),
            "last_s_median": statistics.median(times["last"]),
            "ratio_last_to_first": statistics.median(ratios), "ratios": ratios,
            "fingerprint_s_median": statistics.median(fingerprints)}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"### resume: load_state_dict to the first batch, {report['rounds']} interleaved "
             f"rounds, batch {report['batch']}, num_workers={report['workers']}", "",
             "| samples | batches | state bytes (first, last) | first s (median) | "
             "last s (median) | last / first | of which fingerprint s |",
             "|---|---|---|---|---|---|---|"]
    for row in report["sizes"]:
        sb = row["state_bytes"]
        lines.append(f"| {row['samples']:,} | {row['batches']:,} | {sb['first']:,}, "
                     f"{sb['last']:,} | {row['first_s_median']:.4f} | "
                     f"{row['last_s_median']:.4f} | {row['ratio_last_to_first']:.2f}x | "
                     f"{row['fingerprint_s_median']:.4f} |")
    worst = max(row["ratio_last_to_first"] for row in report["sizes"])
    sizes = sorted({b for row in report["sizes"] for b in row["state_bytes"].values()})
    lines += ["", f"worst last / first ratio {worst:.2f}x (acceptance: <= 1.2x: "
              f"{'met' if worst <= 1.2 else 'NOT met'}); state size {sizes[0]:,}-{sizes[-1]:,} "
              f"bytes over {report['sizes'][0]['samples']:,}-{report['sizes'][-1]['samples']:,} "
              f"samples"]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = common.BenchParser(__doc__, "the images (the first is every sample)",
                                sizes={"rounds": ("interleaved rounds per size", 9, 3),
                                       "batch": ("batch size", 256, 256)})
    parser.add_argument("--sizes", type=int, nargs="+",
                        help=f"dataset sizes (default {' '.join(map(str, DEFAULT_SIZES))}; "
                             f"quick {' '.join(map(str, QUICK_SIZES))})")
    parser.add_argument("--workers", type=int, default=0,
                        help="the resumed loader's num_workers (default 0: in-process)")
    args = parser.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if min(sizes) < 3 * args.batch:
        parser.error(f"--sizes must be at least 3 batches ({3 * args.batch} samples)")
    images = photos(args.data or common.default_data())
    bar = common.progress("resume", args.rounds * len(sizes))
    rows = [measure_size(images, n, args.rounds, args.batch, args.workers, bar) for n in sizes]
    bar.close()
    report = {"command": common.command_line(__name__, argv), "machine": common.machine_facts(),
              "versions": common.library_versions(), "rounds": args.rounds, "batch": args.batch,
              "workers": args.workers, "images": len(images), "sizes": rows}
    common.emit(markdown(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
