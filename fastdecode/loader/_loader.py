"""FastLoader, the zero-copy collate and the worker set-up that pins threads.

Without CUDA (or without ``device=``) FastLoader is a DataLoader whose
workers decode each batch straight into one shared-memory tensor that
crosses to the main process without a copy (``collate``), with
``pin_memory`` doing the one copy into page-locked memory.

With ``device='cuda'`` the batches land in a ring of shared slots that is
registered once with ``cudaHostRegister``: the workers' writes are already
pinned, the host-to-device copy runs on a side stream, uint8 -> float and
normalization run on the GPU, and a slot is reused only after the CUDA event
of its copy completed.
"""

# Over ~400 lines on purpose: FastLoader's three ways through (workers, threads, the
# rings) share its constructor's checks and would otherwise import each other.

from __future__ import annotations

import functools
import math
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate
from torch.utils.data.dataloader import _DatasetKind

from fastdecode._system import limit_threads_to_one, settle_in_worker, shm_budget, usable_cpus
from fastdecode.batching._buffers import (
    CpuRing,
    RingFiller,
    RingSampler,
    map_slot,
    note_batch_taken_whole,
    whole_batch,
)
from fastdecode.batching._seeding import later_carried, row_seed, seeding_of
from fastdecode.errors import ResumeError
from fastdecode.loader._cuda_ring import CudaRing, RingWriter, SlottedSampler, identity
from fastdecode.loader._resume import Tracker
from fastdecode.loader._workers import WorkerIter

__all__ = ["FastLoader", "collate", "worker_init_fn"]


# ---------------------------------------------------------------------------
# collate


def collate(batch: Sequence[Any]) -> Any:
    """default_collate, except that samples which are the slots of one batch
    tensor (what FastImageFolder.__getitems__ returns) are handed on as that
    tensor, with no copy (in a worker, on a slot of its shared pool: see
    batching/_shared_pool.py). The stock ``default_collate`` now does the same
    for FastImageFolder's samples (``collate_rows``).

    Parameters
    ----------
    batch : sequence
        The samples of one batch. When they are ``(image, target)`` pairs
        whose images are the rows of one batch tensor, in order, that tensor
        is the batch's images and the targets are collated by
        ``default_collate``; anything else goes to ``default_collate`` whole.

    Returns
    -------
    object
        ``[images, targets]`` for such pairs (``images`` the batch tensor
        itself, not a copy); else what ``default_collate(batch)`` returns.

    Raises
    ------
    TypeError
        ``default_collate``'s, for samples of a type it cannot collate.
    RuntimeError
        ``default_collate``'s, for tensors of different shapes.
    """
    if batch and isinstance(batch[0], tuple) and len(batch[0]) == 2:
        base = whole_batch([b[0] for b in batch])
        if base is not None:
            note_batch_taken_whole()
            return [base, default_collate([b[1] for b in batch])]
    return default_collate(batch)


# ---------------------------------------------------------------------------
# worker set-up


def worker_init_fn(worker_id: int) -> None:
    """One thread per library in a DataLoader worker (OpenMP, MKL, OpenBLAS,
    OpenCV, torch): workers are the parallelism, nested pools only fight; and
    the worker's longer time slice (``_system.settle_in_worker``, which the
    datasets also call, once per process: more workers than CPUs take turns
    every 20 ms, not every image).

    FastLoader runs it in each worker before the user's ``worker_init_fn``;
    with a plain DataLoader, pass it as ``worker_init_fn=``.

    Parameters
    ----------
    worker_id : int
        The worker's id, as DataLoader passes it (not used).
    """
    limit_threads_to_one()
    settle_in_worker()


def _chained_init(user_fn: Optional[Callable[[int], None]], worker_id: int) -> None:
    worker_init_fn(worker_id)
    if user_fn is not None:
        user_fn(worker_id)


def _with_pinning(user_fn: Optional[Callable[[int], None]]) -> Callable[[int], None]:
    """worker_init_fn, then ``user_fn``; a function that already chains them
    (a FastLoader re-created from its own attributes) is kept as it is."""
    if isinstance(user_fn, functools.partial) and user_fn.func is _chained_init:
        return user_fn
    return functools.partial(_chained_init, user_fn)


