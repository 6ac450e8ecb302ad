"""The fast datasets' common class: its parts composed, its set-up, pickling
and the dataset side of torchdata's StatefulDataLoader protocol.

``_FastDataset`` is :class:`~fastdecode.datasets._batch.BatchPath` (the batch
path) over its bases, each a step below the one before:
:class:`~fastdecode.datasets._sample.OneSample` (one sample under
``on_error``), :class:`~fastdecode.datasets._chain.FusedChain` (the transform,
fused and followed) and :class:`~fastdecode.datasets._reading.SampleReads`
(the samples' bytes). A subclass's ``__init__`` (``datasets/_folder.py``,
``datasets/_image_list.py``) calls ``_setup_fast``, sets ``samples`` and
``targets``, then calls ``_setup_reads``. A pickled dataset (spawned workers)
whose targets still equal its samples' sends them as the compact arrays.
Decision record: docs/decisions/datasets.md.
"""

# No `from __future__ import annotations`: inspect.signature shows the public
# methods' annotations as objects.
from typing import Any, Callable, Optional

import numpy as np

from fastdecode.api import check_limits
from fastdecode.datasets import _stateful
from fastdecode.datasets._base import VisionDataset
from fastdecode.datasets._batch import BatchPath
from fastdecode.datasets._chain import LiveFused
from fastdecode.datasets._sample import ON_ERROR
from fastdecode.storage._samples import SamplesView, shared_int_list

__all__ = ["_FastDataset"]


class _FastDataset(BatchPath, VisionDataset):
    """What the fast datasets share (the module doc): the fused, followed
    transform, the error policy, the limits, the reads (local or remote), the
    batch path and FastLoader's planned path. A subclass's ``__init__`` calls
    :meth:`_setup_fast`, then sets ``samples``/``targets``."""

    def _setup_fast(self, root: Any, loader: Any, transform: Optional[Callable],
                    target_transform: Optional[Callable], exact: bool, on_error: str,
                    max_pixels: Optional[int], max_work_per_byte: Optional[int]) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.on_error = on_error
        self.skipped = 0
        self._live = LiveFused(bool(exact), check_limits(max_pixels, max_work_per_byte))
        self.loader = loader  # before the transform: it decides whether the chain is fused
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_buffers", None)  # per-thread buffers stay with their threads
        samples, targets = state.get("samples"), state.get("targets")
        if (isinstance(samples, SamplesView) and samples.store is not None
                and type(targets) is list and len(targets) == len(samples)
                and all(type(t) is int for t in targets)
                and np.array_equal(np.asarray(targets, dtype=np.int64),
                                   samples.store.target_array)):
            state["targets"] = _TARGETS_FROM_STORE  # rebuilt with shared ints on unpickling
        return state

    def __setstate__(self, state: dict) -> None:
        if state.get("targets") is _TARGETS_FROM_STORE:
            state["targets"] = shared_int_list(state["samples"].store.target_array)
        self.__dict__.update(state)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state for torchdata's ``StatefulDataLoader``: the
        random states its augmentations draw from, in the calling process.

        Under a stock DataLoader the dataset draws its random transforms from
        the global generators of the process that decodes (torch's, Python's
        ``random``, NumPy's), as torchvision's ImageFolder does: a worker's,
        seeded by DataLoader, or the training process's. StatefulDataLoader
        calls this in each worker after each batch (in-process: in its own
        ``state_dict()``) and keeps each worker's state as of the last batch
        the loop received, so that a resumed run draws what the uninterrupted
        run drew from there on. Nothing is decoded to resume, and the batch
        path (``__getitems__``) is kept.

        Returns
        -------
        dict
            Primitives only (``torch.load(weights_only=True)`` reads them),
            a few KB whatever the dataset's size: a kind and version, the
            dataset's size, and the three generators' states.
        """
        return _stateful.dataset_state(len(self))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` saved: sets the calling process's
        torch, Python and NumPy global random states to the saved ones.

        StatefulDataLoader calls it in each resumed worker (after the worker
        is seeded and its ``worker_init_fn`` ran) with that worker's saved
        state, and in-process at the resumed ``iter()``; there it also sets
        the training process's global generators to what they were at the
        save, so the loop's own draws after it match the uninterrupted run's
        too.

        Parameters
        ----------
        state_dict : dict
            What :meth:`state_dict` returned (in a StatefulDataLoader state,
            for instance read back with ``torch.load(weights_only=True)``).

        Raises
        ------
        ResumeError
            ``state_dict`` is not a fastdecode dataset state, is of another
            version or is malformed, or was saved for a dataset of another
            size; the message names what differs. Nothing is changed then.
        """
        _stateful.load_dataset_state(state_dict, len(self))



class _TARGETS_FROM_STORE:  # noqa: N801 - a marker pickled by reference (identity survives)
    """In a pickled dataset: targets equal the samples' targets (rebuilt from the store)."""
