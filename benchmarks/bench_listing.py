"""Listing benchmark: a tree at ImageNet scale (1,281,000 files in 1,000
classes by default) as FastImageFolder and ImageFolder list it.

    python -m benchmarks.bench_listing --tree DIR [--make] [--files 1281000]
        [--classes 1000] [--photos DIR] [--rounds 5] [--window 40000]
        [--json PATH] [--remove] [--workers-only] [--reads heap,mapped]
        [--no-imagefolder]

--make generates the tree first (skipped when DIR already holds a tree of
that size): class folders n00000000..., each file a hard link to one of the
real photos of --photos (copied once beside the tree, DIR.src, so the links
stay on one filesystem and the photos' own files are never touched); the
folders' mtimes are set a minute back, so the listing index is not racy.
--remove deletes the tree and its sources at the end.

What it measures, each in a fresh subprocess (one process's caches, heap and
imports never help the next):

- build: the constructor's wall time, FastImageFolder(refresh_index=True:
  it lists and writes its index) against ImageFolder, interleaved (per
  round both, the order flipped every other round), median and min-max;
  ratio = the median of per-round ratios.
- reopen: FastImageFolder from its index (the second and later opens).
- memory: the RSS the dataset adds (after gc, against the process before
  it), its pickled size (what each spawned worker unpickles).
- workers: a stock DataLoader with 2 workers (fork) over a random order of
  --window samples, each sample read and decoded at 1/8 scale then dropped
  (a listing benchmark: the decode is kept small, the sample path whole); the
  private memory (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup,
  USS) of each worker at checkpoints; growth = the slope of a least-squares
  fit over the checkpoints after the first, in MiB per 10k samples per
  worker, and the gain from the first checkpoint to the last.
  --reads sets how the read-ahead's threads read files for the fast row
  (FASTDECODE_NATIVE_READS, fastdecode.storage._reads; heap: Python threads, into their
  malloc arenas, as before issue 29's fix; mapped: the read pool in C, into
  mappings, the default): one fast
  row per value given, e.g. ``--reads heap,mapped``. Those rows read ahead
  at a fixed depth, so the threads read every file (the adaptive default
  reads a local disk's files in the decoding thread).
  --workers-only skips the build rounds.

Heavy: run it alone (on a shared machine under ``flock``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from . import _common as common

READS = {"heap": 0, "mapped": 1}  # --reads -> the child's FASTDECODE_NATIVE_READS
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


# --------------------------------------------------------------------------
# The tree.

def tree_size(tree: Path) -> int:
    """Files in ``tree``'s class folders (0: no tree)."""
    if not tree.is_dir():
        return 0
    return sum(len(os.listdir(tree / d)) for d in os.listdir(tree) if (tree / d).is_dir())


def make_tree(tree: Path, files: int, classes: int, photos: Path) -> dict[str, Any]:
    """``files`` hard links in ``classes`` folders of ``tree`` to the images
    of ``photos`` (copied once to ``tree``.src, on the tree's filesystem)."""
    sources = sorted(p for p in photos.rglob("*") if p.is_file()
                     and p.name.lower().endswith(EXTENSIONS))
    if not sources:
        raise SystemExit(f"bench_listing: no image under {photos}")
    start = time.perf_counter()
    if tree.exists():
        shutil.rmtree(tree)
    src = tree.with_name(tree.name + ".src")
    src.mkdir(parents=True, exist_ok=True)
    local = []
    for i, path in enumerate(sources):
        copy = src / f"{i:05d}{path.suffix}"
        if not copy.exists():
            shutil.copyfile(path, copy)
        local.append(os.fspath(copy))
    tree.mkdir(parents=True)
    per_class, extra = divmod(files, classes)
    n = 0
    for c in range(classes):
        name = f"n{c:08d}"
        folder = os.path.join(tree, name)
        os.mkdir(folder)
        for j in range(per_class + (c < extra)):
            source = local[n % len(local)]
            os.link(source, os.path.join(folder, f"{name}_{j:06d}{os.path.splitext(source)[1]}"))
            n += 1
    past = time.time() - 60  # not racy for the listing index
    for c in range(classes):
        os.utime(os.path.join(tree, f"n{c:08d}"), (past, past))
    os.utime(tree, (past, past))
    return {"files": n, "classes": classes, "photos": len(local),
            "seconds": round(time.perf_counter() - start, 2)}


