"""The peers of bench_recipes' auto-augment rows: what a user would pick instead of fastdecode.

- ``TorchCodec + v2``: ``ImageFolder(root, preset, loader=decode_image)``
  with TorchCodec's ``decode_image`` (torchvision 0.29 deprecates its own
  image decoding for it) and the reference preset's v2 chain on tensors
  (``backend="tensor"``): RandomResizedCrop, the flip, the policy, ToDtype,
  Normalize and RandomErasing on uint8 tensors.
- ``DALI CPU``: NVIDIA DALI's CPU pipeline (``device_id=None``), its own
  decode-and-crop (``decoders.image_random_crop``), resize, flip, its
  auto-augment policy (``nvidia.dali.auto_aug``: ``trivial_augment_wide``,
  ``rand_augment(n=2, m=9)``, ``auto_augment_image_net``) and
  ``crop_mirror_normalize``, ``num_threads=1``. DALI has no RandomErasing
  step and no AugMix: its rows leave the erasing out (less work on its
  side) and an AugMix recipe has no DALI row.

Each only where it imports (``requirements/peers.txt`` installs both).

Both draw from their own generators: the rows compare throughput on the
same recipe, not the same images. One thread, in this process, as the
per-core rows (bench_recipes runs them at ``num_workers=0`` only).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .presets import MEAN, STD, ClassificationPresetTrain

__all__ = ["DALI", "KINDS", "TORCHCODEC", "available", "kinds", "maker"]

TORCHCODEC = "TorchCodec + v2"
DALI = "DALI CPU"
_CROP = 176  # the reference rows' --train-crop-size
_DALI_POLICIES = {"ta_wide": ("trivial_augment", "trivial_augment_wide", {}),
                  "ra": ("rand_augment", "rand_augment", {"n": 2, "m": 9}),
                  "imagenet": ("auto_augment", "auto_augment_image_net", {})}


_MODULES = {TORCHCODEC: "torchcodec.decoders", DALI: "nvidia.dali"}
KINDS = tuple(_MODULES)  # the peers' row names


@functools.cache
def available(kind: str) -> bool:
    """Whether the peer ``kind`` imports here."""
    import importlib

    try:
        importlib.import_module(_MODULES[kind])
    except ImportError:
        return False
    return True


def kinds(policy: str, preset: bool) -> tuple[str, ...]:
    """The peer rows (one thread) of a recipe of torchvision's ``policy``
    (its name in the reference's ``--auto-augment``), each where it imports:
    TorchCodec + v2 when the recipe is the reference ``preset`` (it runs that
    preset on tensors), DALI where it has the policy."""
    out: tuple[str, ...] = ()
    if preset and available(TORCHCODEC):
        out += (TORCHCODEC,)
    if policy in _DALI_POLICIES and available(DALI):
        out += (DALI,)
    return out


def maker(kind: str, policy: str) -> Callable:
    """bench_loader.open_row's ``make`` for the peer ``kind`` on ``policy``.

    Raises
    ------
    ValueError
        DALI has no such policy (AugMix).
    """
    if kind == DALI and policy not in _DALI_POLICIES:
        raise ValueError(f"DALI has no {policy!r} policy")
    return functools.partial(_tensor_loader if kind == TORCHCODEC else _dali_loader, policy)


def _tensor_loader(policy: str, kind: str, root, chain, workers: int, batch: int, samples: int):
    """The reference preset's v2 chain on tensors decoded by TorchCodec, in a DataLoader."""
    from torch.utils.data import DataLoader
    from torchcodec.decoders import ImageReadMode, decode_image
    from torchvision.datasets import ImageFolder

    from . import bench_loader

    preset = ClassificationPresetTrain(crop_size=_CROP, auto_augment_policy=policy,
                                       random_erase_prob=0.1, backend="tensor", use_v2=True)
    ds = ImageFolder(root, preset, loader=functools.partial(decode_image, mode=ImageReadMode.RGB))
    sampler = bench_loader.Draws(ds, samples)
    return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=workers,
                      drop_last=True), sampler


@dataclass
class _Count:
    """The rows' epoch length (what bench_recipes sets on a row's sampler)."""

    count: int


class _DaliBatches:
    """A DALI pipeline as a row's source: ``count // batch`` batches an
    epoch, each (images, labels) as torch tensors (DALI's CPU outputs copied
    out, as its PyTorch iterator does)."""

    def __init__(self, pipe: Any, batch: int, sampler: _Count):
        self.pipe, self.batch, self.sampler = pipe, batch, sampler

    def __iter__(self):
        for _ in range(self.sampler.count // self.batch):
            images, labels = self.pipe.run()
            yield torch.from_numpy(images.as_array()), torch.from_numpy(labels.as_array())


def _dali_loader(policy: str, kind: str, root, chain, workers: int, batch: int, samples: int):
    """DALI's CPU pipeline for ``policy`` (one thread: the per-core rows)."""
    import importlib

    from nvidia.dali import fn, pipeline_def, types

    module, name, kwargs = _DALI_POLICIES[policy]
    # DALI's auto_aug uses its own deprecated aliases and shows that warning whatever the
    # filters say (its own catch_warnings): recorded here, and dropped
    with warnings.catch_warnings(record=True):
        augment = getattr(importlib.import_module(f"nvidia.dali.auto_aug.{module}"), name)

    @pipeline_def(enable_conditionals=True)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True)
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0],
                                               random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, size=[_CROP, _CROP])
        images = augment(images, **kwargs)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[255 * m for m in MEAN],
                                          std=[255 * s for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels

    with warnings.catch_warnings(record=True):  # (as above, when its ops are made)
        built = pipe(batch_size=batch, num_threads=max(workers, 1), device_id=None, seed=0,
                     prefetch_queue_depth=1)
        built.build()
    sampler = _Count(samples)
    return _DaliBatches(built, batch, sampler), sampler
