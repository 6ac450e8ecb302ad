"""The image's per-pixel tail of a joint chain (ToImage, ToDtype to float32, Normalize) as one table lookup.

After the geometry, the detection and segmentation presets turn the uint8
image into float32 (``ToDtype(torch.float, scale=True)``; segmentation also
``Normalize``), in torchvision's passes over the whole output (a copy to
float, a multiply, a subtract, a divide). Each output value depends only on
its channel and its uint8 value, so the table of every (channel, value)
made by running those very steps on a 3 x 1 x 256 ramp gives v2's floats bit
for bit in one native pass (``_native.lut_to_float``). The steps that also
convert other leaves (a ToDtype's ``Mask: torch.int64``) stay in the chain:
on the float32 image they are a no-op. See docs/decisions/detection.md,
"The image's float tail".
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2 as T2

from fastdecode import _native

__all__ = ["ImageTail", "image_tail"]

# steps that leave the image as it is (they move or drop boxes, or unwrap types)
_IMAGE_NEUTRAL = (T2.ConvertBoundingBoxFormat, T2.SanitizeBoundingBoxes, T2.ClampBoundingBoxes,
                  T2.ToPureTensor)


class ImageTail:
    """The image steps of a chain's tail as a (3, 256) float32 table.

    Parameters
    ----------
    to_image : torchvision.transforms.v2.ToImage
        The tail's first step (dropped: the image is made an ``Image``).
    steps : list
        The ToDtype and Normalize steps, in order, whose table it is.
    table : numpy.ndarray
        (3, 256) float32: what those steps make of each channel's values.
    """

    def __init__(self, to_image: Any, steps: Sequence[Any], table: np.ndarray):
        self.to_image = to_image
        self.steps = list(steps)
        self.table = table
        # ToImage and Normalize only touch the image: dropped; ToDtype may convert masks too
        self._dropped = {id(to_image)} | {id(s) for s in steps if isinstance(s, T2.Normalize)}

    def applies(self, rest: Sequence[Any]) -> bool:
        """Whether ``rest`` (what runs in torchvision) starts with this tail."""
        return bool(rest) and rest[0] is self.to_image

    def image(self, pixels: np.ndarray) -> tv_tensors.Image:
        """The (3, H, W) uint8 pixels as the steps make them: float32, one pass."""
        return tv_tensors.Image(torch.from_numpy(_native.lut_to_float(pixels, self.table)))

    def remaining(self, rest: Sequence[Any]) -> list:
        """``rest`` without the steps the table did and that touch only the image."""
        return [s for s in rest if id(s) not in self._dropped]


def image_tail(rest: Sequence[Any]) -> Optional[ImageTail]:
    """The :class:`ImageTail` of the chain's ``rest`` (the steps after the
    fused geometry), or None: ``rest`` must start with ``ToImage``, then
    ToDtype / Normalize steps (image-neutral box steps between them allowed)
    that leave a float32 image after every ToDtype; the first other step
    ends the tail (it and everything after run on the float image as before).
    """
    if not rest or type(rest[0]) is not T2.ToImage:
        return None
    ramp = tv_tensors.Image(torch.arange(256, dtype=torch.uint8).expand(3, 1, 256).contiguous())
    image: Any = ramp
    steps = []
    for step in rest[1:]:
        if isinstance(step, _IMAGE_NEUTRAL):
            continue
        if type(step) not in (T2.ToDtype, T2.Normalize):
            break
        try:
            out = step(image)
        except (TypeError, ValueError, RuntimeError):  # v2 refuses it (Normalize on uint8):
            return None  # the chain raises it as v2 does
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or \
                out.shape != ramp.shape:
            return None
        image = out
        steps.append(step)
    if not steps:
        return None
    table = np.ascontiguousarray(image.reshape(3, 256).numpy(), dtype=np.float32)
    return ImageTail(rest[0], steps, table)
