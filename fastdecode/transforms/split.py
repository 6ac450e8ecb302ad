"""Where each step of a chain runs: :func:`split_chain` cuts the flat list of steps into the parts that fuse.

In order and never reordered: the leading geometric run, the pixel stage,
a FiveCrop / TenCrop of the result (:class:`MultiCrop`), the tensor table
and its erasing, then the trailing rest, which runs unfused on the type
torchvision would have given it. :class:`~.fused.FusedTransform` runs the
parts. See docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np
from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.augment import PixelOp
from fastdecode.transforms.color import color_op
from fastdecode.transforms.geometry import GeoOp, RandomResizedCropOp, ResizeOp
from fastdecode.transforms.kinds import (
    geo_op,
    is_converter,
    is_pointwise,
    is_uint8_converter,
    tensor_geo_op,
)
from fastdecode.transforms.tensor import EraseOp, TensorTail, erase_run

__all__ = ["ChainSplit", "MultiCrop", "multi_crop", "split_chain"]


class MultiCrop(NamedTuple):
    """A FiveCrop (``flip`` None) or TenCrop (``flip`` 'vertical' or
    'horizontal') of the rendered pixels: torchvision's five crops of
    ``size`` (top-left, top-right, bottom-left, bottom-right, centre), then
    TenCrop's five of the mirrored image, as a tuple."""

    size: tuple[int, int]
    flip: Optional[str]
    transform: Any

    def cut(self, pixels: np.ndarray) -> Optional[list[np.ndarray]]:
        """The crops of (H, W, C) ``pixels`` (views), in torchvision's order;
        None when ``size`` does not fit (torchvision's step then raises)."""
        (ch, cw), (h, w) = self.size, pixels.shape[:2]
        if ch > h or cw > w:
            return None
        top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))  # its centre_crop
        corners = ((0, 0), (0, w - cw), (h - ch, 0), (h - ch, w - cw), (top, left))
        images = [pixels] + ([] if self.flip is None else
                             [pixels[::-1] if self.flip == "vertical" else pixels[:, ::-1]])
        return [im[y:y + ch, x:x + cw] for im in images for y, x in corners]


def multi_crop(t: Any) -> Optional[MultiCrop]:
    """The :class:`MultiCrop` of torchvision's FiveCrop / TenCrop (v1 and
    v2, exact types), else None."""
    if type(t) in (T.FiveCrop, T2.FiveCrop):
        return MultiCrop((int(t.size[0]), int(t.size[1])), None, t)
    if type(t) in (T.TenCrop, T2.TenCrop):
        flip = "vertical" if t.vertical_flip else "horizontal"
        return MultiCrop((int(t.size[0]), int(t.size[1])), flip, t)
    return None


def _per_crop(t: Any) -> bool:
    """A v2 step: it runs on each image of a tuple (a v1 step takes one image)."""
    return type(t).__module__.startswith("torchvision.transforms.v2")


@dataclass(frozen=True)
class ChainSplit:
    """Where a chain's steps run (see the module docstring).

    geo_ops:  the geometric ops, PIL stage first, then tensor stage.
    op_index: the index in ``steps`` of each op.
    tail:     the tensor table, or None (no converter fused).
    end:      index of the first trailing step (``steps[end:]`` run unfused).
    color_ops: the pixel-stage ops after the PIL-stage geometry: colour
              steps and augmentation policies (``color_index``: their
              indices in ``steps``).
    erasing:  the RandomErasing ops after the tensor table.
    crops:    the FiveCrop / TenCrop after the pixel stage, or None; the
              tensor table then runs on each crop (v2 steps only).
    """

    geo_ops: tuple[GeoOp, ...]
    op_index: tuple[int, ...]
    tail: Optional[TensorTail]
    end: int
    color_ops: tuple[PixelOp, ...] = ()
    color_index: tuple[int, ...] = ()
    erasing: tuple[EraseOp, ...] = ()
    crops: Optional[MultiCrop] = None

    @property
    def tensor_stage(self) -> int:
        """How many geometric ops run after the converter (on tensors)."""
        return sum(op.stage == "tensor" for op in self.geo_ops)


def split_chain(steps: list, exact: bool = False) -> ChainSplit:
    """Splits a flat list of steps, in order, never reordered; reads the
    steps, changes nothing:

    1. ``geometric``: the leading run of RandomResizedCrop / Resize /
       CenterCrop / RandomHorizontalFlip (:mod:`.kinds`), walked per image by
       :mod:`.geometry` and rendered by one native decode (:mod:`.render`);
       v2 geometric steps right after ToImage / PILToTensor join at the
       tensor stage (not after colour steps: the draws would change order);
    2. ``color``: the ColorJitter / RandomGrayscale steps and the
       augmentation policies (RandAugment, TrivialAugmentWide, AutoAugment;
       :mod:`fastdecode.augment`) right after that run, drawn with the
       geometry and applied to the rendered pixels in one native call
       (:mod:`.color`);
    3. ``crops``: a FiveCrop / TenCrop right after them (:class:`MultiCrop`),
       cut from the rendered pixels;
    4. ``tensor``: the converter and the per-pixel steps after it, one table,
       and the RandomErasing steps after it, drawn with the geometry and
       erased in place in the result (:mod:`.tensor`);
    5. ``trailing``: everything from the first step not understood.

    ``exact``: only crops and flips join after the converter (torch's uint8
    resample is Pillow's within a level, not bit for bit)."""
    ops: list[GeoOp] = []
    index: list[int] = []
    i = 0
    while i < len(steps) and (op := geo_op(steps[i])) is not None:
        ops.append(op)
        index.append(i)
        i += 1
    colors: list[PixelOp] = []
    while (i < len(steps) and (cop := color_op(steps[i])) is not None
           and (cop.bit_exact or not exact)):  # a blur is within a level: default mode
        colors.append(cop)
        i += 1
    color = (tuple(colors), tuple(range(i - len(colors), i)))
    crops = multi_crop(steps[i]) if i < len(steps) else None
    if crops is not None:
        i += 1
    if i == len(steps) or not is_converter(steps[i]) or crops and not _per_crop(steps[i]):
        return ChainSplit(tuple(ops), tuple(index), None, i, *color, crops=crops)
    converter, j = steps[i], i + 1
    tensor_ops: list[tuple[GeoOp, int]] = []
    while (is_uint8_converter(converter) and not colors and not crops and j < len(steps)
           and (op := tensor_geo_op(steps[j])) is not None
           and not (exact and isinstance(op, (RandomResizedCropOp, ResizeOp)))):
        tensor_ops.append((op, j))
        j += 1
    n = 0
    while j + n < len(steps) and is_pointwise(steps[j + n]) and (
            not crops or _per_crop(steps[j + n])):
        n += 1
    # the longest prefix that runs (a bad Normalize raises at call time, as it would)
    while n >= 0:
        try:
            tail = TensorTail([converter] + steps[j:j + n])
        except Exception:  # noqa: BLE001 - any failure: leave it to torchvision
            n -= 1
            continue
        ops += [op for op, _ in tensor_ops]
        index += [k for _, k in tensor_ops]
        # a v2 erasing draws once for all the crops: it runs unfused after them
        erasing, tail, end = erase_run(steps, j + n, tail) if not crops else ((), tail, j + n)
        return ChainSplit(tuple(ops), tuple(index), tail, end, *color, erasing, crops)
    return ChainSplit(tuple(ops), tuple(index), None, i, *color, crops=crops)  # converter unfused
