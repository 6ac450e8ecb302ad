"""Geometric transforms fused into the decoder (needs torch and torchvision).

Two ways in:

* :func:`fuse` takes an existing torchvision pipeline (``transforms.Compose``
  or ``transforms.v2.Compose``, or a single transform) and returns a callable
  on *encoded* bytes whose result is what the pipeline returns on
  ``Image.open(f).convert('RGB')`` -- same type, shape and dtype, the same
  random crop boxes and flips for the same ``torch.manual_seed``, near-identical
  values -- computed by decoding only the pixels needed, straight to the output
  size and layout::

      train = fuse(T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                              T.ToTensor(), T.Normalize(mean, std)]))
      x = train(open("cat.jpg", "rb").read())      # float32 (3, 224, 224)

* The classes here (:class:`RandomResizedCrop`, :class:`Resize`,
  :class:`CenterCrop`, :class:`RandomHorizontalFlip`, :class:`Compose`) are
  torchvision's v1 classes (subclasses: same parameters, same random draws)
  that also accept encoded bytes, in which case they return what they return
  on the decoded PIL image (``Compose`` of them then returns tensors when it
  ends with ToTensor). Given a PIL image or a tensor they are torchvision's
  transforms unchanged, so they also work in a plain torchvision ``Compose``.
  ``interpolation`` takes an ``InterpolationMode``, a Pillow constant or a
  string ('bilinear', 'bicubic', 'nearest', ...).

How a chain is split (``repr(fuse(t))`` shows it): the leading run of
RandomResizedCrop / Resize / CenterCrop / RandomHorizontalFlip becomes one
native decode (crop box, resample size, zero padding, mirror); a following
ToTensor / PILToTensor / v2.ToImage with the Normalize / v2.ToDtype /
ConvertImageDtype / v2.ToPureTensor after it becomes one table pass writing
the final tensor (bit-identical to torchvision's float arithmetic). v2
geometric transforms right after v2.ToImage / PILToTensor (torchvision runs
them on uint8 tensors, within a level of Pillow) join the decode too; if one
cannot (say a second resample), the RNG state is restored and the whole chain
runs unfused. Everything from the first other transform runs unfused, in
order, on the type torchvision would give it (a PIL image before the tensor
part, the tensor after it). Transforms are never reordered, and the plan is
fixed when ``fuse`` is called. EXIF orientation is not applied (torchvision's
ImageFolder loader does not either).

By default the decoder also downscales in the DCT domain when the output is
much smaller than the decoded region (``exact=False``: a JPEG at least 2.5x
larger than the output decodes at 1/2, 1/4 or 1/8 scale first; >= 43 dB PSNR
from the Pillow result on real photos); ``exact=True`` always decodes at full
resolution and resamples like Pillow (near bit-exact: within 1 level).
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import torch
from torchvision import transforms as _T
from torchvision.transforms import InterpolationMode

from fastdecode import _fuse
from fastdecode._fuse import FusedTransform, interpolation_mode
from fastdecode._plan import Geometry

__all__ = [
    "CenterCrop",
    "Compose",
    "FusedTransform",
    "Geometry",
    "InterpolationMode",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "fuse",
]


def fuse(transform: Any = None, *, exact: bool = False, region: str = "box",
         dct_margin: float = _fuse.DCT_MARGIN) -> FusedTransform:
    """A picklable callable ``f(data)`` on encoded image bytes that returns
    what ``transform(Image.open(io.BytesIO(data)).convert('RGB'))`` returns.

    transform: a torchvision ``transforms.Compose`` / ``transforms.v2.Compose``
      (nested ones are flattened), a list of transforms, a single transform,
      fastdecode's own classes, or None (the decoded PIL image).
    exact: decode at full resolution before resampling (Pillow's pixels,
      near bit-exact) instead of letting the decoder downscale by M/8 first.
    region: for a region kept after a resample (``Resize(256)`` then
      ``CenterCrop(224)``): 'box' (default) decodes just the pixels the centre
      reads and resamples the sub-pixel source box, as Pillow's
      ``resize(box=)`` (exact); 'whole' resamples the whole image and keeps the
      centre (exact, more resampling); 'round' resamples the nearest integer
      source box (one call, sub-pixel misaligned: down to ~24 dB on photos).
    dct_margin: with ``exact=False``, a JPEG is decoded at 1/2, 1/4 or 1/8
      scale only when the scaled crop stays >= dct_margin x the output size
      (default 1.25: >= 43 dB from Pillow on real photos; 1 is the decoder's
      own rule, faster and down to ~31 dB on fine texture).

    ``data`` may be bytes, bytearray, memoryview, mmap, a uint8 numpy array or
    a 1-D uint8 tensor (e.g. ``torchvision.io.read_file``); JPEG and BMP are
    decoded natively, other formats through Pillow. A PIL image runs the chain
    unfused. Random parameters come from torch's global RNG, drawn as
    torchvision draws them, in the same order.

    The result ``f`` also has ``f.plan`` (which transform runs where),
    ``f.output_shape``, ``f.last_params`` and, for batch loaders,
    ``f.decode_into(data, out)`` / ``f.finish(batch)``: see
    :class:`FusedTransform`. Raises TypeError when a step is not callable,
    ValueError for an unknown ``region`` or a ``dct_margin`` below 1.
    """
    return _fuse.fuse(transform, exact=exact, region=region, dct_margin=dct_margin)


def _is_encoded(data: Any) -> bool:
    if isinstance(data, (bytes, bytearray, memoryview, mmap.mmap)):
        return True
    if isinstance(data, np.ndarray):
        return data.ndim == 1 and data.dtype == np.uint8
    if isinstance(data, torch.Tensor):
        return data.dim() == 1 and data.dtype == torch.uint8
    return False


class _AcceptsEncoded:
    """Routes encoded bytes through a (cached) fused plan of ``self``: in
    ``forward`` for the transforms (nn.Modules), in ``__call__`` for Compose."""

    def forward(self, img):
        if _is_encoded(img):
            return self._fused_plan()(img)
        return super().forward(img)

    def _fused_plan(self) -> FusedTransform:
        key = tuple(id(t) for t in _fuse.flatten(self))
        cached = self.__dict__.get("_fd_fused")
        if cached is None or cached[0] != key:
            cached = (key, fuse(self))
            self.__dict__["_fd_fused"] = cached
        return cached[1]

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
            return self._fused_plan()(img)
        return super().__call__(img)


_fuse.register("rrc", RandomResizedCrop)
_fuse.register("resize", Resize)
_fuse.register("center_crop", CenterCrop)
_fuse.register("hflip", RandomHorizontalFlip)
_fuse.register("compose", Compose)