def remove_tree(tree: Path) -> None:
    shutil.rmtree(tree, ignore_errors=True)
    shutil.rmtree(tree.with_name(tree.name + ".src"), ignore_errors=True)


# --------------------------------------------------------------------------
# One measurement, in a fresh process.

KINDS = ("ImageFolder", "FastImageFolder", "FastImageFolder (index)")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def private_mib(pid: int) -> Optional[float]:
    """USS: Private_Clean + Private_Dirty of ``pid`` (/proc/PID/smaps_rollup), MiB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            kib = sum(int(line.split()[1]) for line in f
                      if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except OSError:
        return None
    return kib / 1024


def _draft_loader(path: str) -> Any:
    """ImageFolder's PIL loader, decoding a JPEG at 1/8 scale (as the fast
    dataset's reduced DCT decode): the workers' time goes to the listing."""
    from PIL import Image

    with open(path, "rb") as f:
        image = Image.open(f)
        image.draft("RGB", (32, 32))
        return image.convert("RGB")


def _open(kind: str, tree: str, transform: Any = None, readahead: Any = None) -> Any:
    if kind == "ImageFolder":
        from torchvision.datasets import ImageFolder

        loader = {} if transform is None else {"loader": _draft_loader}
        return ImageFolder(tree, transform=transform, **loader)
    from fastdecode.datasets import FastImageFolder

    return FastImageFolder(tree, transform=transform, refresh_index=kind == "FastImageFolder",
                           readahead=readahead)


def child_build(kind: str, tree: str) -> dict[str, Any]:
    """Build time, RSS added, pickled size of one dataset."""
    import gc

    import torch  # noqa: F401 - imported before the baseline, as every row's
    import torchvision.datasets  # noqa: F401

    from fastdecode.datasets import FastImageFolder  # noqa: F401

    gc.collect()
    before = _rss_mib()
    start = time.perf_counter()
    ds = _open(kind, tree)
    seconds = time.perf_counter() - start
    gc.collect()
    rss = _rss_mib() - before
    pickled = len(pickle.dumps(ds))
    return {"kind": kind, "samples": len(ds), "seconds": seconds, "rss_mib": rss,
            "pickled_mib": pickled / 2**20, "source": getattr(ds, "_listing_source", "listed")}


def child_workers(kind: str, tree: str, window: int, checkpoints: int, batch: int,
                  seed: int, mapped: int = -1) -> dict[str, Any]:
    """Each of 2 forked workers' USS at checkpoints over ``window`` samples in
    a random order (a stock DataLoader). ``mapped`` 0 or 1: the read-ahead's
    FASTDECODE_NATIVE_READS (the forked workers inherit it); -1: its default."""
    import torch
    import torchvision.transforms as T
    from torch.utils.data import DataLoader

    from fastdecode.storage import _readahead, _reads

    readahead = None
    if mapped >= 0:  # the threads read every file: a fixed depth (the adaptive
        # default reads a local disk's files in the decoding thread)
        os.environ[_reads.NATIVE_READS_ENV] = str(mapped)
        readahead = _readahead.DEFAULT_DEPTH

    transform = T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()])
    ds = _open(kind if kind == "ImageFolder" else "FastImageFolder (index)", tree, transform,
               readahead)
    perm = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))
    order = perm[:window].tolist()
    loader = DataLoader(ds, batch_size=batch, sampler=order, num_workers=2,
                        multiprocessing_context="fork", persistent_workers=False)
    it = iter(loader)
    pids = [w.pid for w in it._workers]  # type: ignore[attr-defined]
    every = max(1, window // batch // checkpoints)
    rows: list[dict[str, Any]] = []
    seen = 0
    start = time.perf_counter()
    for b, (images, _) in enumerate(it):
        seen += len(images)
        if b == 0 or (b + 1) % every == 0:
            rows.append({"samples": seen, "seconds": round(time.perf_counter() - start, 2),
                         "uss_mib": [private_mib(p) for p in pids]})
            # each checkpoint as it comes (stderr): a run stopped early keeps them
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    rows.append({"samples": seen, "seconds": round(time.perf_counter() - start, 2),
                 "uss_mib": [private_mib(p) for p in pids]})
    return {"kind": kind, "window": seen, "batch": batch, "checkpoints": rows,
            "mapped_reads": None if kind == "ImageFolder" else _reads.native_reads(),
            "readahead": None if kind == "ImageFolder" else repr(ds._reads.options),
            "seconds": rows[-1]["seconds"], **growth(rows)}


def growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per worker: the least-squares slope of USS over the samples the
    loader gave (after the first checkpoint: the workers' warm-up), in MiB
    per 10k samples of the epoch (both workers' together, each worker
    touches half), and the gain from the first checkpoint to the last."""
    import numpy as np

    rows = [r for r in rows if all(u is not None for u in r["uss_mib"])]
    if len(rows) < 3:
        return {"slope_mib_per_10k": None, "gain_mib": None}
    x = np.array([r["samples"] for r in rows[1:]], float)
    slopes, gains = [], []
    for w in range(len(rows[0]["uss_mib"])):
        y = np.array([r["uss_mib"][w] for r in rows[1:]], float)
        slopes.append(float(np.polyfit(x, y, 1)[0] * 10_000))
        gains.append(float(rows[-1]["uss_mib"][w] - rows[1]["uss_mib"][w]))
    return {"slope_mib_per_10k": slopes, "gain_mib": gains,
            "first_mib": rows[1]["uss_mib"], "last_mib": rows[-1]["uss_mib"]}


