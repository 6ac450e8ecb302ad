"""The fused-transform machinery behind :func:`fastdecode.transforms.fuse` (private).

A chain is split into three parts, in order, never reordered:

1. ``geometric``: the leading run of RandomResizedCrop / Resize / CenterCrop /
   RandomHorizontalFlip (torchvision v1, v2 or fastdecode's own), planned per
   image by :mod:`fastdecode._plan` and rendered by one native decode call
   (``decode_image(data, crop=..., size=..., flip=..., layout=...)``);
2. ``tensor``: a PIL-to-tensor converter (ToTensor, PILToTensor, v2.ToImage,
   v2.PILToTensor, v2.ToTensor) followed by per-pixel ops (Normalize, v2.ToDtype,
   ConvertImageDtype, v2.ToPureTensor), applied as one 256-entry-per-channel
   table (see ``_tensor.pxi``), built by running the real transforms on a
   256-pixel ramp, so the values and the result type are torchvision's own;
3. ``trailing``: everything from the first transform not understood, run
   unfused on the type torchvision would have given it at that point.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Optional

import numpy as np
import PIL.Image
import torch
from torchvision import transforms as T
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T2

from fastdecode import _native, api
from fastdecode._plan import (
    PIL_FILTER_NAMES,
    CenterCropOp,
    FlipOp,
    Geometry,
    RandomResizedCropOp,
    ResizeOp,
    round_box,
    run_geometry,
    static_output_size,
)

__all__ = ["FusedTransform", "fuse", "register", "pil_filter"]

# What fuse translates: kind -> the class name, the same in torchvision's v1
# and v2. fastdecode.transforms registers its own classes per kind.
_TORCHVISION_NAMES = {"compose": "Compose", "rrc": "RandomResizedCrop", "resize": "Resize",
                      "center_crop": "CenterCrop", "hflip": "RandomHorizontalFlip"}
_REGISTRY: dict[str, set] = {kind: set() for kind in _TORCHVISION_NAMES}


def register(kind: str, cls: type) -> type:
    _REGISTRY[kind].add(cls)
    return cls


_V1 = {kind: getattr(T, name) for kind, name in _TORCHVISION_NAMES.items()}
_V2 = {kind: getattr(T2, name) for kind, name in _TORCHVISION_NAMES.items()}

_CONVERTERS = {T.ToTensor, T.PILToTensor, T2.ToImage, T2.PILToTensor}
_POINTWISE = {T.Normalize, T2.Normalize, T.ConvertImageDtype, T2.ConvertImageDtype, T2.ToDtype,
              T2.ToPureTensor}
_UINT8_CONVERTERS = {T.PILToTensor, T2.ToImage, T2.PILToTensor}
if hasattr(T2, "ToTensor"):  # deprecated in v2, still there
    _CONVERTERS.add(T2.ToTensor)


def _kind(t: Any) -> Optional[tuple[str, bool]]:
    """(kind, is_v2) for the transforms fuse understands (exact types only: a
    subclass may override forward)."""
    cls = type(t)
    for kind in _REGISTRY:
        if cls in _REGISTRY[kind] or cls is _V1[kind]:
            return kind, False
        if cls is _V2[kind]:
            return kind, True
    return None


# --------------------------------------------------------------------------
# Interpolation.

_STRINGS = {m.value: m for m in InterpolationMode}


def interpolation_mode(value: Any) -> InterpolationMode:
    """InterpolationMode from a mode, a Pillow constant or a string."""
    if isinstance(value, InterpolationMode):
        return value
    if isinstance(value, str):
        key = value.lower().replace("_", "-")
        if key == "nearest_exact":
            key = "nearest-exact"
        if key not in _STRINGS:
            raise ValueError(
                f"interpolation must be one of {sorted(_STRINGS)}, an InterpolationMode or a "
                f"Pillow constant, got {value!r}"
            )
        return _STRINGS[key]
    if isinstance(value, int) and not isinstance(value, bool):
        modes = {0: InterpolationMode.NEAREST, 1: InterpolationMode.LANCZOS,
                 2: InterpolationMode.BILINEAR, 3: InterpolationMode.BICUBIC,
                 4: InterpolationMode.BOX, 5: InterpolationMode.HAMMING}
        if value in modes:
            return modes[value]
    raise ValueError(
        f"interpolation must be an InterpolationMode, a Pillow constant (0-5) or one of "
        f"{sorted(_STRINGS)}, got {value!r}"
    )


def pil_filter(value: Any) -> int:
    """The Pillow filter torchvision uses for an interpolation on PIL images."""
    from torchvision.transforms.functional import pil_modes_mapping

    return pil_modes_mapping[interpolation_mode(value)]


# --------------------------------------------------------------------------
# Classification.


def flatten(transform: Any) -> list:
    if transform is None:
        return []
    if isinstance(transform, (list, tuple)):
        return [s for t in transform for s in flatten(t)]
    kind = _kind(transform)
    if kind is not None and kind[0] == "compose":
        return flatten(list(transform.transforms))
    return [transform]


def geo_op(t: Any, tensor: bool = False):
    """The plan op for a geometric transform, or None when it is not one
    fuse can run as torchvision would (it then runs unfused).

    tensor: the transform sees a uint8 tensor (it comes after ToImage /
    PILToTensor). Only v2 classes qualify (they keep tv_tensors.Image and
    pure tensors as they are), resampling only bilinear/bicubic with
    antialias=True: torch's antialiased uint8 resize is Pillow's within one
    level; its nearest is not Pillow's.
    """
    kind = _kind(t)
    if kind is None:
        return None
    kind, v2 = kind
    if tensor and not v2:
        return None
    try:
        if kind == "hflip":
            return FlipOp(t, float(t.p))
        if kind == "center_crop":
            h, w = (int(v) for v in t.size)
            return CenterCropOp(t, (h, w))
        if t.antialias is False or (tensor and t.antialias is not True):
            return None  # torchvision warns on PIL images: let it
        flt = pil_filter(t.interpolation)
        if tensor and flt not in (2, 3):
            return None
        if kind == "rrc":
            h, w = (int(v) for v in t.size)
            return RandomResizedCropOp(t, (h, w), flt, v2)
        if kind == "resize":
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
    except (TypeError, ValueError, AttributeError):
        return None
    return None


class TensorTail:
    """A converter and the per-pixel ops after it, as one table per channel."""

    def __init__(self, steps: list):
        self.steps = steps
        ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
        result: Any = PIL.Image.fromarray(ramp, "RGB")
        for step in steps:
            result = step(result)
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 1, 256):
            raise TypeError(f"not a per-pixel chain: {steps}")
        if type(result) not in (torch.Tensor, tv_tensors.Image):
            raise TypeError(f"unexpected result type {type(result).__name__}")
        self.wrap = type(result) is tv_tensors.Image
        self.dtype = result.dtype
        table = result.as_subclass(torch.Tensor)[:, 0, :].contiguous()
        self.identity = self.dtype == torch.uint8 and bool(
            (table == torch.arange(256, dtype=torch.uint8)).all()
        )
        self.table = table.numpy()  # (3, 256)

    def apply(self, chw: np.ndarray, out: Any = None) -> torch.Tensor:
        """uint8 (..., C, H, W) array -> the chain's tensor (into ``out``)."""
        if self.identity:
            if out is not None:
                target = _as_numpy(out, np.uint8, chw.shape)
                np.copyto(target, chw)
                tensor = out if isinstance(out, torch.Tensor) else torch.from_numpy(target)
            else:
                tensor = torch.from_numpy(chw)
        elif self.dtype == torch.float32:
            target = None if out is None else _as_numpy(out, np.float32, chw.shape)
            result = _native.lut_to_float(chw, self.table, target)
            tensor = out if isinstance(out, torch.Tensor) else torch.from_numpy(result)
        else:
            channels = np.arange(chw.shape[-3]).reshape((-1, 1, 1))
            values = self.table[channels, chw]
            if out is not None:
                target = _as_numpy(out, values.dtype, chw.shape)
                np.copyto(target, values)
                tensor = out if isinstance(out, torch.Tensor) else torch.from_numpy(target)
            else:
                tensor = torch.from_numpy(values)
        if self.wrap:
            return tensor.as_subclass(tv_tensors.Image)
        return tensor

    def __repr__(self) -> str:
        return " + ".join(_name(s) for s in self.steps)


