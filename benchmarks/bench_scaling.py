"""The machine's own scaling: the fused train chain in one process alone and in
one process per usable CPU at once, no loader.

    python -m benchmarks.bench_scaling [--data DIR] [--seconds S] [--rounds R] [--json PATH]

The loader benchmark's limit is usable CPUs / one process's fused cost per
image. This measures whether the machine gives that: each process decodes the
same photos in a loop (RandomResizedCrop(224) + flip + ToTensor + Normalize,
one torch thread) for ``--seconds``; rows alternate, ``--rounds`` times. When N
processes reach ~N times one process's rate at the same CPU per image, the
limit is the machine's, and what a loader spends above that CPU per image is
its own machinery (IPC, collation, memory) rather than the decode.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from pathlib import Path
from typing import Optional

from fastdecode._system import usable_cpus

from . import _common as common

__all__ = ["main", "measure"]


def _decode_loop(paths: list[str], seconds: float, out: mp.Queue) -> None:
    import torch
    from torchvision import transforms as T

    import fastdecode as fd

    torch.set_num_threads(1)
    fused = fd.fuse(T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    datas = [Path(p).read_bytes() for p in paths]
    for data in datas[:20]:  # warm: plan, caches
        fused(data)
    images, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    while images == 0 or time.perf_counter() - wall0 < seconds:
        for data in datas:
            fused(data)
            images += 1
    out.put((images, time.process_time() - cpu0, time.perf_counter() - wall0))


def _context() -> mp.context.BaseContext:
    """Fresh processes without the parent's threads: forked from a server
    that imported torch, torchvision and fastdecode once (each spawned
    process spent ~3 s importing them, and a round's processes began their
    loops seconds apart); spawned where there is no forkserver (Windows)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torchvision.transforms", "fastdecode"])
    return ctx


def run_once(paths: list[str], procs: int, seconds: float) -> dict:
    """``procs`` processes decoding at once: their summed images/s and CPU ms per image."""
    ctx = _context()
    queue = ctx.Queue()
    workers = [ctx.Process(target=_decode_loop, args=(paths, seconds, queue)) for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        results = [queue.get(timeout=seconds + 120) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()
    images = sum(r[0] for r in results)
    return {"images_per_s": sum(r[0] / r[2] for r in results),
            "cpu_ms_per_image": sum(r[1] for r in results) / images * 1e3}


def measure(paths: list[str], seconds: float, rounds: int, cpus: Optional[int] = None) -> dict:
    cpus = cpus or usable_cpus()
    runs: dict[int, list[dict]] = {1: [], cpus: []}
    for _ in range(rounds):
        for procs in runs:
            runs[procs].append(run_once(paths, procs, seconds))
    rows = {procs: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
            for procs, rs in runs.items()}
    one, many = rows[1], rows[cpus]
    return {"cpus": cpus, "rows": {str(k): v for k, v in rows.items()},
            "scaling": many["images_per_s"] / one["images_per_s"],
            "cpu_growth": many["cpu_ms_per_image"] / one["cpu_ms_per_image"]}


def photos(root: Path, limit: int) -> list[str]:
    files = sorted(str(p) for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    return files[:limit]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a folder of JPEGs (default: the generated set)")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    data = args.data or common.default_data()
    paths = photos(data, args.images)
    if not paths:
        parser.error(f"no .jpg or .jpeg file under {data}")
    result = measure(paths, args.seconds, args.rounds)
    one, many = result["rows"]["1"], result["rows"][str(result["cpus"])]
    print(f"fused train chain, float, {len(paths)} images, median of {args.rounds} rounds\n\n"
          "| processes | images/s | CPU ms/image |\n|---:|---:|---:|\n"
          f"| 1 | {one['images_per_s']:,.0f} | {one['cpu_ms_per_image']:.3f} |\n"
          f"| {result['cpus']} | {many['images_per_s']:,.0f} | {many['cpu_ms_per_image']:.3f} |\n\n"
          f"scaling {result['scaling']:.2f}x on {result['cpus']} CPUs; CPU per image "
          f"x{result['cpu_growth']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
