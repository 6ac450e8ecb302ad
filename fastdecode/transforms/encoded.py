"""torchvision's v1 geometric classes and Compose, also taking encoded bytes (fused).

Each is a subclass of torchvision's (the same parameters and draws): on
encoded bytes it runs :func:`~fastdecode.transforms.fuse` of itself, cached
and re-fused when its parameters change; on anything else it is
torchvision's transform unchanged. See docs/decisions/fused-transforms.md.
"""

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
        """The transform of ``img``: fused on encoded bytes, torchvision's otherwise.

        Parameters
        ----------
        img : bytes-like, PIL.Image.Image or torch.Tensor
            Encoded image bytes (bytes, bytearray, memoryview, mmap, a 1-D
            uint8 array or tensor), or what torchvision's transform takes.

        Returns
        -------
        PIL.Image.Image or torch.Tensor
            What torchvision's transform returns on the decoded image (on
            ``img`` itself when it is not bytes).

        Raises
        ------
        DecodeError
            The bytes cannot be decoded (the subclasses as for
            :func:`fastdecode.decode_image`).
        """
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
    """torchvision's RandomResizedCrop (a subclass: the same draws), also on encoded bytes.

    Given encoded bytes (bytes, bytearray, memoryview, mmap, or a 1-D uint8
    array or tensor) it returns what it returns on the decoded PIL image: only
    the drawn box is decoded, and resampled to ``size`` in the same native
    call (see :func:`fastdecode.transforms.fuse`). Given a PIL image or a
    tensor it is torchvision's transform unchanged.

    Parameters
    ----------
    size : int or (int, int)
        The output size, as torchvision's.
    scale : (float, float), default (0.08, 1.0)
        The range of the crop's area, as a fraction of the image's.
    ratio : (float, float), default (3/4, 4/3)
        The range of the crop's aspect ratio.
    interpolation : InterpolationMode, str or int, default BILINEAR
        torchvision's ``InterpolationMode``, a Pillow constant or a name
        ('bilinear', 'bicubic', 'nearest', ...).
    antialias : bool, default True
        As torchvision's (PIL images are always resampled antialiased).
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        super().__init__(size, scale=scale, ratio=ratio,
                         interpolation=interpolation_mode(interpolation), antialias=antialias)


class Resize(_AcceptsEncoded, _T.Resize):
    """torchvision's Resize (a subclass), also on encoded bytes.

    Given encoded bytes (as :class:`RandomResizedCrop` takes them) it returns
    what it returns on the decoded PIL image, decoded straight to the new
    size in one native call; given a PIL image or a tensor, torchvision's
    transform unchanged.

    Parameters
    ----------
    size : int or (int, int)
        The shorter edge's new length, or (height, width), as torchvision's.
    interpolation : InterpolationMode, str or int, default BILINEAR
        As for :class:`RandomResizedCrop`.
    max_size : int, optional
        The longest edge's maximum, as torchvision's.
    antialias : bool, default True
        As for :class:`RandomResizedCrop`.
    """

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):
        super().__init__(size, interpolation=interpolation_mode(interpolation),
                         max_size=max_size, antialias=antialias)


class CenterCrop(_AcceptsEncoded, _T.CenterCrop):
    """torchvision's CenterCrop (a subclass; zero padding included), also on encoded bytes.

    Given encoded bytes (as :class:`RandomResizedCrop` takes them), only the
    window is decoded, zero-padded where it is larger than the image, as
    torchvision crops the decoded PIL image; a PIL image or a tensor gets
    torchvision's transform unchanged.

    Parameters
    ----------
    size : int or (int, int)
        The crop's size, as torchvision's; a crop larger than the image is
        zero-padded.
    """


class RandomHorizontalFlip(_AcceptsEncoded, _T.RandomHorizontalFlip):
    """torchvision's RandomHorizontalFlip (a subclass: the same draw), also on encoded bytes.

    Given encoded bytes (as :class:`RandomResizedCrop` takes them) it decodes
    the image mirrored when the draw says so, writing the mirror as the rows
    are decoded; a PIL image or a tensor gets torchvision's transform
    unchanged.

    Parameters
    ----------
    p : float, default 0.5
        The probability of the mirror.
    """


class Compose(_AcceptsEncoded, _T.Compose):
    """torchvision's Compose (a subclass); on encoded bytes the whole chain is fused.

    Called on encoded bytes it returns what the chain returns on the decoded
    PIL image, through :func:`fastdecode.transforms.fuse` of itself (re-fused
    when a step's parameters change); on anything else it is torchvision's
    Compose.

    Parameters
    ----------
    transforms : list
        The steps, torchvision's or fastdecode's transforms or any callables.
    """

    def __call__(self, img):
        """Applies the chain to ``img``.

        Parameters
        ----------
        img : bytes-like, PIL.Image.Image or torch.Tensor
            Encoded bytes (bytes, bytearray, memoryview, mmap, or a 1-D uint8
            array or tensor), or an image as torchvision's Compose takes it.

        Returns
        -------
        Any
            What the chain returns on the decoded PIL image (for encoded bytes,
            through the fused chain), or on ``img`` itself.
        """
        if _is_encoded(img):
            return self._fused()(img)
        return super().__call__(img)


register("rrc", RandomResizedCrop)
register("resize", Resize)
register("center_crop", CenterCrop)
register("hflip", RandomHorizontalFlip)
register("compose", Compose)
