"""A loader's batch transform (MixUp, CutMix, ...): run where the loader makes
the batch, in place in it, its draws seeded by the batch's position when the
batch is seeded. See docs/decisions/augment.md ("Batch mixing").

FastLoader's ``batch_transform`` runs through :func:`transform_batch`: in a
worker right after the batch is collated (in its ring slot), as torchvision's
reference runs MixUp/CutMix in its ``collate_fn``, so its draws are the
worker's, as there; with ``threads=N`` in the loader's thread, in batch
order. A seeded batch (``FastLoader(resumable=True)``) draws under a seed of
(epoch seed, the batch's first position) alone, Python's, NumPy's and torch's
generators set to it and restored after, so a resumed run mixes as the
uninterrupted one did. :class:`TransformedCollate` is the collate path (any
other dataset): the collate, then the transform. :class:`Collated` carries a
worker's final targets to the main process.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from fastdecode.augment._mix import mix_batch
from fastdecode.batching._seeding import row_seed, seeding_of

__all__ = ["Collated", "TransformedCollate", "seeded_draws", "transform_batch"]

# the batch transform's seeds are not any sample's (those are row_seed(seed, position))
_SALT = 0x6D69785F62617463  # "mix_batc"


@contextmanager
def seeded_draws(batch: Any) -> Iterator[None]:
    """Inside, a seeded ``batch``'s draws come from torch's, NumPy's and
    Python's global generators set from (its epoch seed, its first position);
    they are restored after. Any other batch: nothing changes."""
    seeded = seeding_of(batch)
    if seeded is None or not seeded[1]:
        yield
        return
    seed = row_seed(seeded[0] ^ _SALT, seeded[1][0])
    kept = torch.get_rng_state(), np.random.get_state(), random.getstate()
    torch.manual_seed(seed)
    np.random.seed(seed % (1 << 32))
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(kept[0])
        np.random.set_state(kept[1])
        random.setstate(kept[2])


def transform_batch(transform: Callable, images: Any, targets: Any, batch: Any = None) -> Any:
    """``transform(images, targets)`` (in place for the mixing transforms
    :func:`~fastdecode.augment._mix.mix_batch` knows), under the seeds of
    ``batch`` (the indices it was made from) when it is seeded."""
    with seeded_draws(batch):
        return mix_batch(transform, images, targets)


class TransformedCollate:
    """``collate``, then the batch transform: a DataLoader collate_fn (the
    draws are those of the process and thread that collates)."""

    def __init__(self, collate: Callable, transform: Callable) -> None:
        self.collate = collate
        self.transform = transform

    def __call__(self, samples: Any) -> Any:
        images, targets = self.collate(samples)
        return transform_batch(self.transform, images, targets)


class Collated:
    """A worker's batch targets as the batch transform left them (not to be
    collated again): a tensor crosses as its NumPy array (no shared memory
    per batch), anything else as it is."""

    def __init__(self, targets: Any) -> None:
        self.tensor = isinstance(targets, torch.Tensor)
        self.value = targets.numpy() if self.tensor else targets

    def get(self) -> Any:
        """The targets, a tensor again if they were one."""
        return torch.from_numpy(self.value) if self.tensor else self.value
