"""End-to-end loader benchmark: ImageFolder+PIL vs FastImageFolder (stock
DataLoader) vs FastLoader, over num_workers, for the standard train and eval
chains; images/s, CPU-seconds per image and peak memory (PSS of the main
process and its workers), plus the memory of 8 workers over a 1M-entry file
list.

    python -m benchmarks.bench_loader [--data PATH] [--quick] [--json PATH]

Run by `make bench`. Numbers are ratios within one run on a shared machine;
rerun rather than trust one figure.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, RandomSampler

import fastdecode as fd

from . import _common as common

LOADERS = ("ImageFolder+PIL", "FastImageFolder", "FastLoader")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def chains():
    from torchvision import transforms as T

    return {
        "train": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                            T.Normalize(MEAN, STD)]),
        "eval": T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
    }


# ---------------------------------------------------------------------------
# memory: proportional set size of this process and its children


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def tree_pss_mib() -> float:
    """PSS, unlike RSS, counts shared pages once across the process tree."""
    pids = [os.getpid()]
    pids += _children(os.getpid())
    return sum(_pss_kib(p) for p in pids) / 1024


class PeakMemory:
    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak, self._stop = interval, 0.0, threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_pss_mib())
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # workers, once reaped
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# ---------------------------------------------------------------------------
# one measurement


def make_loader(kind: str, root: Path, chain, workers: int, batch: int, samples: int):
    from torchvision.datasets import ImageFolder

    generator = torch.Generator().manual_seed(0)
    if kind == "ImageFolder+PIL":
        ds = ImageFolder(root, chain)
    else:
        ds = fd.FastImageFolder(root, chain)
    sampler = RandomSampler(ds, replacement=True, num_samples=samples, generator=generator)
    common = dict(batch_size=batch, sampler=sampler, num_workers=workers,
                  pin_memory=torch.cuda.is_available(), drop_last=True)
    if kind == "FastLoader":
        return fd.FastLoader(ds, **common)
    return DataLoader(ds, **common, persistent_workers=False)


def measure(kind: str, root: Path, chain, workers: int, batch: int, samples: int) -> dict:
    """Wall time from creating the iterator to the last batch: worker start-up
    is part of what a training epoch pays, and prefetched batches cannot
    inflate a rate measured over the whole run."""
    loader = make_loader(kind, root, chain, workers, batch, samples)
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    first = None
    images = 0
    with PeakMemory() as peak:
        for x, _ in loader:
            if first is None:
                first = time.perf_counter()
            images += x.shape[0]
    end = time.perf_counter()
    del loader
    cpu = cpu_seconds() - cpu0
    return {
        "loader": kind, "num_workers": workers,
        "images_per_s": images / (end - start) if images else 0.0,
        "cpu_s_per_image": cpu / max(images, 1),
        "peak_pss_mib": peak.peak,
        "first_batch_s": (first or end) - start,
    }


# ---------------------------------------------------------------------------
# the 1M-entry file list


class ListOnly(torch.utils.data.Dataset):
    """Touches samples[i] as __getitem__ does, without decoding anything."""

    def __init__(self, base) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base.samples)

    def __getitem__(self, i: int) -> int:
        path, target = self.base.samples[i]
        return target + len(path) * 0


def file_list_memory(entries: int, workers: int) -> list[dict]:
    import tempfile

    from torchvision.datasets import ImageFolder

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "c").mkdir()
        (root / "c" / "x.jpg").write_bytes(b"")  # the walk needs one file; never opened
        fake = [(f"/data/imagenet/train/n{i % 1000:08d}/n{i % 1000:08d}_{i}.JPEG", i % 1000)
                for i in range(entries)]
        for name, cls in (("ImageFolder", ImageFolder), ("FastImageFolder", fd.FastImageFolder)):
            base = cls(root)
            base.samples = fake
            if name == "ImageFolder":
                base.targets = [t for _, t in fake]
            ds = ListOnly(base)
            with warnings.catch_warnings():  # 8 workers on fewer cores is the point here
                warnings.filterwarnings("ignore", "This DataLoader will create")
                loader = DataLoader(ds, batch_size=4096, num_workers=workers, shuffle=True,
                                    generator=torch.Generator().manual_seed(0))
                before = tree_pss_mib()
                with PeakMemory() as peak:
                    for _ in loader:
                        pass
            rows.append({"dataset": name, "entries": entries, "num_workers": workers,
                         "peak_pss_mib": peak.peak, "main_before_mib": before})
            del loader, ds, base
    return rows


# ---------------------------------------------------------------------------
# report


def table(rows: list[dict], baseline_best: float) -> str:
    lines = ["| loader | workers | images/s | CPU-s/image | speedup vs ImageFolder best | "
             "peak PSS MiB |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['loader']} | {r['num_workers']} | {r['images_per_s']:.0f} | "
            f"{r['cpu_s_per_image'] * 1000:.2f} ms | {r['images_per_s'] / baseline_best:.2f}x | "
            f"{r['peak_pss_mib']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder")
    parser.add_argument("--workers", type=int, nargs="+",
                        help="num_workers values (default 0 1 2 4 8; quick 0 1 2 4)")
    parser.add_argument("--batch-size", type=int, help="default 256 (quick: 64)")
    parser.add_argument("--samples", type=int, help="images per measurement (default 8 batches)")
    parser.add_argument("--entries", type=int,
                        help="file-list entries (default 1,000,000; quick 200,000)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    data = args.data or common.default_data()
    workers = args.workers or ([0, 1, 2, 4] if args.quick else [0, 1, 2, 4, 8])
    batch = args.batch_size or (64 if args.quick else 256)
    samples = args.samples or batch * 8
    entries = args.entries or (200_000 if args.quick else 1_000_000)

    report = {"command": common.command_line(__name__, argv), "data": str(data),
              "batch_size": batch, "samples": samples, "machine": common.machine_facts(),
              "versions": common.library_versions(), "chains": {}}
    all_chains = chains()
    # One tick per measurement, and one for the file list.
    with common.progress("loader sweep", len(all_chains) * len(workers) * len(LOADERS) + 1) as bar:
        for name, chain in all_chains.items():
            rows = []
            for w in workers:
                for kind in LOADERS:
                    bar.set_postfix_str(f"{name} {kind} num_workers={w}")
                    rows.append(measure(kind, data, chain, w, batch, samples))
                    bar.update()
            report["chains"][name] = chain_result(rows, workers)
            common.emit(f"\n### {name} chain, batch {batch}, {samples} images per run\n\n"
                        + chain_markdown(report["chains"][name], workers))
        bar.set_postfix_str(f"file list of {entries:,} entries")
        report["file_list"] = file_list_memory(entries, 8)
        bar.update()
    report["machine"]["load_average_end"] = common.load_average()
    common.emit("\n".join([f"\n### file list of {entries:,} entries, 8 workers\n",
                            "| dataset | peak PSS MiB (main + 8 workers) |", "|---|---:|"]
                           + [f"| {r['dataset']} | {r['peak_pss_mib']:.0f} |"
                              for r in report["file_list"]]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def chain_result(rows: list[dict], workers: list[int]) -> dict:
    """Each row's speedup over ImageFolder+PIL's best num_workers, and a summary."""
    best = {k: max(r["images_per_s"] for r in rows if r["loader"] == k) for k in LOADERS}
    for r in rows:
        r["speedup"] = r["images_per_s"] / best["ImageFolder+PIL"]
    at_max = [r for r in rows
              if r["num_workers"] == max(workers) and r["loader"] == "FastImageFolder"]
    summary = {
        "best_images_per_s": best,
        "best_speedup_fastimagefolder": best["FastImageFolder"] / best["ImageFolder+PIL"],
        "best_speedup_fastloader": best["FastLoader"] / best["ImageFolder+PIL"],
        "max_workers_vs_best_fastimagefolder":
            at_max[0]["images_per_s"] / best["FastImageFolder"] if at_max else None,
    }
    return {"rows": rows, "summary": summary}


def chain_markdown(result: dict, workers: list[int]) -> str:
    summary = result["summary"]
    return (table(result["rows"], summary["best_images_per_s"]["ImageFolder+PIL"])
            + f"\n\nbest: FastImageFolder {summary['best_speedup_fastimagefolder']:.2f}x, "
            f"FastLoader {summary['best_speedup_fastloader']:.2f}x ImageFolder's best; "
            f"FastImageFolder at {max(workers)} workers = "
            f"{summary['max_workers_vs_best_fastimagefolder']:.0%} of its best")


if __name__ == "__main__":
    sys.exit(main())
