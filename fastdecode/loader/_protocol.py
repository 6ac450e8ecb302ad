"""What FastLoader needs of a dataset, as typing Protocols.

FastLoader loads any map-style dataset as DataLoader does
(:class:`LoaderDataset`: ``__len__``, ``__getitem__``, and ``__getitems__``
when it has one). A dataset that has more takes the fast paths, each chosen
by what the dataset has, never by its type (the loader imports no dataset):

- :class:`RingDataset` (``fixed_sample_shape``, ``pixel_table``,
  ``decode_batch_into``): the CPU and CUDA batch rings, which the workers
  decode each batch into in place; with ``_ring_table`` and ``_slot_erases``
  (read when present) a chain whose tensor step ends in a fused RandomErasing
  goes through the rings too, the CUDA ring writing each slot's boxes after
  the table;
- :class:`ReadAheadDataset` (``_read_ahead``): the reads of the batch a
  worker (or the thread pool) gets next, started before it decodes this one;
- :class:`PlannedDataset` (``_plan_batch``, ``_render_plan``,
  ``_finish_plan``): ``threads=N``'s batch split into its random draws, made
  in the loader's thread, and its decode, run in a pool thread; the plan is
  the dataset's own, opaque to the loader;
- ``samples`` ((path, target) pairs) and ``classes``, read when present: the
  dataset's fingerprint in a saved state (``loader/_resume.py``).

FastImageFolder, FastDatasetFolder and FastImageList have every member. The
underscored ones are fastdecode's internal protocol between its datasets and
its loader, not public API. Decision record: docs/decisions/loaders.md.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence, cast

import torch

__all__ = ["LoaderDataset", "PlannedDataset", "ReadAheadDataset", "RingDataset", "fixed_shape",
           "planned_dataset", "read_ahead_of", "ring_dataset", "ring_table", "slot_erases_of"]


class LoaderDataset(Protocol):
    """A map-style dataset, as DataLoader takes it."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class RingDataset(LoaderDataset, Protocol):
    """A dataset whose batches a loader's ring can hold: every sample has one
    uint8 (C, H, W) shape before the chain's per-pixel tensor step."""

    def fixed_sample_shape(self) -> Optional[tuple[int, ...]]:
        """(C, H, W) of every sample's uint8 pixels, or None when it varies."""
        ...

    def pixel_table(self) -> Optional[torch.Tensor]:
        """The (C, 256) table of the per-pixel tensor step (None: the pixels
        are the result), which the CUDA ring applies on the GPU."""
        ...

    def decode_batch_into(self, indices: list[int], pixels: Any) -> list[Any]:
        """Decodes ``indices`` into the uint8 ``pixels`` (slot by slot) and
        returns their targets."""
        ...


class ReadAheadDataset(Protocol):
    """A dataset that can start the reads of samples before it decodes them."""

    def _read_ahead(self, indices: Sequence[int]) -> None:
        """Starts the reads of samples ``indices``' files, in order."""
        ...


class PlannedDataset(Protocol):
    """A dataset whose batch splits into its draws and its decode
    (FastLoader ``threads=N``)."""

    def _plan_batch(self, indices: list[int], seed: int,
                    keys: Optional[list[int]] = None) -> Optional[Any]:
        """The batch's random draws, made in the calling thread under
        per-sample seeds from ``seed`` (keyed by ``keys``, else the slots);
        None when its items cannot be split."""
        ...

    def _render_plan(self, plan: Any) -> Optional[list[Any]]:
        """The batch's samples rendered from ``plan`` without drawing (any
        thread); None when :meth:`_finish_plan` has work left."""
        ...

    def _finish_plan(self, plan: Any) -> list[Any]:
        """The batch's samples, finished in the thread that planned it."""
        ...


def fixed_shape(dataset: Any) -> Optional[tuple[int, ...]]:
    """``dataset.fixed_sample_shape()``, None for a dataset without one."""
    fixed = getattr(dataset, "fixed_sample_shape", None)
    return fixed() if callable(fixed) else None


def ring_dataset(dataset: Any, with_table: bool = False) -> Optional[RingDataset]:
    """``dataset`` as a :class:`RingDataset` when it decodes batches in place
    (``decode_batch_into``; ``with_table``: and has ``pixel_table``), else None."""
    if not hasattr(dataset, "decode_batch_into"):
        return None
    if with_table and not hasattr(dataset, "pixel_table"):
        return None
    return cast(RingDataset, dataset)


def ring_table(dataset: Any) -> Optional[torch.Tensor]:
    """The (C, 256) table a ring applies to ``dataset``'s uint8 batches (None:
    the pixels are the result before any erasing): ``_ring_table()`` when the
    dataset has it (a chain with a fused RandomErasing too), else
    ``pixel_table()``."""
    table = getattr(dataset, "_ring_table", None) or getattr(dataset, "pixel_table", None)
    return table() if callable(table) else None


def slot_erases_of(dataset: Any) -> Optional[Callable[[Any], Optional[list]]]:
    """The dataset's ``_slot_erases`` (each slot's erasing boxes after
    ``decode_batch_into``), None for a dataset without one."""
    return getattr(dataset, "_slot_erases", None)


def read_ahead_of(dataset: Any) -> Optional[Callable[[Sequence[int]], None]]:
    """The dataset's ``_read_ahead``, None for a dataset without one."""
    return getattr(dataset, "_read_ahead", None)


def planned_dataset(dataset: Any) -> Optional[PlannedDataset]:
    """``dataset`` as a :class:`PlannedDataset` when it plans its batches, else None."""
    return cast(PlannedDataset, dataset) if getattr(dataset, "_plan_batch", None) is not None \
        else None
