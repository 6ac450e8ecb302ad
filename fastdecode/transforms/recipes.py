"""Recipes: the transform objects real training code builds, as steps fuse knows.

* **Wrappers**: an object whose ``__call__`` is exactly
  ``return self.<attr>(img)`` (torchvision's reference ``presets.py``
  classes), decided from the function's bytecode, never from attribute
  names, is its inner transform.
* **Pretrained weights' presets**: torchvision's ``ImageClassification``
  (``<Model>_Weights.<W>.transforms()``) is the chain it runs: Resize,
  CenterCrop, PILToTensor, ConvertImageDtype(float), Normalize, with its own
  parameters.
* **timm**: ``RandomResizedCropAndInterpolation`` and ``ResizeKeepRatio``
  (drawn through timm's own ``get_params`` from Python's ``random``, and the
  interpolation with ``random.choice`` as timm does), ``CenterCropOrPad``
  (zero fill), and the converters ``MaybeToTensor``, ``MaybePILToTensor``,
  ``ToTensor``, ``ToNumpy``. timm is never imported by this module unless a
  chain holds a timm object.
"""

from __future__ import annotations

import dis
import inspect
import random
import types
from typing import Any, Optional

from fastdecode.transforms.filters import pil_filter
from fastdecode.transforms.geometry import (
    CenterCropOp,
    Geometry,
    GeoOp,
    PilResize,
    RandomResizedCropOp,
    Stop,
    standin,
)

__all__ = ["expand", "foreign_geo_op", "is_foreign_converter", "unwrap"]

# Instructions that carry no behaviour (the interpreter's own bookkeeping).
_NEUTRAL = {"RESUME", "CACHE", "NOP", "PRECALL", "PUSH_NULL", "EXTENDED_ARG"}


def unwrap(t: Any) -> Optional[tuple[str, Any]]:
    """(attribute, inner transform) when ``t`` is a pure wrapper: its class's
    ``__call__`` is a plain function of (self, img) whose code is exactly
    ``return self.<attribute>(img)``; None otherwise."""
    call = inspect.getattr_static(type(t), "__call__", None)
    if not isinstance(call, types.FunctionType) or call.__closure__:
        return None
    code = call.__code__
    if (code.co_argcount != 2 or code.co_kwonlyargcount or code.co_posonlyargcount
            or code.co_flags & (0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200)):
        return None  # *args, **kwargs, generators, coroutines
    ops = [(i.opname.replace("_BORROW", ""), i.argval) for i in dis.get_instructions(call)
           if i.opname not in _NEUTRAL]
    self_name, img_name = code.co_varnames[:2]
    if len(ops) != 5:
        return None
    (load_self, s), (load_attr, attr), (load_img, m), (call_op, n), (ret, _) = ops
    if (load_self, s) != ("LOAD_FAST", self_name) or (load_img, m) != ("LOAD_FAST", img_name):
        return None
    if load_attr not in ("LOAD_ATTR", "LOAD_METHOD") or not isinstance(attr, str):
        return None
    if call_op != "CALL" or n != 1 or ret != "RETURN_VALUE":
        return None
    # a plain attribute only: a property or __getattr__ would run code of its own
    inner = vars(t).get(attr) if hasattr(t, "__dict__") else None
    if inner is None:
        inner = (vars(t).get("_modules") or {}).get(attr)  # an nn.Module's submodule
    return (attr, inner) if callable(inner) else None


def expand(t: Any) -> Optional[list]:
    """The equivalent steps of a preset object that runs a fixed chain
    (torchvision's ImageClassification), or None."""
    from torchvision.transforms import _presets

    if type(t) is not _presets.ImageClassification:
        return None
    import torch
    from torchvision import transforms as T

    # ImageClassification.forward: resize, center_crop, pil_to_tensor,
    # convert_image_dtype(float), normalize -- these classes call the same
    # functionals with the same arguments.
    return [T.Resize(list(t.resize_size), interpolation=t.interpolation, antialias=t.antialias),
            T.CenterCrop(list(t.crop_size)), T.PILToTensor(),
            T.ConvertImageDtype(torch.float), T.Normalize(mean=t.mean, std=t.std)]


