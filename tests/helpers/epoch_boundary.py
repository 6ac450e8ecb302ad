"""What an epoch boundary costs a loader with persistent workers: the time its
workers sleep (wall minus run minus runqueue wait, from /proc/PID/schedstat,
so a busy machine's waits for a CPU do not count) from the last batch of one
epoch to the last of the next, per boundary, and their CPU per image.

    cd tests && python -m helpers.epoch_boundary ROOT [--batch 256] [--batches 8]
        [--epochs 5] [--workers 2] [--loader FastLoader|DataLoader|collate] [--chain float|uint8]

Prints one JSON line; epoch 0 (start-up) is left out. For an A/B, run it
with PYTHONPATH set to each checkout in turn, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import torch


def _schedstat(pids: list[int]) -> tuple[float, float]:
    """(run s, run + runqueue-wait s) summed over ``pids``."""
    run = wait = 0
    for pid in pids:
        with open(f"/proc/{pid}/schedstat") as f:
            fields = f.read().split()
        run += int(fields[0])
        wait += int(fields[1])
    return run / 1e9, (run + wait) / 1e9


def _main_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(loader, epochs: int, workers: int) -> dict:
    from helpers.faults_per_batch import children

    pids: list[int] = []
    marks = []  # per epoch: (time, (run, run + wait), main cpu, images) at its last batch
    images = 0
    for _ in range(epochs):
        for x, _y in loader:
            x.max()  # the consumer reads its batch (as a training step would)
            images += x.shape[0]
            if not pids:
                pids = children()
        marks.append((time.perf_counter(), _schedstat(pids), _main_cpu(), images))
    asleep = [workers * (b[0] - a[0]) - (b[1][1] - a[1][1]) for a, b in zip(marks, marks[1:])]
    counted = marks[-1][3] - marks[0][3]
    return {"asleep_s_per_epoch": statistics.median(asleep), "asleep_s": asleep,
            "worker_cpu_ms_per_image": 1000 * (marks[-1][1][0] - marks[0][1][0]) / counted,
            "main_cpu_ms_per_image": 1000 * (marks[-1][2] - marks[0][2]) / counted,
            "images_per_s": counted / (marks[-1][0] - marks[0][0])}


def main() -> None:
    from torchvision import transforms as T

    import fastdecode as fd

    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=8, help="batches per epoch")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--loader", choices=["FastLoader", "DataLoader", "collate"],
                    default="FastLoader")
    ap.add_argument("--chain", choices=["float", "uint8"], default="float")
    args = ap.parse_args()
    tail = ([T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
            if args.chain == "float" else [T.PILToTensor()])
    ds = fd.FastImageFolder(args.root, T.Compose([T.RandomResizedCrop(224),
                                                  T.RandomHorizontalFlip(), *tail]))
    sampler = torch.utils.data.RandomSampler(ds, replacement=True,
                                             num_samples=args.batch * args.batches,
                                             generator=torch.Generator().manual_seed(0))
    kw = dict(batch_size=args.batch, sampler=sampler, num_workers=args.workers,
              persistent_workers=True, drop_last=True)
    if args.loader == "FastLoader":
        loader = fd.FastLoader(ds, **kw)
    else:
        loader = torch.utils.data.DataLoader(
            ds, collate_fn=fd.collate if args.loader == "collate" else None, **kw)
    result = measure(loader, args.epochs, args.workers)
    print(json.dumps({"loader": args.loader, "chain": args.chain,
                      **{k: [round(x, 3) for x in v] if isinstance(v, list) else round(v, 3)
                         for k, v in result.items()}}), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
