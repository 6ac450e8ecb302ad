"""The CUDA ring: page-locked shared batch slots that DataLoader workers
decode into and the main process copies to the GPU on a side stream.

The ring is allocated once in shared memory and registered with
``cudaHostRegister``, so the workers' writes are already pinned; the sampler
numbers each batch with a slot, the workers return only the slot number and
the targets, uint8 -> float and normalization run on the GPU, and a slot is
handed out again only after the CUDA event of its last copy completed. A
chain ending in a fused RandomErasing sends each slot's boxes (drawn in the
worker, their values in the result's dtype) with the targets, written on the
GPU after the table; FastLoader's ``batch_transform`` runs there after them,
on the batch on the GPU (seeded by the batch when it is seeded).

Importing this module needs no GPU; a :class:`CudaRing` is built only when
the caller asked for ``device='cuda'`` and CUDA is available. Decision
record: docs/decisions/loaders.md ("The CUDA ring").
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator, Optional

import torch

from fastdecode.batching._mixing import transform_batch
from fastdecode.batching._seeding import carry
from fastdecode.loader._protocol import slot_erases_of

__all__ = ["CudaRing", "RingWriter", "SlottedSampler", "erase_rows"]


class SlotBatch(list):
    """A batch of indices that also says which ring slot to decode into."""

    def __init__(self, indices: list[int], slot: int) -> None:
        super().__init__(indices)
        self.slot = slot


class SlottedSampler:
    """Numbers the batches of ``batch_sampler`` into ring slots."""

    def __init__(self, batch_sampler, slots: int) -> None:
        self.batch_sampler = batch_sampler
        self.slots = slots

    def __iter__(self):
        for n, indices in enumerate(self.batch_sampler):
            yield carry(indices, SlotBatch(list(indices), n % self.slots))

    def __len__(self) -> int:
        return len(self.batch_sampler)


class RingWriter(torch.utils.data.Dataset):
    """Runs in the workers: decodes a batch into its ring slot and returns
    only the slot number and the targets, and, when the chain erases or the
    loader has a batch transform, (each slot's erasing boxes, the batch's
    indices with their seeds)."""

    def __init__(self, dataset, ring: torch.Tensor, send_batch: bool = False) -> None:
        self.dataset = dataset
        self.ring = ring
        self.send_batch = send_batch
        self.erases_of = slot_erases_of(dataset)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, batch: SlotBatch):
        indices = carry(batch, list(batch))  # FastLoader(resumable=True): seeded by position
        pixels = self.ring[batch.slot][:len(indices)]
        targets = self.dataset.decode_batch_into(indices, pixels)
        erases = None if self.erases_of is None else self.erases_of(pixels)
        if erases is not None and not any(erases):
            erases = None
        if erases is None and not self.send_batch:
            return batch.slot, targets
        if erases is not None:  # NumPy values: no shared memory per batch
            erases = [tuple((i, j, h, w, v.numpy()) for i, j, h, w, v in boxes)
                      for boxes in erases]
        return batch.slot, targets, (erases, indices if self.send_batch else None)


def erase_rows(images: torch.Tensor, erases: Optional[list]) -> None:
    """Writes each row's erasing boxes (``(top, left, height, width,
    values)``, values a NumPy array in the images' dtype) into the (N, C, H, W)
    ``images`` in place, wherever they are (the CUDA ring: on the GPU), box
    after box, as the chain's own erase writes them."""
    for k, boxes in enumerate(erases or ()):
        for i, j, h, w, v in boxes:
            images[k, :, i:i + h, j:j + w] = torch.from_numpy(v).to(images.device)


def identity(x: Any) -> Any:
    """The ring's collate: the workers already return (slot, targets)."""
    return x


class CudaRing:
    """Page-locked shared slots, registered with CUDA once, and their events."""

    def __init__(self, slots: int, shape: tuple[int, ...]) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the CUDA ring needs CUDA, which is not available")
        self.ring = torch.empty((slots, *shape), dtype=torch.uint8).share_memory_()
        self.events: list[Optional[torch.cuda.Event]] = [None] * slots
        cudart = torch.cuda.cudart()
        self._ptr = self.ring.data_ptr()
        self._nbytes = self.ring.numel()
        # flags 0 = cudaHostRegisterDefault (portable pinned memory)
        err = cudart.cudaHostRegister(self._ptr, self._nbytes, 0)
        self.registered = int(err) == 0
        if not self.registered:
            warnings.warn(f"cudaHostRegister failed ({err}); copies will not be zero-copy",
                          RuntimeWarning, stacklevel=2)

    def wait_free(self, slot: int) -> None:
        event = self.events[slot]
        if event is not None:
            event.synchronize()
            self.events[slot] = None

    def batches(self, it: Iterator[Any], device: torch.device, stream, ahead: int,
                table: Optional[torch.Tensor],
                transform: Optional[Callable] = None) -> Iterator[Any]:
        """(images, targets) on ``device`` for each (slot, targets[, extra])
        of ``it``, a DataLoader over a :class:`RingWriter` with ``ahead``
        batches in flight; ``table`` (C, 256) maps the uint8 pixels on the
        GPU, then each slot's erasing boxes are written, then ``transform``
        (the loader's batch transform) runs on the batch."""
        slots = len(self.events)
        n = 0
        try:
            while True:
                # Fetching batch n lets the loader dispatch batch n + ahead
                # into slot (n + ahead) % slots: its last copy must be done.
                self.wait_free((n + ahead) % slots)
                try:
                    slot, targets, *extra = next(it)
                except StopIteration:
                    return
                erases, batch = extra[0] if extra else (None, None)
                with torch.cuda.stream(stream):
                    images = self.ring[slot][:len(targets)].to(device, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(stream)
                    images = apply_table(table, images)
                    erase_rows(images, erases)
                    targets = torch.as_tensor(targets).to(device, non_blocking=True)
                    if transform is not None:
                        images, targets = transform_batch(transform, images, targets, batch)
                self.events[slot] = event
                torch.cuda.current_stream(device).wait_stream(stream)
                images.record_stream(torch.cuda.current_stream(device))
                n += 1
                yield [images, targets]
        finally:
            for slot in range(slots):
                self.wait_free(slot)

    def close(self) -> None:
        for slot in range(len(self.events)):
            self.wait_free(slot)
        if self.registered:
            torch.cuda.cudart().cudaHostUnregister(self._ptr)
            self.registered = False


def apply_table(table: Optional[torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> the chain's per-pixel result, on the images' device."""
    if table is None:
        return images
    channels = torch.arange(images.shape[1], device=images.device).view(1, -1, 1, 1)
    return table[channels, images.long()]
