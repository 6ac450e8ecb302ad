"""FastLoader: its construction (the rings, the resume tracker, the worker
set-up it installs) and its resumable position (``state_dict``).

The public contract is the class docstring (and the package's, for the
paths it takes); how it iterates is ``loader/_passes.py``. Decision record:
docs/decisions/loaders.md.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable, Optional, cast

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _DatasetKind

from fastdecode._system import usable_cpus
from fastdecode.batching._buffers import collate
from fastdecode.batching._mixing import TransformedCollate
from fastdecode.errors import ResumeError
from fastdecode.loader._cpu_ring import CpuRing, RingFiller, RingSampler
from fastdecode.loader._cuda_ring import CudaRing, RingWriter, SlottedSampler, identity
from fastdecode.loader._passes import LoaderBase, LoaderPasses
from fastdecode.loader._protocol import (
    LoaderDataset,
    RingDataset,
    fixed_shape,
    ring_dataset,
    ring_table,
)
from fastdecode.loader._resume import Tracker
from fastdecode.loader._setup import (
    check_oversubscription,
    ring_worker_init,
    warn_if_shm_short,
    with_pinning,
)
from fastdecode.loader._slotted import SlotCollate

__all__ = ["FastLoader"]


def check_threads(threads: Any, num_workers: Any) -> None:
    """``threads`` as FastLoader takes it: None, or a positive int (not a
    bool, not a float) given without worker processes (``num_workers`` None
    or 0). Each error names ``threads``, the argument the caller passed, not
    the thread pool's own parameter that would fail at the first batch."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral):
        raise TypeError(f"threads must be a positive int (the pool's thread count), got "
                        f"{threads!r} ({type(threads).__name__})")
    if threads < 1:
        raise ValueError(f"threads must be a positive int (the pool's thread count), got "
                         f"{threads}; threads=None (the default) runs worker processes")
    if num_workers:
        raise ValueError(f"threads={threads} and num_workers={num_workers} exclude each other: "
                         "threads runs the loading in a thread pool in this process, without "
                         "worker processes; pass one of them")


