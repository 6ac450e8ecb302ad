"""DetachedPlan: a fully fused chain's batch decode without its source transforms.

What a Ray read task (or any process that receives a ``BatchDecoder``)
unpickles. A :class:`~fastdecode.transforms.FusedTransform` pickles its
torchvision source and re-fuses on unpickling, so every fresh worker imported
torchvision (1.2-1.8 CPU-s, most of it ``torch._dynamo`` through
``torchvision.ops``) before its first row. When the whole chain fused (the
geometry ops are the four plain kinds, a tensor table, nothing trailing),
what a worker runs per row needs none of it: the geometry ops' parameters,
the fused colour ops, the renderer's options and the table. :func:`detach`
copies those, with each op's source transform replaced by a stand-in that
carries only what the op reads at draw time (RandomResizedCrop's ``scale``
and ``ratio``, a colour op's ``p``), and keeps
the pickled FusedTransform as bytes for the rare image whose geometry stops
(a second resample, a padded canvas): that image restores the RNG state and
runs through the full transform, unpickled (and torchvision imported) then.

Written again here on purpose: :meth:`DetachedPlan.decode_into` is the
all-joined path of ``FusedTransform.decode_into`` (read the header, draw the
geometry, then the colour steps, render into the slot, apply the colour) and
:meth:`DetachedPlan.finish` its ``finish`` for numpy batches; :func:`detach`
refuses (returns None, and the caller pickles the FusedTransform as before)
any FusedTransform whose state is not the fields listed in ``_FUSED_STATE``
and ``_COLOR_STATE`` (colour ops only of this package's kinds), so a plan
that grows a new per-image step is never detached without being taught here
(tests/transforms/test_detached.py checks the rows are the same).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any, Optional

import numpy as np
import torch

from fastdecode import api
from fastdecode.transforms.color import ColorOp
from fastdecode.transforms.color import apply as apply_color
from fastdecode.transforms.color import draw as draw_color
from fastdecode.transforms.geometry import (
    CenterCropOp,
    FlipOp,
    GeoOp,
    RandomResizedCropOp,
    ResizeOp,
    draw_geometry,
)
from fastdecode.transforms.render import Renderer
from fastdecode.transforms.tensor import TensorTail

__all__ = ["DetachedPlan", "detach"]

# FusedTransform's attributes (fused.py's __init__): detach() knows what each
# means for a fully fused chain; any other state refuses.
_FUSED_STATE = frozenset({"source", "_fingerprint", "exact", "renderer", "steps", "geo_ops",
                          "op_index", "tail", "tensor_stage", "trailing", "output_shape", "plan",
                          "last_params"})
# The fused colour steps' fields: the ops travel with stand-in sources;
# fill_end matters only on a stop (the full transform's path).
_COLOR_STATE = frozenset({"color_ops", "fill_end"})
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


def _detached_color(op: ColorOp) -> ColorOp:
    out = copy.copy(op)
    out.transform = _Source(repr(op.transform), p=getattr(op.transform, "p", None))
    if hasattr(op, "inner"):  # RandomApply of colour ops
        out.inner = [_detached_color(inner) for inner in op.inner]  # type: ignore[attr-defined]
    return out


def _detached_tail(tail: TensorTail) -> TensorTail:
    out = copy.copy(tail)
    out.steps = []  # the torchvision converter and per-pixel steps: the table has them
    out.wrap = False  # batches are numpy arrays: no tv_tensors.Image (torchvision) around them
    return out


def detach(fused: Any) -> Optional[DetachedPlan]:
    """The torchvision-free form of ``fused`` for batch decoding, or None when
    its chain is not fully fused into the four plain geometry ops and a
    tensor table (then pickle ``fused`` itself)."""
    from fastdecode.transforms.fused import FusedTransform

    state = vars(fused)
    if (type(fused) is not FusedTransform or not _FUSED_STATE <= set(state)
            or set(state) - _FUSED_STATE - _COLOR_STATE
            or not all(isinstance(op, ColorOp) for op in state.get("color_ops", ()))
            or fused.output_shape is None or fused.trailing or fused.tail is None
            or type(fused.tail) is not TensorTail or fused.tail.numpy
            or type(fused.renderer) is not Renderer
            or not all(type(op) in _PLAIN_OPS for op in fused.geo_ops)):
        return None
    return DetachedPlan(fused)


class DetachedPlan:
    """A fully fused chain's ``decode_into`` / ``finish`` for batches (see the
    module docstring); built by :func:`detach`. ``full()`` is the
    FusedTransform (unpickled on first use)."""

    def __init__(self, fused: Any) -> None:
        self.output_shape = tuple(fused.output_shape)
        self.exact = fused.exact
        self.geo_ops = [_detached_op(op) for op in fused.geo_ops]
        self.color_ops = [_detached_color(op) for op in getattr(fused, "color_ops", ())]
        self.renderer = copy.copy(fused.renderer)
        self.tail = _detached_tail(fused.tail)
        self.text = repr(fused)
        self._pickled = pickle.dumps(fused)
        self._full: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_full"] = None
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
        info = api.read_header(data)
        state = torch.get_rng_state()
        geo, stop, _ = draw_geometry(self.geo_ops, info.height, info.width)
        if stop < len(self.geo_ops):  # this image leaves the fused path: the full transform
            torch.set_rng_state(state)
            self.full().decode_into(data, out)
            return
        color = draw_color(self.color_ops)
        self.renderer.render(data, geo, "CHW", out=out, fmt=info.format)
        apply_color(out, "CHW", color)

    def finish(self, pixels: np.ndarray, out: Any = None) -> Any:
        """The tensor table over a uint8 (N, C, H, W) batch, into ``out``."""
        return self.tail.apply(np.ascontiguousarray(pixels), out)

    def __repr__(self) -> str:
        return f"DetachedPlan of {self.text}"
