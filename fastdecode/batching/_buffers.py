"""Batch buffers: the memory a dataset decodes its batches into, reused when
it is proven free, and the protocol by which a collate takes a batch whole.

The protocol, between a producer (``FastDatasetFolder.__getitems__``) and a
consumer (a collate function, ``fastdecode.collate``):

- The producer asks its thread's :class:`BatchBuffers` for each output
  tensor with ``get(name, shape, dtype, leaves=...)``; ``leaves=True`` for a
  tensor whose views go out to the caller (the batch), ``leaves=False`` for
  scratch consumed inside the call (the uint8 pixels a float tail reads).
- A buffer is handed out again only when it is proven free: no tensor
  outside the pool still views its storage (the storage's use count is back
  to what it was when the pool made it) and it was never moved to shared
  memory (pickling a tensor to another process does that in place).
- The samples are :class:`BatchRow` views of the batch (in a worker, when
  the batch is on a slot of the worker's pool, :class:`~fastdecode.data.
  _shared_pool.SlotView`), registered in torch's ``default_collate_fn_map``
  at import: the stock ``default_collate`` reaches :func:`collate_rows`,
  which takes the rows whole when they are one batch in order (as
  ``fastdecode.collate`` does) and otherwise stacks them as torch does.
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
- A loader that owns the memory the batch must land in (a slot of its
  :class:`CpuRing`) wraps the producer's call in :func:`batches_into`: the
  next batch handed out is that slot, when its shape and dtype are the ones
  asked for, and the producer writes the result there once.

The :class:`CpuRing` is FastLoader's: shared batch slots reserved once in the
main process, each mapped by a worker (:func:`map_slot`) just before it
first writes there (so a worker's start pays only its first slots), and
handed to a batch only when proven free: not in flight, and no tensor
outside the ring still views the slot (its storage's use count is back to
what it was when the ring made it). A batch whose slot is not free (the
consumer keeps many) is made fresh, as without the ring.
"""

from __future__ import annotations

import math
import resource
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils.data._utils.collate import collate_tensor_fn, default_collate_fn_map

from fastdecode.batching._seeding import carry, later_carried
from fastdecode.batching._shared_pool import SlotView, worker_pool

__all__ = ["POOL_DEPTH", "BatchBuffers", "BatchRow", "CpuRing", "RingFiller", "RingSampler",
           "batches_into", "collate_rows", "holders", "map_slot", "note_batch_taken_whole",
           "storage_use_count", "whole_batch"]

# In-process batches taken whole: the one the consumer holds, the one being made.
POOL_DEPTH = 2


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def _shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
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
            return _shared_empty(shape, dtype) if pooled is None else pooled
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


class SlotBatch(list):
    """A batch of indices and the ring slot it is decoded into (None: none
    was free, the batch is made fresh); ``later``: the indices of the batch
    the same worker gets next (its reads start first, ``storage/_readahead.py``),
    None when unknown."""

    def __init__(self, indices: list[int], slot: Optional[int],
                 later: Optional[list[int]] = None) -> None:
        super().__init__(indices)
        self.slot = slot
        self.later = later


