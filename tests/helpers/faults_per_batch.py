"""Page faults per batch of a loader, in its workers and in the main process:
minor faults from /proc/PID/stat (workers) and getrusage (main), counted over
the steady state (the first epoch warms up). The counts repeat from run to
run even on a busy machine, unlike timings.

    cd tests && python -m helpers.faults_per_batch ROOT [--batch 64] [--workers 2] [--epochs 3]

With --workers 0 the batches are made in the main process (its faults are
the "main" column).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Callable

import torch


def minflt(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # field 10: minflt


# Children of ours that are not loader workers: multiprocessing's helper
# processes (started by whatever test first used shared memory or a
# semaphore). Counting or killing one of them as a "worker" is wrong.
NOT_WORKERS = (b"multiprocessing.resource_tracker", b"multiprocessing.forkserver")


def children() -> list[int]:
    """This process's child processes that may be loader workers."""
    pids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):  # the thread ended since the listing
            pass
    return [p for p in pids if not _is_helper(p)]


def _is_helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:  # already gone
        return False
    return any(name in cmdline for name in NOT_WORKERS)


def faults_per_batch(make_loader: Callable[[], torch.utils.data.DataLoader],
                     epochs: int = 3) -> dict:
    """Minor faults per batch after the first epoch, in the workers (summed)
    and in the main process, and the batch's bytes; the loader must have
    persistent workers (the same processes are counted throughout), started
    by the first epoch."""
    loader = make_loader()
    batches, nbytes = 0, 0
    start_workers = start_main = 0
    started = 0.0
    for epoch in range(epochs):
        it = iter(loader)
        if epoch == 1:
            pids = children()
            start_workers = sum(minflt(p) for p in pids)
            start_main = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            started = time.perf_counter()
        for images, _targets in it:
            images.max()  # the consumer reads its batch (as a training step would)
            if epoch >= 1:
                batches += 1
                nbytes = images.numel() * images.element_size()
        if epoch == epochs - 1:
            workers = sum(minflt(p) for p in pids) - start_workers
            main = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start_main
            seconds = time.perf_counter() - started
    del loader
    return {"batches": batches, "batch_bytes": nbytes, "batch_pages": nbytes // 4096,
            "worker_faults_per_batch": workers / batches, "main_faults_per_batch": main / batches,
            "images_per_s": batches * (nbytes and images.shape[0]) / seconds}


def main() -> None:
    from torchvision import transforms as T

    import fastdecode as fd
    from fastdecode.batching._buffers import _taken_whole

    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    kw = dict(batch_size=args.batch, num_workers=args.workers,
              persistent_workers=args.workers > 0)
    tails = {"uint8": [T.PILToTensor()],
             "float": [T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]}
    for tail, steps in tails.items():
        ds = fd.FastImageFolder(args.root, T.Compose([T.RandomResizedCrop(224),
                                                      T.RandomHorizontalFlip(), *steps]))
        kinds = {
            "DataLoader": lambda ds=ds: torch.utils.data.DataLoader(ds, **kw),
            "DataLoader+collate": lambda ds=ds: torch.utils.data.DataLoader(
                ds, collate_fn=fd.collate, **kw),
            "FastLoader": lambda ds=ds: fd.FastLoader(ds, **kw),
        }
        for name, make in kinds.items():
            # With --workers 0 every loader runs in this thread, where a
            # fastdecode.collate that took a batch whole leaves every later
            # batch fresh (the flag is per thread): each loader starts clean.
            _taken_whole.flag = False
            r = faults_per_batch(make, args.epochs)
            print(f"{tail:5} {name:18} pages/batch {r['batch_pages']:6d}  worker faults/batch "
                  f"{r['worker_faults_per_batch']:8.0f}  main faults/batch "
                  f"{r['main_faults_per_batch']:8.0f}  {r['images_per_s']:6.0f} img/s", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
