"""The pixel stage fused after the geometry: colour steps and the augmentation policies.

The colour steps: ColorJitter, RandomGrayscale, RandomApply of them; the
policies: :mod:`fastdecode.augment`.

The colour steps' parameters are drawn with the RNG calls of torchvision's
``ColorJitter.get_params`` (:func:`jitter_params`, tested against it), so a
plan unpickled without torchvision (:mod:`.detached`) draws them too; the
augmentation policies (RandAugment, TrivialAugmentWide, AutoAugment of
torchvision v1 / v2 and timm) draw as their library draws
(:func:`fastdecode.augment.pixel_op`). All the steps of an image then run,
in chain order, in one native call on the rendered uint8 pixels
(``_native.augment``) with Pillow's arithmetic: bit-identical to
torchvision / timm on the same pixels. RandomGrayscale is a saturation step
of factor 0. Exact types only (a subclass may override ``forward``). See
docs/decisions/fused-transforms.md ("Colour steps fuse, bit-exact") and
docs/decisions/augment.md.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

import numpy as np
import torch

from fastdecode import _native, augment
from fastdecode.augment import ops as aug_ops
from fastdecode.augment.base import PixelOp

__all__ = ["ColorOp", "Steps", "apply", "color_op", "draw", "jitter_params", "why_not"]

Steps = augment.Steps  # _native.augment's step tuples

# ColorJitter's fn_idx 0..3 -> the native op
_OPS = (_native.COLOR_BRIGHTNESS, _native.COLOR_CONTRAST, _native.COLOR_SATURATION,
        _native.COLOR_HUE)
_GRAY: Steps = (aug_ops.color_step(_native.COLOR_SATURATION, 0.0),)


@functools.cache
def _classes() -> tuple[dict, dict, dict]:
    """The transform classes fuse knows -> whether v2 (torchvision loads only
    when a chain is fused, never when a fused plan is unpickled)."""
    from torchvision import transforms as T
    from torchvision.transforms import v2 as T2

    return ({T.ColorJitter: False, T2.ColorJitter: True},
            {T.RandomGrayscale: False, T2.RandomGrayscale: True},
            {T.RandomApply: False, T2.RandomApply: True})


def jitter_params(ranges: Sequence[Optional[Sequence[float]]]):
    """torchvision's ``ColorJitter.get_params(brightness, contrast,
    saturation, hue)``: ``torch.randperm(4)``, then one ``uniform_`` per range
    that is not None, in that order, each as a Python float of the float32
    draw (v2's ``make_params`` draws the same)."""
    order = torch.randperm(4)
    factors = [None if r is None else float(torch.empty(1).uniform_(r[0], r[1])) for r in ranges]
    return (order, *factors)


class ColorOp(PixelOp):
    """One colour step of a chain: :meth:`draw` consumes torch's RNG exactly
    as the transform's ``forward`` would on a PIL image and returns the native
    steps it would apply (empty: the image passes unchanged); the size plays
    no part."""

    how = "fused: the colours are adjusted natively on the decoded pixels, with Pillow's arithmetic"

    def draw(self, size: tuple[int, int] = (0, 0)) -> Steps:  # pragma: no cover - subclasses
        """Draws this image's parameters from torch's RNG as the transform's
        ``forward`` would, and returns the native steps they give.

        Parameters
        ----------
        size : (int, int), optional
            (height, width) of the image (unused by colour steps).

        Returns
        -------
        Steps
            The ``(AUG_COLOR, op, factor)`` steps to apply; empty when the
            image passes unchanged.
        """
        raise NotImplementedError


class _Jitter(ColorOp):
    def __init__(self, transform: Any):
        super().__init__(transform)
        self.ranges = (transform.brightness, transform.contrast, transform.saturation,
                       transform.hue)

    def draw(self, size: tuple[int, int] = (0, 0)) -> Steps:
        order, b, c, s, h = jitter_params(self.ranges)
        factors: tuple[Optional[float], ...] = (b, c, s, None if h is None else _hue_shift(h))
        return tuple(aug_ops.color_step(_OPS[i], f) for i in order.tolist()
                     if (f := factors[i]) is not None)


def _hue_shift(hue_factor: float) -> int:
    """What torchvision's adjust_hue adds to Pillow's uint8 H (its expression:
    numpy's float -> uint8 cast wraps negative shifts)."""
    return int(np.array(hue_factor * 255).astype(np.uint8))


class _Grayscale(ColorOp):
    def __init__(self, transform: Any, v2: bool):
        super().__init__(transform)
        self.v2 = v2

    def draw(self, size: tuple[int, int] = (0, 0)) -> Steps:
        p = self.transform.p
        if self.v2:  # _RandomApplyTransform.forward
            return () if bool(torch.rand(1) >= p) else _GRAY
        return _GRAY if bool(torch.rand(1) < p) else ()


class _RandomApply(ColorOp):
    def __init__(self, transform: Any, v2: bool, inner: list[ColorOp]):
        super().__init__(transform)
        self.v2 = v2
        self.inner = inner

    def draw(self, size: tuple[int, int] = (0, 0)) -> Steps:
        p = self.transform.p
        skip = bool(torch.rand(1) >= p) if self.v2 else bool(p < torch.rand(1))
        if skip:
            return ()
        return draw(self.inner, size)


def draw(ops: Sequence[PixelOp], size: tuple[int, int] = (0, 0)) -> Steps:
    """The native steps of ``ops`` in chain order, each op drawing as its
    transform would on an image of ``size`` (height, width)."""
    return augment.draw(ops, size)


def color_op(t: Any) -> Optional[PixelOp]:
    """The pixel-stage op for ``t`` (a colour step, or an augmentation op of
    :func:`fastdecode.augment.pixel_op`), or None when it is not one fuse
    runs exactly (any other step, a subclass)."""
    cls = type(t)
    jitters, grayscales, applies = _classes()
    try:
        if cls in jitters:
            return _Jitter(t)
        if cls in grayscales:
            float(t.p)
            return _Grayscale(t, grayscales[cls])
        if cls in applies:
            float(t.p)
            inner = [color_op(s) for s in t.transforms]
            colours = [op for op in inner if isinstance(op, ColorOp)]  # colour steps alone
            if inner and len(colours) == len(inner):
                return _RandomApply(t, applies[cls], colours)
            return None
    except (TypeError, ValueError, AttributeError):
        return None
    return augment.pixel_op(t)


def why_not(t: Any) -> Optional[str]:
    """Why a colour transform or an augmentation policy did not fuse (for the
    fusion report), or None when ``t`` is not one fuse knows."""
    cls = type(t)
    jitters, grayscales, applies = _classes()
    inner = getattr(t, "transforms", None) if cls in applies else None
    if inner is not None and any(type(s) in jitters or type(s) in grayscales for s in inner):
        return "a RandomApply of steps other than ColorJitter / RandomGrayscale: it runs unfused"
    return augment.why_not(t)


def apply(pixels: np.ndarray, layout: str, steps: Steps) -> np.ndarray:
    """``pixels`` (uint8 (3, H, W) for 'CHW', (H, W, 3) for 'HWC') after
    ``steps``: in place when writable and C-contiguous, else a copy."""
    return augment.apply(pixels, layout, steps)
