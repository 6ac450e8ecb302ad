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

from __future__ import annotations

import functools
import math
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler
from torch.utils.data._utils.collate import default_collate

from fastdecode._system import limit_threads_to_one, shm_free_bytes, usable_cpus
from fastdecode.data._batches import note_batch_taken_whole
from fastdecode.data._cuda_ring import CudaRing, RingWriter, SlottedSampler, identity

__all__ = ["FastLoader", "collate", "worker_init_fn"]


# ---------------------------------------------------------------------------
# collate


def _whole_base(samples: Sequence[Any]) -> Optional[torch.Tensor]:
    """The batch tensor when `samples` are its slots 0..n-1 in order."""
    if not samples or not all(isinstance(s, torch.Tensor) for s in samples):
        return None
    base = samples[0]._base
    if base is None or base.dim() != samples[0].dim() + 1 or base.shape[0] != len(samples):
        return None
    stride = base.stride(0)
    for k, s in enumerate(samples):
        if s._base is not base or s.storage_offset() != base.storage_offset() + k * stride:
            return None
    return base


def collate(batch: Sequence[Any]) -> Any:
    """default_collate, except that samples which are the slots of one batch
    tensor (what FastImageFolder.__getitems__ returns) are handed on as that
    tensor, with no copy."""
    if batch and isinstance(batch[0], tuple) and len(batch[0]) == 2:
        base = _whole_base([b[0] for b in batch])
        if base is not None:
            note_batch_taken_whole()
            return [base, default_collate([b[1] for b in batch])]
    return default_collate(batch)


# ---------------------------------------------------------------------------
# worker set-up


def worker_init_fn(worker_id: int) -> None:
    """One thread per library in a DataLoader worker (OpenMP, MKL, OpenBLAS,
    OpenCV, torch): workers are the parallelism, nested pools only fight."""
    limit_threads_to_one()


def _chained_init(user_fn: Optional[Callable[[int], None]], worker_id: int) -> None:
    worker_init_fn(worker_id)
    if user_fn is not None:
        user_fn(worker_id)


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


def check_shm(num_workers: int, prefetch_factor: int, batch_bytes: int) -> None:
    free = shm_free_bytes()
    need = num_workers * prefetch_factor * batch_bytes
    if free is not None and num_workers > 0 and need > free:
        _warn_once(
            "shm",
            f"/dev/shm has {free / 2**20:.0f} MiB free but num_workers={num_workers} x "
            f"prefetch_factor={prefetch_factor} batches need {need / 2**20:.0f} MiB: enlarge it "
            f"(docker run --shm-size={math.ceil(need * 2 / 2**30)}g) or lower num_workers, "
            f"prefetch_factor or batch_size",
        )


# ---------------------------------------------------------------------------
# FastLoader


class _DataLoader(DataLoader):
    """DataLoader minus its worker-count warning: FastLoader's own guard
    knows the cgroup quota and says what to set, once."""

    def check_worker_number_rationality(self) -> None:
        pass


