"""FastImageList against FastImageFolder over the same files (issue 29:
"FastImageList gives FastImageFolder's rate, >= 0.98x").

    python -m benchmarks.bench_image_list [--data PATH] [--rounds 7] [--workers 2]
        [--batch 64] [--round-s 8] [--reads heap,mapped] [--json PATH]

Two rows, each a stock DataLoader with persistent workers, the train chain
(RandomResizedCrop(224) + RandomHorizontalFlip -> uint8 PILToTensor):
DataLoader(FastImageFolder(data)) and DataLoader(FastImageList(the folder's
samples)), the same indices drawn by each (bench_loader's Draws, one seed).
bench_loader's round machinery: each row's untimed first epoch (start-up,
its rate), then rounds of whole waves timed in steady state, the rows taking
turns (every other round in the reverse order); the ratio is the median of
the per-round ratios (FastImageList / FastImageFolder), with their range.

``--reads heap,mapped`` runs FastImageFolder rows instead, one per way the
read-ahead reads local files (FASTDECODE_NATIVE_READS, fastdecode.storage._reads,
set before the row's workers fork; heap: Python threads, into their malloc arenas,
as before issue 29's fix; mapped: the read pool in C, into mappings copied out
by the consumer), the ratio
read against the first: the fix's cost in rate. Those rows read ahead at a
fixed depth, so the threads read every file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from . import _common as common
from . import bench_loader as bl

LIST, FOLDER = "FastImageList", "FastImageFolder"
READS = "FastImageFolder reads="  # + heap or mapped: a --reads row


def train_chain() -> Any:
    return bl.chains(["train_uint8"])["train_uint8"]


def make_loader(kind: str, root: Path, chain: Any, workers: int, batch: int,
                samples: int) -> tuple[Any, Any]:
    """A row's stock DataLoader and its sampler: ``kind`` FastImageFolder,
    FastImageList (over the folder's samples) or ``READS + 'heap'|'mapped'``."""
    import torch
    from torch.utils.data import DataLoader

    import fastdecode as fd

    folder = fd.FastImageFolder(root, chain)
    if kind == LIST:
        ds: Any = fd.FastImageList(list(folder.samples), chain)
    elif kind == FOLDER:
        ds = folder
    elif kind.startswith(READS) and kind[len(READS):] in ("heap", "mapped"):
        import os

        from fastdecode.storage import _readahead, _reads

        # read by the workers, which fork at the row's first epoch (open_row);
        # at a fixed depth the threads read every file (the adaptive default
        # reads a local disk's files in the decoding thread)
        os.environ[_reads.NATIVE_READS_ENV] = "1" if kind[len(READS):] == "mapped" else "0"
        ds = fd.FastImageFolder(root, chain, readahead=_readahead.DEFAULT_DEPTH)
    else:
        raise ValueError(f"bench_image_list: no row {kind!r}")
    sampler = bl.Draws(ds, samples)
    return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=workers,
                      drop_last=True, pin_memory=torch.cuda.is_available(),
                      persistent_workers=workers > 0), sampler


def measure(root: Path, kinds: list[str], workers: int, batch: int, rounds: int,
            round_s: float, bar: Any, make: Callable = make_loader,
            chain: Any = None) -> list[Any]:
    """The rows of ``kinds``, opened (bench_loader.open_row) and sized to
    ``round_s`` seconds of their first epoch's rate, then ``rounds`` rounds
    each, in turns (the order reversed every other round)."""
    wave = max(workers, 1)
    least = 3 * wave
    rows = []
    for kind in kinds:
        bar.set_postfix_str(f"{kind}: start-up")
        row = bl.open_row("train_uint8", kind, root, chain, workers, batch, least * batch,
                          make=make)
        row.sampler.count = batch * bl.round_batches(row, batch, least, round_s)
        rows.append(row)
        bar.update()
    for r in range(rounds):
        for row in common.round_order(rows, r):
            bar.set_postfix_str(f"{row.loader}, round {r + 1}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                bl.run_round(row)
            bar.update()
    for row in rows:
        row.source = None  # ends its persistent workers
    return rows


def result(rows: list[Any]) -> dict[str, Any]:
    """Per row its median rate and range; each row after the first against
    the first, round by round (median, range, the per-round ratios)."""
    first = rows[0]
    out: dict[str, Any] = {"rows": [], "ratios": {}}
    for row in rows:
        out["rows"].append({"loader": row.loader, "num_workers": row.num_workers,
                            "images_per_s": statistics.median(row.rates),
                            "min_images_per_s": min(row.rates),
                            "max_images_per_s": max(row.rates),
                            "round_images_per_s": row.rates,
                            "cpu_ms_per_image": statistics.median(row.cpu) * 1e3
                            if row.cpu else None,
                            "round_images": row.sampler.count if row.sampler is not None
                            else None})
    for row in rows[1:]:
        ratios = [a / b for a, b in zip(row.rates, first.rates)]
        out["ratios"][f"{row.loader} / {first.loader}"] = {
            "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "rounds": ratios}
    return out


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [f"### {' vs '.join(r['loader'] for r in report['rows'])}: stock DataLoader, "
             f"num_workers={s['workers']}, batch {s['batch']}, train chain (uint8), "
             f"{s['rounds']} interleaved rounds", "",
             "| row | images/s (median, min-max) | CPU ms/image |", "|---|---|---|"]
    for row in report["rows"]:
        cpu = f"{row['cpu_ms_per_image']:.2f}" if row["cpu_ms_per_image"] is not None else "-"
        lines.append(f"| {row['loader']} | {row['images_per_s']:.0f} "
                     f"({row['min_images_per_s']:.0f}-{row['max_images_per_s']:.0f}) | {cpu} |")
    lines.append("")
    for name, ratio in report["ratios"].items():
        lines.append(f"{name}: {ratio['median']:.3f}x (median of per-round ratios, "
                     f"{ratio['min']:.3f}-{ratio['max']:.3f})")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an ImageFolder tree (default: the "
                        "generated ImageNet-like set)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--round-s", type=float, default=8.0,
                        help="seconds per round at the row's first-epoch rate")
    parser.add_argument("--reads", type=lambda v: v.split(","),
                        help="heap,mapped: FastImageFolder rows, one per way the read-ahead "
                        "reads (heap: as before issue 29's fix)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root = args.data or common.default_data()
    kinds = [f"{READS}{r}" for r in args.reads] if args.reads else [FOLDER, LIST]
    bar = common.progress("image list", len(kinds) * (1 + args.rounds))
    rows = measure(root, kinds, args.workers, args.batch, args.rounds, args.round_s, bar,
                   make=make_loader, chain=train_chain())
    bar.close()
    report = {"command": common.command_line(__name__, argv), "data": str(root),
              "settings": {"workers": args.workers, "batch": args.batch,
                           "rounds": args.rounds, "round_s": args.round_s},
              "machine": common.machine_facts(), "versions": common.library_versions(),
              **result(rows)}
    common.emit(markdown(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