def _ring_worker_init(init: Callable[[int], None], slots: Sequence[torch.Tensor],
                      worker_id: int) -> None:
    """The CUDA ring's workers: the loader's init (pinning, the user's), then
    the ring (pinned, so touched already) mapped once (:func:`map_slot`)."""
    init(worker_id)
    for slot in slots:
        map_slot(slot)


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def check_oversubscription(num_workers: int, threads_per_worker: int = 1) -> None:
    cpus = usable_cpus()
    if num_workers * threads_per_worker > cpus:
        _warn_once(
            "cpus",
            f"num_workers={num_workers} x {threads_per_worker} thread(s) per worker exceeds the "
            f"{cpus} CPU(s) this process may use (affinity and cgroup quota); set "
            f"num_workers<={cpus} to avoid oversubscription",
        )


def warn_if_shm_short(num_workers: int, prefetch_factor: int, batch_bytes: int) -> None:
    """Warns once when /dev/shm cannot hold the batches the workers keep in
    flight (``fastdecode._system.shm_budget``), saying how to enlarge it."""
    budget = shm_budget(num_workers, prefetch_factor, batch_bytes)
    if num_workers > 0 and budget.status == "short":
        assert budget.free is not None
        _warn_once(
            "shm",
            f"/dev/shm has {budget.free / 2**20:.0f} MiB free but num_workers={num_workers} x "
            f"prefetch_factor={prefetch_factor} batches need {budget.need / 2**20:.0f} MiB: "
            f"enlarge it ({budget.advice}) or lower num_workers, prefetch_factor or batch_size",
        )


class _LoaderBase(DataLoader):
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


# ---------------------------------------------------------------------------
# FastLoader


