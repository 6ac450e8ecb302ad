"""Joint steps: torchvision v2's detection and segmentation geometry, drawn as v2 draws it, on a plan.

Each op reads one v2 transform (RandomHorizontalFlip, RandomZoomOut,
RandomIoUCrop, RandomShortestSize, ScaleJitter, RandomResize, RandomCrop),
makes its random draws with v2's torch calls in v2's order (the same seed
gives the same parameters and RNG state), moves the
:class:`~fastdecode.targets.plan.JointPlan` and transforms the boxes and
keypoints with v2's own kernels (so boxes are v2's bit for bit). Masks and
pixels follow from the plan. An op that cannot join raises
:class:`~fastdecode.transforms.geometry.Stop` before it draws. See
docs/decisions/detection.md.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.ops.boxes import box_iou
from torchvision.transforms import v2 as T2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2._utils import _get_fill

from fastdecode.targets.plan import JointPlan
from fastdecode.transforms.filters import pil_filter
from fastdecode.transforms.geometry import Stop, resized_output_size

__all__ = ["JOINT_OPS", "JointOp", "Leaves", "joint_op"]


class Leaves:
    """The flat target of one sample: which leaves are boxes, keypoints, masks.

    Parameters
    ----------
    flat : list
        ``tree_flatten(target)[0]``; the boxes and keypoints in it are
        replaced as the ops move them.
    """

    def __init__(self, flat: list):
        self.flat = flat
        self.moved = [i for i, v in enumerate(flat)
                      if isinstance(v, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints))]
        self.has_masks = any(isinstance(v, tv_tensors.Mask) or hasattr(v, "at_plan") for v in flat)

    def boxes(self) -> Optional[tv_tensors.BoundingBoxes]:
        """The first BoundingBoxes leaf (v2's ``get_bounding_boxes``), or None."""
        return next((self.flat[i] for i in self.moved
                     if isinstance(self.flat[i], tv_tensors.BoundingBoxes)), None)

    def apply(self, kernel, **kwargs) -> None:
        """Runs v2's ``kernel`` on every box and keypoint leaf."""
        for i in self.moved:
            self.flat[i] = kernel(self.flat[i], **kwargs)


def _probe_fill(fill: Any, like) -> Any:
    """The value v2's ``F.pad`` writes with ``fill`` into ``like`` (1x1), or None when it refuses."""
    try:
        out = F.pad(like, padding=[1, 0, 0, 0], fill=fill)
    except (TypeError, ValueError, RuntimeError):
        return None
    if isinstance(out, PIL.Image.Image):
        return tuple(int(v) for v in np.asarray(out)[0, 0])
    return float(out.reshape(-1)[0])


class JointOp:
    """One v2 transform as a joint step (see the module docstring).

    Parameters
    ----------
    transform : Any
        The v2 transform; its attributes are read at each call.
    """

    def __init__(self, transform: Any):
        self.transform = transform

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:  # pragma: no cover - abstract
        """Draws this step's parameters and moves ``plan`` and ``leaves``.

        Raises
        ------
        Stop
            Before any draw: the step cannot join (it runs in torchvision).
        """
        raise NotImplementedError

    def _fills(self, leaves: Leaves) -> tuple[tuple[int, ...], Optional[float]]:
        """(the RGB v2 pads a PIL image with, the value it pads a mask with)."""
        fills = self.transform._fill
        key = repr(fills)
        cached = getattr(self, "_fill_cache", None)
        if cached is not None and cached[0] == key and (cached[2] is not None
                                                          or not leaves.has_masks):
            return cached[1], cached[2]
        image = _probe_fill(_get_fill(fills, PIL.Image.Image), PIL.Image.new("RGB", (1, 1)))
        mask = _probe_fill(_get_fill(fills, tv_tensors.Mask),
                           tv_tensors.Mask(torch.zeros(1, 1, 1, dtype=torch.uint8)))
        if image is None or (mask is None and leaves.has_masks):
            raise Stop("a fill that v2's pad refuses")
        self._fill_cache = (key, image, mask)
        return image, mask

    def __repr__(self) -> str:
        return repr(self.transform)


class FlipOp(JointOp):
    """RandomHorizontalFlip: ``torch.rand(1) >= p`` skips, as v2's random-apply."""

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:
        """See :meth:`JointOp.apply`."""
        if torch.rand(1) >= self.transform.p:
            return
        plan.flip()
        leaves.apply(F.horizontal_flip)


class ZoomOutOp(JointOp):
    """RandomZoomOut: a canvas ``r`` times the image, the image at a drawn offset."""

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:
        """See :meth:`JointOp.apply`."""
        t = self.transform
        fills = self._fills(leaves)
        if torch.rand(1) >= t.p:
            return
        orig_h, orig_w = plan.canvas
        r = t.side_range[0] + torch.rand(1) * (t.side_range[1] - t.side_range[0])
        canvas_width, canvas_height = int(orig_w * r), int(orig_h * r)
        r = torch.rand(2)
        left = int((canvas_width - orig_w) * r[0])
        top = int((canvas_height - orig_h) * r[1])
        padding = [left, top, canvas_width - (left + orig_w), canvas_height - (top + orig_h)]
        plan.pad(padding, *fills)
        leaves.apply(F.pad, padding=padding)


class IoUCropOp(JointOp):
    """RandomIoUCrop: SSD's crop, drawn from the boxes before any pixel is decoded."""

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:
        """See :meth:`JointOp.apply`.

        Raises
        ------
        TypeError
            The target has no BoundingBoxes (v2's message).
        """
        t = self.transform
        bboxes = leaves.boxes()
        if bboxes is None:
            raise TypeError(
                f"{type(t).__name__}() requires input sample to contain tensor or PIL images "
                "and bounding boxes. Sample can also contain masks.")
        orig_h, orig_w = plan.canvas
        xyxy = F.convert_bounding_box_format(bboxes.as_subclass(torch.Tensor), bboxes.format,
                                             tv_tensors.BoundingBoxFormat.XYXY)
        if xyxy.dtype in _NP_FLOAT and torch.get_default_dtype() == torch.float32:
            found = _iou_crop_draw(t, orig_h, orig_w, xyxy.numpy())
        else:  # v2's own arithmetic, on tensors
            found = _iou_crop_draw_torch(t, orig_h, orig_w, xyxy)
        if found is None:
            return
        top, left, new_h, new_w, within = found
        plan.crop(top, left, new_h, new_w)
        leaves.apply(F.crop, top=top, left=left, height=new_h, width=new_w)
        keep = torch.as_tensor(within)
        for i in leaves.moved:
            if isinstance(leaves.flat[i], tv_tensors.BoundingBoxes):
                leaves.flat[i][~keep] = 0


_NP_FLOAT = {torch.float32: np.float32, torch.float64: np.float64}


def _iou_crop_draw(t, orig_h: int, orig_w: int, xyxy: np.ndarray):
    """RandomIoUCrop's ``make_params`` with v2's torch RNG calls and its float
    arithmetic done in numpy (float32 tensors compute in float32 with the
    Python scalars cast to float32; torchvision's ``box_iou`` is elementwise
    IEEE arithmetic): the same draws, boxes and RNG state at a fraction of
    the tensor set-up (tests/targets/test_joint.py checks it against v2).
    Returns (top, left, height, width, within) or None (leave as is)."""
    f32 = np.float32
    ft = xyxy.dtype.type
    cx = (xyxy[:, 0] + xyxy[:, 2]) * ft(0.5)
    cy = (xyxy[:, 1] + xyxy[:, 3]) * ft(0.5)
    area = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    span, low = f32(t.max_scale - t.min_scale), f32(t.min_scale)
    fw, fh = f32(orig_w), f32(orig_h)
    pair = torch.empty(2)
    while True:
        idx = int(torch.randint(low=0, high=len(t.options), size=(1,)))
        min_jaccard_overlap = t.options[idx]
        if min_jaccard_overlap >= 1.0:
            return None
        threshold = ft(min_jaccard_overlap)
        for _ in range(t.trials):
            a, b = pair.uniform_(0, 1).numpy().tolist()
            new_w = int(fw * (low + f32(a) * span))
            new_h = int(fh * (low + f32(b) * span))
            if not (t.min_aspect_ratio <= new_w / new_h <= t.max_aspect_ratio):
                continue
            a, b = pair.uniform_(0, 1).numpy().tolist()
            left, top = int(f32(orig_w - new_w) * f32(a)), int(f32(orig_h - new_h) * f32(b))
            right, bottom = left + new_w, top + new_h
            if left == right or top == bottom:
                continue
            within = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            if not within.any():
                continue
            box = xyxy[within]
            w = np.maximum(np.minimum(box[:, 2], ft(right)) - np.maximum(box[:, 0], ft(left)),
                           ft(0))
            h = np.maximum(np.minimum(box[:, 3], ft(bottom)) - np.maximum(box[:, 1], ft(top)),
                           ft(0))
            inter = w * h
            union = area[within] + ft(new_w) * ft(new_h) - inter
            if (inter / union).max() < threshold:
                continue
            return top, left, new_h, new_w, within


def _iou_crop_draw_torch(t, orig_h: int, orig_w: int, xyxy: torch.Tensor):
    """v2's RandomIoUCrop ``make_params`` as written (other dtypes)."""
    cx, cy = 0.5 * (xyxy[..., 0] + xyxy[..., 2]), 0.5 * (xyxy[..., 1] + xyxy[..., 3])
    while True:
        idx = int(torch.randint(low=0, high=len(t.options), size=(1,)))
        min_jaccard_overlap = t.options[idx]
        if min_jaccard_overlap >= 1.0:
            return None
        for _ in range(t.trials):
            r = t.min_scale + (t.max_scale - t.min_scale) * torch.rand(2)
            new_w, new_h = int(orig_w * r[0]), int(orig_h * r[1])
            if not (t.min_aspect_ratio <= new_w / new_h <= t.max_aspect_ratio):
                continue
            r = torch.rand(2)
            left, top = int((orig_w - new_w) * r[0]), int((orig_h - new_h) * r[1])
            right, bottom = left + new_w, top + new_h
            if left == right or top == bottom:
                continue
            within = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            if not within.any():
                continue
            ious = box_iou(xyxy[within], torch.tensor([[left, top, right, bottom]],
                                                      dtype=xyxy.dtype))
            if ious.max() < min_jaccard_overlap:
                continue
            return top, left, new_h, new_w, within


class _ResizeOp(JointOp):
    """A random resize: the size drawn, then one resample (first in the chain)."""

    def size(self, height: int, width: int) -> list[int]:  # pragma: no cover - abstract
        """Draws the size v2 resizes to (its ``make_params``)."""
        raise NotImplementedError

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:
        """See :meth:`JointOp.apply`."""
        if plan.size is not None or plan.canvas != plan.image_size or plan.cols.flipped:
            raise Stop("a resample after another step")
        size = self.size(*plan.canvas)
        new_h, new_w = resized_output_size(*plan.canvas, size, None)
        plan.resize(new_h, new_w, pil_filter(self.transform.interpolation))
        leaves.apply(F.resize, size=size)


class ShortestSizeOp(_ResizeOp):
    """RandomShortestSize: a drawn shorter edge, capped by ``max_size``."""

    def size(self, height: int, width: int) -> list[int]:
        """See :meth:`_ResizeOp.size`."""
        t = self.transform
        min_size = t.min_size[int(torch.randint(len(t.min_size), ()))]
        r = min_size / min(height, width)
        if t.max_size is not None:
            r = min(r, t.max_size / max(height, width))
        return [int(height * r), int(width * r)]


class ScaleJitterOp(_ResizeOp):
    """ScaleJitter: the target size times a drawn scale."""

    def size(self, height: int, width: int) -> list[int]:
        """See :meth:`_ResizeOp.size`."""
        t = self.transform
        scale = t.scale_range[0] + torch.rand(1) * (t.scale_range[1] - t.scale_range[0])
        r = min(t.target_size[1] / height, t.target_size[0] / width) * scale
        return [int(height * r), int(width * r)]


class RandomResizeOp(_ResizeOp):
    """RandomResize: a shorter edge drawn in [min_size, max_size)."""

    def size(self, height: int, width: int) -> list[int]:
        """See :meth:`_ResizeOp.size`."""
        t = self.transform
        return [int(torch.randint(t.min_size, t.max_size, ()))]


class RandomCropOp(JointOp):
    """RandomCrop: its padding (fixed, or ``pad_if_needed``) then a drawn window."""

    def apply(self, plan: JointPlan, leaves: Leaves) -> None:
        """See :meth:`JointOp.apply`.

        Raises
        ------
        ValueError
            The crop is larger than the (padded) image (v2's message).
        """
        t = self.transform
        if t.padding_mode != "constant":
            raise Stop(f"padding_mode={t.padding_mode!r}")
        fills = self._fills(leaves)
        padded_height, padded_width = plan.canvas
        if t.padding is not None:
            pad_left, pad_right, pad_top, pad_bottom = t.padding
            padded_height += pad_top + pad_bottom
            padded_width += pad_left + pad_right
        else:
            pad_left = pad_right = pad_top = pad_bottom = 0
        cropped_height, cropped_width = t.size
        if t.pad_if_needed:
            if padded_height < cropped_height:
                diff = cropped_height - padded_height
                pad_top, pad_bottom = pad_top + diff, pad_bottom + diff
                padded_height += 2 * diff
            if padded_width < cropped_width:
                diff = cropped_width - padded_width
                pad_left, pad_right = pad_left + diff, pad_right + diff
                padded_width += 2 * diff
        if padded_height < cropped_height or padded_width < cropped_width:
            raise ValueError(
                f"Required crop size {(cropped_height, cropped_width)} is larger than "
                f"{'padded ' if t.padding is not None else ''}input image size "
                f"{(padded_height, padded_width)}.")
        padding = [pad_left, pad_top, pad_right, pad_bottom]
        top = (int(torch.randint(0, padded_height - cropped_height + 1, size=()))
               if padded_height > cropped_height else 0)
        left = (int(torch.randint(0, padded_width - cropped_width + 1, size=()))
                if padded_width > cropped_width else 0)
        if any(padding):
            plan.pad(padding, *fills)
            leaves.apply(F.pad, padding=padding)
        if padded_height > cropped_height or padded_width > cropped_width:
            plan.crop(top, left, cropped_height, cropped_width)
            leaves.apply(F.crop, top=top, left=left, height=cropped_height, width=cropped_width)


JOINT_OPS: dict[type, type[JointOp]] = {
    T2.RandomHorizontalFlip: FlipOp,
    T2.RandomZoomOut: ZoomOutOp,
    T2.RandomIoUCrop: IoUCropOp,
    T2.RandomShortestSize: ShortestSizeOp,
    T2.ScaleJitter: ScaleJitterOp,
    T2.RandomResize: RandomResizeOp,
    T2.RandomCrop: RandomCropOp,
}


def joint_op(step: Any) -> Optional[JointOp]:
    """The joint op of a v2 step (exact types: a subclass may override), or None."""
    cls = JOINT_OPS.get(type(step))
    return None if cls is None else cls(step)
