"""Classification: which steps of a chain fuse, and as what.

``flatten`` opens Compose (torchvision v1, v2, fastdecode's own), pure
wrappers and presets into a flat list of steps; ``geo_op`` translates a
geometric step into its :mod:`.geometry` op, or None when it must run
unfused; ``is_converter`` / ``is_pointwise`` name the steps the tensor table
(:mod:`.tensor`) absorbs. Exact types only: a subclass may override
``forward``. Beside torchvision's classes it knows the objects real training
code builds: a wrapper whose ``__call__`` is exactly ``return
self.<attr>(img)`` (decided from its bytecode), the pretrained weights'
``ImageClassification`` preset, and timm's geometric classes and converters
(timm is imported only when a chain holds a timm object). See
docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import dis
import inspect
import random
import types
from typing import Any, Optional

from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.transforms.color import color_op
from fastdecode.transforms.draws import standin
from fastdecode.transforms.filters import FILTERS, pil_filter
from fastdecode.transforms.geometry import (
    CenterCropOp,
    FlipOp,
    Geometry,
    GeoOp,
    PadOp,
    PilResize,
    RandomCropOp,
    RandomResizedCropOp,
    ResizeOp,
    Stop,
)
from fastdecode.transforms.render import PadStage

__all__ = ["flatten", "geo_op", "is_converter", "is_pointwise", "is_uint8_converter", "joint",
           "kind", "pad_sides", "register", "register_joint", "short_name", "tensor_geo_op"]

# What fuse translates: kind -> the class name, the same in torchvision's v1
# and v2. fastdecode.transforms registers its own classes per kind.
_TORCHVISION_NAMES = {"compose": "Compose", "rrc": "RandomResizedCrop", "resize": "Resize",
                      "center_crop": "CenterCrop", "hflip": "RandomHorizontalFlip",
                      "random_crop": "RandomCrop", "pad": "Pad"}
_REGISTRY: dict[str, set] = {k: set() for k in _TORCHVISION_NAMES}
_V1 = {k: getattr(T, name) for k, name in _TORCHVISION_NAMES.items()}
_V2 = {k: getattr(T2, name) for k, name in _TORCHVISION_NAMES.items()}

_CONVERTERS = {T.ToTensor, T.PILToTensor, T2.ToImage, T2.PILToTensor}
if hasattr(T2, "ToTensor"):  # deprecated in v2, still there
    _CONVERTERS.add(T2.ToTensor)
_UINT8_CONVERTERS = {T.PILToTensor, T2.ToImage, T2.PILToTensor}
_POINTWISE = {T.Normalize, T2.Normalize, T.ConvertImageDtype, T2.ConvertImageDtype, T2.ToDtype,
              T2.ToPureTensor}


_JOINT: list = []  # the factory fastdecode.targets registers (imports stay one way)


def register_joint(factory: Any) -> None:
    """Declares the factory of joint fused transforms (``fastdecode.targets.fuse_joint``)."""
    _JOINT[:] = [factory]


def joint(fused: Any) -> Any:
    """The joint fused transform of ``fused``'s chain, made once: what
    ``f(data, target)`` runs (docs/decisions/detection.md)."""
    if getattr(fused, "_joint_fused", None) is None:
        if not _JOINT:
            raise TypeError("a fused transform called on (data, target) needs fastdecode.targets: "
                            "import fastdecode.targets first (or use fastdecode.targets.fuse_joint)")
        r = fused.renderer
        fused._joint_fused = _JOINT[0](fused.source, exact=fused.exact, dct_margin=r.dct_margin,
                                       **r.limits)
    return fused._joint_fused


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
    presets expanded and pure wrappers opened (:func:`expand`, :func:`unwrap`)."""
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
        if name in ("random_crop", "pad"):
            return None if v2 else _padding_op(t, name)
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


def pad_sides(padding) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of torchvision's ``padding`` (an int, or a
    sequence of 1, 2 or 4 ints, as ``F.pad`` reads it); ValueError otherwise."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        return (padding,) * 4
    values = [int(v) for v in padding]
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return (values[0], values[1], values[0], values[1])
    if len(values) == 4:
        return (values[0], values[1], values[2], values[3])
    raise ValueError(f"padding must be an int or 1, 2 or 4 ints, got {padding!r}")


def _padding_op(t: Any, name: str) -> Optional[GeoOp]:
    """RandomCrop / Pad (v1): a zero constant fill pads the canvas (mode
    None); edge / reflect / symmetric and an integer fill of one or three
    values are a PadStage (``mode``); another fill (float, per-channel of
    another length) or negative padding runs unfused (None)."""
    fill = list(t.fill) if isinstance(t.fill, (list, tuple)) else [t.fill]
    if t.padding_mode == "constant":
        if not all(type(v) is int and 0 <= v <= 255 for v in fill) or len(fill) not in (1, 3):
            return None
        mode: Optional[tuple] = (None if not any(fill) else
                                 ("constant", tuple(fill * (3 // len(fill))), PadStage.start))
    elif t.padding_mode in ("edge", "reflect", "symmetric"):
        mode = (t.padding_mode, None, PadStage.start)
    else:
        return None
    sides = None if t.padding is None else pad_sides(t.padding)
    if sides is not None and min(sides) < 0:
        return None
    if name == "pad":
        return PadOp(t, sides, mode)
    h, w = (int(v) for v in t.size)
    return RandomCropOp(t, (h, w), sides, mode)


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


# -- recipes: the objects real training code builds, as steps fuse knows ----------

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


def _pick(filters: tuple[int, ...]) -> int:
    """timm's own draw: ``random.choice(self.interpolation)`` when it holds
    several, made as ``random.choice`` over the positions of ``filters``
    (:func:`_filters` of ``self.interpolation``, in its order): the same Python RNG call
    on a sequence of the same length, so the same seed picks the same."""
    if len(filters) == 1:
        return filters[0]
    return filters[random.choice(range(len(filters)))]


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
        return _pick(self.filters)


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
        flt = _pick(self.filters)
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