class FastLoader(LoaderPasses):
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
    and the world size may change: [Resuming runs](../guides/resuming.md)).

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
        cgroup quota). More than those warns once (RuntimeWarning). With
        ``threads``: None or 0 (no workers).
    collate_fn : callable, optional
        None (the default): :func:`collate`, zero-copy for the datasets'
        batch tensors. A collate_fn of one's own also turns off the CPU
        batch ring (a MixUp/CutMix collate: pass ``batch_transform``); with
        workers, its batch's plain tensors of 64 KiB or more (a detection
        batch's images and masks) cross in a reused shared slot of the
        worker's, not in fresh shared memory, and arrive as plain tensors.
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
        An in-process pool of this many threads (a positive int) instead of
        worker processes (the decode releases the GIL); not together with
        ``num_workers`` > 0. For a dataset with a draw/render split
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
    batch_transform : callable, optional
        ``(images, targets) -> (images, targets)``, run on each collated
        batch where the collate runs: torchvision's MixUp/CutMix (or a
        ``RandomChoice`` of them) and timm's ``Mixup``, as torchvision's
        reference passes ``collate_fn=lambda b: mixup_cutmix(*default_collate(b))``,
        with the same draws (the worker's random state, after the batch's
        own) and the same mixed batches and soft targets, but mixed in place
        in the batch (``fastdecode.augment.mix_batch``) and keeping the CPU
        ring. With ``threads`` it runs in the loader's thread, in batch
        order; with the CUDA ring on the GPU batch, after the table and the
        erasing, drawing in this process, as a training loop mixing each
        batch it receives does (timm's ``Mixup``). With ``resumable`` its
        draws are seeded by the batch's position (a dataset with
        ``__getitems__``; otherwise they are the collating worker's).

    Raises
    ------
    RuntimeError
        ``device`` is a CUDA device and CUDA is not available.
    TypeError
        ``resumable`` is neither a bool nor an int; ``threads`` is not an int
        (a float, a bool).
    ValueError
        ``threads`` is below 1, or given with ``num_workers`` > 0;
        ``resumable`` is True or an int but the dataset is not map-style or
        there are no batches (``batch_size=None`` and no
        ``batch_sampler``); and DataLoader's own (conflicting ``sampler``,
        ``shuffle`` and ``batch_sampler``, ...).
    """

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
        batch_transform: Optional[Callable] = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        check_threads(threads, num_workers)
        if batch_transform is not None and not callable(batch_transform):
            raise TypeError(f"batch_transform must be callable, got "
                            f"{type(batch_transform).__name__}")
        if isinstance(collate_fn, TransformedCollate) and collate_fn.transform is batch_transform:
            collate_fn = collate_fn.collate  # a loader re-created from this one's attributes
        if isinstance(collate_fn, SlotCollate):
            collate_fn = collate_fn.collate_fn  # (the same)
        self.threads = threads
        self.batch_transform = batch_transform
        # an attribute, as threads and device are: Lightning re-creates a loader it did not
        # see made (trainer.fit(train_dataloaders=...)) from its attributes, under DDP
        self.resumable = resumable
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} asked for, but CUDA is not available")
        workers = 0 if threads is not None else (
            usable_cpus() if num_workers is None else num_workers)
        ahead = 2 if prefetch_factor is None else prefetch_factor
        init = with_pinning(worker_init_fn)
        super().__init__(
            dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=workers,
            collate_fn=collate if collate_fn is None else (
                SlotCollate(collate_fn) if workers and batch_transform is None else collate_fn),
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

        shape = fixed_shape(self.dataset)
        slots = workers * ahead + 2  # in flight, arriving, held by the training step
        if workers:
            check_oversubscription(workers)
            if shape is not None:
                warn_if_shm_short(workers, ahead, self._batch_bytes(shape))
        inner = dict(num_workers=workers, collate_fn=identity, timeout=timeout, worker_init_fn=init,
                     multiprocessing_context=multiprocessing_context, generator=self.generator,
                     prefetch_factor=ahead, persistent_workers=self.persistent_workers)
        ring_ds = self._use_ring(shape)
        if ring_ds is not None:
            assert shape is not None
            self._ring = CudaRing(slots, (self._batch_rows(), *shape))
            table = ring_table(ring_ds)
            self._table = None if table is None else table.to(self.device)
            inner["worker_init_fn"] = functools.partial(ring_worker_init, init, [self._ring.ring])
            self._ring_loader = LoaderBase(
                RingWriter(dataset, self._ring.ring, send_batch=batch_transform is not None),
                batch_sampler=SlottedSampler(self._batches(), slots), pin_memory=False, **inner)
        elif (cpu_ds := self._use_cpu_ring(shape, collate_fn)) is not None:
            assert shape is not None
            table = ring_table(cpu_ds)
            dtype = torch.uint8 if table is None else table.dtype
            self._cpu_ring = CpuRing(slots + 1, (self._batch_rows(), *shape), dtype)
            self._ring_loader = LoaderBase(
                RingFiller(dataset, self._cpu_ring, self.collate_fn, batch_transform),
                batch_sampler=RingSampler(self._batches(), self._cpu_ring, workers),
                pin_memory=self.pin_memory, **inner)
        elif batch_transform is not None and threads is None:
            self._transform_without_ring(batch_transform, workers, inner)

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
        dataset = cast(LoaderDataset, self.dataset)  # map-style, as checked
        if base is None:
            return Tracker(dataset, self.batch_sampler, self.generator, None)
        # the epochs' base seeds (the workers' seeds, which a seeded batch does not
        # use) come from a generator of their own: the sampler's generator, or
        # torch's global one, is then drawn from by the sampler only, so the
        # epochs' orders are the same in-process, in workers persistent or not,
        # and in threads
        self.__dict__["generator"] = torch.Generator().manual_seed(base)  # (see _tracker)
        return Tracker(dataset, self.batch_sampler, None, base)

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

    def _transform_without_ring(self, transform: Callable, workers: int, inner: dict) -> None:
        """The batch transform where no ring holds the batches: a dataset with
        ``__getitems__`` goes through a ring of no slots (its filler runs the
        transform after the collate, seeded by a seeded batch); any other
        through the collate, as DataLoader's collate_fn runs."""
        if (hasattr(self.dataset, "__getitems__") and self.batch_sampler is not None
                and (self.device is None or self.device.type == "cpu")
                and self._dataset_kind == _DatasetKind.Map):
            self._cpu_ring = CpuRing(0, (), torch.uint8)
            if not workers:
                inner = dict(inner, prefetch_factor=None, persistent_workers=False)
            self._ring_loader = LoaderBase(
                RingFiller(self.dataset, self._cpu_ring, self.collate_fn, transform),
                batch_sampler=RingSampler(self._batches(), self._cpu_ring, workers),
                pin_memory=self.pin_memory, **inner)
        else:
            self.__dict__["collate_fn"] = TransformedCollate(self.collate_fn, transform)

    def _batch_bytes(self, shape: tuple[int, ...]) -> int:
        """Bytes of one batch as it crosses: the chain's result dtype."""
        table = ring_table(self.dataset)
        size = 1 if table is None else table.element_size()
        return self._batch_rows() * math.prod(shape) * size

    def _batch_rows(self) -> int:
        return int(getattr(self.batch_sampler, "batch_size", None) or self.batch_size or 1)

    def _use_ring(self, shape: Optional[tuple[int, ...]]) -> Optional[RingDataset]:
        """The dataset, when its batches go through the CUDA ring (else None)."""
        if (self.device is not None and self.device.type == "cuda" and shape is not None
                and self.num_workers > 0 and self.batch_sampler is not None):
            return ring_dataset(self.dataset)
        return None

    def _use_cpu_ring(self, shape: Optional[tuple[int, ...]],
                      collate_fn: Optional[Callable]) -> Optional[RingDataset]:
        """The dataset, when its batches go through the CPU ring (else None)."""
        if (shape is not None and self.num_workers > 0 and collate_fn is None
                and (self.device is None or self.device.type == "cpu")
                and self.batch_sampler is not None):
            return ring_dataset(self.dataset, with_table=True)
        return None

    # -- iteration, and the position it keeps ---------------------------------

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

    def close(self) -> None:
        """Unregisters the pinned ring (also done when the loader is collected)."""
        if self._ring is not None:
            self._ring.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: CUDA may be gone already
            pass
