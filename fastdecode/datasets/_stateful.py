"""The dataset side of torchdata's ``StatefulDataLoader`` protocol, for the fast
datasets (FastImageFolder, FastDatasetFolder, FastImageList).

Under a stock DataLoader a fast dataset draws its random augmentations from
the global generators of the process that decodes (torch's, Python's
``random``, NumPy's legacy one), as torchvision's ImageFolder does, and
nothing else of it changes from batch to batch: its state is those three
generators' states as the calling process has them (:func:`dataset_state`),
set back by :func:`load_dataset_state`. Primitives only
(``torch.load(weights_only=True)``): bytes, ints, a float, a few KB whatever
the dataset's size; ``KIND`` and ``VERSION`` name the format.

Decision record: docs/decisions/datasets.md ("Resuming under torchdata's
StatefulDataLoader").
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from fastdecode.errors import ResumeError

__all__ = ["KIND", "VERSION", "dataset_state", "load_dataset_state"]

KIND = "fastdecode.dataset"
VERSION = 1


def dataset_state(size: int) -> dict[str, Any]:
    """The calling process's global random states, for a dataset of ``size``
    samples (the dataset's ``state_dict``)."""
    py = random.getstate()
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "kind": KIND,
        "version": VERSION,
        "size": int(size),
        "torch": torch.get_rng_state().numpy().tobytes(),
        "python": {
            "version": int(py[0]),
            "mt": np.asarray(py[1], dtype=np.uint32).tobytes(),
            # None until random.gauss() caches one: kept as a float or None
            "gauss_next": None if py[2] is None else float(py[2]),
        },
        "numpy": {
            "kind": str(kind),
            "keys": np.asarray(keys, dtype=np.uint32).tobytes(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(gauss),
        },
    }


def load_dataset_state(state: Any, size: int) -> None:
    """Sets the calling process's global random states from ``state`` (what
    :func:`dataset_state` gave, for a dataset of ``size`` samples); raises
    :class:`ResumeError` naming what does not fit."""
    if not isinstance(state, dict) or state.get("kind") != KIND:
        found = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a fastdecode dataset state (kind {found!r}): pass the state "
                          f"StatefulDataLoader.state_dict() returned to its load_state_dict")
    if state.get("version") != VERSION:
        raise ResumeError(f"fastdecode dataset state version {state.get('version')!r}; this "
                          f"fastdecode reads version {VERSION}")
    if state.get("size") != size:
        raise ResumeError(f"another dataset: its size differs (saved {state.get('size')!r}, "
                          f"now {size})")
    saved = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    try:
        py, nps = state["python"], state["numpy"]
        mt = tuple(int(v) for v in np.frombuffer(py["mt"], dtype=np.uint32))
        torch.set_rng_state(torch.frombuffer(bytearray(state["torch"]), dtype=torch.uint8))
        random.setstate((py["version"], mt, py["gauss_next"]))
        np.random.set_state((nps["kind"], np.frombuffer(nps["keys"], dtype=np.uint32).copy(),
                             nps["pos"], nps["has_gauss"], nps["cached_gaussian"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        torch.set_rng_state(saved[0])  # none of the three half set
        random.setstate(saved[1])
        np.random.set_state(saved[2])
        raise ResumeError(f"a malformed fastdecode dataset state: {type(exc).__name__}: "
                          f"{exc}") from exc
