"""Ranks (spawned processes, gloo on 127.0.0.1) of the framework and
elastic resume tests (issue 30): each writes what its training loop saw,
step by step, and which samples its dataset read, to ``out``.

A step's record is (epoch, batch index, the samples' digests); a read is
the dataset index of an image read from disk (``FastImageFolder._read``,
``readahead=0``, ``num_workers=0``: reads happen in the rank itself, in
the order of the batches).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any

import torch

import fastdecode as fd

from helpers.ddp_worker import leave_together, rank_env

SEED = 1234  # resumable=SEED: the samples' draws, the same on every rank and every run


def chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.PILToTensor()])


def digests(batch) -> list[str]:
    images, targets = batch
    out = []
    for x, y in zip(images, targets):
        h = hashlib.blake2b(x.contiguous().numpy().tobytes(), digest_size=10)
        h.update(str(int(y)).encode())
        out.append(h.hexdigest())
    return out


def counted_dataset(root: str) -> tuple[Any, list[int]]:
    """FastImageFolder(root) whose image reads are logged (indices)."""
    ds = fd.FastImageFolder(root, chain(), readahead=0)
    reads: list[int] = []
    real = ds._read

    def read(path, index=None):
        reads.append(index)
        return real(path, index)

    ds._read = read
    return ds, reads


# -- Lightning -----------------------------------------------------------------


def lightning(rank: int, world: int, root: str, port: int, out: str, ckpt_dir: str,
              resume_from: str | None, epochs: int) -> None:
    """``trainer.fit(model, train_dataloaders=FastLoader(...), ckpt_path=...)``
    under DDP (CPU, gloo): Lightning re-creates the loader with a
    DistributedSampler. Without ``resume_from`` the run checkpoints after
    every step (ModelCheckpoint, every_n_train_steps=1); with it, the run
    resumes from that checkpoint."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    rank_env(rank, world, port)
    torch.manual_seed(0)
    ds, reads = counted_dataset(root)
    steps: list[tuple[int, int, list[str], list[int]]] = []

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def training_step(self, batch, batch_idx):
            steps.append((self.current_epoch, batch_idx, digests(batch), list(reads)))
            reads.clear()
            return (self.w * batch[0].float().mean()).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    callbacks = [] if resume_from else [
        ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", every_n_train_steps=1, save_top_k=-1)]
    trainer = pl.Trainer(accelerator="cpu", devices=world, num_nodes=1, strategy="ddp",
                         max_epochs=epochs, logger=False, callbacks=callbacks,
                         enable_checkpointing=not resume_from, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    loader = fd.FastLoader(ds, batch_size=2, shuffle=True, num_workers=0, resumable=SEED)
    with warnings.catch_warnings():
        # Lightning's own advice on a 2-core machine and a tiny dataset: not ours
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*is smaller than the logging interval.*")
        trainer.fit(Model(), train_dataloaders=loader, ckpt_path=resume_from)
    used = trainer.train_dataloader
    kinds = (type(used).__name__, type(used.sampler).__name__, used._tracker.base_seed)
    torch.save({"steps": steps, "kinds": kinds}, out)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# -- Accelerate ---------------------------------------------------------------


def accelerate(rank: int, world: int, root: str, port: int, out: str, ckpt_dir: str,
               save_at: tuple[int, int], resume: bool, epochs: int) -> None:
    """A hand-written Accelerate loop over a FastLoader readied by
    ``fastdecode.integrations.accelerate.prepare``. Without ``resume`` it
    runs ``epochs`` epochs and calls ``save_state`` after batch ``save_at =
    (epoch, k)``; with it, a fresh run calls ``load_state``, then
    ``accelerator.skip_first_batches(loader, k)`` for epoch ``epoch`` and the
    whole loader for the later epochs (Accelerate's resume recipe)."""
    from accelerate import Accelerator
    from torch.utils.data.distributed import DistributedSampler

    from fastdecode.integrations import accelerate as fd_accelerate

    rank_env(rank, world, port)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    ds, reads = counted_dataset(root)
    sampler = DistributedSampler(ds, num_replicas=accelerator.num_processes,
                                 rank=accelerator.process_index, shuffle=True, seed=0)
    loader = fd_accelerate.prepare(accelerator, fd.FastLoader(
        ds, batch_size=2, sampler=sampler, num_workers=0, resumable=SEED))
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    steps: list[tuple[int, int, list[str], list[int]]] = []
    first_epoch, skip = 0, 0
    if resume:
        accelerator.load_state(ckpt_dir)
        first_epoch, skip = save_at
    for epoch in range(first_epoch, epochs):
        sampler.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, skip) if epoch == first_epoch \
            else loader
        for k, batch in enumerate(batches, start=skip if epoch == first_epoch else 0):
            steps.append((epoch, k, digests(batch), list(reads)))
            reads.clear()
            if not resume and (epoch, k + 1) == tuple(save_at):
                accelerator.save_state(ckpt_dir)
    kinds = (type(batches).__name__, batches is loader)
    torch.save({"steps": steps, "kinds": kinds}, out)
    accelerator.end_training()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# -- elastic: another world size ------------------------------------------------


def elastic(rank: int, world: int, root: str, port: int, out: str, state_path: str,
            global_batch: int, save_after: int, resume: bool, epochs: int) -> None:
    """A plain loop on a gloo process group of ``world`` ranks (127.0.0.1):
    a FastLoader over a DistributedSampler, ``global_batch // world`` per
    rank. Without ``resume`` it runs ``epochs`` epochs and, after step
    ``save_after`` of epoch 0, every rank writes its state (rank 0's to
    ``state_path``); with it, a fresh world loads that state (``weights_only``)
    and runs the rest of epoch 0 and the later epochs. Every step all-reduces
    the ranks' batch sizes: each rank takes part in every step."""
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        torch.manual_seed(0)
        ds, reads = counted_dataset(root)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=9)
        loader = fd.FastLoader(ds, batch_size=global_batch // world, sampler=sampler,
                               num_workers=0, resumable=SEED)
        if resume:
            loader.load_state_dict(torch.load(state_path, weights_only=True))
        steps: list[tuple[int, int, list[str], list[int]]] = []
        sizes: list[int] = []
        states: list[dict] = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            start = loader.state_dict()["batches"] if resume and epoch == 0 else 0
            for k, batch in enumerate(loader, start=start):
                steps.append((epoch, k, digests(batch), list(reads)))
                reads.clear()
                size = torch.tensor([len(batch[0])])
                dist.all_reduce(size)
                sizes.append(int(size))
                if not resume and epoch == 0 and k + 1 == save_after:
                    states.append(loader.state_dict())
                    if rank == 0:
                        torch.save(states[-1], state_path + ".tmp")
                        os.replace(state_path + ".tmp", state_path)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, states)
        torch.save({"steps": steps, "sizes": sizes, "states": gathered}, out)
        # every rank done with the group, and back from its barrier, before
        # any tears it down (the exit itself: ddp_worker._rank)
        dist.barrier()
        leave_together(out, rank, world, port)
    finally:
        dist.destroy_process_group()

