"""Batch buffers and collate: the memory a dataset decodes its batches into,
reused when it is proven free, and the collate that takes a batch whole.

The protocol, between a producer (``FastDatasetFolder.__getitems__``) and a
consumer (a collate function, :func:`collate`):

- The producer asks its thread's :class:`BatchBuffers` for each output
  tensor with ``get(name, shape, dtype, leaves=...)``; ``leaves=True`` for a
  tensor whose views go out to the caller (the batch), ``leaves=False`` for
  scratch consumed inside the call (the uint8 pixels a float tail reads).
- A buffer is handed out again only when it is proven free: no tensor
  outside the pool still views its storage (the storage's use count is back
  to what it was when the pool made it) and it was never moved to shared
  memory (pickling a tensor to another process does that in place).
- The samples are :class:`BatchRow` views of the batch (in a worker, when
  the batch is on a slot of the worker's pool, :class:`~fastdecode.batching.
  _shared_pool.SlotView`), registered in torch's ``default_collate_fn_map``
  at import: the stock ``default_collate`` reaches :func:`collate_rows`,
  which takes the rows whole when they are one batch in order (as
  :func:`collate` does) and otherwise stacks them as torch does.
  ``ds[i]`` (``__getitem__``) stays a plain tensor.
- A consumer that hands the batch on as it is, without a copy, calls
  :func:`note_batch_taken_whole` in the producing thread, and hands on a view
  of the batch, never the tensor the producer was given (a new view shows in
  the storage's use count; a Python reference to the pool's own tensor would
  not). In the consumer's own process (``num_workers=0``) later batches come
  from a pool of ``POOL_DEPTH`` buffers, each handed out (as a view) only
  when proven free: the consumer holds the previous batch while the next is
  made, and drops it after; when every buffer is held the batch is fresh.
- In a DataLoader worker every batch that leaves is written into a slot of
  the worker's shared pool (``_shared_pool``: released by the main process
  when it drops what it received); none free, a fresh shared batch.
- A loader that owns the memory the batch must land in (a slot of its CPU
  ring, ``loader/_cpu_ring.py``) wraps the producer's call in
  :func:`batches_into`: the next batch handed out is that slot, when its
  shape and dtype are the ones asked for, and the producer writes the result
  there once.

Decision record: docs/decisions/datasets.md ("Batches in place", "A worker's
batches live on its shared pool, released by the main process").
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils.data._utils.collate import (
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
)

from fastdecode.batching._shared_pool import SlotView, worker_pool

__all__ = ["POOL_DEPTH", "BatchBuffers", "BatchRow", "batches_into", "collate", "collate_rows",
           "holders", "note_batch_taken_whole", "shared_empty", "storage_use_count", "whole_batch"]

# In-process batches taken whole: the one the consumer holds, the one being made.
POOL_DEPTH = 2


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor born in shared memory, its storage's own (not a
    view: its rows' ``_base`` is this tensor)."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape, strides)


# How many tensors share a storage; private in torch, so optional: without
# it no batch that leaves __getitems__ is reused.
storage_use_count = getattr(torch._C, "_storage_Use_Count", None)


def holders(tensor: torch.Tensor) -> int:
    """References to ``tensor``'s storage (0 when torch cannot say)."""
    return storage_use_count(tensor.untyped_storage()._cdata) if storage_use_count else 0


_taken_whole = threading.local()


def note_batch_taken_whole() -> None:
    """Called by a collate that hands this thread's batch on as it is: the
    next in-process batches come from the pool, never the kept buffer."""
    _taken_whole.flag = True


