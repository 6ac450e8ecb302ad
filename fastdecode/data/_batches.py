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
- A consumer that hands the batch on as it is, without a copy, calls
  :func:`note_batch_taken_whole` in the producing thread; from then on that
  thread's batches are fresh (in shared memory, in a DataLoader worker), never
  reused: the consumer, not the pool, owns what it took.
"""

from __future__ import annotations

import math
import threading

import torch

__all__ = ["BatchBuffers", "holders", "new_batch", "note_batch_taken_whole", "storage_use_count"]


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def new_batch(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A batch tensor; in a DataLoader worker it is born in shared memory so
    sending it to the main process copies nothing."""
    if not _in_worker():
        return torch.empty(shape, dtype=dtype)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


# How many tensors share a storage; private in torch, so optional: without
# it no batch that leaves __getitems__ is reused.
storage_use_count = getattr(torch._C, "_storage_Use_Count", None)


def holders(tensor: torch.Tensor) -> int:
    """References to ``tensor``'s storage (0 when torch cannot say)."""
    return storage_use_count(tensor.untyped_storage()._cdata) if storage_use_count else 0


_taken_whole = threading.local()


def note_batch_taken_whole() -> None:
    """Called by a collate that hands this thread's batch on as it is: the
    next batches must be fresh (in shared memory, in a worker), never reused."""
    _taken_whole.flag = True


class BatchBuffers(threading.local):
    """This thread's batch buffers, reused from one batch to the next when
    nothing else holds them: fresh memory costs a page fault per 4 KiB,
    which on some VMs rivals the decode itself.

    A buffer is reused only when it is proven free (see the module's
    protocol). A worker's first batch is born in shared memory, as every
    batch was before this pool, because the collate might take it whole;
    once a consumer has said it does, or a batch that left was sent as it
    is, this thread hands out only such fresh batches."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[torch.Tensor, int]] = {}
        self.sent = False
        self.handed_out = 0

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
            leaves: bool = True) -> torch.Tensor:
        """A (shape, dtype) buffer; ``leaves`` when it goes out to the
        caller, rather than being consumed inside __getitems__."""
        kept = self.kept.pop(name, None)
        if leaves:
            self.handed_out += 1
            self.sent = (self.sent or getattr(_taken_whole, "flag", False)
                         or storage_use_count is None
                         or (kept is not None and kept[0].is_shared()))
            if self.sent or (self.handed_out == 1 and _in_worker()):
                return new_batch(shape, dtype)
        if kept is not None:
            buf, count = kept
            if (tuple(buf.shape) == shape and buf.dtype == dtype and not buf.is_shared()
                    and holders(buf) == count):
                self.kept[name] = kept
                return buf
        buf = torch.empty(shape, dtype=dtype)
        self.kept[name] = (buf, holders(buf))
        return buf
