"""FastLoader's ways through an epoch: its workers (DataLoader's iterator, or
the CPU or CUDA ring), an in-process thread pool, and the copy to a device.

:class:`LoaderPasses` is FastLoader's base (FastLoader itself, in
``loader/_loader.py``, builds the rings and the tracker these passes read):

- workers without a ring: DataLoader's own iterator, with
  :class:`~fastdecode.loader._workers.WorkerIter` for a dead worker, each
  batch copied to the device on a side stream when ``device`` is a GPU;
- the CPU ring (``loader/_cpu_ring.py``): batches in shared slots, one pass
  at a time; the CUDA ring (``loader/_cuda_ring.py``): batches copied from
  pinned slots, the per-pixel step on the GPU;
- ``threads=N``: a :class:`~fastdecode.loader._protocol.PlannedDataset`'s
  draws made in the loader's thread, in batch order, its decode in the pool,
  so the batches are reproducible; any other dataset's items run whole in
  the pool (said once).

Each pass draws its batches from the resume tracker's sampler
(``loader/_resume.py``) when the loader has one. Decision record:
docs/decisions/loaders.md ("threads=N is reproducible", "The CPU ring",
"The CUDA ring").
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from fastdecode.batching._mixing import Collated, transform_batch
from fastdecode.batching._seeding import later_carried, row_seed, seeding_of
from fastdecode.loader._cpu_ring import CpuRing
from fastdecode.loader._cuda_ring import CudaRing
from fastdecode.loader._protocol import planned_dataset, read_ahead_of
from fastdecode.loader._resume import Tracker
from fastdecode.loader._setup import check_oversubscription, warn_once
from fastdecode.loader._workers import WorkerIter

__all__ = ["LoaderBase", "LoaderPasses"]


class LoaderBase(DataLoader):
    """DataLoader minus its worker-count warning (FastLoader's own guard
    knows the cgroup quota and says what to set, once), with the iterator
    that names dead workers."""

    def check_worker_number_rationality(self) -> None:
        """Does nothing: DataLoader's worker-count check (a warning at
        construction and at every iterator with workers, from
        ``os.sched_getaffinity`` alone) is replaced by FastLoader's own,
        which counts the cgroup quota too and warns once."""
        pass

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        return WorkerIter(self)


def _is_sharded(*samplers: Any) -> bool:
    """True when one of ``samplers`` splits the data between processes
    (DistributedSampler, or one that says how many replicas it serves)."""
    from torch.utils.data.distributed import DistributedSampler

    for s in samplers:
        if isinstance(s, DistributedSampler) or hasattr(s, "num_replicas") or \
                hasattr(s, "num_processes"):
            return True
    return False


class LoaderPasses(LoaderBase):
    """FastLoader's passes over an epoch (the module doc); the attributes are
    set by FastLoader's constructor."""

    _tracker: Optional[Tracker]
    threads: Optional[int]
    device: Optional[torch.device]
    _lookahead: int  # batches in flight per worker (per thread)
    _ring: Optional[CudaRing]
    _cpu_ring: Optional[CpuRing]
    _ring_loader: Optional[DataLoader]
    _table: Optional[torch.Tensor]
    _stream: Optional[torch.cuda.Stream]
    batch_transform: Optional[Callable]

    @property
    def _index_sampler(self):  # DataLoader's iterators draw their batches from this
        tracker = self.__dict__.get("_tracker")
        return tracker.sampler if tracker is not None else super()._index_sampler

    def _batches(self) -> Any:
        """The batch sampler the iterators draw from: the tracker's wrapper."""
        return self._tracker.sampler if self._tracker is not None else self.batch_sampler

    def _forget_ahead(self) -> None:
        """Persistent workers' next epoch, drawn ahead, is not what a loaded
        state continues: dropped at the next iter() (no warning: no stream
        of the workers' is kept across a resume)."""
        for source in (self, self._ring_loader):
            ahead = getattr(getattr(source, "_iterator", None), "_ahead", None)
            if ahead is not None:
                ahead.failed = True
                ahead.items = []

    @contextmanager
    def _undoing_draws(self) -> Iterator[None]:
        """At an iter() that continues a loaded state, the draw of the
        epoch's base seed from torch's global generator (DataLoader's, the
        threads') is undone: the uninterrupted run made it before the state
        was saved. (The loader's own generator is set from the state.)"""
        tracker = self._tracker
        kept = torch.get_rng_state() if tracker is not None and tracker.resumed_iter \
            and self.generator is None else None
        try:
            yield
        finally:
            if kept is not None:
                torch.set_rng_state(kept)

    def _iter(self) -> Any:
        self._check_sharded()
        if self._ring is not None and self._ring_loader is not None and self.device is not None:
            return self._ring.batches(iter(self._ring_loader), self.device, self._side_stream(),
                                      self.num_workers * self._lookahead, self._table)
        if self._cpu_ring is not None:
            return self._iter_cpu_ring()
        if self.threads is not None:
            return self._iter_threads()
        it = super().__iter__()
        if self.device is None or self.device.type == "cpu":
            return it
        return (self._to_device(batch) for batch in it)

    def _iter_cpu_ring(self) -> Iterator[Any]:
        """Batches in the ring's slots; one pass at a time: a new pass ends
        the workers of one left unfinished, which may still write slots."""
        assert self._cpu_ring is not None and self._ring_loader is not None
        previous = self.__dict__.get("_ring_pass")
        if previous is not None and not self._ring_loader.persistent_workers \
                and hasattr(previous, "_shutdown_workers"):  # (none in-process)
            previous._shutdown_workers()
        with self._undoing_draws():
            it = iter(self._ring_loader)
        self._ring_pass = it
        ring = self._cpu_ring
        for item in it:
            if item[0] == "slot":
                _, slot, rows, targets = item
                images = ring.take(slot, rows)
                targets = targets.get() if isinstance(targets, Collated) else \
                    default_collate(targets)
                if self.pin_memory:
                    images, targets = images.pin_memory(), targets.pin_memory()
                yield [images, targets]
            else:
                ring.fresh += 1
                yield item[1]

    @property
    def made_ahead(self) -> int:
        """Batches of the current epoch that persistent workers had been
        given before it began, while the previous epoch ended (0 when the
        prediction of its batches was dropped or not made)."""
        source = self._ring_loader if self._ring_loader is not None else self
        return getattr(source._iterator, "made_ahead", 0)

    def _check_sharded(self) -> None:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        if not _is_sharded(self.sampler, self.batch_sampler,
                           getattr(self.batch_sampler, "sampler", None)):
            warn_once(
                "sharding",
                f"torch.distributed runs {dist.get_world_size()} processes but this FastLoader's "
                f"sampler ({type(self.sampler).__name__}) does not shard the data: every rank "
                f"sees every sample; pass sampler=DistributedSampler(dataset)",
            )

    def _to_device(self, batch: Any) -> Any:
        """``batch`` on the device, copied on the side stream: every tensor in
        it, its structure kept (``[images, targets]``, or a detection batch's
        tuples of images and target dicts, tv_tensors keeping their type)."""
        stream = self._side_stream()
        leaves, spec = tree_flatten(batch)
        with torch.cuda.stream(stream):
            leaves = [leaf.to(self.device, non_blocking=True) if isinstance(leaf, torch.Tensor)
                      else leaf for leaf in leaves]
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(stream)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                leaf.record_stream(current)
        return tree_unflatten(leaves, spec)

    def _iter_threads(self) -> Iterator[Any]:
        """Batches from a pool of ``threads``; reproducible: a dataset that
        can split its items (FastDatasetFolder) has each batch's draws made
        here, in order, under seeds from this epoch's base seed and the batch
        index, and only the decode runs in the pool (a :class:`PlannedDataset`)."""
        assert self.threads is not None
        check_oversubscription(self.threads)
        # DataLoader draws its base seed (its workers' seeds) from the generator
        # before sampling: so `generator` gives the same order as it does there
        with self._undoing_draws():
            base = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        dataset = planned_dataset(self.dataset)
        plan = None if dataset is None else dataset._plan_batch
        lookahead = max(1, self.threads * self._lookahead)
        move = self.device is not None and self.device.type != "cpu"
        with ThreadPoolExecutor(self.threads, thread_name_prefix="fastdecode") as pool:
            pending: deque = deque()

            def fetch(indices: list[int]) -> Any:
                if hasattr(self.dataset, "__getitems__"):
                    return self.collate_fn(self.dataset.__getitems__(indices))
                return self.collate_fn([self.dataset[i] for i in indices])

            def render(planned: Any) -> Any:
                assert dataset is not None
                samples = dataset._render_plan(planned)
                return None if samples is None else self.collate_fn(samples)

            def take() -> Any:
                planned, future, indices = pending.popleft()
                batch = future.result()
                if batch is None:  # steps that may draw, or a replacement: here
                    assert dataset is not None
                    batch = self.collate_fn(dataset._finish_plan(planned))
                if self.batch_transform is not None:  # here, in batch order: reproducible
                    images, targets = batch
                    batch = transform_batch(self.batch_transform, images, targets, indices)
                return self._to_device(batch) if move else batch

            read_ahead = read_ahead_of(self.dataset)
            for number, (indices, later) in enumerate(later_carried(self._batches() or (), 1)):
                if read_ahead is not None and later is not None:  # this batch's reads, the next's
                    read_ahead(indices)
                    read_ahead(later)
                seeded = seeding_of(indices)  # resumable=True: seeds by position in the epoch
                planned = None if plan is None else (
                    plan(list(indices), row_seed(base, number)) if seeded is None
                    else plan(list(indices), *seeded))
                if planned is None:
                    self._warn_unsplit()
                    pending.append((None, pool.submit(fetch, indices), indices))
                else:
                    pending.append((planned, pool.submit(render, planned), indices))
                if len(pending) >= lookahead:
                    yield take()
            while pending:
                yield take()

    def _warn_unsplit(self) -> None:
        name = type(self.dataset).__name__
        warn_once(
            f"unsplit {name}",
            f"FastLoader threads={self.threads}: {name} has no draw/render split (a "
            f"FastImageFolder / FastDatasetFolder decoding with fastdecode has one), so its "
            f"items run whole in the pool threads, where any random transform draws from the "
            f"global RNGs in whichever thread runs first: batches are not reproducible, and the "
            f"training loop's own draws shift; use num_workers= for it",
        )

    def _side_stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream
