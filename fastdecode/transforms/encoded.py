"""torchvision's v1 geometric classes and Compose, also taking encoded bytes (fused)."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import torch
from torchvision import transforms as _T
from torchvision.transforms import InterpolationMode

from fastdecode.transforms.filters import interpolation_mode
from fastdecode.transforms.fused import FusedTransform, fuse
from fastdecode.transforms.kinds import register

__all__ = ["CenterCrop", "Compose", "RandomHorizontalFlip", "RandomResizedCrop", "Resize"]


def _is_encoded(data: Any) -> bool:
    if isinstance(data, (bytes, bytearray, memoryview, mmap.mmap)):
        return True
    if isinstance(data, np.ndarray):
        return data.ndim == 1 and data.dtype == np.uint8
    if isinstance(data, torch.Tensor):
        return data.dim() == 1 and data.dtype == torch.uint8
    return False


class _AcceptsEncoded:
    """Routes encoded bytes through a (cached) fused transform of ``self``: in
    ``forward`` for the transforms (nn.Modules), in ``__call__`` for Compose."""

    def forward(self, img):
        if _is_encoded(img):
            return self._fused()(img)
        return super().forward(img)  # type: ignore[misc]  # the torchvision class, mixed in

    def _fused(self) -> FusedTransform:
        """The fused transform of ``self``, re-fused when its parameters changed."""
        cached = self.__dict__.get("_fd_fused")
        fresh = fuse(self) if cached is None else cached.refreshed()
        if fresh is not cached:
            self.__dict__["_fd_fused"] = fresh
        return fresh

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_fd_fused", None)
        return state


class RandomResizedCrop(_AcceptsEncoded, _T.RandomResizedCrop):
    """torchvision's RandomResizedCrop, also on encoded bytes (see module doc)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        super().__init__(size, scale=scale, ratio=ratio,
                         interpolation=interpolation_mode(interpolation), antialias=antialias)


class Resize(_AcceptsEncoded, _T.Resize):
    """torchvision's Resize, also on encoded bytes (see module doc)."""

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):
        super().__init__(size, interpolation=interpolation_mode(interpolation),
                         max_size=max_size, antialias=antialias)


class CenterCrop(_AcceptsEncoded, _T.CenterCrop):
    """torchvision's CenterCrop (zero padding included), also on encoded bytes."""


class RandomHorizontalFlip(_AcceptsEncoded, _T.RandomHorizontalFlip):
    """torchvision's RandomHorizontalFlip, also on encoded bytes."""


class Compose(_AcceptsEncoded, _T.Compose):
    """torchvision's Compose; on encoded bytes the whole chain is fused."""

    def __call__(self, img):
        if _is_encoded(img):
            return self._fused()(img)
        return super().__call__(img)


register("rrc", RandomResizedCrop)
register("resize", Resize)
register("center_crop", CenterCrop)
register("hflip", RandomHorizontalFlip)
register("compose", Compose)