def _as_numpy(out: Any, dtype, shape) -> np.ndarray:
    arr = out.numpy() if isinstance(out, torch.Tensor) else out
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"out must be a numpy array or a CPU tensor, got {type(out).__name__}")
    if arr.dtype != dtype or tuple(arr.shape) != tuple(shape):
        raise ValueError(
            f"out must have dtype {np.dtype(dtype).name} and shape {tuple(shape)}, "
            f"got {arr.dtype} {tuple(arr.shape)}"
        )
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise ValueError("out must be writable and C-contiguous")
    return arr


def _name(t: Any) -> str:
    text = repr(t)
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------
# Rendering a Geometry.

_NATIVE_FILTERS = {0: "nearest", 2: "bilinear", 3: "bicubic"}
# M of the M/8 DCT scales libjpeg-turbo runs with SIMD (the others are scalar
# and slower than a full decode), smallest first.
DCT_SCALES = (1, 2, 4)
REGION_STRATEGIES = ("box", "whole", "round")
_SUPPORT = {"nearest": 1.0, "bilinear": 1.0, "bicubic": 2.0}  # filter radius, Pillow's
DCT_MARGIN = 1.25


@functools.lru_cache(maxsize=None)
def native_caps() -> frozenset:
    """Which resampling options this build's decode_image takes."""
    try:
        params = inspect.signature(api.decode_image).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return frozenset()
    return frozenset(name for name in ("size", "box", "interpolation") if name in params)


