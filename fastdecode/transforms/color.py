"""Colour steps fused after the decode: ColorJitter, RandomGrayscale and RandomApply of them.

torchvision runs ColorJitter on a PIL image as Pillow's ImageEnhance
(brightness, contrast, saturation: each ``Image.blend(degenerate, image,
factor)``), in the order of ``torch.randperm(4)``. Here the parameters are
drawn by torchvision's own ``ColorJitter.get_params`` in the same order and
with the same RNG calls, and the blends run in one native call on the
rendered uint8 pixels with Pillow's float32 arithmetic
(``_native.adjust_colors``, src_c/fd_color.c): bit-identical to torchvision
on the same pixels. Hue is Pillow's RGB -> HSV, torchvision's uint8 shift of
H (``np.array(hue_factor * 255).astype(np.uint8)``, computed here with that
very expression), Pillow's HSV -> RGB. RandomGrayscale is Pillow's
``convert('L')`` in the three channels, i.e. a saturation step with factor
0. Exact types only (kinds.py's rule): a subclass may override ``forward``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode import _native

__all__ = ["ColorOp", "Steps", "apply", "color_op", "why_not"]

Steps = tuple[tuple[int, float], ...]  # (op, factor) pairs for _native.adjust_colors

# ColorJitter's fn_idx 0..3 -> the native op
_OPS = (_native.COLOR_BRIGHTNESS, _native.COLOR_CONTRAST, _native.COLOR_SATURATION,
        _native.COLOR_HUE)
_GRAY: Steps = ((_native.COLOR_SATURATION, 0.0),)
_JITTERS = {T.ColorJitter: False, T2.ColorJitter: True}
_GRAYSCALES = {T.RandomGrayscale: False, T2.RandomGrayscale: True}
_APPLIES = {T.RandomApply: False, T2.RandomApply: True}


class ColorOp:
    """One colour step of a chain: :meth:`draw` consumes torch's RNG exactly
    as the transform's ``forward`` would on a PIL image and returns the native
    steps it would apply (empty: the image passes unchanged)."""

    def __init__(self, transform: Any):
        self.transform = transform

    def draw(self) -> Steps:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


class _Jitter(ColorOp):
    def __init__(self, transform: Any):
        super().__init__(transform)
        self.ranges = (transform.brightness, transform.contrast, transform.saturation,
                       transform.hue)

    def draw(self) -> Steps:
        # v2's make_params draws the same: randperm(4), then one uniform_ per range
        # set, float of the float32 value (``.item()`` there, ``float()`` here)
        order, b, c, s, h = T.ColorJitter.get_params(*self.ranges)
        factors: tuple[Optional[float], ...] = (b, c, s, None if h is None else _hue_shift(h))
        return tuple((_OPS[i], f) for i in order.tolist() if (f := factors[i]) is not None)


def _hue_shift(hue_factor: float) -> int:
    """What torchvision's adjust_hue adds to Pillow's uint8 H (its expression:
    numpy's float -> uint8 cast wraps negative shifts)."""
    return int(np.array(hue_factor * 255).astype(np.uint8))


class _Grayscale(ColorOp):
    def __init__(self, transform: Any, v2: bool):
        super().__init__(transform)
        self.v2 = v2

    def draw(self) -> Steps:
        p = self.transform.p
        if self.v2:  # _RandomApplyTransform.forward
            return () if bool(torch.rand(1) >= p) else _GRAY
        return _GRAY if bool(torch.rand(1) < p) else ()


class _RandomApply(ColorOp):
    def __init__(self, transform: Any, v2: bool, inner: list[ColorOp]):
        super().__init__(transform)
        self.v2 = v2
        self.inner = inner

    def draw(self) -> Steps:
        p = self.transform.p
        skip = bool(torch.rand(1) >= p) if self.v2 else bool(p < torch.rand(1))
        if skip:
            return ()
        return tuple(step for op in self.inner for step in op.draw())


def color_op(t: Any) -> Optional[ColorOp]:
    """The colour op for ``t``, or None when it is not one fuse runs exactly
    (any other step, a subclass)."""
    cls = type(t)
    try:
        if cls in _JITTERS:
            return _Jitter(t)
        if cls in _GRAYSCALES:
            float(t.p)
            return _Grayscale(t, _GRAYSCALES[cls])
        if cls in _APPLIES:
            float(t.p)
            inner = [color_op(s) for s in t.transforms]
            if inner and all(op is not None for op in inner):
                return _RandomApply(t, _APPLIES[cls], [op for op in inner if op is not None])
    except (TypeError, ValueError, AttributeError):
        return None
    return None


def why_not(t: Any) -> Optional[str]:
    """Why a colour transform did not fuse (for the fusion report), or None
    when ``t`` is not a colour transform fuse knows."""
    cls = type(t)
    inner = getattr(t, "transforms", None) if cls in _APPLIES else None
    if inner is not None and any(type(s) in _JITTERS or type(s) in _GRAYSCALES for s in inner):
        return "a RandomApply of steps other than ColorJitter / RandomGrayscale: it runs unfused"
    return None


def apply(pixels: np.ndarray, layout: str, steps: Steps) -> np.ndarray:
    """``pixels`` (uint8 (3, H, W) for 'CHW', (H, W, 3) for 'HWC') after
    ``steps``: in place when writable and C-contiguous, else a copy."""
    if not steps:
        return pixels
    if not (pixels.flags.writeable and pixels.flags.c_contiguous):
        pixels = np.array(pixels, order="C")
    return _native.adjust_colors(pixels, steps, layout)
