"""A training process that saves its loader's state and is SIGKILLed, or resumes one.

Run as ``python -m helpers.resume_run MODE ...`` (``tests/`` on the path) by
``tests/data/test_resume_killed.py``; each run is a fresh process, seeded as a
training script seeds itself, over an ImageFolder tree:

- ``run``: two whole epochs; writes each batch's per-sample digests;
- ``save``: epoch 0 up to its ``k``-th batch, then the checkpoint a training
  loop writes (the loader's state, the epoch, torch's global RNG state),
  written atomically (a temporary file, fsync, ``os.replace``), then SIGKILL
  of itself: nothing after the save runs, no shutdown, no ``__del__``;
- ``resume``: loads that checkpoint with ``weights_only=True`` into a new
  loader (another ``num_workers``), then runs to the end of the next epoch;
  writes the digests of every batch it yields.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler
from torchvision import transforms as T

import fastdecode as fd

CHAINS: dict[str, Callable[[], Any]] = {
    "fully-fused": lambda: T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                      T.PILToTensor()]),
    # unfused random steps after the fused run
    "partly-fused": lambda: T.Compose([T.RandomResizedCrop(24), T.ToTensor(),
                                       T.RandomErasing(p=0.7)]),
    "colour": lambda: T.Compose([T.RandomResizedCrop(24), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                                 T.PILToTensor()]),
}


class StatefulShuffle(Sampler):
    """A user's sampler with its own state (torchdata's protocol)."""

    def __init__(self, n: int, seed: int = 7) -> None:
        self.n, self.seed, self.epoch, self.yielded, self._start = n, seed, 0, 0, 0

    def set_epoch(self, e: int) -> None:
        self.epoch = e

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        start, self._start = self._start, 0
        self.yielded = start
        for i in order.tolist()[start:]:
            self.yielded += 1
            yield i

    def __len__(self) -> int:
        return self.n

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self._start = state["epoch"], state["yielded"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# sampler name -> loader keywords over the dataset
SAMPLERS: dict[str, Callable[[Any], dict]] = {
    "random-generator": lambda ds: dict(shuffle=True, generator=_gen(5)),
    "random-global": lambda ds: dict(shuffle=True),
    "sequential": lambda ds: dict(shuffle=False),
    "distributed-set-epoch": lambda ds: dict(sampler=DistributedSampler(ds, num_replicas=2, rank=1,
                                                                        seed=9)),
    "weighted": lambda ds: dict(sampler=WeightedRandomSampler(
        [1.0 + i % 3 for i in range(len(ds))], len(ds), generator=_gen(3))),
    "batch-sampler": lambda ds: dict(batch_size=1, batch_sampler=BatchSampler(
        RandomSampler(ds, generator=_gen(2)), 3, drop_last=True)),
    "user-sampler-with-state": lambda ds: dict(sampler=StatefulShuffle(len(ds))),
}


def digests(batch: Any) -> list[str]:
    """One batch: a digest per sample (pixels and label), in order."""
    x, y = batch
    out = []
    for i in range(len(x)):
        h = hashlib.blake2b(x[i].contiguous().numpy().tobytes(), digest_size=12)
        h.update(repr(int(y[i])).encode())
        out.append(h.hexdigest())
    return out


def make_loader(root: str, chain: str, sampler: str, workers: str) -> fd.FastLoader:
    """The run's loader: ``workers`` is N (num_workers) or tN (threads=N, in-process)."""
    with warnings.catch_warnings():  # a partly fused chain says so once: not the point here
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        ds = fd.FastImageFolder(root, CHAINS[chain]())
    kw: dict[str, Any] = {"batch_size": 3, "resumable": True, **SAMPLERS[sampler](ds)}
    if kw.get("batch_sampler") is not None:
        kw.pop("batch_size")
    if workers.startswith("t"):
        kw.update(num_workers=0, threads=int(workers[1:]))
    else:
        kw.update(num_workers=int(workers))
    return fd.FastLoader(ds, **kw)


def set_epoch(loader: fd.FastLoader, e: int) -> None:
    """What the training loop calls before each epoch, where the sampler has it."""
    sampler = loader.batch_sampler.sampler if loader.batch_sampler is not None else loader.sampler
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(e)


def fresh_process() -> None:
    """The seeding a training script does first."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def save_atomically(obj: Any, path: Path) -> None:
    """torch.save to a temporary file, flushed to disk, then renamed over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Runs one mode (see the module doc); returns the exit status."""
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("run", "save", "resume"))
    parser.add_argument("--root", required=True)
    parser.add_argument("--chain", required=True, choices=sorted(CHAINS))
    parser.add_argument("--sampler", required=True, choices=sorted(SAMPLERS))
    parser.add_argument("--workers", default="2")
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    fresh_process()
    loader = make_loader(args.root, args.chain, args.sampler, args.workers)
    batches: list[list[str]] = []
    if args.mode == "save":
        set_epoch(loader, 0)
        for step, _batch in enumerate(loader, 1):
            if step == args.k:
                save_atomically({"epoch": 0, "loader": loader.state_dict(),
                                 "rng": torch.get_rng_state()}, args.checkpoint)
                os.kill(os.getpid(), signal.SIGKILL)
        return 1  # the kill never came
    first = 0
    if args.mode == "resume":
        ckpt = torch.load(args.checkpoint, weights_only=True)
        loader.load_state_dict(ckpt["loader"])
        torch.set_rng_state(ckpt["rng"])
        first = ckpt["epoch"] + (1 if ckpt["loader"]["finished"] else 0)
    for e in range(first, 2):
        set_epoch(loader, e)
        batches += [digests(batch) for batch in loader]
    args.out.write_text(json.dumps(batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