def _full(box, image_size) -> bool:
    return box == (0, 0) + tuple(image_size)


class Renderer:
    """Turns a Geometry into pixels: uint8 HWC or CHW, the canvas size.

    region: how a region kept *after* a resample (Resize then CenterCrop) is
      decoded while decode_image takes only integer crops:
      'box'    decode the integer crop that holds the region and its filter
               support, then resample the sub-pixel box (Pillow's
               ``resize(box=)``) with the native resampler: two native calls,
               exact (default);
      'whole'  resample the whole crop, then slice (exact; resamples more
               pixels than are kept);
      'round'  resample the nearest integer box straight to the kept size
               (one call, sub-pixel misalignment: ~24 dB worst case on photos).
      With a native ``box=`` option in decode_image, that is used instead.
    exact: scale=1 (no DCT-domain downscaling): Pillow-exact pixels.
    dct_margin: otherwise a JPEG is decoded at the smallest M/8 in
      DCT_SCALES whose scaled crop is still >= dct_margin x the resample
      size. A DCT downscale is a sharper low-pass than Pillow's antialiased
      filters: with a margin of 1 (the decoder's own automatic choice) one of
      the 250 photos ends 31 dB from Pillow; 1.25 keeps every photo >= 43 dB
      and still lets large images (the ones where it pays) decode at 1/2-1/8.
    """

    def __init__(self, exact: bool = False, region: str = "box",
                 dct_margin: float = DCT_MARGIN):
        if region not in REGION_STRATEGIES:
            raise ValueError(f"region must be one of {REGION_STRATEGIES}, got {region!r}")
        if not dct_margin >= 1:
            raise ValueError(f"dct_margin must be >= 1, got {dct_margin!r}")
        self.exact = exact
        self.region = region
        self.dct_margin = float(dct_margin)

    def scale_for(self, fmt: str, crop_hw, out_hw):
        """The decoder scale for resampling a crop of crop_hw to out_hw."""
        if fmt != "jpeg" or self.exact:
            return 1 if fmt == "jpeg" or not fmt else None  # None: no DCT scaling there
        for m in DCT_SCALES:
            if (crop_hw[0] * m >= self.dct_margin * 8 * out_hw[0]
                    and crop_hw[1] * m >= self.dct_margin * 8 * out_hw[1]):
                return m / 8
        return 1

    def render(self, data: Any, geo: Geometry, layout: str, out: Optional[np.ndarray] = None,
               fmt: str = "jpeg"):
        H, W = geo.canvas
        ct, cl, ch, cw = geo.content
        shape = (3, H, W) if layout == "CHW" else (H, W, 3)
        if ch == 0 or cw == 0:
            if out is None:
                return np.zeros(shape, np.uint8)
            out[...] = 0
            return out
        if not geo.padded:
            return self._content(data, geo, layout, out, fmt)
        canvas = np.zeros(shape, np.uint8) if out is None else out
        if out is not None:
            canvas[...] = 0
        left = W - cl - cw if geo.flip else cl
        content = self._content(data, geo, layout, None, fmt)
        if layout == "CHW":
            canvas[:, ct:ct + ch, left:left + cw] = content
        else:
            canvas[ct:ct + ch, left:left + cw] = content
        return canvas

    def _decode(self, data, **kw):
        return api.decode_image(data, mode="RGB", **kw)

    def _content(self, data, geo: Geometry, layout: str, out, fmt: str):
        caps = native_caps()
        flt = _NATIVE_FILTERS.get(geo.filter)
        if geo.size is None:
            crop = None if _full(geo.region, geo.image_size) else geo.region
            return self._decode(data, crop=crop, flip=geo.flip, layout=layout, out=out)
        if "size" not in caps or flt is None:
            return self._pillow(data, geo, layout, out)
        # nearest picks source pixels: any DCT pre-filter changes which
        scale = self.scale_for(fmt if flt != "nearest" else "", geo.crop[2:], geo.size)
        resample = {"interpolation": flt} if "interpolation" in caps else {}
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        if geo.region_is_full:
            return self._decode(data, crop=crop, size=geo.size, flip=geo.flip, layout=layout,
                                out=out, scale=scale, **resample)
        kept = geo.region[2:]
        if "box" in caps:
            return self._decode(data, box=geo.source_box(), size=kept, flip=geo.flip,
                                layout=layout, out=out, scale=scale, **resample)
        if self.region == "round":
            return self._decode(data, crop=round_box(geo), size=kept, flip=geo.flip,
                                layout=layout, out=out, scale=scale, **resample)
        if self.region == "box" and hasattr(_native, "resize"):
            return self._box(data, geo, layout, out, scale, flt)
        whole = self._decode(data, crop=crop, size=geo.size, layout=layout, scale=scale, **resample)
        return _slice(whole, geo.region, geo.flip, layout, out)

    def _box(self, data, geo: Geometry, layout: str, out, scale, flt: str):
        """Pillow's resize(size, box=float box) of the stored image, from a
        decode of only the pixels it reads: the box widened by the filter
        support (taps are clipped at the image edges, never at ours)."""
        top, left, height, width = geo.source_box()
        out_h, out_w = geo.region[2:]
        H, W = geo.image_size
        m = 8 if scale is None else int(round(scale * 8))
        radius = _SUPPORT[flt]
        # support in stored pixels: radius x max(1, decoded px per output px), at 8/m px each
        pad_y = (radius * max(1.0, height * m / 8 / out_h) + 2) * 8 / m
        pad_x = (radius * max(1.0, width * m / 8 / out_w) + 2) * 8 / m
        t0, l0 = max(0, math.floor(top - pad_y)), max(0, math.floor(left - pad_x))
        b0, r0 = min(H, math.ceil(top + height + pad_y)), min(W, math.ceil(left + width + pad_x))
        crop = (t0, l0, b0 - t0, r0 - l0)
        arr = self._decode(data, crop=None if _full(crop, geo.image_size) else crop, scale=scale)
        # the decoder's scaled frame starts the crop at floor(t0 * m / 8)
        oy, ox = (t0 * m) // 8, (l0 * m) // 8
        k = m / 8
        box = (left * k - ox, top * k - oy, (left + width) * k - ox, (top + height) * k - oy)
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(arr.shape[1]), box[2]),
               min(float(arr.shape[0]), box[3]))
        return _native.resize(arr, (out_h, out_w), interpolation=flt, box=box, flip=geo.flip,
                              layout=layout, out=out)

    def _pillow(self, data, geo: Geometry, layout: str, out):
        """Filters decode_image lacks (box, hamming, lanczos): Pillow resamples
        the natively decoded crop, exactly as torchvision would."""
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        arr = self._decode(data, crop=crop, scale=1)
        im = PIL.Image.fromarray(arr, "RGB").resize((geo.size[1], geo.size[0]), geo.filter)
        return _slice(np.asarray(im), geo.region, geo.flip, "HWC", out, layout)


def _slice(arr, region, flip, layout, out, to_layout=None):
    to_layout = to_layout or layout
    t, l, h, w = region
    if layout == "CHW":
        part = arr[:, t:t + h, l:l + w]
        if flip:
            part = part[:, :, ::-1]
        if to_layout == "HWC":
            part = part.transpose(1, 2, 0)
    else:
        part = arr[t:t + h, l:l + w]
        if flip:
            part = part[:, ::-1]
        if to_layout == "CHW":
            part = part.transpose(2, 0, 1)
    if out is None:
        return np.ascontiguousarray(part)
    np.copyto(out, part)
    return out


# --------------------------------------------------------------------------
# The fused callable.


def _as_data(data: Any):
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError(
                "a tensor given to a fused transform must hold encoded bytes (1-D uint8), got "
                f"{data.dtype} shape {tuple(data.shape)}"
            )
        return data.contiguous().numpy()
    return data


class FusedTransform:
    """``f(data)`` == ``transform(Image.open(data).convert('RGB'))``, decoded
    and transformed in as few passes as the chain allows.

    Build with :func:`fastdecode.transforms.fuse`. Picklable (re-fused from the
    source transform on unpickling), so it works in DataLoader workers.

    Attributes:
        plan: ``{'geometric': [...], 'tensor': [...], 'trailing': [...]}``, the
            source transforms in each part (see the module docstring); ``repr``
            prints it.
        output_shape: (C, H, W) of every result when it is fixed and the whole
            chain is geometric + tensor (then :meth:`decode_into` and
            :meth:`finish` work); otherwise None.
        last_params: the :class:`~fastdecode._plan.Geometry` of the last image
            (debugging only; not thread-safe).

    The batch protocol (what datasets and loaders use; stable): when
    :attr:`output_shape` is not None, :meth:`decode_into` fills a uint8
    (C, H, W) slot, :attr:`tensor_table` is the per-channel table that
    :meth:`finish` applies (None when ``finish`` returns the uint8 pixels
    themselves) and :attr:`result_dtype` is the dtype ``finish`` returns.
    """

    def __init__(self, transform: Any, *, exact: bool = False, region: str = "box",
                 dct_margin: float = DCT_MARGIN):
        self.source = transform
        self.exact = exact
        self.renderer = Renderer(exact=exact, region=region, dct_margin=dct_margin)
        steps = flatten(transform)
        for step in steps:
            if not callable(step):
                raise TypeError(f"fuse: {step!r} in the chain is not callable")
        self.steps = steps
        ops, op_index = [], []  # the geometric ops and their index in steps
        i = 0
        while i < len(steps) and (op := geo_op(steps[i])) is not None:
            ops.append(op)
            op_index.append(i)
            i += 1
        self.tail: Optional[TensorTail] = None
        self.tensor_stage = 0  # geometric ops fused from after the converter
        if i < len(steps) and type(steps[i]) in _CONVERTERS:
            converter, i = steps[i], i + 1
            tensor_ops = []
            while (type(converter) in _UINT8_CONVERTERS and i < len(steps)
                   and (op := geo_op(steps[i], tensor=True)) is not None):
                tensor_ops.append((op, i))
                i += 1
            n = 0
            while i + n < len(steps) and type(steps[i + n]) in _POINTWISE:
                n += 1
            # the longest prefix that runs (a bad Normalize raises at call time, as it would)
            while n >= 0:
                try:
                    self.tail = TensorTail([converter] + steps[i:i + n])
                    break
                except Exception:  # noqa: BLE001 - any failure: leave it to torchvision
                    n -= 1
            if self.tail is None:
                i = op_index[-1] + 1 if op_index else 0  # the converter runs unfused
            else:
                for op, index in tensor_ops:
                    op.stage = "tensor"
                    ops.append(op)
                    op_index.append(index)
                self.tensor_stage = len(tensor_ops)
                i += n
        self.geo_ops = ops
        self.op_index = op_index
        self.trailing = steps[i:]
        fixed = static_output_size(ops) if ops else None
        self.output_shape = (
            (3, fixed[0], fixed[1]) if fixed is not None and self.tail is not None
            and not self.trailing else None
        )
        self.plan = {
            "geometric": [op.transform for op in ops],  # (after the converter: on tensors)
            "tensor": list(self.tail.steps) if self.tail else [],
            "trailing": list(self.trailing),
        }
        self.last_params: Optional[Geometry] = None

    # -- the batch protocol ----------------------------------------------------------

    @property
    def tensor_table(self) -> Optional[np.ndarray]:
        """The (C, 256) table of the tensor step: ``finish(pixels)[..., c, y, x]
        == table[c, pixels[..., c, y, x]]``; np.float32 for the ToTensor /
        Normalize / ToDtype(float32) chains (the array of the result dtype in
        general). None when that step is the identity (``finish`` returns the
        uint8 values as they are) or the chain has no fused tensor step.
        Read-only; do not modify."""
        if self.tail is None or self.tail.identity:
            return None
        return self.tail.table

    @property
    def result_dtype(self) -> Optional[torch.dtype]:
        """The torch dtype of what :meth:`finish` returns (torch.uint8 for a
        PILToTensor / ToImage tail, torch.float32 for ToTensor + Normalize...);
        None when the chain has no fused tensor step (``finish`` raises)."""
        return None if self.tail is None else self.tail.dtype

    # -- pickling: rebuild from the source ----------------------------------------

    def __reduce__(self):
        r = self.renderer
        return (_rebuild, (self.source, self.exact, r.region, r.dct_margin))

    # -- calls -----------------------------------------------------------------------

    def __call__(self, data: Any):
        """The chain's result for encoded image bytes (any bytes-like, or a 1-D
        uint8 tensor); a PIL image runs the chain unfused."""
        if isinstance(data, PIL.Image.Image):
            return self._run(self.steps, data)
        data = _as_data(data)
        geo, stop, replacement, fmt, rng = self._plan(data)
        if stop < len(self.geo_ops):
            if rng is not None:  # a tensor-stage op cannot join: replay the chain unfused
                torch.set_rng_state(rng)
                return self._run(self.steps, self._pil(data, Geometry.start(*geo.image_size), fmt))
            img = self._pil(data, geo, fmt)
            return self._run(self._after_stop(stop, replacement), img)
        if self.tail is None:
            return self._run(self.trailing, self._pil(data, geo, fmt))
        chw = self.renderer.render(data, geo, "CHW", fmt=fmt)
        return self._run(self.trailing, self.tail.apply(chw))

    def decode_into(self, data: Any, out: Any) -> Geometry:
        """Writes the geometric part's uint8 (C, H, W) result for ``data`` into
        ``out`` and returns the :class:`~fastdecode._plan.Geometry` used.

        For batch loaders: ``out`` is a writable C-contiguous uint8 tensor or
        array of shape :attr:`output_shape` (e.g. ``batch[i]`` of a
        preallocated (N, C, H, W) uint8 batch); the random parameters are drawn
        exactly as ``f(data)`` draws them. ``finish(batch)`` then turns the
        uint8 batch into what ``f`` returns per image, stacked. Only available
        when :attr:`output_shape` is not None (raises TypeError otherwise).
        """
        if self.output_shape is None:
            raise TypeError(
                "decode_into needs a chain with a fixed output shape made only of geometric "
                f"and tensor steps (output_shape is None); plan: {self.plan}"
            )
        target = _as_numpy(out, np.uint8, self.output_shape)
        data = _as_data(data)
        geo, stop, replacement, fmt, rng = self._plan(data)
        if stop < len(self.geo_ops):
            # the geometric steps (with the converter when some run on tensors) unfused
            end = self.op_index[-1] + 1
            if rng is not None:  # a tensor-stage op: replay from the whole image
                torch.set_rng_state(rng)
                img = self._pil(data, Geometry.start(*geo.image_size), fmt)
                result = self._run(self.steps[:end], img)
            else:
                index = self.op_index[stop]
                first = replacement if replacement is not None else [self.steps[index]]
                result = self._run(list(first) + self.steps[index + 1:end],
                                   self._pil(data, geo, fmt))
            if isinstance(result, PIL.Image.Image):
                arr = np.asarray(result.convert("RGB")).transpose(2, 0, 1)
            else:
                arr = result.as_subclass(torch.Tensor).numpy()
            if arr.shape != target.shape:  # pragma: no cover - static size says otherwise
                raise RuntimeError(f"unexpected shape {arr.shape}, expected {target.shape}")
            np.copyto(target, arr)
        else:
            self.renderer.render(data, geo, "CHW", out=target, fmt=fmt)
        return geo

    def finish(self, images: Any, out: Any = None):
        """The deferred tensor part: uint8 (C, H, W) or (N, C, H, W) tensor (or
        array) from :meth:`decode_into` -> what ``f(data)`` returns (stacked
        along N), e.g. float32 normalized; one pass, into ``out`` when given
        (a tensor/array of the result dtype and the same shape). A tensor with
        the values of ``images`` is returned as is when the tensor part is a
        plain PILToTensor. Needs :attr:`output_shape` (TypeError otherwise).
        """
        if self.output_shape is None or self.tail is None:
            raise TypeError("finish needs a chain whose output_shape is not None")
        arr = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
        if arr.dtype != np.uint8 or arr.ndim not in (3, 4) or arr.shape[-3] != 3:
            raise ValueError(
                f"finish takes uint8 (3, H, W) or (N, 3, H, W), got {arr.dtype} {arr.shape}"
            )
        if self.tail.identity and out is None and isinstance(images, torch.Tensor):
            tensor = images.as_subclass(torch.Tensor)
            return tensor.as_subclass(tv_tensors.Image) if self.tail.wrap else tensor
        return self.tail.apply(np.ascontiguousarray(arr), out)

    # -- internals -----------------------------------------------------------------

    def _plan(self, data):
        info = api.read_header(data)
        rng = torch.get_rng_state() if self.tensor_stage else None
        geo, stop, replacement = run_geometry(self.geo_ops, info.height, info.width)
        self.last_params = geo
        if stop < len(self.geo_ops) and self.geo_ops[stop].stage != "tensor":
            rng = None  # a PIL-stage stop: the rest runs unfused from there
        return geo, stop, replacement, info.format, rng

    def _after_stop(self, stop: int, replacement) -> list:
        """What runs on the PIL image after a PIL-stage op could not join."""
        index = self.op_index[stop]
        first = replacement if replacement is not None else [self.steps[index]]
        return list(first) + self.steps[index + 1:]

    def _pil(self, data, geo: Geometry, fmt: str) -> PIL.Image.Image:
        return PIL.Image.fromarray(self.renderer.render(data, geo, "HWC", fmt=fmt), "RGB")

    @staticmethod
    def _run(steps, value):
        for step in steps:
            value = step(value)
        return value

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        geo = " -> ".join(_name(op.transform) + (" (on tensors)" if op.stage == "tensor" else "")
                          for op in self.geo_ops) or "full image"
        how = "Pillow resample" if "size" not in native_caps() else "native decode + resample"
        lines.append(f"  decode: {geo}   [{how}]")
        if self.tail is not None:
            kind = "uint8, no pass" if self.tail.identity else f"one table pass -> {self.tail.dtype}"
            lines.append(f"  tensor: {self.tail!r}   [{kind}]")
        if self.trailing:
            lines.append("  trailing (unfused): " + " -> ".join(_name(s) for s in self.trailing))
        lines.append(f"  output_shape={self.output_shape}, exact={self.exact})")
        return "\n".join(lines)


def _rebuild(source, exact, region, dct_margin):
    return FusedTransform(source, exact=exact, region=region, dct_margin=dct_margin)


def fuse(transform: Any = None, *, exact: bool = False, region: str = "box",
         dct_margin: float = DCT_MARGIN) -> FusedTransform:
    return FusedTransform(transform, exact=exact, region=region, dct_margin=dct_margin)


__all__ += ["PIL_FILTER_NAMES"]