class BatchRow(torch.Tensor):
    """A sample of a batch ``__getitems__`` made: a view of that batch, which
    torch's ``default_collate`` hands to :func:`collate_rows`. Every op on
    it gives a plain tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]


def whole_batch(samples: Sequence[Any]) -> Optional[torch.Tensor]:
    """A view of the batch tensor when `samples` are its slots 0..n-1 in
    order (its first n rows when it has more: a reused buffer holding a
    shorter batch), else None. A view, never the tensor itself: the batch
    buffers' proof that a buffer is free sees views, not a Python reference
    to their own tensor. Rows on a worker's pool slot give a
    :class:`SlotView` (it crosses to the main process by the pool's rules)."""
    if not samples or not all(isinstance(s, torch.Tensor) for s in samples):
        return None
    base = samples[0]._base
    if base is None or base.dim() != samples[0].dim() + 1 or base.shape[0] < len(samples):
        return None
    stride = base.stride(0)
    for k, s in enumerate(samples):
        if s._base is not base or s.storage_offset() != base.storage_offset() + k * stride:
            return None
    whole = base[:len(samples)]
    return whole.as_subclass(SlotView) if type(samples[0]) is SlotView else whole


def collate_rows(batch: Sequence[torch.Tensor], *,
                 collate_fn_map: Optional[dict] = None) -> torch.Tensor:
    """``default_collate`` for :class:`BatchRow` / :class:`SlotView` samples:
    the batch whole when they are one batch in order, else torch's stack
    (a collate that reorders or drops samples: the copy it always made)."""
    whole = whole_batch(batch)
    if whole is None:
        return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    note_batch_taken_whole()
    return whole


# torch's documented extension point: exact types are looked up first
default_collate_fn_map[BatchRow] = collate_rows
default_collate_fn_map[SlotView] = collate_rows


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


_destination = threading.local()


@contextmanager
def batches_into(dest: torch.Tensor) -> Iterator[None]:
    """Inside, the batch this thread's :class:`BatchBuffers` hands out next
    is ``dest`` (when the shape and dtype asked for are its own)."""
    _destination.tensor = dest
    try:
        yield
    finally:
        _destination.tensor = None


def _holds(have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """A buffer of shape ``have`` can hold a batch of shape ``want`` in its
    first rows."""
    return len(have) == len(want) and have[1:] == want[1:] and 0 < want[0] <= have[0]


class BatchBuffers(threading.local):
    """This thread's batch buffers, reused from one batch to the next when
    nothing else holds them: fresh memory costs a page fault per 4 KiB,
    which on some VMs rivals the decode itself.

    A buffer is reused only when it is proven free (see the module's
    protocol). In a DataLoader worker the batch goes into a slot of the
    worker's shared pool (a fresh shared batch when none is free); in the
    consumer's process it is the kept buffer, or once a collate has taken a
    batch whole, one of the pool of ``POOL_DEPTH``; once a batch that left
    was sent to another process as it is, this thread's are all fresh."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[torch.Tensor, int]] = {}
        self.pools: dict[str, list[tuple[torch.Tensor, int]]] = {}  # taken whole, in-process
        self.sent = False
        # what the samples of the last batch handed out are (see rows())
        self.row_type: type = BatchRow

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
            leaves: bool = True) -> torch.Tensor:
        """A (shape, dtype) buffer; ``leaves`` when it goes out to the
        caller, rather than being consumed inside __getitems__."""
        dest = getattr(_destination, "tensor", None) if leaves else None
        if dest is not None and tuple(dest.shape) == shape and dest.dtype == dtype:
            _destination.tensor = None
            self.row_type = torch.Tensor  # the loader's own slot: as it always was
            return dest
        if leaves and _in_worker():
            pooled = worker_pool().take(shape, dtype)
            self.row_type = BatchRow if pooled is None else SlotView
            return shared_empty(shape, dtype) if pooled is None else pooled
        kept = self.kept.pop(name, None)
        if leaves:
            self.row_type = BatchRow
            self.sent = (self.sent or storage_use_count is None
                         or (kept is not None and kept[0].is_shared()))
            if self.sent:
                return torch.empty(shape, dtype=dtype)
            if getattr(_taken_whole, "flag", False):
                return self._pooled(name, shape, dtype)
        if kept is not None:
            buf, count = kept
            if (_holds(tuple(buf.shape), shape) and buf.dtype == dtype and not buf.is_shared()
                    and holders(buf) == count):
                self.kept[name] = kept
                # a shorter batch (an epoch's last) is the buffer's first rows:
                # a fresh one would fault in every page, twice an epoch
                return buf if buf.shape[0] == shape[0] else buf[:shape[0]]
        buf = torch.empty(shape, dtype=dtype)
        self.kept[name] = (buf, holders(buf))
        return buf

    def rows(self, batch: torch.Tensor) -> list[torch.Tensor]:
        """The samples of ``batch`` (the last one handed out), as the type
        the collate protocol needs (the module doc)."""
        rows = batch.unbind(0)
        if self.row_type is torch.Tensor:
            return list(rows)
        return [row.as_subclass(self.row_type) for row in rows]

    def _pooled(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A view of a free buffer of this thread's pool for ``name`` (a
        consumer in this process takes the batches whole); a fresh batch when
        every one is held."""
        pool = self.pools.setdefault(name, [])
        free = [(buf, count) for buf, count in pool
                if not buf.is_shared() and holders(buf) == count]
        for buf, _ in free:
            if _holds(tuple(buf.shape), shape) and buf.dtype == dtype:
                return buf[:shape[0]]
        # a free buffer of another shape or dtype is nobody's: make room
        pool[:] = [entry for entry in pool if not any(entry[0] is f for f, _ in free)
                   and not entry[0].is_shared()]
        buf = torch.empty(shape, dtype=dtype)
        if len(pool) < POOL_DEPTH:
            pool.append((buf, holders(buf)))
            return buf[:shape[0]]
        return buf
