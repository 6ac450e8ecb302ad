"""torchvision's single-op augmentations (v1 and v2) as pixel ops.

RandomRotation, RandomAffine and the Random* level ops.

RandomRotation (without ``expand``) and RandomAffine draw with the class's
own ``get_params`` (v1) / ``make_params`` (v2, on a zero-stride stand-in of
the image's size), then run as ``F.rotate`` / ``F.affine`` run on a PIL
image; RandomPosterize, RandomSolarize, RandomAdjustSharpness,
RandomAutocontrast, RandomEqualize and RandomInvert draw their probability
as the forward does (v1 ``torch.rand(1).item() < p``, v2 ``torch.rand(1) >=
p`` skips). Exact types only. See docs/decisions/augment.md ("Draws and
plans").
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch

from fastdecode import _native, _rng
from fastdecode.augment import ops
from fastdecode.augment.base import PixelOp, Steps
from fastdecode.augment.tv_policies import resample_of, tv_fill

__all__ = ["single_op"]


def _standin(size: tuple[int, int]) -> torch.Tensor:
    """A zero-stride uint8 tensor of ``size``: what make_params reads the size from."""
    return torch.zeros(1, dtype=torch.uint8).expand(3, size[0], size[1])


class _Chance(PixelOp):
    """A Random* op of fixed steps, applied with probability ``p``."""

    def __init__(self, transform: Any, v2: bool, steps: Steps):
        super().__init__(transform)
        self.v2, self.steps = v2, steps

    def draw(self, size: tuple[int, int]) -> Steps:
        """The steps when the forward's probability draw applies the op (see :meth:`PixelOp.draw`)."""
        p = self.transform.p
        if self.v2:
            return self.steps if _rng.below(p) else ()  # skipped when torch.rand(1) >= p
        return self.steps if _rng.uniform() < p else ()  # torch.rand(1).item() < p


class _Geometric(PixelOp):
    """RandomRotation / RandomAffine: the class's own parameter draw, then the PIL kernel's matrix."""

    def __init__(self, transform: Any, v2: bool, rotation: bool, resample: int, fill: ops.Fill):
        super().__init__(transform)
        self.v2, self.rotation, self.resample, self.fill = v2, rotation, resample, fill

    def draw(self, size: tuple[int, int]) -> Steps:
        """The rotation or affine drawn for ``size`` (see :meth:`PixelOp.draw`)."""
        t = self.transform
        if self.rotation:
            angle = (t.make_params([_standin(size)])["angle"] if self.v2
                     else type(t).get_params(t.degrees))
            step = ops.pil_rotate(angle, size, self.resample, self.fill, t.center)
            return () if step is None else (step,)
        if self.v2:
            params = t.make_params([_standin(size)])
            angle, translate = params["angle"], list(params["translate"])
            scale, shear = params["scale"], list(params["shear"])
            center = None if t.center is None else [float(c) for c in t.center]
        else:
            angle, translate, scale, shear = type(t).get_params(
                t.degrees, t.translate, t.scale, t.shear, [size[1], size[0]])
            translate, shear, center = list(translate), list(shear), t.center
            angle = float(angle)
        return (ops.tv_affine(size, angle, translate, scale, shear, self.resample, self.fill,
                              center, self.v2),)


class _Blur(PixelOp):
    """GaussianBlur: the sigma drawn as the forward draws it, then the native
    blur (torchvision's float32 kernel; within one level of its conv2d, not
    bit-exact: the default mode only)."""

    bit_exact = False
    how = ("fused (default mode): its sigma drawn as torchvision draws it, blurred natively "
           "with torchvision's kernel, within one level of torchvision's conv2d")

    def __init__(self, transform: Any, v2: bool, kernel: tuple[int, int]):
        super().__init__(transform)
        self.v2, self.kernel = v2, kernel

    def draw(self, size: tuple[int, int]) -> Steps:
        """The blur of the drawn sigma (see :meth:`PixelOp.draw`)."""
        t = self.transform
        if self.v2:
            sigma = float(t.make_params([])["sigma"][0])
        else:
            sigma = float(type(t).get_params(t.sigma[0], t.sigma[1]))
        return ((_native.AUG_BLUR, self.kernel[0], self.kernel[1], sigma, sigma),)


def _blur_op(t: Any, v2: bool) -> Optional[PixelOp]:
    kernel = tuple(int(k) for k in t.kernel_size)
    if len(kernel) != 2 or not all(k > 0 and k % 2 == 1 for k in kernel):
        return None
    return _Blur(t, v2, (kernel[0], kernel[1]))


@functools.cache
def _classes() -> dict[type, tuple[str, bool]]:
    from torchvision import transforms as T
    from torchvision.transforms import v2 as T2

    out: dict[type, tuple[str, bool]] = {}
    for name in ("RandomRotation", "RandomAffine", "RandomPosterize", "RandomSolarize",
                 "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
                 "RandomInvert", "GaussianBlur"):
        out[getattr(T, name)] = (name, False)
        out[getattr(T2, name)] = (name, True)
    return out


_LEVEL_STEPS: dict[str, Callable[[Any], Steps]] = {
    "RandomPosterize": lambda t: (ops.posterize(int(t.bits)),),
    "RandomSolarize": lambda t: (ops.solarize(float(t.threshold)),),
    "RandomAdjustSharpness": lambda t: (ops.sharpness(float(t.sharpness_factor)),),
    "RandomAutocontrast": lambda t: (ops.autocontrast(),),
    "RandomEqualize": lambda t: (ops.equalize(),),
    "RandomInvert": lambda t: (ops.invert(),),
}


def single_op(t: Any) -> Optional[PixelOp]:
    """The pixel op of one of torchvision's single-op augmentations, or None
    (another step, a subclass, RandomRotation with ``expand``, an
    interpolation Image.transform does not take, a fill that is not an RGB
    colour)."""
    found = _classes().get(type(t))
    if found is None:
        return None
    name, v2 = found
    try:
        if name == "GaussianBlur":
            return _blur_op(t, v2)
        float(t.p) if name in _LEVEL_STEPS else None
        if name in _LEVEL_STEPS:
            return _Chance(t, v2, _LEVEL_STEPS[name](t))
        if name == "RandomRotation" and t.expand:
            return None
        resample = resample_of(t.interpolation, v2)
        if v2:
            import PIL.Image
            from torchvision.transforms.v2._utils import _get_fill

            fill = tv_fill(_get_fill(t._fill, PIL.Image.Image))
        else:
            fill = tv_fill(t.fill)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    if resample is None:
        return None
    return _Geometric(t, v2, name == "RandomRotation", resample, fill)
