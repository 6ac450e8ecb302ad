"""Shared batch slots of a DataLoader worker, reused once the main process
has let go of what it received.

A worker keeps a small pool of shared storages (:class:`WorkerPool`, up to
``POOL_SLOTS``, grown only when none is free) and writes each batch that
leaves ``__getitems__`` into one. Each storage carries two counters past the
batch bytes: tensors of it sent (counted by the worker as a
:class:`SlotView` is pickled) and released (counted in the main process when
the storage :func:`_rebuild` made for what it received dies); it is in the
main process's hands while they differ. The worker hands a slot out again
only when its own use count is back to the pool's and every tensor sent was
released; a message never unpickled leaves its slot out. No slot free and
the pool full: the caller makes a fresh batch (correct, slower).

Decision record: docs/decisions/datasets.md ("A worker's batches live on its
shared pool, released by the main process"; issue #16).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from typing import Any, Optional

import torch
from torch.multiprocessing.reductions import reduce_tensor

__all__ = ["POOL_SLOTS", "SlotView", "WorkerPool", "borrowed", "pool_counts", "this_process_pool",
           "worker_pool"]

# Slots per worker: the batch being made, prefetch_factor (2) waiting, the
# one the loop holds, one more for the pin-memory thread's lag.
POOL_SLOTS = 5
_TAIL = 64  # the counters sit on their own cache line past the batch bytes

_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _uses(storage: torch.UntypedStorage) -> int:
    assert _use_count is not None
    return _use_count(storage._cdata)


class _Slot:
    """One shared storage: ``capacity`` batch bytes, then the counters
    (tensors sent, released)."""

    def __init__(self, nbytes: int) -> None:
        self.capacity = -(-nbytes // _TAIL) * _TAIL
        self.storage = torch.UntypedStorage._new_shared(self.capacity + _TAIL)
        self.counters = _counters(self.storage, self.capacity)
        self.counters.zero_()
        self.baseline = _uses(self.storage)  # the pool's own: this object and its counters

    def free(self) -> bool:
        # The use count first: the feeder thread counts the batch sent while
        # it pickles, before it drops it.
        if _uses(self.storage) != self.baseline:
            return False
        sent, released = self.counters.tolist()
        return sent == released

    def view(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
        return torch.empty(0, dtype=dtype).set_(self.storage, 0, shape, strides)


def _counters(storage: torch.UntypedStorage, at: int) -> torch.Tensor:
    """[sent, released] at byte ``at``: one writer each (worker, main process),
    aligned 8-byte words."""
    return torch.empty(0, dtype=torch.int64).set_(storage, at // 8, (2,), (1,))


class WorkerPool:
    """This worker's slots (see the module doc); shared by its threads."""

    def __init__(self, slots: int = POOL_SLOTS) -> None:
        self.depth = slots
        self.slots: list[_Slot] = []
        self.by_address: dict[int, _Slot] = {}
        self.lock = threading.Lock()
        self.reused = self.made = self.full = 0  # batches into an old slot / a new one / none

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> Optional[torch.Tensor]:
        """A contiguous (shape, dtype) tensor on a free slot (its storage's
        own, not a view), None when every slot is held and the pool is full."""
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if _use_count is None or nbytes == 0:
            return None
        with self.lock:
            free = [s for s in self.slots if s.free()]
            fit = next((s for s in free if s.capacity >= nbytes), None)
            if fit is not None:
                self.reused += 1
                return fit.view(shape, dtype)
            if len(self.slots) >= self.depth and free:  # a free slot too small: replace it
                self._drop(free[0])
            if len(self.slots) >= self.depth:
                self.full += 1
                return None
            slot = _Slot(nbytes)
            self.slots.append(slot)
            self.by_address[slot.storage.data_ptr()] = slot
            self.made += 1
            return slot.view(shape, dtype)

    def _drop(self, slot: _Slot) -> None:
        self.slots.remove(slot)
        del self.by_address[slot.storage.data_ptr()]

    def slot_of(self, tensor: torch.Tensor) -> Optional[_Slot]:
        return self.by_address.get(tensor.untyped_storage().data_ptr())


_pool: Optional[WorkerPool] = None
_pool_pid = -1
_pool_lock = threading.Lock()


def worker_pool() -> WorkerPool:
    """This process's pool (a forked child starts its own)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool, _pool_pid = WorkerPool(), os.getpid()
        return _pool


def this_process_pool() -> Optional[WorkerPool]:
    """This process's pool if it made one (a forked child's inherited one is
    its parent's), without making one."""
    return _pool if _pool_pid == os.getpid() else None


def pool_counts() -> dict[str, int]:
    """This process's batches into a reused slot, a new slot, and none (the
    pool full): for tests and the fault helper."""
    pool = this_process_pool()
    if pool is None:
        return {"reused": 0, "made": 0, "full": 0, "slots": 0}
    return {"reused": pool.reused, "made": pool.made, "full": pool.full,
            "slots": len(pool.slots)}


class SlotView(torch.Tensor):
    """A tensor on a worker's pool slot. torch's default ``__torch_function__``
    keeps the subclass on every result, so a view made of it (by a collate)
    is one too and cannot leave by torch's own reduction, which would send
    the slot's memory without the flag. Received as a plain tensor."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        plain = self.as_subclass(torch.Tensor)
        pool = this_process_pool()
        slot = None if pool is None else pool.slot_of(self)
        if pool is None or slot is None or self.requires_grad or self.numel() == 0:
            return reduce_tensor(plain)  # not on a slot (a copy a collate made): as torch sends it
        with pool.lock:
            slot.counters[0] += 1
        return (_rebuild, (slot.storage, slot.capacity, plain.storage_offset(),
                           tuple(plain.shape), tuple(plain.stride()), plain.dtype))


# -- the main process: tensors borrowing a slot, each counted released at its end

_release_lock = threading.Lock()  # the pin thread receives, the loop drops
_borrowed = 0  # received tensors still alive (tests)


def _rebuild(storage: torch.UntypedStorage, counters_at: int, offset: int,
             shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The received view, as a plain tensor on a storage of its own that
    borrows the slot's bytes: its end releases it (module doc)."""
    global _borrowed
    itemsize = torch.empty((), dtype=dtype).element_size()
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    raw = torch.empty(0, dtype=torch.uint8).set_(storage, offset * itemsize,
                                                 (extent * itemsize,), (1,))
    exporter = raw.numpy()  # holds the slot's storage; its end is the release
    with _release_lock:
        _borrowed += 1
    weakref.finalize(exporter, _release, _counters(storage, counters_at)).atexit = False
    borrowed = torch.frombuffer(exporter, dtype=dtype).untyped_storage()
    return torch.empty(0, dtype=dtype).set_(borrowed, 0, shape, stride)


def _release(counters: torch.Tensor) -> None:
    global _borrowed
    with _release_lock:
        counters[1] += 1
        _borrowed -= 1


def borrowed() -> int:
    """Received tensors on worker slots still alive in this process (tests)."""
    return _borrowed
