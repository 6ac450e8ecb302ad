"""A training process that saves its loader's state and is SIGKILLed, or resumes one.

Run as ``python -m helpers.resume_run MODE ...`` (``tests/`` on the path) by
``tests/data/test_resume_killed.py``; each run is a fresh process, seeded as a
training script seeds itself, over an ImageFolder tree. The loader is a
FastLoader (``--loader fastloader``, ``resumable=True``) or torchdata's
StatefulDataLoader over a FastImageFolder (``--loader torchdata``: the stock
path, which needs the same ``num_workers`` to resume):

- ``run``: two whole epochs; writes each batch's per-sample digests;
- ``save``: epoch 0 up to its ``k``-th batch, then the checkpoint a training
  loop writes (the loader's state, the epoch, torch's global RNG state),
  written atomically by :func:`fastdecode.save_state`, then SIGKILL of
  itself: nothing after the save runs, no shutdown, no ``__del__``;
- ``resume``: loads that checkpoint with ``weights_only=True``
  (:func:`fastdecode.load_state`) into a new loader (FastLoader: another
  ``num_workers``), then runs to the end of the next epoch; writes the
  digests of every batch it yields.

The torchdata loaders (:data:`TD_SAMPLERS`, :data:`TD_MORE_SAMPLERS`,
:data:`TD_WORKERS`, :func:`make_stateful_loader`) serve ``tests/data/test_resume_torchdata.py``
too.
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
from torch.utils.data import BatchSampler, RandomSampler, Sampler, SequentialSampler, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler
from torchvision import transforms as T

import fastdecode as fd

CHAINS: dict[str, Callable[[], Any]] = {
    "fully-fused": lambda: T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                      T.PILToTensor()]),
    # unfused random steps after the fused run
    "partly-fused": lambda: T.Compose([T.RandomResizedCrop(24), T.ToTensor(),
                                       T.RandomVerticalFlip(p=0.7)]),
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


def _td_random_sampler(ds: Any, generator: torch.Generator) -> Any:
    from torchdata.stateful_dataloader.sampler import RandomSampler

    return RandomSampler(ds, generator=generator)


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


# torchdata's StatefulDataLoader: sampler name -> its keywords over the dataset
TD_SAMPLERS: dict[str, Callable[[Any], dict]] = {
    # torchdata's own RandomSampler (it swaps in its stateful one for shuffle=True)
    "random": lambda ds: dict(shuffle=True),
    # the loader's generator: torchdata's RandomSampler's, and the workers' base seeds
    "random-generator": lambda ds: dict(shuffle=True, generator=_gen(5)),
    # the generator the sampler's alone
    "random-sampler-generator": lambda ds: dict(sampler=_td_random_sampler(ds, _gen(5))),
    "sequential": lambda ds: dict(shuffle=False),
}

# more of them, torch's samplers and a user's (issue 30), with set_epoch before each
# epoch (set_epoch below). Apart from TD_SAMPLERS: the SIGKILL runs cover those four
TD_MORE_SAMPLERS: dict[str, Callable[[Any], dict]] = {
    # torch's, no state: torchdata's BatchSampler fast-forwards a fresh iter() by the
    # samples yielded; its order is the seed's and set_epoch's
    "distributed-set-epoch": lambda ds: dict(sampler=DistributedSampler(
        ds, num_replicas=2, rank=0, seed=9)),  # 6 samples: 2 batches
    # torch's, no state: its generator is not saved
    "weighted-generator": lambda ds: dict(sampler=WeightedRandomSampler(
        [1.0 + i % 3 for i in range(len(ds))], len(ds), generator=_gen(3))),
    # torch's BatchSampler as batch_sampler= (with batch_size=1, the loader's default,
    # which it requires): the loader fast-forwards a fresh iter() by the batches yielded
    "batch-sampler-sequential": lambda ds: dict(batch_size=1, batch_sampler=BatchSampler(
        SequentialSampler(ds), 3, drop_last=True)),
    "batch-sampler-random-generator": lambda ds: dict(batch_size=1, batch_sampler=BatchSampler(
        RandomSampler(ds, generator=_gen(2)), 3, drop_last=True)),
    # Stateful (torchdata's runtime-checkable protocol: state_dict and load_state_dict):
    # its state goes in torchdata's BatchSampler's
    "user-sampler-with-state": lambda ds: dict(sampler=StatefulShuffle(len(ds))),
}

# num_workers and persistent_workers (torchdata resumes with the same num_workers only)
TD_WORKERS: dict[str, dict] = {
    "in-process": dict(num_workers=0),
    "2-workers": dict(num_workers=2),
    "2-persistent-workers": dict(num_workers=2, persistent_workers=True),
}


def td_exact_next_epoch(sampler: str, workers: str) -> bool:
    """Whether torchdata 0.11 resumes the epochs after the saved one exactly
    too (the saved epoch's rest is exact in every case; the resume guide says
    why): its in-process iterator misses a draw of the loader's generator, so
    a generator given to the loader with shuffle=True moves the next epoch's
    order; workers that are not persistent are seeded anew each epoch from the
    loader's generator or torch's global one, saved only when torchdata's
    RandomSampler shares it."""
    if workers == "in-process":
        return sampler != "random-generator"
    if workers == "2-workers":
        return sampler == "random-generator"
    return True


def make_stateful_loader(root: str, chain: str, sampler: str, workers: str) -> Any:
    """torchdata's StatefulDataLoader over a FastImageFolder, batches of 3."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    with warnings.catch_warnings():  # a partly fused chain says so once: not the point here
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        ds = fd.FastImageFolder(root, CHAINS[chain]())
    kw: dict[str, Any] = {"batch_size": 3, **{**TD_SAMPLERS, **TD_MORE_SAMPLERS}[sampler](ds)}
    with warnings.catch_warnings():  # torchdata 0.11 calls a torch API torch 2.14 deprecates
        warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
        return StatefulDataLoader(ds, **kw, **TD_WORKERS[workers])


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