class CpuRing:
    """Shared batch slots of one (batch, C, H, W) shape and dtype, for a
    loader's workers to write each batch into once (see the module doc)."""

    def __init__(self, slots: int, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        # born in shared memory and not touched here: torch reserves the
        # pages (fallocate), the kernel zeroes each at its first touch, in
        # the worker that first maps the slot (zeroed here, the 19 float
        # slots of 8 workers, 2.9 GB, held the workers' start 2.1-4.7 s)
        self.slots = [_shared_empty(shape, dtype) for _ in range(slots)]
        self.baseline = [holders(s) for s in self.slots]
        self.in_flight: set[int] = set()
        self.reused = self.fresh = 0  # batches decoded into a slot / made fresh

    def pick(self) -> Optional[int]:
        """A free slot, now in flight; None when every slot is held."""
        for i, slot in enumerate(self.slots):
            if i not in self.in_flight and storage_use_count is not None \
                    and holders(slot) == self.baseline[i]:
                self.in_flight.add(i)
                return i
        return None

    def take(self, slot: int, rows: int) -> torch.Tensor:
        """The arrived batch of ``slot``: a view, which holds the slot until
        the consumer drops it (and every view of it)."""
        self.in_flight.discard(slot)
        self.reused += 1
        return self.slots[slot][:rows]


class RingSampler:
    """Gives each batch of ``batch_sampler`` a free slot of ``ring``, in the
    main process, as the DataLoader dispatches it, and the batch its worker
    (one of ``workers``, round-robin) gets next."""

    def __init__(self, batch_sampler, ring: CpuRing, workers: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.ring = ring
        self.workers = workers

    def __iter__(self) -> Iterator[SlotBatch]:
        return self._slotted(self.batch_sampler, fresh=True)

    def ahead(self, batch_sampler) -> Iterator[SlotBatch]:
        """The batches of ``batch_sampler`` (the next epoch's, predicted) with
        their slots, drawn while this pass's batches are still in flight."""
        return self._slotted(batch_sampler, fresh=False)

    def hold_only(self, items) -> None:
        """The slots in flight are those of ``items`` (the batches dispatched
        and not yet taken), the others being dropped or taken."""
        self.ring.in_flight = {i.slot for i in items if i.slot is not None}

    def _slotted(self, batch_sampler, fresh: bool) -> Iterator[SlotBatch]:
        if fresh:
            # A new pass starts (at its first batch) after the previous one's
            # workers were drained (persistent) or shut down: no slot of it
            # is still being written.
            self.ring.in_flight.clear()
        for indices, later in later_carried(batch_sampler, self.workers):
            yield carry(indices, SlotBatch(indices, self.ring.pick(), later))

    def __len__(self) -> int:
        return len(self.batch_sampler)


def map_slot(slot: torch.Tensor) -> None:
    """Maps every page of a shared ``slot`` into this process, reading one
    byte per page. fork copies no page tables of a shared mapping, so a
    worker's first write to a slot faulted once per page (one minor fault
    per 4 KiB, ~1.2-1.6 us each on the 2-core VM: 45-60 ms for a float slot
    of 256 x 3 x 224 x 224). A read fault maps the neighbouring pages too
    (the kernel's fault-around, 64 KiB by default), writable in shared
    memory, so this costs ~10 ms for such a slot (DESIGN.md, "FastLoader at
    8 workers"). A page no process has touched yet is zeroed by the kernel
    at this read instead (one fault a page, as a fresh batch's write)."""
    whole = torch.empty(0, dtype=torch.uint8).set_(slot.untyped_storage())
    whole[::resource.getpagesize()].max()


class RingFiller(torch.utils.data.Dataset):
    """Runs in the workers: the batch decoded into its ring slot, returned as
    ("slot", slot, rows, [target, ...]); without a slot, or when the dataset did
    not write the slot, ("batch", collate(samples))."""

    def __init__(self, dataset, ring: CpuRing, collate: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.slots = ring.slots
        self.collate = collate
        self.mapped: set[int] = set()  # slots map_slot mapped in this worker

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, batch: SlotBatch):
        indices = carry(batch, list(batch))  # FastLoader(resumable=True): seeded by position
        read_ahead = getattr(self.dataset, "_read_ahead", None)
        if read_ahead is not None and batch.later:  # this batch's reads, then the next's
            read_ahead(indices)
            read_ahead(batch.later)
        if batch.slot is None:
            return "batch", self.collate(self.dataset.__getitems__(indices))
        if batch.slot not in self.mapped:  # its first write here: map it whole first
            map_slot(self.slots[batch.slot])
            self.mapped.add(batch.slot)
        dest = self.slots[batch.slot][:len(indices)]
        with batches_into(dest):
            samples = self.dataset.__getitems__(indices)
        images = [s[0] for s in samples]
        if not all(isinstance(x, torch.Tensor) and x.data_ptr() == dest[k].data_ptr()
                   for k, x in enumerate(images)):
            return "batch", self.collate(samples)
        # the targets travel as Python objects and are collated in the main
        # process: a worker then creates no shared memory per batch (none
        # to leak when it is killed, no descriptor to hand over)
        return "slot", batch.slot, len(indices), [s[1] for s in samples]