class FastLoader:
    """A DataLoader drop-in for FastImageFolder-style datasets.

    Worker processes by default (``num_workers=None``: the usable CPUs);
    ``threads=N`` uses an in-process thread pool instead (the decode releases
    the GIL). ``device='cuda'`` yields batches already on the GPU; for a
    FastImageFolder whose chain ends in ToTensor/Normalize (or ToDtype) the
    workers only decode uint8 and that per-pixel step runs on the GPU, with
    the values the CPU chain would give. Without CUDA everything degrades to
    the shared-memory path, and ``device`` must be None or 'cpu'.
    """

    def __init__(
        self,
        dataset,
        batch_size: int = 1,
        shuffle: bool = False,
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
        prefetch_factor: int = 2,
        persistent_workers: bool = False,
        threads: Optional[int] = None,
        device: Optional[str | torch.device] = None,
    ) -> None:
        if batch_sampler is None:
            if sampler is None:
                sampler = (RandomSampler(dataset, generator=generator) if shuffle
                           else SequentialSampler(dataset))
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        elif batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                             "shuffle, sampler, and drop_last")
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.batch_size = batch_size
        self.threads = threads
        self.num_workers = usable_cpus() if num_workers is None else num_workers
        if threads is not None:
            self.num_workers = 0
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} asked for, but CUDA is not available")
        self.collate_fn = collate if collate_fn is None else collate_fn
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.prefetch_factor = prefetch_factor
        self._ring: Optional[CudaRing] = None
        self._table: Optional[torch.Tensor] = None
        self._generator = generator

        shape = self._fixed_shape()
        if self.num_workers:
            check_oversubscription(self.num_workers)
            if shape is not None:
                check_shm(self.num_workers, prefetch_factor,
                          batch_size * math.prod(shape))
        loader_kwargs = dict(
            num_workers=self.num_workers, timeout=timeout,
            worker_init_fn=functools.partial(_chained_init, worker_init_fn),
            multiprocessing_context=multiprocessing_context, generator=generator,
            prefetch_factor=prefetch_factor if self.num_workers else None,
            persistent_workers=persistent_workers and self.num_workers > 0,
        )
        if self._use_ring(shape):
            slots = self.num_workers * prefetch_factor + 2
            self._ring = CudaRing(slots, (batch_size, *shape))
            table = self.dataset.pixel_table()
            self._table = None if table is None else table.to(self.device)
            self._loader = _DataLoader(
                RingWriter(dataset, self._ring.ring),
                batch_sampler=SlottedSampler(batch_sampler, slots),
                collate_fn=identity, pin_memory=False, **loader_kwargs)
        elif threads is None:
            self._loader = _DataLoader(dataset, batch_sampler=batch_sampler,
                                      collate_fn=self.collate_fn, pin_memory=self.pin_memory,
                                      **loader_kwargs)
        else:
            self._loader = None
        self._stream = None

    def _fixed_shape(self) -> Optional[tuple[int, ...]]:
        fixed = getattr(self.dataset, "fixed_sample_shape", None)
        return fixed() if callable(fixed) else None

    def _use_ring(self, shape) -> bool:
        return (self.device is not None and self.device.type == "cuda" and shape is not None
                and self.num_workers > 0 and hasattr(self.dataset, "decode_batch_into"))

    def __len__(self) -> int:
        return len(self.batch_sampler)

    # -- iteration ----------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._ring is not None:
            return self._iter_ring()
        if self._loader is None:
            return self._iter_threads()
        return self._iter_plain(iter(self._loader))

    def _to_device(self, batch: Any) -> Any:
        if self.device is None or self.device.type == "cpu":
            return batch
        images, targets = batch
        stream = self._side_stream()
        with torch.cuda.stream(stream):
            images = images.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        images.record_stream(torch.cuda.current_stream(self.device))
        return [images, targets]

    def _iter_plain(self, it) -> Iterator[Any]:
        for batch in it:
            yield self._to_device(batch)

    def _iter_threads(self) -> Iterator[Any]:
        check_oversubscription(self.threads)
        # DataLoader draws its base seed from the generator before sampling;
        # do the same so `generator` gives the same order as it does there.
        torch.empty((), dtype=torch.int64).random_(generator=self._generator)
        lookahead = max(1, self.threads * self.prefetch_factor)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="fastdecode") as pool:
            pending: deque = deque()
            batches = iter(self.batch_sampler)

            def fetch(indices):
                if hasattr(self.dataset, "__getitems__"):
                    return self.collate_fn(self.dataset.__getitems__(list(indices)))
                return self.collate_fn([self.dataset[i] for i in indices])

            for indices in batches:
                pending.append(pool.submit(fetch, indices))
                if len(pending) >= lookahead:
                    yield self._to_device(pending.popleft().result())
            while pending:
                yield self._to_device(pending.popleft().result())

    def _side_stream(self):
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream

    def _iter_ring(self) -> Iterator[Any]:
        assert self._ring is not None and self._loader is not None
        return self._ring.batches(iter(self._loader), self.device, self._side_stream(),
                                  self.num_workers * self.prefetch_factor, self._table)

    def close(self) -> None:
        """Unregisters the pinned ring (also done when the loader is collected)."""
        if self._ring is not None:
            self._ring.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: CUDA may be gone already
            pass
