"""DetachedPlan: a fully fused chain's batch decode without its source transforms.

What a Ray read task (or any process that receives a ``BatchDecoder``)
unpickles. When the whole chain fused (the four plain geometry ops, colour
ops of this package's kinds, a tensor table, nothing trailing),
:func:`detach` copies what a row needs (the ops, each with a stand-in for its
torchvision transform carrying what it reads at draw time, the renderer's
options, the table) and keeps the pickled FusedTransform as bytes for the
rare image whose geometry stops, which then runs through it. :func:`detach`
refuses (None: pickle the FusedTransform) any state it was not taught
(``_FUSED_STATE``, ``_COLOR_STATE``). See docs/decisions/ray.md ("A fully
fused chain reaches the workers without torchvision").
"""

from __future__ import annotations

import copy
import pickle
from typing import Any, Optional

import numpy as np

from fastdecode import _native, api
from fastdecode.transforms import torch_draws
from fastdecode.transforms.geometry import (
    CenterCropOp,
    FlipOp,
    GeoOp,
    RandomResizedCropOp,
    ResizeOp,
    draw_geometry,
)
from fastdecode.transforms.render import Renderer

__all__ = ["DetachedPlan", "detach"]

# FusedTransform's attributes (fused.py's __init__): detach() knows what each
# means for a fully fused chain; any other state refuses.
_FUSED_STATE = frozenset({"source", "_fingerprint", "exact", "renderer", "steps", "geo_ops",
                          "op_index", "tail", "tensor_stage", "trailing", "output_shape", "plan",
                          "last_params", "crops"})  # crops: None here (output_shape says so)
# The fused colour steps' fields: the ops travel with stand-in sources;
# fill_end matters only on a stop (the full transform's path). A chain with
# fused erasing (its boxes drawn per slot, erased by finish) is not detached.
_COLOR_STATE = frozenset({"color_ops", "fill_end", "erasing", "_erased"})
_PLAIN_OPS = (RandomResizedCropOp, ResizeOp, CenterCropOp, FlipOp)


class _Source:
    """Stands in for an op's torchvision transform: its repr and the
    attributes the op reads when it draws."""

    def __init__(self, text: str, **params: Any) -> None:
        self.text = text
        self.__dict__.update(params)

    def __repr__(self) -> str:
        return self.text


def _detached_op(op: GeoOp) -> GeoOp:
    out = copy.copy(op)
    params = {}
    if type(op) is RandomResizedCropOp:
        params = {"scale": tuple(op.transform.scale), "ratio": tuple(op.transform.ratio)}
    out.transform = _Source(repr(op.transform), **params)
    return out


def _detached_color(op: Any) -> Any:
    out = copy.copy(op)
    out.transform = _Source(repr(op.transform), p=getattr(op.transform, "p", None))
    if hasattr(op, "inner"):  # RandomApply of colour ops
        out.inner = [_detached_color(inner) for inner in op.inner]
    return out


class ArrayTail:
    """A TensorTail's table over numpy batches, without torch: what a detached
    plan's ``finish`` applies (the converter and per-pixel steps are in the
    table; batches are numpy arrays, so no tv_tensors.Image around them).
    ``dtype`` is the numpy dtype of the result."""

    def __init__(self, tail: Any) -> None:
        import torch

        self.dtype = np.dtype(torch.empty((), dtype=tail.dtype).numpy().dtype)
        self.identity = tail.identity
        self.table = tail.table

    def apply(self, chw: np.ndarray, out: np.ndarray) -> np.ndarray:
        """uint8 (N, C, H, W) -> the chain's values, into ``out`` (the same
        computation as TensorTail.apply's numpy paths)."""
        if self.identity:
            np.copyto(out, chw)
        elif self.dtype == np.float32:
            _native.lut_to_float(chw, self.table, out)
        else:
            channels = np.arange(chw.shape[-3]).reshape((-1, 1, 1))
            np.copyto(out, self.table[channels, chw])
        return out


def detach(fused: Any) -> Optional[DetachedPlan]:
    """The torchvision-free form of ``fused`` for batch decoding, or None when
    its chain is not fully fused into the four plain geometry ops and a
    tensor table (then pickle ``fused`` itself)."""
    from fastdecode.transforms.color import ColorOp
    from fastdecode.transforms.fused import FusedTransform
    from fastdecode.transforms.tensor import TensorTail

    state = vars(fused)
    if (type(fused) is not FusedTransform or not _FUSED_STATE <= set(state)
            or set(state) - _FUSED_STATE - _COLOR_STATE
            or not all(isinstance(op, ColorOp) for op in state.get("color_ops", ()))
            or fused.output_shape is None or fused.trailing or fused.tail is None
            or getattr(fused, "erasing", None)
            or type(fused.tail) is not TensorTail or fused.tail.numpy
            or type(fused.renderer) is not Renderer
            or not all(type(op) in _PLAIN_OPS for op in fused.geo_ops)):
        return None
    return DetachedPlan(fused)


