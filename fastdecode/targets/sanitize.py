"""SanitizeBoundingBoxes moved before the masks are made: invalid instances never rasterized.

When the steps between the fused geometry and a ``SanitizeBoundingBoxes``
leave the instances alone (ToImage, PILToTensor, ToDtype of the image,
Normalize, ConvertBoundingBoxFormat), its verdict depends only on the boxes
the geometry produced: it is computed then, with v2's own
``_get_sanitize_bounding_boxes_mask`` on the boxes in the format they will
have, and the boxes, labels and masks (deferred COCO masks included) keep the
valid instances before any mask is made at the output. The step is then left
out of the rest. See docs/decisions/detection.md.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2 as T2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2._utils import _find_labels_default_heuristic

__all__ = ["EarlySanitize", "early_sanitize"]

_NEUTRAL = (T2.ToImage, T2.PILToTensor, T2.Normalize, T2.ConvertImageDtype)


def _neutral(step: Any) -> bool:
    if type(step) in _NEUTRAL:
        return True
    if type(step) is T2.ToDtype:
        return isinstance(step.dtype, torch.dtype)  # a dict may convert boxes or masks
    return type(step) is T2.ConvertBoundingBoxFormat


class EarlySanitize:
    """One ``SanitizeBoundingBoxes`` of the rest, run on the joint targets.

    Parameters
    ----------
    index : int
        Its index in the rest.
    before : sequence
        The steps of the rest before it (box-neutral; ConvertBoundingBoxFormat
        among them gives the format the verdict is computed in).
    """

    def __init__(self, index: int, before: Sequence[Any], step: Any):
        self.index = index
        self.step = step
        self.formats = [s.format for s in before if type(s) is T2.ConvertBoundingBoxFormat]

    def applies(self, flat: list) -> bool:
        """Whether this sample's leaves allow it: one box leaf and every dense
        mask an instance stack (a (H, W) mask is indexed by v2 at its output
        size only, so it stays with v2)."""
        boxes = [v for v in flat if isinstance(v, tv_tensors.BoundingBoxes)]
        return len(boxes) == 1 and all(v.ndim == 3 and v.shape[0] == boxes[0].shape[0]
                                       for v in flat if isinstance(v, tv_tensors.Mask))

    def apply(self, flat: list, target: Any) -> None:
        """Keeps the valid instances of ``flat`` (the leaves of ``target``) in place.

        Raises
        ------
        ValueError
            The labels are not tensors, or their number is not the boxes'
            (v2's messages).
        """
        t = self.step
        labels = None if t.labels_getter is None else _find_labels_default_heuristic(
            (None, target))
        boxes = next(v for v in flat if isinstance(v, tv_tensors.BoundingBoxes))
        if labels is not None:
            msg = "The labels in the input to forward() must be a tensor or None, got {type} instead."
            if isinstance(labels, torch.Tensor):
                labels = (labels,)
            else:
                raise ValueError(msg.format(type=type(labels)))
            for label in labels:
                if boxes.shape[0] != label.shape[0]:
                    raise ValueError(
                        f"Number of boxes (shape={boxes.shape}) and must match the number of labels."
                        f"Found labels with shape={label.shape}).")
        checked = boxes
        for fmt in self.formats:
            checked = F.convert_bounding_box_format(checked, new_format=fmt)
        valid = F._misc._get_sanitize_bounding_boxes_mask(
            checked, format=checked.format, canvas_size=checked.canvas_size,
            min_size=t.min_size, min_area=t.min_area)
        if bool(valid.all()):
            return
        for i, leaf in enumerate(flat):
            if labels is not None and any(leaf is label for label in labels):
                flat[i] = leaf[valid]
            elif isinstance(leaf, (tv_tensors.BoundingBoxes, tv_tensors.Mask)):
                flat[i] = tv_tensors.wrap(leaf[valid], like=leaf)
            elif hasattr(leaf, "at_plan"):  # deferred masks (CocoMasks)
                flat[i] = leaf.select(valid.tolist())


def early_sanitize(rest: Sequence[Any]) -> Optional[EarlySanitize]:
    """The first SanitizeBoundingBoxes of ``rest`` when only box-neutral steps
    precede it and it uses the default labels getter (or none), else None."""
    for k, step in enumerate(rest):
        if type(step) is T2.SanitizeBoundingBoxes:
            if step.labels_getter not in ("default", None):
                return None
            return EarlySanitize(k, rest[:k], step)
        if not _neutral(step):
            return None
    return None
