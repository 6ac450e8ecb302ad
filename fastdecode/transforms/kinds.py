"""Classification: which transforms of a chain fuse, and as what kind.

``flatten`` opens Compose (torchvision v1, v2, fastdecode's own) into a flat
list of steps; ``geo_op`` translates a geometric step into its
:mod:`.geometry` op, or None when it must run unfused; ``is_converter`` /
``is_pointwise`` name the steps the tensor table (:mod:`.tensor`) absorbs.
Exact types only: a subclass may override ``forward``.
"""

from __future__ import annotations

from typing import Any, Optional

from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.transforms.color import color_op
from fastdecode.transforms.filters import FILTERS, pil_filter
from fastdecode.transforms.geometry import (
    CenterCropOp,
    FlipOp,
    GeoOp,
    RandomResizedCropOp,
    ResizeOp,
)
from fastdecode.transforms.recipes import expand, foreign_geo_op, is_foreign_converter, unwrap

__all__ = ["flatten", "geo_op", "is_converter", "is_pointwise", "is_uint8_converter", "kind",
           "register", "short_name", "tensor_geo_op"]

# What fuse translates: kind -> the class name, the same in torchvision's v1
# and v2. fastdecode.transforms registers its own classes per kind.
_TORCHVISION_NAMES = {"compose": "Compose", "rrc": "RandomResizedCrop", "resize": "Resize",
                      "center_crop": "CenterCrop", "hflip": "RandomHorizontalFlip"}
_REGISTRY: dict[str, set] = {k: set() for k in _TORCHVISION_NAMES}
_V1 = {k: getattr(T, name) for k, name in _TORCHVISION_NAMES.items()}
_V2 = {k: getattr(T2, name) for k, name in _TORCHVISION_NAMES.items()}

_CONVERTERS = {T.ToTensor, T.PILToTensor, T2.ToImage, T2.PILToTensor}
if hasattr(T2, "ToTensor"):  # deprecated in v2, still there
    _CONVERTERS.add(T2.ToTensor)
_UINT8_CONVERTERS = {T.PILToTensor, T2.ToImage, T2.PILToTensor}
_POINTWISE = {T.Normalize, T2.Normalize, T.ConvertImageDtype, T2.ConvertImageDtype, T2.ToDtype,
              T2.ToPureTensor}


def register(kind_name: str, cls: type) -> type:
    """Declares ``cls`` a transform of ``kind_name`` (one of the keys above)."""
    _REGISTRY[kind_name].add(cls)
    return cls


def kind(t: Any) -> Optional[tuple[str, bool]]:
    """(kind, is_v2) for the geometric transforms and Compose fuse understands."""
    cls = type(t)
    for name in _REGISTRY:
        if cls in _REGISTRY[name] or cls is _V1[name]:
            return name, False
        if cls is _V2[name]:
            return name, True
    return None


def is_converter(t: Any) -> bool:
    """A PIL-to-tensor step (ToTensor, PILToTensor, v2.ToImage, timm's, ...)."""
    return type(t) in _CONVERTERS or is_foreign_converter(t)


def is_uint8_converter(t: Any) -> bool:
    """A converter whose result is the uint8 tensor (v2 geometry may follow it)."""
    return type(t) in _UINT8_CONVERTERS


def is_pointwise(t: Any) -> bool:
    """A per-pixel tensor step (Normalize, ToDtype, ConvertImageDtype, ToPureTensor)."""
    return type(t) in _POINTWISE


_MAX_DEPTH = 32  # wrappers of wrappers (a cycle would recurse forever)


def flatten(transform: Any, _depth: int = 0) -> list:
    """The chain as a flat list of steps, in order: Compose and lists opened,
    presets expanded and pure wrappers opened (:mod:`.recipes`)."""
    if transform is None:
        return []
    if _depth > _MAX_DEPTH:
        return [transform]
    if isinstance(transform, (list, tuple)):
        return [s for t in transform for s in flatten(t, _depth + 1)]
    k = kind(transform)
    if k is not None and k[0] == "compose":
        return flatten(list(transform.transforms), _depth + 1)
    steps = expand(transform)
    if steps is not None:
        return steps
    wrapped = unwrap(transform)
    if wrapped is not None:
        inner = wrapped[1]
        steps = flatten(inner, _depth + 1)
        if steps != [inner] or fusable(inner):
            return steps
        # an opaque inner step (T.Lambda's function): the wrapper stays the step
    return [transform]


def fusable(t: Any) -> bool:
    """A step fuse can absorb somewhere (geometry, colour, converter or per-pixel)."""
    return (geo_op(t) is not None or color_op(t) is not None or is_converter(t)
            or is_pointwise(t))


def geo_op(t: Any, tensor: bool = False) -> Optional[GeoOp]:
    """The geometry op for a geometric transform, or None when it is not one
    fuse can run as torchvision would (it then runs unfused).

    tensor: the transform sees a uint8 tensor (it comes after ToImage /
    PILToTensor). Only v2 classes qualify (they keep tv_tensors.Image and
    pure tensors as they are), resampling only bilinear/bicubic with
    antialias=True: torch's antialiased uint8 resize is Pillow's within one
    level; its nearest is not Pillow's.
    """
    k = kind(t)
    if k is None:
        return None if tensor else foreign_geo_op(t)
    name, v2 = k
    if tensor and not v2:
        return None
    try:
        if name == "hflip":
            return FlipOp(t, float(t.p))
        if name == "center_crop":
            h, w = (int(v) for v in t.size)
            return CenterCropOp(t, (h, w))
        if t.antialias is False or (tensor and t.antialias is not True):
            return None  # torchvision warns on PIL images: let it
        flt = FILTERS[pil_filter(t.interpolation)]
        if tensor and flt.name not in ("bilinear", "bicubic"):
            return None
        if name == "rrc":
            h, w = (int(v) for v in t.size)
            return RandomResizedCropOp(t, (h, w), flt.pil, v2)
        if name == "resize":
            return _resize_op(t, v2, flt.pil)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    return None


def tensor_geo_op(t: Any) -> Optional[GeoOp]:
    """:func:`geo_op` for a step that sees the uint8 tensor (after ToImage /
    PILToTensor): its op runs at the tensor stage."""
    op = geo_op(t, tensor=True)
    if op is not None:
        op.stage = "tensor"
    return op


def _resize_op(t: Any, v2: bool, flt: int) -> Optional[ResizeOp]:
    size, max_size = t.size, t.max_size
    if isinstance(size, int):
        size = [size]
    if size is not None:
        size = [int(v) for v in size]
        if len(size) not in (1, 2) or (len(size) == 2 and max_size is not None):
            return None
    elif not v2:
        return None
    return ResizeOp(t, size, max_size, flt)


def short_name(t: Any) -> str:
    """A transform's repr, cut at 120 characters."""
    text = repr(t)
    return text if len(text) <= 120 else text[:117] + "..."