def set_epoch(loader: Any, e: int) -> None:
    """What the training loop calls before each epoch, where the sampler has it."""
    sampler = loader.batch_sampler.sampler if loader.batch_sampler is not None else loader.sampler
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(e)


def fresh_process() -> None:
    """The seeding a training script does first."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def main(argv: list[str] | None = None) -> int:
    """Runs one mode (see the module doc); returns the exit status."""
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("run", "save", "resume"))
    parser.add_argument("--loader", default="fastloader", choices=("fastloader", "torchdata"))
    parser.add_argument("--root", required=True)
    parser.add_argument("--chain", required=True, choices=sorted(CHAINS))
    parser.add_argument("--sampler", required=True)
    # FastLoader: N (num_workers) or tN (threads=N); torchdata: a TD_WORKERS name
    parser.add_argument("--workers", default="2")
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    stock = args.loader == "torchdata"
    if args.sampler not in (TD_SAMPLERS if stock else SAMPLERS):
        parser.error(f"no {args.loader} sampler {args.sampler!r}")
    fresh_process()
    loader: Any = (make_stateful_loader if stock else make_loader)(
        args.root, args.chain, args.sampler, args.workers)
    batches: list[list[str]] = []
    if args.mode == "save":
        set_epoch(loader, 0)
        for step, _batch in enumerate(loader, 1):
            if step == args.k:
                fd.save_state({"epoch": 0, "loader": loader.state_dict(),
                               "rng": torch.get_rng_state()}, args.checkpoint)
                os.kill(os.getpid(), signal.SIGKILL)
        return 1  # the kill never came
    first = 0
    if args.mode == "resume":
        ckpt = fd.load_state(args.checkpoint)
        loader.load_state_dict(ckpt["loader"])
        torch.set_rng_state(ckpt["rng"])
        # FastLoader's state after an epoch's last batch resumes at the next epoch's
        # first; torchdata's continues the saved epoch, which then yields nothing
        first = ckpt["epoch"] + (1 if ckpt["loader"].get("finished") else 0)
    for e in range(first, 2):
        set_epoch(loader, e)
        batches += [digests(batch) for batch in loader]
    args.out.write_text(json.dumps(batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