def _run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", __spec__.name if __spec__ else __name__,
                          "--child", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench_listing child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# The run.

def _median(values: list[float]) -> float:
    return statistics.median(values)


def worker_rows(tree: Path, window: int, checkpoints: int, batch: int,
                reads: Optional[list[str]], bar: Any = None,
                imagefolder: bool = True) -> dict[str, Any]:
    """The worker memory rows: ImageFolder (unless not ``imagefolder``), then
    FastImageFolder once per ``reads`` value, 'heap' or 'mapped' (None:
    once, the default)."""
    rows: dict[str, Any] = {}
    fast = [("FastImageFolder", -1)] if reads is None else \
        [(f"FastImageFolder ({r} reads)", READS[r]) for r in reads]
    for name, mapped in [("ImageFolder", -1)] * imagefolder + fast:
        kind = "ImageFolder" if name == "ImageFolder" else "FastImageFolder"
        rows[name] = _run_child("workers", kind, str(tree), str(window), str(checkpoints),
                                str(batch), "0", str(mapped))
        if bar is not None:
            bar.update()
    return rows


def measure(tree: Path, rounds: int, window: int, checkpoints: int, batch: int,
            workers: bool, reads: Optional[list[str]] = None,
            build: bool = True, imagefolder: bool = True) -> dict[str, Any]:
    report: dict[str, Any] = {}
    fast_rows = 1 if reads is None else len(reads)
    bar = common.progress("listing", (rounds * 2 + 3 if build else 0)
                          + (imagefolder + fast_rows) * workers)
    if not build:
        if workers:
            report["workers"] = worker_rows(tree, window, checkpoints, batch, reads, bar,
                                            imagefolder)
        bar.close()
        return report
    # the index exists (and is fresh) before any reopen is timed
    first = _run_child("build", "FastImageFolder", str(tree))
    bar.update()
    builds: dict[str, list[dict[str, Any]]] = {"ImageFolder": [], "FastImageFolder": []}
    for r in range(rounds):
        for kind in common.round_order(("ImageFolder", "FastImageFolder"), r):
            builds[kind].append(_run_child("build", kind, str(tree)))
            bar.update()
    reopen = [_run_child("build", "FastImageFolder (index)", str(tree)) for _ in range(2)]
    bar.update(2)
    ratios = [f["seconds"] / i["seconds"]
              for f, i in zip(builds["FastImageFolder"], builds["ImageFolder"])]
    rows = []
    for kind, runs in [*builds.items(), ("FastImageFolder (index)", reopen)]:
        seconds = [run["seconds"] for run in runs]
        rows.append({"kind": kind, "samples": runs[0]["samples"],
                     "seconds_median": _median(seconds), "seconds_min": min(seconds),
                     "seconds_max": max(seconds), "rss_mib": _median([r["rss_mib"] for r in runs]),
                     "pickled_mib": runs[0]["pickled_mib"],
                     "sources": sorted({r["source"] for r in runs})})
    report["build"] = {"rounds": rounds, "rows": rows, "first_open": first,
                       "ratio_fast_to_imagefolder": _median(ratios), "ratios": ratios}
    if workers:
        report["workers"] = worker_rows(tree, window, checkpoints, batch, reads, bar,
                                        imagefolder)
    bar.close()
    return report


def markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    build = report.get("build")
    if build is not None:
        lines += build_markdown(build)
    for kind, result in report.get("workers", {}).items():
        slopes = ", ".join(f"{s:+.2f}" for s in result["slope_mib_per_10k"] or [])
        gains = ", ".join(f"{g:+.1f}" for g in result["gain_mib"] or [])
        lines.append(f"- {kind}, 2 workers, {result['window']:,} samples in random order "
                     f"({result.get('seconds', 0):.0f} s): "
                     f"USS slope {slopes} MiB per 10k samples; gain {gains} MiB "
                     f"(first checkpoint {result.get('first_mib')} -> last "
                     f"{result.get('last_mib')})")
    return "\n".join(lines)


def build_markdown(build: dict[str, Any]) -> list[str]:
    lines = [f"### listing: {build['rows'][0]['samples']:,} files, "
             f"{build['rounds']} interleaved rounds (fresh process each)", "",
             "| dataset | build s (median, min-max) | RSS added MiB | pickled MiB |",
             "|---|---|---|---|"]
    for row in build["rows"]:
        lines.append(f"| {row['kind']} | {row['seconds_median']:.2f} ({row['seconds_min']:.2f}-"
                     f"{row['seconds_max']:.2f}) | {row['rss_mib']:.0f} | "
                     f"{row['pickled_mib']:.1f} |")
    lines += ["", f"FastImageFolder / ImageFolder build time: "
              f"{build['ratio_fast_to_imagefolder']:.2f}x (median of per-round ratios)"]
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help="the tree (default: "
                        "$FASTDECODE_CACHE or ~/.cache/fastdecode, listing-tree-FILES)")
    parser.add_argument("--make", action="store_true", help="generate the tree first")
    parser.add_argument("--remove", action="store_true", help="delete the tree at the end")
    parser.add_argument("--files", type=int, default=1_281_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--photos", type=Path, help="the images to link to (default: the "
                        "generated ImageNet-like set)")
    parser.add_argument("--data", type=Path, help="same as --photos (fastdecode bench's name)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=40_000,
                        help="samples the workers go through (the whole epoch: --files)")
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no-workers", action="store_true", help="skip the worker memory run")
    parser.add_argument("--workers-only", action="store_true", help="skip the build rounds")
    parser.add_argument("--no-imagefolder", action="store_true",
                        help="skip ImageFolder's worker row (its growth measured before)")
    parser.add_argument("--reads", type=lambda v: v.split(","),
                        help="heap,mapped: one fast worker row per way the read threads "
                        "read (heap: as before issue 29's fix); default: the default")
    parser.add_argument("--quick", action="store_true", help="20,000 files, 2 rounds, 8k window")
    parser.add_argument("--full", action="store_true", help="(fastdecode bench --full) as given")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        kind, tree, *rest = args.child[1:]
        if args.child[0] == "build":
            result = child_build(kind, tree)
        else:
            window, checkpoints, batch, seed, *mapped = map(int, rest)
            result = child_workers(kind, tree, window, checkpoints, batch, seed, *mapped)
        print(json.dumps(result))
        return 0
    if args.quick:
        args.files, args.rounds, args.window = 20_000, 2, 8_000
    if args.tree is None:
        from fastdecode.storage._remote_index import cache_dir

        args.tree = Path(cache_dir()) / f"listing-tree-{args.files}"
        args.make = True
    made = None
    if args.make and tree_size(args.tree) != args.files:
        photos = args.photos or args.data or common.default_data()
        common.emit(f"generating {args.files:,} hard links under {args.tree} ...")
        made = make_tree(args.tree, args.files, args.classes, Path(photos))
    try:
        report = {"command": common.command_line(__name__, argv), "tree": str(args.tree),
                  "made": made, "machine": common.machine_facts(),
                  "versions": common.library_versions(),
                  **measure(args.tree, args.rounds, min(args.window, args.files),
                            args.checkpoints, args.batch, not args.no_workers,
                            args.reads, not args.workers_only,
                            not args.no_imagefolder)}
    finally:
        if args.remove:
            remove_tree(args.tree)
    common.emit(markdown(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
