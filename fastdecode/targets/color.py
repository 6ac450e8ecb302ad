"""The leading colour steps of a joint chain (SSD's RandomPhotometricDistort, ColorJitter), natively.

They read only the image, on the whole decoded image (PhotometricDistort's
contrast reads the whole image's mean), before any geometry. Each draws
with v2's torch RNG calls in v2's order (``RandomPhotometricDistort.make_params``:
one ``torch.rand(1)`` per factor and its ``uniform_``, the contrast's place,
the channel permutation) and becomes the native colour steps of
:mod:`fastdecode.transforms.color` (Pillow's arithmetic, bit-identical) and a
channel order. See docs/decisions/detection.md.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
from torchvision.transforms import v2 as T2

from fastdecode import _native
from fastdecode.augment import ops as aug_ops
from fastdecode.transforms.color import ColorOp, Steps, color_op
from fastdecode.transforms.color import _hue_shift as hue_shift
from fastdecode.transforms.color import apply as apply_color

__all__ = ["PreColor", "pre_color"]


class PreColor:
    """The leading colour steps, drawn and applied on HWC uint8 pixels.

    Parameters
    ----------
    steps : list
        The transforms (RandomPhotometricDistort, or a step
        :func:`fastdecode.transforms.color.color_op` fuses).
    """

    def __init__(self, steps: Sequence[Any]):
        self.steps = list(steps)
        self.ops: list[Optional[ColorOp]] = [
            None if isinstance(s, T2.RandomPhotometricDistort) else _as_color(s) for s in steps]

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        """Draws every step and applies it to the (H, W, 3) pixels (in place when it can)."""
        return self.apply(pixels, self.draw())

    def draw(self) -> list:
        """Every step's parameters, drawn from torch's RNG as v2 draws them:
        per step, (the native colour steps, the channel order or None)."""
        out = []
        for step, op in zip(self.steps, self.ops):
            out.append((op.draw(), None) if op is not None else _photometric(step))
        return out

    @staticmethod
    def pointwise(drawn: list) -> bool:
        """Whether the drawn steps read each pixel alone (no contrast, which
        blends with the whole image's mean): then they may run on a crop."""
        return not any(step[0] == _native.AUG_COLOR and step[1] == _native.COLOR_CONTRAST
                       for colors, _ in drawn for step in colors)

    @staticmethod
    def apply(pixels: np.ndarray, drawn: list) -> np.ndarray:
        """The drawn steps on (H, W, 3) pixels, in chain order."""
        for colors, order in drawn:
            pixels = apply_color(pixels, "HWC", colors)
            if order is not None:
                pixels = np.ascontiguousarray(pixels[..., order])
        return pixels


def _as_color(step: Any) -> ColorOp:
    op = color_op(step)
    if not isinstance(op, ColorOp):  # pragma: no cover - pre_color checked it
        raise TypeError(f"not a colour step: {step!r}")
    return op


def _photometric(t: Any) -> tuple[Steps, Optional[list[int]]]:
    """RandomPhotometricDistort's draws (its ``make_params``, 3 channels) as
    native steps in its ``transform`` order, and the channel order or None."""
    factors = []
    for low_high in (t.brightness, t.contrast, t.saturation, t.hue):
        drawn = torch.rand(1) < t.p
        factors.append(torch.empty(1).uniform_(low_high[0], low_high[1]).item() if drawn
                       else None)
    brightness, contrast, saturation, hue = factors
    contrast_before = bool(torch.rand(()) < 0.5)
    order = torch.randperm(3).tolist() if torch.rand(1) < t.p else None
    steps: list = []
    if brightness is not None:
        steps.append(aug_ops.color_step(_native.COLOR_BRIGHTNESS, brightness))
    if contrast is not None and contrast_before:
        steps.append(aug_ops.color_step(_native.COLOR_CONTRAST, contrast))
    if saturation is not None:
        steps.append(aug_ops.color_step(_native.COLOR_SATURATION, saturation))
    if hue is not None:
        steps.append(aug_ops.color_step(_native.COLOR_HUE, hue_shift(hue)))
    if contrast is not None and not contrast_before:
        steps.append(aug_ops.color_step(_native.COLOR_CONTRAST, contrast))
    return tuple(steps), order


def pre_color(steps: Sequence[Any]) -> Optional[PreColor]:
    """The native form of the leading colour ``steps``, or None when one of them
    does not fuse (they then run in torchvision on the decoded PIL image)."""
    for s in steps:
        if type(s) is T2.RandomPhotometricDistort:
            continue
        if not isinstance(color_op(s), ColorOp):
            return None
    return PreColor(steps)
