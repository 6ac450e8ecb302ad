"""Ranks of the distributed tests (each run in a spawned process: gloo on
127.0.0.1) and their launcher, :func:`run_ranks`, run in the test process."""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import socket
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

import fastdecode as fd


def leave_together(out: str, rank: int, world: int, port: int, timeout_s: float = 60.0) -> None:
    """After the ranks' last barrier: waits (at most ``timeout_s``) until
    every rank has returned from it, told by a file each beside ``out``,
    before this one destroys the group and exits, so that no rank closes its
    connections while a peer may still be reading the barrier's last
    message. (The -6 exits of 4 and 5 December, first put down to that, were
    the exiting rank's own abort: see :func:`_rank`.)"""
    here = Path(out).parent
    (here / f".left-{port}-{rank}").touch()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not all(
            (here / f".left-{port}-{r}").exists() for r in range(world)):
        time.sleep(0.01)


def run(rank: int, world: int, root: str, port: int, out: str) -> None:
    from torchvision import transforms as T

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        chain = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])
        ds = fd.FastImageFolder(root, chain)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(1)
        runs = []
        for _ in range(2):  # the same seed twice gives the same tensors
            torch.manual_seed(1000 + rank)
            loader = fd.FastLoader(ds, batch_size=3, sampler=sampler, num_workers=0)
            runs.append(torch.cat([images for images, _ in loader]))
        shards = [None] * world
        dist.all_gather_object(shards, list(sampler))
        # a FastLoader that does not shard, under a world of 2, says so once
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                next(iter(fd.FastLoader(ds, batch_size=3, num_workers=0)))
        unsharded = [str(w.message) for w in caught]
        torch.save({"indices": list(sampler), "shards": shards, "runs": runs,
                    "unsharded": unsharded}, out)
        dist.barrier()  # every rank done before any tears the group down
        leave_together(out, rank, world, port)
    finally:
        dist.destroy_process_group()


# -- framework ranks: what each rank's training loop saw, per epoch ----------

FRAMEWORK_EPOCHS = 2


def _digests(images) -> list[str]:
    import hashlib

    return [hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()[:16]
            for image in images.cpu()]


def _eval_chain():
    from torchvision import transforms as T

    return T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])


def rank_env(rank: int, world: int, port: int) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
                      RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0",
                      LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1")


def run_lightning(rank: int, world: int, root: str, port: int, out: str) -> None:
    """Lightning DDP (gloo) over a FastLoader made in the module's hook and
    one handed to fit(): Lightning re-creates both with a DistributedSampler."""
    import lightning.pytorch as pl

    rank_env(rank, world, port)
    ds = fd.FastImageFolder(root, _eval_chain())
    seen: dict = {}

    class Model(pl.LightningModule):
        def __init__(self, how: str, loader=None) -> None:
            super().__init__()
            self.how, self.loader = how, loader
            self.w = torch.nn.Parameter(torch.ones(1))

        def train_dataloader(self):
            if self.loader is not None:
                return self.loader
            return fd.FastLoader(ds, batch_size=3, shuffle=True, threads=2)

        def training_step(self, batch, _):
            images, _targets = batch
            seen.setdefault(self.how, {}).setdefault(self.current_epoch, []).extend(
                _digests(images))
            self.loaders = type(self.trainer.train_dataloader).__name__
            return (self.w * images.float().mean()).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    kinds = {}
    for how in ("hook", "passed"):
        loader = fd.FastLoader(ds, batch_size=3, shuffle=True, threads=2) if how == "passed" \
            else None
        model = Model(how, loader)
        trainer = pl.Trainer(accelerator="cpu", devices=world, num_nodes=1, strategy="ddp",
                             max_epochs=FRAMEWORK_EPOCHS, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0)
        trainer.fit(model)
        used = trainer.train_dataloader
        kinds[how] = (type(used).__name__, type(used.sampler).__name__, used.threads,
                      used.collate_fn is fd.collate)
    torch.save({"seen": seen, "kinds": kinds}, out)
    if dist.is_initialized():
        dist.destroy_process_group()


def run_accelerate(rank: int, world: int, root: str, port: int, out: str) -> None:
    """Accelerate's prepare() of a FastLoader with one worker, on CPU/gloo."""
    from accelerate import Accelerator

    rank_env(rank, world, port)
    accelerator = Accelerator(cpu=True)
    ds = fd.FastImageFolder(root, _eval_chain())
    loader = accelerator.prepare(fd.FastLoader(ds, batch_size=3, shuffle=True, num_workers=0))
    seen: dict = {}
    for epoch in range(FRAMEWORK_EPOCHS):
        loader.set_epoch(epoch)
        for images, _targets in loader:
            seen.setdefault(epoch, []).extend(_digests(images))
    from fastdecode.loader import _setup as loader_mod

    # the rebuilt DataLoader keeps the zero-copy collate and the thread pinning
    kinds = (loader.collate_fn is fd.collate,
             loader.worker_init_fn.func is loader_mod._chained_init)
    torch.save({"seen": {"prepare": seen}, "kinds": kinds}, out)
    accelerator.end_training()


# -- the launcher (in the test process) ---------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(target, faults: str, *args) -> None:
    """A rank's process: ``target(*args)``, then an exit that skips the
    interpreter's finalization; faulthandler writes every thread's Python
    stack to ``faults`` if the process dies of a signal, for run_ranks.

    Why ``os._exit``: a gloo process group's worker thread destroys each
    finished collective after the waiting caller has returned. The barrier's
    work holds the all_gather before it, whose tensors are Python objects,
    so that thread takes the GIL to free them. Once the interpreter is
    finalizing, taking the GIL ends the thread (``pthread_exit``), whose
    unwinding through the C++ destructor calls ``std::terminate``: "terminate
    called without an active exception", SIGABRT, a rank exiting -6 after
    its output was written (.ci/run on 4 and 5 December; the core's stack:
    ``ProcessGroupGloo::runLoop`` > ``~AsyncBarrierWork`` >
    ``~AsyncAllgatherWork`` > ``decref_pyobject`` > ``take_gil`` >
    ``PyThread_exit_thread``). A rank whose target returned has written its
    output and left the group, so nothing is lost by not finalizing."""
    # left open until the exit: an abort anywhere in the target is written
    faulthandler.enable(os.open(faults, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                        all_threads=True)
    target(*args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(target, world, args, outs, timeout=240.0):
    """``target(rank, world, root, port, out, *args)`` in ``world`` spawned
    processes (gloo on 127.0.0.1); every process is gone when it returns.
    A rank that exits non-zero fails it with the Python stacks it died in."""
    port = free_port()
    ctx = mp.get_context("spawn")
    faults = [f"{o}.faults" for o in outs]
    procs = [ctx.Process(target=_rank, args=(target, faults[r], r, world, args[0], port,
                                             str(outs[r]), *args[1:]))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        codes = [p.exitcode for p in procs]
        if codes != [0] * world:
            died = "".join(f"\n-- rank {r} ({c}):\n{Path(faults[r]).read_text()}"
                           for r, c in enumerate(codes) if c != 0 and Path(faults[r]).exists())
            raise AssertionError(f"ranks exited with {codes}{died}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return [torch.load(o, weights_only=False) for o in outs]
