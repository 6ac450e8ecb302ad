"""A user's collate whose batch crosses from a worker in one reused shared slot, not fresh shared memory.

DataLoader moves each tensor a worker returns through fresh shared memory:
a new segment, its pages faulted and zeroed, the tensor copied in, then
mapped, and unmapped, in the main process. For a detection batch (lsj: a
1024 x 1024 float image and its masks, 17 MB a sample) that costs about as
much CPU as computing the sample (docs/decisions/detection.md, "What moving
a sample costs"). :class:`SlotCollate` runs the user's collate, then, in a
worker, copies the batch's plain CPU tensors of ``MIN_BYTES`` or more (not
already in shared memory) into one slot of the worker's
shared pool (:mod:`fastdecode.batching._shared_pool`: mapped once, handed
out again once the main process has let go of every tensor received from
it) as :class:`~fastdecode.batching._shared_pool.SlotView`, received as
plain tensors. A tensor of another type (a tv_tensor, a subclass) and a
batch when no slot is free cross as DataLoader sends them. Decision record:
docs/decisions/detection.md ("What moving a sample costs").
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.data import get_worker_info

from fastdecode.batching._shared_pool import SlotView, worker_pool

__all__ = ["MIN_BYTES", "SlotCollate"]

_ALIGN = 64  # each tensor on its own cache line in the slot
# smaller tensors (labels, boxes) cross as DataLoader sends them: one that the
# loop keeps (labels for a metric) then holds no slot
MIN_BYTES = 1 << 16


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class SlotCollate:
    """``collate_fn``, its batch's plain tensors moved into a pool slot in a worker.

    Parameters
    ----------
    collate_fn : callable
        The user's collate (its result's structure, lists, tuples and dicts
        of tensors and other values, is kept).
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        out = self.collate_fn(batch)
        if get_worker_info() is None:
            return out
        leaves, spec = tree_flatten(out)
        moved = [i for i, leaf in enumerate(leaves)
                 if type(leaf) is torch.Tensor and leaf.device.type == "cpu"
                 and not leaf.requires_grad and leaf.nbytes >= MIN_BYTES and not leaf.is_shared()]
        if not moved:
            return out
        total = sum(_aligned(leaves[i].nbytes) for i in moved)
        slot = worker_pool().take((total,), torch.uint8)
        if slot is None:  # every slot held by the main process: as DataLoader sends it
            return out
        at = 0
        for i in moved:
            leaf = leaves[i]
            view = slot[at:at + leaf.nbytes].view(leaf.dtype).view(leaf.shape)
            view.copy_(leaf)
            leaves[i] = view.as_subclass(SlotView)
            at += _aligned(leaf.nbytes)
        return tree_unflatten(leaves, spec)

    def __repr__(self) -> str:
        return f"SlotCollate({self.collate_fn!r})"