def _timm(t: Any):
    """timm.data.transforms when ``t`` is one of timm's objects, else None."""
    if not type(t).__module__.startswith("timm."):
        return None
    try:
        from timm.data import transforms as timm_transforms
    except ImportError:  # pragma: no cover - a timm object without timm
        return None
    return timm_transforms


def is_foreign_converter(t: Any) -> bool:
    """timm's PIL-to-tensor/array steps (their result on a PIL image is the
    tensor table's job, built by running them)."""
    tt = _timm(t)
    return tt is not None and type(t) in (tt.MaybeToTensor, tt.MaybePILToTensor, tt.ToTensor,
                                          tt.ToNumpy)


def _filters(interpolation: Any) -> tuple[int, ...]:
    """The Pillow filters timm may pick from (one, or its 'random' pair)."""
    if isinstance(interpolation, (tuple, list)):
        return tuple(pil_filter(m) for m in interpolation)
    return (pil_filter(interpolation),)


def _pick(transform: Any, filters: tuple[int, ...]) -> int:
    """timm's own draw: ``random.choice(self.interpolation)`` when it holds
    several (the same Python RNG call, so the same seed picks the same)."""
    if len(filters) == 1:
        return filters[0]
    return pil_filter(random.choice(transform.interpolation))


class TimmRandomResizedCropOp(RandomResizedCropOp):
    """timm's RandomResizedCropAndInterpolation: timm's get_params (Python's
    random), then its interpolation draw."""

    def __init__(self, transform: Any):
        self.filters = _filters(transform.interpolation)
        h, w = (int(v) for v in transform.size)
        super().__init__(transform, (h, w), self.filters[0], v2=False)

    def draw(self, canvas: tuple[int, int]) -> tuple[int, int, int, int]:
        t = self.transform
        top, left, height, width = type(t).get_params(standin(canvas), t.scale, t.ratio)
        return int(top), int(left), int(height), int(width)

    def pick_filter(self) -> int:
        return _pick(self.transform, self.filters)


class ResizeKeepRatioOp(GeoOp):
    """timm's ResizeKeepRatio: timm's get_params for the size (Python's
    random when its random scale/aspect are on), then the interpolation."""

    def __init__(self, transform: Any):
        super().__init__(transform)
        self.filters = _filters(transform.interpolation)

    def apply(self, geo: Geometry) -> None:
        t = self.transform
        size = type(t).get_params(standin(geo.canvas), t.size, t.longest, t.random_scale_prob,
                                  t.random_scale_range, t.random_scale_area,
                                  t.random_aspect_prob, t.random_aspect_range)
        flt = _pick(t, self.filters)
        height, width = int(size[0]), int(size[1])
        if height <= 0 or width <= 0:
            raise Stop("empty output size", steps=[PilResize((height, width), flt)])
        try:
            geo.do_resize(height, width, flt)
        except Stop as stop:  # the draws are spent: resize to what they gave
            raise Stop(stop.reason, steps=[PilResize((height, width), flt)]) from None

    def fixed_size(self, size):
        return None


def foreign_geo_op(t: Any) -> Optional[GeoOp]:
    """The geometry op of a timm geometric transform, or None."""
    tt = _timm(t)
    if tt is None:
        return None
    cls = type(t)
    try:
        if cls is tt.RandomResizedCropAndInterpolation:
            return TimmRandomResizedCropOp(t)
        if cls is tt.ResizeKeepRatio:
            return ResizeKeepRatioOp(t)
        if cls is tt.CenterCropOrPad and t.padding_mode == "constant" and t.fill == 0:
            h, w = (int(v) for v in t.size)
            return CenterCropOp(t, (h, w))
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    return None
