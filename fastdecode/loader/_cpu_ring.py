"""The CPU ring: FastLoader's shared batch slots, which its workers decode each
batch into once and the main process hands on as a view.

The slots (one (batch, C, H, W) shape and dtype) are reserved once in the
main process and not touched there; a worker maps a slot
(:func:`map_slot`) just before it first writes there, so a worker's start
pays only its first slots. :class:`RingSampler`, in the main process, gives
each dispatched batch a slot that is proven free: not in flight, and no
tensor outside the ring still views it (its storage's use count is back to
what it was when the ring made it). :class:`RingFiller`, in the worker,
decodes the batch into that slot through ``batches_into``
(``batching/_buffers.py``) and returns only (slot, rows, targets). A batch
whose slot is not free (the consumer keeps many) is made fresh, as without
the ring. FastLoader's ``batch_transform`` (MixUp, CutMix) runs in the worker
on the batch in its slot, in place (``batching/_mixing.py``); a ring of no
slots is the path of a batch transform whose batches have no fixed shape.

Decision record: docs/decisions/loaders.md ("The CPU ring", "FastLoader at 8
workers on 2 cores", "Mapped as used, not at the start").
"""

from __future__ import annotations

import resource
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils.data import default_collate

from fastdecode.batching._buffers import batches_into, holders, shared_empty, storage_use_count
from fastdecode.batching._mixing import Collated, transform_batch
from fastdecode.batching._seeding import carry, later_carried
from fastdecode.loader._protocol import read_ahead_of

__all__ = ["CpuRing", "RingFiller", "RingSampler", "SlotBatch", "map_slot"]


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
        self.slots = [shared_empty(shape, dtype) for _ in range(slots)]
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
    byte per page: fork copies no page tables of a shared mapping, so a
    worker's first write to a slot would fault once per 4 KiB page, and a
    read fault maps the neighbouring pages too (the kernel's fault-around),
    writable in shared memory (docs/decisions/loaders.md, "FastLoader at 8
    workers on 2 cores"). A page no process has touched yet is zeroed by the
    kernel at this read instead (one fault a page, as a fresh batch's write)."""
    whole = torch.empty(0, dtype=torch.uint8).set_(slot.untyped_storage())
    whole[::resource.getpagesize()].max()


class RingFiller(torch.utils.data.Dataset):
    """Runs in the workers: the batch decoded into its ring slot, returned as
    ("slot", slot, rows, [target, ...]); without a slot, or when the dataset did
    not write the slot, ("batch", collate(samples)). With a batch
    ``transform``: applied after, in place in the slot ("slot", slot, rows,
    :class:`~fastdecode.batching._mixing.Collated` targets), or on the
    collated batch."""

    def __init__(self, dataset: Any, ring: CpuRing, collate: Callable[[Any], Any],
                 transform: Optional[Callable] = None) -> None:
        self.dataset = dataset
        self.slots = ring.slots
        self.collate = collate
        self.transform = transform
        self.mapped: set[int] = set()  # slots map_slot mapped in this worker

    def _made(self, batch: SlotBatch, samples: Any) -> tuple:
        """("batch", the collated batch, transformed)."""
        collated = self.collate(samples)
        if self.transform is not None:
            images, targets = collated
            collated = transform_batch(self.transform, images, targets, batch)
        return "batch", collated

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, batch: SlotBatch):
        indices = carry(batch, list(batch))  # FastLoader(resumable=True): seeded by position
        read_ahead = read_ahead_of(self.dataset)
        if read_ahead is not None and batch.later:  # this batch's reads, then the next's
            read_ahead(indices)
            read_ahead(batch.later)
        if batch.slot is None:
            return self._made(batch, self.dataset.__getitems__(indices))
        if batch.slot not in self.mapped:  # its first write here: map it whole first
            map_slot(self.slots[batch.slot])
            self.mapped.add(batch.slot)
        dest = self.slots[batch.slot][:len(indices)]
        with batches_into(dest):
            samples = self.dataset.__getitems__(indices)
        images = [s[0] for s in samples]
        if not all(isinstance(x, torch.Tensor) and x.data_ptr() == dest[k].data_ptr()
                   for k, x in enumerate(images)):
            return self._made(batch, samples)
        # the targets travel as Python objects and are collated in the main
        # process: a worker then creates no shared memory per batch (none
        # to leak when it is killed, no descriptor to hand over)
        targets = [s[1] for s in samples]
        if self.transform is None:
            return "slot", batch.slot, len(indices), targets
        mixed, soft = transform_batch(self.transform, dest, default_collate(targets), batch)
        if not (isinstance(mixed, torch.Tensor) and mixed.data_ptr() == dest.data_ptr()
                and mixed.shape == dest.shape):  # a transform that made a new batch
            return "batch", (mixed, soft)
        return "slot", batch.slot, len(indices), Collated(soft)
