"""``fastdecode tune``: the num_workers and prefetch_factor a job needs,
measured on its own data with its own transforms.

One worker's time per batch (its CPU and its wait on storage apart), then
FastLoader's rate at each worker count; workers are sized by the CPU part,
the wait being the read-ahead's to hide. The measurements repeat until the
recommendation settles (``MAX_PASSES`` at most, the result says whether it
did), each bounded in batches and time: it never hangs. Decision records:
docs/decisions/storage.md (Storage reports), docs/decisions/cli.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from fastdecode import _system
from fastdecode.cli._args import number, subcommand
from fastdecode.cli._tune_transform import UsageError, load_transform

__all__ = ["UsageError", "load_transform", "recommend_prefetch", "register", "tune"]

# Counts within this share of the best rate are as good as the best: the
# difference is noise on a shared machine, and fewer workers cost less memory.
NEAR_BEST = 0.95
MAX_PREFETCH = 8
SEED = 0
# A worker waiting on storage for this share of its batch time or more is
# sized by its CPU time alone, and told about the read-ahead.
IO_WAIT_SHARE = 0.10
# how a dataset's on_error="warn" starts its warning of a replaced sample: a
# file's error (which names it), or another exception's (after the sample)
SKIP_WARNING = "skipping "
FILE_ERROR = "unreadable sample: "
# the unreadable files' errors a result keeps (it counts them all)
UNREADABLE_SHOWN = 10
# passes: 1 and 2 at --batches, then each with twice the last one's batches,
# until the last two recommend the same num_workers
MAX_PASSES = 4


@dataclass
class Row:
    num_workers: int
    images_per_s: float
    first_batch_s: float
    batches: int
    oversubscribed: bool
    meets_step_time: Optional[bool] = None


@dataclass
class Result:
    data: str
    images: int
    classes: int
    transform: str
    batch_size: int
    batches: int
    usable_cpus: int
    decode_s_per_batch: float
    decode_s_per_batch_max: float
    io_wait_s_per_batch: float
    worker_images_per_s: float
    batch_bytes: int
    sweep: list[Row]
    max_images_per_s: float
    max_at_num_workers: int
    recommended_num_workers: int
    recommended_prefetch_factor: int
    step_time_s: Optional[float] = None
    target_images_per_s: Optional[float] = None
    needed_num_workers: Optional[int] = None
    input_bound: Optional[bool] = None
    skipped_images: int = 0  # distinct unreadable files the one-worker measurement met
    unreadable: list[str] = field(default_factory=list)  # their errors, the first UNREADABLE_SHOWN
    load_average: Optional[float] = None
    stable: bool = True
    passes: list[dict] = field(default_factory=list)  # per pass: batches, its recommendation
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# measuring


def thread_schedstat_s() -> Optional[float]:
    """Seconds this thread has run (its CPU clock) plus waited for a CPU
    (``/proc/thread-self/schedstat``'s second field); None where the kernel
    has no such file. Not schedstat's run time: for the running thread it
    moves only at the scheduler's ticks, so a batch of a few milliseconds
    could show none and read as all wait on storage."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            _, waited_ns = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return time.thread_time() + int(waited_ns) / 1e9


def measure_worker(ds, batch_size: int, batches: int, torch,
                   seed: int = SEED) -> tuple[list[float], list[float], int]:
    """Seconds per batch for one worker (decode, transforms, collate), after a
    warm-up batch (fusing the chain, first touch of the code); of each, the
    seconds it waited on storage (neither running nor waiting for a CPU: on
    the files, directly or through the read-ahead; 0 where schedstat is
    missing); and the bytes of one collated batch."""
    import numpy as np

    from fastdecode.loader import collate

    rng = np.random.default_rng(seed)
    times, waits = [], []
    with _system.one_thread_per_pool(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        images, _ = collate(ds.__getitems__(rng.integers(0, len(ds), batch_size).tolist()))
        for _ in range(batches):
            indices = rng.integers(0, len(ds), batch_size).tolist()
            busy, start = thread_schedstat_s(), time.perf_counter()
            collate(ds.__getitems__(indices))
            wall, busy_after = time.perf_counter() - start, thread_schedstat_s()
            times.append(wall)
            waits.append(0.0 if busy is None or busy_after is None
                         else min(wall, max(0.0, wall - (busy_after - busy))))
    return times, waits, images.element_size() * images.numel()


@contextmanager
def unreadable_files(ds, found: dict[str, None]) -> Iterator[None]:
    """While open, ``ds`` (read with ``on_error="skip"``) warns of each
    sample it replaces, and the distinct warnings (one per unreadable file:
    each names its file) gather in ``found``; other warnings are shown as
    they would have been. ``ds.skipped`` counts replacements, so one bad file
    of five drawn in every batch would count hundreds."""
    ds.on_error = "warn"
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always")
            yield
    finally:
        ds.on_error = "skip"
    for w in recorded:
        text = str(w.message)
        if issubclass(w.category, RuntimeWarning) and text.startswith(SKIP_WARNING):
            text = text[len(SKIP_WARNING):]
            found[text[len(FILE_ERROR):] if text.startswith(FILE_ERROR) else text] = None
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def measure_loader(ds, workers: int, batch_size: int, batches: int, timeout: float,
                   caught: list[str], torch) -> tuple[float, float, int]:
    """Images/s of FastLoader with ``workers`` workers, in steady state.

    All workers start together, so the first ``workers`` batches arrive as one
    wave after the start-up; the rate counts the batches after that wave over
    the time since it, which is the steady rate (counting from the first
    batch would overstate it by the wave)."""
    from fastdecode.loader._loader import FastLoader

    wave = max(1, workers)
    total = wave + batches
    sampler = torch.utils.data.RandomSampler(
        ds, replacement=True, num_samples=total * batch_size,
        generator=torch.Generator().manual_seed(SEED + workers))
    with warnings.catch_warnings(record=True) as recorded:
        # oversubscription and /dev/shm warnings become part of the report
        warnings.simplefilter("always")
        loader = FastLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                            drop_last=True, timeout=timeout if workers else 0)
        start = time.perf_counter()
        arrivals = [time.perf_counter() for _ in loader]
    caught.extend(str(w.message) for w in recorded)
    elapsed = max(arrivals[-1] - arrivals[wave - 1], 1e-9)  # a finite number for the JSON
    rate = batches * batch_size / elapsed
    return rate, arrivals[0] - start, total


# --------------------------------------------------------------------------
# recommending


def recommend_prefetch(slowest_batch_s: float, workers: int, step_time: float) -> int:
    """A batch is requested num_workers * prefetch_factor steps before the
    training loop needs it, so it has that many step times to arrive: the
    smallest prefetch_factor (>= 2, the DataLoader default) whose lead time
    covers the slowest measured batch."""
    return min(MAX_PREFETCH, max(2, math.ceil(slowest_batch_s / (workers * step_time))))


def default_worker_counts(usable: int) -> list[int]:
    counts, n = [], 1
    while n < usable:
        counts.append(n)
        n *= 2
    return counts + [usable]


def tune(data: Path, transform: Callable, description: str, batch_size: int, batches: int,
         step_time: Optional[float], worker_counts: Optional[list[int]],
         progress: Callable[[str], None] = lambda line: None) -> Result:
    """Measures ``transform`` on the ImageFolder tree ``data`` and recommends
    num_workers and prefetch_factor: passes of :func:`measure_pass` until the
    last two recommend the same num_workers (``MAX_PASSES`` at most; from
    the third on, each with twice the batches of the one before).

    Parameters
    ----------
    data : Path
        The ImageFolder tree (read with ``on_error="skip"``).
    transform : callable
        The chain each image goes through, as the job's dataset applies it.
    description : str
        How the result names the transform.
    batch_size : int
        Images per batch.
    batches : int
        Batches timed per measurement in the first two passes.
    step_time : float or None
        Seconds the training step takes per batch, without waiting on data;
        None sizes the workers by the best rate the machine reaches.
    worker_counts : list of int or None
        The num_workers values to measure; None: 1, 2, 4, ... up to the
        usable CPUs (and the count ``step_time`` calls for).
    progress : callable, optional
        Called with a line of text as each measurement starts.

    Returns
    -------
    Result
        The last pass's measurements and recommendation, with every pass's
        recommendation (``passes``), whether the last two agree (``stable``)
        and the notes.

    Raises
    ------
    UsageError
        ``data`` is not an ImageFolder tree.
    """
    import torch

    from fastdecode.datasets import FastImageFolder

    try:
        ds = FastImageFolder(data, transform, on_error="skip")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise UsageError(f"--data {data}: not an ImageFolder tree: {exc}") from exc
    usable = _system.usable_cpus()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    passes: list[dict] = []
    size = batches
    unreadable: dict[str, None] = {}  # over every pass
    for n in range(MAX_PASSES):
        result = measure_pass(ds, data, description, batch_size, size, step_time,
                              worker_counts, usable, load, n, progress, torch, unreadable)
        passes.append({"batches": size, "recommended_num_workers":
                       result.recommended_num_workers})
        picks = [p["recommended_num_workers"] for p in passes]
        if len(picks) >= 2 and picks[-1] == picks[-2]:
            break
        if n >= 1:
            size *= 2  # a repeat disagreed: widen
    result.passes, result.stable = passes, len(picks) >= 2 and picks[-1] == picks[-2]
    result.notes.append(
        f"recommendation per pass: {', '.join(str(p) for p in picks)} ("
        + ("stable: the last two agree)" if result.stable else
           f"NOT stable after {len(picks)} passes up to {passes[-1]['batches']} batches: the "
           "machine is too noisy to tell; rerun on a quieter machine or with larger --batches)"))
    return result


def measure_pass(ds, data: Path, description: str, batch_size: int, batches: int,
                 step_time: Optional[float], worker_counts: Optional[list[int]], usable: int,
                 load: Optional[float], n: int, progress: Callable[[str], None],
                 torch, unreadable: dict[str, None]) -> Result:
    """One pass: one worker's batches, then the loader at each worker count,
    and the recommendation from them (pass ``n`` seeds its draws apart); the
    unreadable files the worker's batches met are added to ``unreadable``."""
    progress(f"pass {n + 1}: measuring one worker: {batches} batches of {batch_size}")
    with unreadable_files(ds, unreadable):
        times, waits, batch_bytes = measure_worker(ds, batch_size, batches, torch, SEED + n)
    decode, slowest = statistics.median(times), max(times)
    result = Result(
        data=str(data), images=len(ds), classes=len(ds.classes), transform=description,
        batch_size=batch_size, batches=batches, usable_cpus=usable, decode_s_per_batch=decode,
        decode_s_per_batch_max=slowest, io_wait_s_per_batch=statistics.median(waits),
        worker_images_per_s=batch_size / decode, batch_bytes=batch_bytes, sweep=[],
        max_images_per_s=0.0, max_at_num_workers=0, recommended_num_workers=0,
        recommended_prefetch_factor=2, step_time_s=step_time, load_average=load)
    if step_time is not None:
        result.needed_num_workers = math.ceil(decode / step_time)
        wanted = cpu_workers(result)
        result.recommended_num_workers = min(wanted, usable)
        result.input_bound = wanted > usable
        result.target_images_per_s = batch_size / step_time

    counts = list(dict.fromkeys(worker_counts)) if worker_counts else sorted(
        set(default_worker_counts(usable)) | {result.recommended_num_workers} - {0})
    caught: list[str] = []
    for workers in counts:
        progress(f"pass {n + 1}: measuring FastLoader with num_workers={workers}")
        # generous: a start-up plus ten slow batches on time-shared CPUs
        timeout = 60 + 10 * slowest * max(1, workers / usable)
        rate, first, total = measure_loader(ds, workers, batch_size, batches, timeout, caught,
                                            torch)
        target = result.target_images_per_s
        result.sweep.append(Row(workers, rate, first, total, workers > usable,
                                None if target is None else rate >= target))
    best = max(result.sweep, key=lambda row: row.images_per_s)
    result.max_images_per_s, result.max_at_num_workers = best.images_per_s, best.num_workers
    result.skipped_images = len(unreadable)
    result.unreadable = list(unreadable)[:UNREADABLE_SHOWN]
    result.warnings = list(dict.fromkeys(caught))
    _recommend(result)
    return result


def io_wait_share(r: Result) -> float:
    """The share of one worker's batch time spent waiting on storage."""
    return r.io_wait_s_per_batch / r.decode_s_per_batch if r.decode_s_per_batch > 0 else 0.0


def cpu_s_per_batch(r: Result) -> float:
    """One worker's batch time on a CPU (or waiting for one): what sizes the
    workers when the wait on storage is a tenth of it or more, else the
    whole batch time (the split is noise then)."""
    if io_wait_share(r) >= IO_WAIT_SHARE:
        return r.decode_s_per_batch - r.io_wait_s_per_batch
    return r.decode_s_per_batch


def cpu_workers(r: Result) -> int:
    """Workers a step of ``r.step_time_s`` asks for: ceil(CPU time per batch
    / step), at least 1 (a batch that is all wait on storage still wants its
    reads off the training loop); before the cap at the usable CPUs."""
    assert r.step_time_s is not None
    return max(1, math.ceil(cpu_s_per_batch(r) / r.step_time_s))


def _recommend(r: Result) -> None:
    notes = r.notes
    # the load average counts the whole machine (also in a container), so
    # it is weighed against all of its CPUs
    cpus = os.cpu_count() or 1
    if r.load_average is not None and r.load_average > cpus / 2:
        notes.append(f"the machine was busy (load average {r.load_average:.1f} on {cpus} CPUs "
                     "when tune started): the rates are lower than on an idle machine")
    _recommend_workers(r)
    share = io_wait_share(r)
    if share >= IO_WAIT_SHARE:
        notes.append(
            f"one worker waited on storage {r.io_wait_s_per_batch:.3f} s of its "
            f"{r.decode_s_per_batch:.3f} s per batch ({share:.0%}): num_workers is sized by the "
            f"other {cpu_s_per_batch(r):.3f} s; the wait is the read-ahead's to hide (readahead="
            "or FASTDECODE_READAHEAD, `fastdecode doctor ROOT` sizes it), not more workers "
            "than CPUs")
    shm = _system.shm_budget(r.recommended_num_workers, r.recommended_prefetch_factor,
                             r.batch_bytes)
    if shm.status == "short" and shm.free is not None:
        notes.append(f"/dev/shm has {shm.free / 2**20:,.0f} MiB free but "
                     f"{r.recommended_num_workers} workers x prefetch_factor="
                     f"{r.recommended_prefetch_factor} x {r.batch_bytes / 2**20:,.0f} MiB batches "
                     f"need {shm.need / 2**20:,.0f} MiB: enlarge it ({shm.advice}; see "
                     "`fastdecode doctor`) or lower the batch size")


def _recommend_workers(r: Result) -> None:
    notes = r.notes
    if r.step_time_s is None:
        # the fewest workers that reach the best rate; 0 workers decode in
        # the training loop itself, so only when nothing else was tried
        candidates = [row for row in r.sweep if row.num_workers > 0] or r.sweep
        top = max(row.images_per_s for row in candidates)
        pick = min((row for row in candidates if row.images_per_s >= NEAR_BEST * top),
                   key=lambda row: row.num_workers)
        r.recommended_num_workers = pick.num_workers
        notes.append(f"the machine feeds at most {r.max_images_per_s:,.0f} images/s "
                     f"(num_workers={r.max_at_num_workers}); num_workers={pick.num_workers} is "
                     f"the fewest within {1 - NEAR_BEST:.0%} of the best")
        notes.append("prefetch_factor=2 (the default); pass --step-time to size it against "
                     "your training step")
        return
    step = r.step_time_s
    cpu = cpu_s_per_batch(r)
    notes.append(f"a step of {step:g} s consumes {r.target_images_per_s:,.0f} images/s: "
                 f"num_workers = ceil({cpu:.3f} / {step:g}) = {cpu_workers(r)}"
                 + (f", capped at the {r.usable_cpus} usable CPUs" if r.input_bound else ""))
    if r.input_bound:
        r.recommended_prefetch_factor = 2
        notes.append(f"input-bound: {r.usable_cpus} CPUs cannot decode "
                     f"{r.target_images_per_s:,.0f} images/s (measured at most "
                     f"{r.max_images_per_s:,.0f}); the GPU will wait on data. Options: more "
                     "CPUs, `fastdecode convert --to bmp` (decodes several times faster), "
                     "smaller stored images, or a longer step (larger model or batch). "
                     "prefetch_factor stays 2: more batches in flight cannot raise the rate")
    else:
        r.recommended_prefetch_factor = recommend_prefetch(
            r.decode_s_per_batch_max, max(1, r.recommended_num_workers), step)
        notes.append(f"prefetch_factor={r.recommended_prefetch_factor}: each batch is requested "
                     f"{r.recommended_num_workers} x {r.recommended_prefetch_factor} steps "
                     f"ahead, which covers the slowest batch measured "
                     f"({r.decode_s_per_batch_max:.3f} s)")
    measured = {row.num_workers: row for row in r.sweep}.get(r.recommended_num_workers)
    if measured is not None and measured.meets_step_time is False and not r.input_bound:
        notes.append(f"but the loader measured {measured.images_per_s:,.0f} images/s at "
                     f"num_workers={measured.num_workers}, under the target: the workers "
                     "compete for memory bandwidth or the main process; try one more worker")


# --------------------------------------------------------------------------
# the command


def print_text(r: Result) -> None:
    print(f"data: {r.data} ({r.images} images, {r.classes} classes)")
    print(f"transform: {r.transform}")
    print(f"one worker: {r.decode_s_per_batch:.3f} s per batch of {r.batch_size} (median of "
          f"{r.batches}, slowest {r.decode_s_per_batch_max:.3f} s; waiting on storage "
          f"{r.io_wait_s_per_batch:.3f} s) = {r.worker_images_per_s:,.0f} images/s")
    print(f"usable CPUs: {r.usable_cpus}\n")
    print("num_workers  images/s  first batch")
    for row in r.sweep:
        flags = [f for f, on in (("oversubscribed", row.oversubscribed),
                                 ("meets the step time", row.meets_step_time)) if on]
        print(f"{row.num_workers:>11}  {row.images_per_s:>8,.0f}  {row.first_batch_s:>9.2f} s"
              + (f"  ({', '.join(flags)})" if flags else ""))
    print()
    for note in r.notes:
        print(f"- {note}")
    if r.skipped_images:
        shown = "; ".join(r.unreadable[:3]) + ("; ..." if r.skipped_images > 3 else "")
        print(f"- {r.skipped_images} unreadable image(s) of the {r.images:,} in the tree, each "
              f"replaced by another while measuring (on_error='skip'): {shown}")
    for message in r.warnings:
        print(f"- loader warning: {message}")
    print(f"\nrecommended: num_workers={r.recommended_num_workers}, "
          f"prefetch_factor={r.recommended_prefetch_factor}"
          + ("" if r.stable else " (not stable: see the passes above)"))


def _error(message: str) -> None:
    print(f"fastdecode tune: error: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as exc:
        _error(f"tune needs torch and torchvision ({exc}): pip install torch torchvision")
        return 2
    try:
        transform, description = load_transform(args.transform)
        data = args.data
        if data is None:
            from fastdecode.cli.datagen import generate_imagenet_like

            data = generate_imagenet_like()
            print(f"no --data: using the generated ImageNet-like set in {data}", file=sys.stderr)
        elif not data.is_dir():
            raise UsageError(f"--data {data}: no such directory")
        progress = (lambda line: None) if args.json else (
            lambda line: print(line + " ...", file=sys.stderr, flush=True))
        result = tune(data, transform, description, args.batch_size, args.batches,
                      args.step_time, args.workers, progress)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except Exception as exc:  # the pipeline itself failed: say what, exit 1
        _error(f"measuring failed: {type(exc).__name__}: {exc}")
        return 1
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print_text(result)
    return 0


DESCRIPTION = """\
Measures one worker's decode time per batch on your data with your
transform chain, then FastLoader's images/s at each worker count, and
recommends num_workers and prefetch_factor."""

EPILOG = f"""\
how it decides:
  num_workers     with --step-time S: ceil(D / S) (at least 1), D being one
                  worker's median time per batch, capped at the usable CPUs
                  (then the job is input-bound and the output says what
                  would help). When the
                  worker waits on storage for {IO_WAIT_SHARE:.0%} of D or more, D
                  counts only its time on (or waiting for) a CPU: the read-ahead
                  hides the wait, more workers would oversubscribe.
                  Without it: the fewest workers within {1 - NEAR_BEST:.0%} of the
                  best measured images/s.
  prefetch_factor a batch is requested num_workers x prefetch_factor steps
                  before it is needed; tune picks the smallest value >= 2 whose
                  lead time covers the slowest measured batch:
                  max(2, ceil(slowest / (num_workers x S))), at most {MAX_PREFETCH}.
                  2 without --step-time or when input-bound (more batches in
                  flight cannot raise the rate, only memory).
  stability       the measurements run twice; while the last two passes
                  recommend different num_workers, again with twice the
                  batches, {MAX_PASSES} passes at most; the output says whether it
                  settled.

exit status: 0 on success, 1 when the pipeline fails while measuring (a
decode error, a transform that raises, a worker timeout), 2 for bad
arguments (missing --data, a --transform that does not import).

examples:
  fastdecode tune --data ~/data/imagenet/train --step-time 0.25
  fastdecode tune --data ~/data/train --transform myproject.data:train_transform --batch-size 128
  fastdecode tune --workers 2 4 6 8 --batches 20 --json > tune.json
  fastdecode tune          # the generated ImageNet-like set, standard chain
"""


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode tune``."""
    parser.add_argument("--data", type=Path, metavar="PATH",
                        help="an ImageFolder tree (default: the generated ImageNet-like set, "
                        "made on first use)")
    parser.add_argument("--transform", metavar="MODULE:ATTR",
                        help="your transform: a torchvision transform object or a function "
                        "that returns one, imported from the current directory or the "
                        "Python path (default: the standard ImageNet train chain)")
    parser.add_argument("--batch-size", type=number(int, 1), default=256, metavar="B",
                        help="images per batch (default: 256)")
    parser.add_argument("--step-time", type=number(float, 0, strict=True), metavar="SECONDS",
                        help="seconds your training step takes per batch, without waiting on data")
    parser.add_argument("--workers", type=number(int, 0), nargs="+", metavar="N",
                        help="worker counts to try (default: 1, 2, 4, ... up to the usable CPUs)")
    parser.add_argument("--batches", type=number(int, 1), default=8, metavar="N",
                        help="batches timed per measurement (default: 8)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


register = subcommand("tune", run, _options, description=DESCRIPTION, epilog=EPILOG)