class FastLoader(_LoaderBase):
    """A ``torch.utils.data.DataLoader`` (a subclass: frameworks that re-create
    a DataLoader from its arguments, e.g. to inject a DistributedSampler,
    keep it, with its fast paths) for FastImageFolder-style datasets.

    Worker processes by default (``num_workers=None``: the usable CPUs), the
    zero-copy :func:`collate` and :func:`worker_init_fn`; ``threads=N`` uses an
    in-process thread pool instead (the decode releases the GIL).
    ``device='cuda'`` yields batches already on the GPU; for a FastImageFolder
    whose chain ends in ToTensor/Normalize (or ToDtype) the workers only decode
    uint8 and that per-pixel step runs on the GPU, with the values the CPU
    chain would give. Without CUDA everything degrades to the shared-memory
    path, and ``device`` must be None or 'cpu'.

    :meth:`state_dict` / :meth:`load_state_dict` resume an epoch mid-way, as
    torchdata's ``StatefulDataLoader`` does, in O(1): the next ``iter()``
    after a load continues the saved epoch at the next batch, nothing before
    it is decoded, and later ``iter()`` calls run the following epochs. The
    samples and their order are exact always (``num_workers``, ``threads``
    and the world size may change: docs/guides/resuming.md).

    Parameters
    ----------
    dataset : Dataset
        A map-style or iterable dataset. A FastImageFolder /
        FastDatasetFolder / FastImageList takes the fast paths (the batch
        rings, the threads' draw/decode split); any other dataset loads as
        DataLoader loads it.
    batch_size : int or None, default 1
        As DataLoader's.
    shuffle : bool or None, default False
        As DataLoader's.
    sampler, batch_sampler : Sampler or iterable, optional
        As DataLoader's. Under ``torch.distributed`` with two processes or
        more, a sampler that does not shard the data (no DistributedSampler,
        no ``num_replicas``) warns once, at ``iter()``.
    num_workers : int or None, default None
        Worker processes; None: the CPUs this process may use (affinity and
        cgroup quota). More than those warns once (RuntimeWarning). Ignored
        (no workers) when ``threads`` is given.
    collate_fn : callable, optional
        None (the default): :func:`collate`, zero-copy for the datasets'
        batch tensors. A collate_fn of one's own also turns off the CPU
        batch ring.
    pin_memory : bool, default True
        As DataLoader's, but only where CUDA is available (else False).
    drop_last : bool, default False
        As DataLoader's.
    timeout : float, default 0
        As DataLoader's.
    worker_init_fn : callable, optional
        ``worker_id -> None``, run in each worker after fastdecode's
        :func:`worker_init_fn` (one thread per library pool, the longer time
        slice), which always runs.
    multiprocessing_context : optional
        As DataLoader's.
    generator : torch.Generator, optional
        As DataLoader's: the sampler's and the workers' base seed's
        generator. With ``resumable=True`` its ``initial_seed()`` is the base
        seed, and the loader's ``generator`` attribute becomes a generator of
        its own seeded with it.
    prefetch_factor : int or None, default 2
        Batches in flight per worker (None: 2); with ``threads=N``, ``N x
        prefetch_factor`` batches are submitted ahead.
    persistent_workers : bool, default False
        As DataLoader's (only with workers).
    pin_memory_device : str, default ''
        As DataLoader's.
    in_order : bool, default True
        As DataLoader's.
    threads : int or None, default None
        An in-process pool of this many threads instead of worker processes
        (the decode releases the GIL). For a dataset with a draw/render split
        (FastDatasetFolder, FastImageFolder, FastImageList decoding with
        fastdecode) the random draws are made in the loader's thread, in
        batch order, so the batches are reproducible; other items (another
        dataset, a custom ``loader``) run whole in the pool and warn once.
    device : str or torch.device, optional
        None or 'cpu': batches on the CPU. 'cuda' (or a CUDA device): batches
        on that device; with workers, batches and a dataset of fixed sample
        shape, through the pinned ring (uint8 copied, then the chain's
        ToTensor/Normalize run on the GPU); else each batch is copied on a
        side stream.
    resumable : bool or int, default False
        False draws random augmentations as DataLoader does
        (from each worker's RNG, or in-process from the global one), so the
        batches equal DataLoader's bit for bit, and those drawn after a resume
        are not the uninterrupted run's. True seeds each sample's draws by
        (base seed, epoch, its position in the epoch's order) only, never by
        the worker, thread or rank that decodes it: a resumed run yields the
        uninterrupted run's batches bit for bit, with any ``num_workers`` or
        ``threads``, and the training loop's global RNGs are never drawn from.
        The base seed is ``generator.initial_seed()`` (torch's
        ``initial_seed()`` without one); an int gives it. The epochs' orders
        are then the sampler's draws only: ``iter()`` draws its base seed
        (the workers' seeds) from a generator of its own, so the order is the
        same in-process, in workers (persistent or not) and in threads.

    Raises
    ------
    RuntimeError
        ``device`` is a CUDA device and CUDA is not available.
    TypeError
        ``resumable`` is neither a bool nor an int.
    ValueError
        ``resumable`` is True or an int but the dataset is not map-style or
        there are no batches (``batch_size=None`` and no
        ``batch_sampler``); and DataLoader's own (conflicting ``sampler``,
        ``shuffle`` and ``batch_sampler``, ...).
    """

    _tracker: Optional[Tracker]

    def __init__(
        self,
        dataset,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = False,
        sampler=None,
        batch_sampler=None,
        num_workers: Optional[int] = None,
        collate_fn: Optional[Callable] = None,
        pin_memory: bool = True,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: Optional[int] = 2,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        threads: Optional[int] = None,
        device: Optional[str | torch.device] = None,
        resumable: bool | int = False,
    ) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.threads = threads
        # an attribute, as threads and device are: Lightning re-creates a loader it did not
        # see made (trainer.fit(train_dataloaders=...)) from its attributes, under DDP
        self.resumable = resumable
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} asked for, but CUDA is not available")
        workers = 0 if threads is not None else (
            usable_cpus() if num_workers is None else num_workers)
        ahead = 2 if prefetch_factor is None else prefetch_factor
        init = _with_pinning(worker_init_fn)
        super().__init__(
            dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=workers,
            collate_fn=collate if collate_fn is None else collate_fn,
            pin_memory=pin_memory and torch.cuda.is_available(), drop_last=drop_last,
            timeout=timeout, worker_init_fn=init, multiprocessing_context=multiprocessing_context,
            generator=generator, prefetch_factor=ahead if workers else None,
            persistent_workers=persistent_workers and workers > 0,
            pin_memory_device=pin_memory_device, in_order=in_order)
        self._record_for_lightning(given)
        # set past DataLoader's __setattr__: Lightning's patched one records sets made
        # after DataLoader.__init__ and replays them on the loader it re-creates, which
        # would then follow this loader's sampler
        self.__dict__["_tracker"] = self._make_tracker(resumable)
        self._lookahead = ahead
        self._ring: Optional[CudaRing] = None
        self._cpu_ring: Optional[CpuRing] = None
        self._ring_loader: Optional[DataLoader] = None
        self._table: Optional[torch.Tensor] = None
        self._stream: Optional[torch.cuda.Stream] = None

        shape = self._fixed_shape()
        slots = workers * ahead + 2  # in flight, arriving, held by the training step
        if workers:
            check_oversubscription(workers)
            if shape is not None:
                warn_if_shm_short(workers, ahead, self._batch_bytes(shape))
        inner = dict(num_workers=workers, collate_fn=identity, timeout=timeout, worker_init_fn=init,
                     multiprocessing_context=multiprocessing_context, generator=self.generator,
                     prefetch_factor=ahead, persistent_workers=self.persistent_workers)
        if self._use_ring(shape):
            assert shape is not None
            self._ring = CudaRing(slots, (self._batch_rows(), *shape))
            table = self.dataset.pixel_table()  # type: ignore[attr-defined]
            self._table = None if table is None else table.to(self.device)
            inner["worker_init_fn"] = functools.partial(_ring_worker_init, init, [self._ring.ring])
            self._ring_loader = _LoaderBase(
                RingWriter(dataset, self._ring.ring),
                batch_sampler=SlottedSampler(self._batches(), slots), pin_memory=False, **inner)
        elif self._use_cpu_ring(shape, collate_fn):
            assert shape is not None
            table = self.dataset.pixel_table()  # type: ignore[attr-defined]
            dtype = torch.uint8 if table is None else table.dtype
            self._cpu_ring = CpuRing(slots + 1, (self._batch_rows(), *shape), dtype)
            self._ring_loader = _LoaderBase(
                RingFiller(dataset, self._cpu_ring, self.collate_fn),
                batch_sampler=RingSampler(self._batches(), self._cpu_ring, workers),
                pin_memory=self.pin_memory, **inner)

    def _make_tracker(self, resumable: bool | int) -> Optional[Tracker]:
        """The position tracker behind state_dict (None: no batches of a
        map-style dataset to resume)."""
        if isinstance(resumable, bool):
            g = self.generator if self.generator is not None else torch.default_generator
            base: Optional[int] = int(g.initial_seed()) if resumable else None
        elif isinstance(resumable, int):
            base = int(resumable)
        else:
            raise TypeError(f"resumable must be a bool or an int seed, not "
                            f"{type(resumable).__name__}")
        if self._dataset_kind != _DatasetKind.Map or self.batch_sampler is None:
            if base is not None:
                raise ValueError("resumable= needs a map-style dataset and batches "
                                 "(batch_size or batch_sampler)")
            return None
        if base is None:
            return Tracker(self.dataset, self.batch_sampler, self.generator, None)
        # the epochs' base seeds (the workers' seeds, which a seeded batch does not
        # use) come from a generator of their own: the sampler's generator, or
        # torch's global one, is then drawn from by the sampler only, so the
        # epochs' orders are the same in-process, in workers persistent or not,
        # and in threads
        self.__dict__["generator"] = torch.Generator().manual_seed(base)  # (see _tracker)
        return Tracker(self.dataset, self.batch_sampler, None, base)

    @property
    def _index_sampler(self):  # DataLoader's iterators draw their batches from this
        tracker = self.__dict__.get("_tracker")
        return tracker.sampler if tracker is not None else super()._index_sampler

    def _batches(self) -> Any:
        """The batch sampler the iterators draw from: the tracker's wrapper."""
        return self._tracker.sampler if self._tracker is not None else self.batch_sampler

    def _record_for_lightning(self, given: dict) -> None:
        """Lightning re-creates a DataLoader (to inject a DistributedSampler)
        from the arguments its patched ``__init__`` recorded. When FastLoader
        was first imported after Lightning patched the DataLoader classes,
        only the base class's call got recorded, which knows nothing of
        ``threads=`` or ``device=``: record FastLoader's own arguments."""
        if "__pl_saved_args" in vars(self) and not hasattr(type(self).__init__, "__wrapped__"):
            for name, value in (("args", ()), ("kwargs", given), ("arg_names", ()),
                                ("default_kwargs", {})):
                object.__setattr__(self, f"__pl_saved_{name}", value)

    def _batch_bytes(self, shape: tuple[int, ...]) -> int:
        """Bytes of one batch as it crosses: the chain's result dtype."""
        table = getattr(self.dataset, "pixel_table", lambda: None)()
        size = 1 if table is None else table.element_size()
        return self._batch_rows() * math.prod(shape) * size

    def _batch_rows(self) -> int:
        return int(getattr(self.batch_sampler, "batch_size", None) or self.batch_size or 1)

    def _fixed_shape(self) -> Optional[tuple[int, ...]]:
        fixed = getattr(self.dataset, "fixed_sample_shape", None)
        return fixed() if callable(fixed) else None

    def _use_ring(self, shape) -> bool:
        return (self.device is not None and self.device.type == "cuda" and shape is not None
                and self.num_workers > 0 and hasattr(self.dataset, "decode_batch_into")
                and self.batch_sampler is not None)

    def _use_cpu_ring(self, shape, collate_fn) -> bool:
        return (shape is not None and self.num_workers > 0 and collate_fn is None
                and (self.device is None or self.device.type == "cpu")
                and hasattr(self.dataset, "decode_batch_into")
                and hasattr(self.dataset, "pixel_table") and self.batch_sampler is not None)

    # -- iteration ----------------------------------------------------------

    def __iter__(self) -> Any:  # DataLoader's iterator, or a generator
        tracker = self._tracker
        if tracker is None:
            return self._iter()
        if tracker.loaded is not None or tracker.skipping:
            self._forget_ahead()
        serial = tracker.start_epoch()
        with self._undoing_draws():
            it = self._iter()
        return tracker.counted(it, serial)

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

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch the loop received, as
        torchdata's ``StatefulDataLoader.state_dict``: the epoch, batches and
        samples taken, the random states the epoch's order was drawn from, a
        stateful sampler's own state, the base seed, the sampler's shape and
        a fingerprint of the dataset. A few KB of primitives whatever the
        dataset's size (``torch.load(weights_only=True)`` reads it), the
        same on every rank.

        Taken before the first ``iter()``, it resumes at the beginning; after
        an epoch's last batch, at the next epoch's first batch; right after
        :meth:`load_state_dict` (before ``iter()``), it is the loaded state.

        Returns
        -------
        dict
            The state: ``kind`` and ``version``, ``epoch``, ``started``,
            ``batches`` and ``samples`` taken (``samples_global`` across the
            ranks), ``finished``, ``order_replicas``, ``random`` (the saved
            generator states), ``sampler_state`` (a stateful sampler's own
            ``state_dict()``, else None), ``sampler_epoch`` (a
            DistributedSampler's epoch), ``base_seed`` (None unless
            ``resumable``), ``shape`` (the sampler chain, batch size,
            ``drop_last``, replicas) and ``dataset`` (its size, class list and
            file list fingerprint). Pass it to :meth:`load_state_dict`.

        Raises
        ------
        ResumeError
            The loader has no position to save (an iterable dataset, or no
            batches), or the position after the last batch taken was not kept
            (batches taken out of order).
        """
        return self._resume_tracker().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Checks ``state_dict`` (from :meth:`state_dict`) against this
        loader, raising :class:`~fastdecode.errors.ResumeError` naming what
        differs (dataset, seed, sampler, batch size, a global batch the
        world size does not divide); the next ``iter()`` continues its
        epoch at the next batch, in O(1).

        Nothing before the resume point is read or decoded, and later
        ``iter()`` calls run the following epochs. The state may be loaded
        with other ``num_workers``, ``threads`` or a world size that keeps
        the global batch (``batch_size x ranks``). Loaded while an iterator
        is still running, it warns once; that iterator goes on as it is and
        the state applies to the next ``iter()``.

        Parameters
        ----------
        state_dict : dict
            What :meth:`state_dict` returned (for instance read back with
            ``torch.load(..., weights_only=True)``).

        Raises
        ------
        ResumeError
            The loader has no position to load (an iterable dataset, or no
            batches), ``state_dict`` is not a FastLoader state or of another
            version, or it does not fit this loader: another dataset (size,
            class list, file list), base seed, sampler chain or sampler
            settings, batch size, or a global batch the new world size does
            not divide.
        """
        self._resume_tracker().load_state_dict(state_dict)

    def _resume_tracker(self) -> Tracker:
        if self._tracker is None:
            raise ResumeError("this FastLoader has no position to save or load: it needs a "
                              "map-style dataset and batches (batch_size or batch_sampler)")
        return self._tracker

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
        if previous is not None and not self._ring_loader.persistent_workers:
            previous._shutdown_workers()
        with self._undoing_draws():
            it = iter(self._ring_loader)
        self._ring_pass = it
        ring = self._cpu_ring
        for item in it:
            if item[0] == "slot":
                _, slot, rows, targets = item
                images = ring.take(slot, rows)
                targets = default_collate(targets)
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
            _warn_once(
                "sharding",
                f"torch.distributed runs {dist.get_world_size()} processes but this FastLoader's "
                f"sampler ({type(self.sampler).__name__}) does not shard the data: every rank "
                f"sees every sample; pass sampler=DistributedSampler(dataset)",
            )

    def _to_device(self, batch: Any) -> Any:
        images, targets = batch
        stream = self._side_stream()
        with torch.cuda.stream(stream):
            images = images.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        images.record_stream(torch.cuda.current_stream(self.device))
        return [images, targets]

    def _iter_threads(self) -> Iterator[Any]:
        """Batches from a pool of ``threads``; reproducible: a dataset that
        can split its items (FastDatasetFolder) has each batch's draws made
        here, in order, under seeds from this epoch's base seed and the batch
        index, and only the decode runs in the pool (``datasets/_planned.py``)."""
        assert self.threads is not None
        check_oversubscription(self.threads)
        # DataLoader draws its base seed (its workers' seeds) from the generator
        # before sampling: so `generator` gives the same order as it does there
        with self._undoing_draws():
            base = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        dataset: Any = self.dataset
        plan = getattr(dataset, "_plan_batch", None)
        lookahead = max(1, self.threads * self._lookahead)
        move = self.device is not None and self.device.type != "cpu"
        with ThreadPoolExecutor(self.threads, thread_name_prefix="fastdecode") as pool:
            pending: deque = deque()

            def fetch(indices):
                if hasattr(self.dataset, "__getitems__"):
                    return self.collate_fn(self.dataset.__getitems__(indices))
                return self.collate_fn([self.dataset[i] for i in indices])

            def render(planned):
                samples = dataset._render_plan(planned)
                return None if samples is None else self.collate_fn(samples)

            def take():
                planned, future = pending.popleft()
                batch = future.result()
                if batch is None:  # steps that may draw, or a replacement: here
                    batch = self.collate_fn(dataset._finish_plan(planned))
                return self._to_device(batch) if move else batch

            read_ahead = getattr(dataset, "_read_ahead", None)
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
                    pending.append((None, pool.submit(fetch, indices)))
                else:
                    pending.append((planned, pool.submit(render, planned)))
                if len(pending) >= lookahead:
                    yield take()
            while pending:
                yield take()

    def _warn_unsplit(self) -> None:
        name = type(self.dataset).__name__
        _warn_once(
            f"unsplit {name}",
            f"FastLoader threads={self.threads}: {name} has no draw/render split (a "
            f"FastImageFolder / FastDatasetFolder decoding with fastdecode has one), so its "
            f"items run whole in the pool threads, where any random transform draws from the "
            f"global RNGs in whichever thread runs first: batches are not reproducible, and the "
            f"training loop's own draws shift; use num_workers= for it",
        )

    def _side_stream(self):
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream

    def close(self) -> None:
        """Unregisters the pinned ring (also done when the loader is collected)."""
        if self._ring is not None:
            self._ring.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: CUDA may be gone already
            pass