class DetachedPlan:
    """A fully fused chain's ``decode_into`` / ``finish`` for batches (see the
    module docstring); built by :func:`detach`. ``full()`` is the
    FusedTransform (unpickled on first use). ``torch_free``: the geometry
    ops' draws have a torch-free form (``transforms.torch_draws``: no colour
    steps, every uniform range exact), so :meth:`decode_seeded` never
    imports torch."""

    def __init__(self, fused: Any) -> None:
        self.output_shape = tuple(fused.output_shape)
        self.exact = fused.exact
        self.geo_ops = [_detached_op(op) for op in fused.geo_ops]
        self.color_ops = [_detached_color(op) for op in getattr(fused, "color_ops", ())]
        self.renderer = copy.copy(fused.renderer)
        self.tail = ArrayTail(fused.tail)
        self.text = repr(fused)
        self._pickled = pickle.dumps(fused)
        self._full: Any = None
        self.ranges = [_crop_ranges(op) for op in self.geo_ops]
        self.torch_free = not self.color_ops and all(
            r is None or (torch_draws.exact_uniform(*r[3]) and torch_draws.exact_uniform(*r[4]))
            for r in self.ranges)
        self.ranges = [None if r is None else r[:3] for r in self.ranges]
        self._draws: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_full"] = None
        state["_draws"] = None
        return state

    def full(self) -> Any:
        """The FusedTransform this plan was detached from (imports torchvision)."""
        if self._full is None:
            self._full = pickle.loads(self._pickled)
        return self._full

    def decode_into(self, data: Any, out: np.ndarray) -> None:
        """``FusedTransform.decode_into(data, out)`` for a writable C-contiguous
        uint8 slot of :attr:`output_shape` and bytes-like ``data``: the same
        draws from torch's RNG, the same pixels."""
        import torch

        from fastdecode.transforms.color import apply as apply_color
        from fastdecode.transforms.color import draw as draw_color

        info = api.read_header(data)
        state = torch.get_rng_state()
        geo, stop, _ = draw_geometry(self.geo_ops, info.height, info.width)
        if stop < len(self.geo_ops):  # this image leaves the fused path: the full transform
            torch.set_rng_state(state)
            self.full().decode_into(data, out)
            return
        color = draw_color(self.color_ops, geo.canvas)
        self.renderer.render(data, geo, "CHW", out=out, fmt=info.format)
        apply_color(out, "CHW", color)

    def decode_seeded(self, data: Any, out: np.ndarray, seed: int) -> None:
        """:meth:`decode_into` under ``torch.manual_seed(seed)``, leaving torch's
        RNG as it was; without torch when :attr:`torch_free` (an image whose
        geometry stops imports it: the full transform's path)."""
        if not self.torch_free:
            return self._under_seed(data, out, seed)
        if self._draws is None:
            self._draws = torch_draws.Draws()
        self._draws.manual_seed(seed)
        info = api.read_header(data)
        geo, stop = torch_draws.draw_geometry(self.geo_ops, self.ranges, self._draws,
                                              info.height, info.width)
        if stop < len(self.geo_ops):
            return self._under_seed(data, out, seed)
        self.renderer.render(data, geo, "CHW", out=out, fmt=info.format)

    def _under_seed(self, data: Any, out: np.ndarray, seed: int) -> None:
        import torch

        state = torch.get_rng_state()
        try:
            torch.manual_seed(seed)
            self.decode_into(data, out)
        finally:
            torch.set_rng_state(state)

    def finish(self, pixels: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The tensor table over a uint8 (N, C, H, W) batch, into ``out``."""
        if out is None:
            out = np.empty(pixels.shape, self.tail.dtype)
        return self.tail.apply(np.ascontiguousarray(pixels), out)

    def __repr__(self) -> str:
        return f"DetachedPlan of {self.text}"


def _crop_ranges(op: Any) -> Optional[tuple]:
    """A RandomResizedCrop's draw ranges as torch draws them (its float32
    log ratio computed by torch, as geometry's op does), and the raw ranges
    for the exactness check; None for the other ops."""
    if type(op) is not RandomResizedCropOp:
        return None
    import torch

    ratio = tuple(op.transform.ratio)
    scale = tuple(op.transform.scale)
    lo, hi = (float(v) for v in torch.log(torch.tensor(ratio)))
    return (torch_draws.range_draw(*scale), torch_draws.range_draw(lo, hi), ratio, scale,
            (lo, hi))
