"""JointFusedTransform: a v2 detection / segmentation chain run on (encoded image, target).

``f(data, target)`` returns what the v2 chain returns on
``(Image.open(data).convert('RGB'), target)``: the leading colour steps (SSD's
RandomPhotometricDistort) run on the decoded image as v2 runs them; the
geometric run after them (:mod:`.ops`) is drawn from the header and the
boxes, the image is decoded once, only the kept crop, at the DCT scale that
suffices (default) or at full resolution (``exact=True``: v2's pixels bit for
bit), every mask is made at the output size (:meth:`.JointPlan.gather`, or a
deferred mask's own ``at_plan``) and boxes and keypoints are moved by v2's
kernels; the image's float tail (ToImage, ToDtype to float32, Normalize) is
one table lookup (:mod:`.tail`, v2's floats bit for bit) and the rest of the
chain (SanitizeBoundingBoxes, ToPureTensor, a ToDtype's masks, or anything
else) runs in torchvision. See docs/decisions/detection.md.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Optional

import numpy as np
import PIL.Image
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors
from torchvision.transforms import v2 as T2

from fastdecode import api
from fastdecode._options import DEFAULTS as _D
from fastdecode.targets.color import pre_color
from fastdecode.targets.ops import JointOp, Leaves, joint_op
from fastdecode.targets.plan import JointPlan
from fastdecode.targets.sanitize import early_sanitize
from fastdecode.targets.tail import image_tail
from fastdecode.transforms.geometry import Geometry, Stop
from fastdecode.transforms.kinds import flatten
from fastdecode.transforms.render import DCT_MARGIN, Renderer

__all__ = ["JointFusedTransform", "fuse_joint"]

# colour steps that read only the image: they run first, on the decoded image
_PRE = (T2.RandomPhotometricDistort, T2.ColorJitter, T2.RandomGrayscale,
        T2.RandomChannelPermutation)


def _steps(transform: Any) -> list:
    """The chain's steps: Compose opened, and a preset object holding a
    ``transforms`` Compose (torchvision's references' presets)."""
    inner = getattr(transform, "transforms", None)
    if not isinstance(transform, (list, tuple, T2.Compose)) and isinstance(inner, T2.Compose):
        transform = inner
    return flatten(transform)


def _as_image(pixels: np.ndarray, step: Any):
    """The rendered uint8 (3, H, W) pixels as the type v2 hands ``step``."""
    if isinstance(step, T2.ToImage):
        return tv_tensors.Image(torch.from_numpy(pixels))
    if isinstance(step, T2.PILToTensor):
        return torch.from_numpy(pixels)
    return PIL.Image.fromarray(np.ascontiguousarray(pixels.transpose(1, 2, 0)), "RGB")


class JointFusedTransform:
    """A v2 joint chain fused into the decoder: ``f(data, target)`` (see the module docstring).

    Parameters
    ----------
    transform : callable or list
        A ``transforms.v2.Compose`` (or a list, or a preset with a
        ``transforms`` Compose) of joint steps.
    exact : bool, default False
        Decode at full resolution and resample as Pillow does (the image
        bit-identical to v2's); boxes, keypoints and masks are v2's either way.
    dct_margin : float, default 2.0
        As for :func:`fastdecode.transforms.fuse`.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        The limit of every decode, as for :func:`fastdecode.decode_image`.
    max_work_per_byte : int or None, default 2048
        The work limit of every decode, as for :func:`fastdecode.decode_image`.

    Attributes
    ----------
    plan : dict
        ``{'pre': [...], 'joint': [...], 'rest': [...]}``: the steps run on
        the decoded image first, fused, and run in torchvision after.
    last_plan : JointPlan or None
        The plan of the last sample (what was decoded, resampled, kept).
    """

    def __init__(self, transform: Any, *, exact: bool = False, dct_margin: float = DCT_MARGIN,
                 max_pixels: Optional[int] = _D["max_pixels"],
                 max_work_per_byte: Optional[int] = _D["max_work_per_byte"]):
        self.source = transform
        self.exact = exact
        self.steps = _steps(transform)
        for step in self.steps:
            if not callable(step):
                raise TypeError(f"a step of the chain is not callable: {step!r}")
        i = 0
        while i < len(self.steps) and isinstance(self.steps[i], _PRE):
            i += 1
        self.pre = self.steps[:i]
        self.pre_color = pre_color(self.pre) if self.pre else None
        self.ops: list[JointOp] = []
        while i < len(self.steps) and (op := joint_op(self.steps[i])) is not None:
            self.ops.append(op)
            i += 1
        self.first_rest = i
        self.sanitize = early_sanitize(self.steps[i:])
        self.tail = image_tail(self.steps[i:])
        self.renderer = Renderer(exact=exact, dct_margin=dct_margin, max_pixels=max_pixels,
                                 max_work_per_byte=max_work_per_byte)
        self.last_plan: Optional[JointPlan] = None
        self._warned = False

    @property
    def plan(self) -> dict:
        """See the class docstring."""
        return {"pre": list(self.pre), "joint": [op.transform for op in self.ops],
                "rest": list(self.steps[self.first_rest:])}

    def __reduce__(self):
        r = self.renderer
        return (_rebuild, (self.source, self.exact, r.dct_margin, r.limits))

    def __call__(self, *inputs: Any):
        """``(image, target)`` as the v2 chain returns it, from encoded bytes
        and a target (or one ``(data, target)`` tuple); a PIL image runs the
        chain in torchvision."""
        if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)) and len(inputs[0]) == 2:
            inputs = tuple(inputs[0])
        if len(inputs) != 2:
            raise TypeError("a joint fused transform takes (data, target): encoded image "
                            f"bytes and its target, got {len(inputs)} inputs")
        data, target = inputs
        if isinstance(data, PIL.Image.Image):
            return self._torchvision(self.steps, data, target)
        if isinstance(data, torch.Tensor):
            if data.dtype != torch.uint8 or data.dim() != 1:
                raise TypeError("a tensor given to a fused transform must hold encoded bytes "
                                f"(1-D uint8), got {data.dtype} shape {tuple(data.shape)}")
            data = data.contiguous().numpy()
        info = api.read_header(data)
        source: Optional[np.ndarray] = None
        drawn: Optional[list] = None  # the leading colour steps, drawn, applied after the plan
        if self.pre_color is not None:
            drawn = self.pre_color.draw()
        elif self.pre:
            whole = Geometry.start(info.height, info.width)
            image = PIL.Image.fromarray(self.renderer.render(data, whole, "HWC", fmt=info.format),
                                        "RGB")
            for step in self.pre:
                image = step(image)
            source = np.asarray(image.convert("RGB"))
        height, width = (info.height, info.width) if source is None else source.shape[:2]
        flat, spec = tree_flatten(target)
        leaves = Leaves(flat)
        plan = JointPlan(height, width)
        stop = len(self.ops)
        for k, op in enumerate(self.ops):
            try:
                op.apply(plan, leaves)
            except Stop as why:
                stop = k
                self._warn(f"{op!r} does not fuse here ({why.reason}): it and the steps "
                           "after it run in torchvision")
                break
        self.last_plan = plan
        rest = self.steps[self.first_rest - len(self.ops) + stop:]
        if stop == len(self.ops) and self.sanitize is not None and self.sanitize.applies(flat):
            self.sanitize.apply(flat, tree_unflatten(flat, spec))
            rest = rest[:self.sanitize.index] + rest[self.sanitize.index + 1:]
        if drawn is not None:
            pixels = self._render_colored(data, plan, drawn, info.format)
        elif source is None:
            pixels = self.renderer.render(data, plan.geometry(), "CHW", fmt=info.format)
        else:
            pixels = _render_decoded(source, plan)
        plan.fill_image(pixels)
        for i, leaf in enumerate(flat):
            if isinstance(leaf, tv_tensors.Mask):
                flat[i] = tv_tensors.wrap(torch.from_numpy(plan.gather(leaf.numpy())), like=leaf)
            elif hasattr(leaf, "at_plan"):
                flat[i] = tv_tensors.Mask(torch.from_numpy(leaf.at_plan(plan)))
        target = tree_unflatten(flat, spec)
        if self.tail is not None and self.tail.applies(rest):
            return self._torchvision(self.tail.remaining(rest), self.tail.image(pixels), target)
        image = _as_image(pixels, rest[0] if rest else None)
        return self._torchvision(rest, image, target)

    def _render_colored(self, data, plan: JointPlan, drawn: list, fmt: str) -> np.ndarray:
        """The canvas when leading colour steps were drawn: pointwise ones and
        no resample run on the kept crop alone (decoded alone); otherwise the
        whole image is decoded and coloured first (contrast reads its mean)."""
        geo = plan.geometry()
        assert self.pre_color is not None
        if geo.size is not None or not self.pre_color.pointwise(drawn):
            whole = self.renderer.render(data, Geometry.start(*geo.image_size), "HWC", fmt=fmt)
            return _render_decoded(self.pre_color.apply(whole, drawn), plan)
        canvas = np.zeros((3,) + plan.canvas, np.uint8)
        ct, cl, ch, cw = geo.content
        if ch and cw:
            kept = dataclasses.replace(geo, canvas=(ch, cw), content=(0, 0, ch, cw))
            part = self.pre_color.apply(self.renderer.render(data, kept, "HWC", fmt=fmt), drawn)
            left = plan.canvas[1] - cl - cw if geo.flip else cl
            canvas[:, ct:ct + ch, left:left + cw] = part.transpose(2, 0, 1)
        return canvas

    @staticmethod
    def _torchvision(steps, image, target):
        sample = (image, target)
        for step in steps:
            sample = step(*sample)
        return sample

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(message, stacklevel=3)

    def __repr__(self) -> str:
        plan = self.plan
        return (f"JointFusedTransform(pre={len(plan['pre'])}, joint={plan['joint']}, "
                f"rest={plan['rest']}, exact={self.exact})")


def _render_decoded(arr: np.ndarray, plan: JointPlan) -> np.ndarray:
    """The plan on an already decoded (H, W, 3) image, as v2 does it on PIL
    (Pillow's resize, then slice)."""
    geo = plan.geometry()
    if geo.size is not None:
        arr = np.asarray(PIL.Image.fromarray(arr, "RGB").resize((geo.size[1], geo.size[0]),
                                                                 geo.filter))
    out = np.zeros((3,) + plan.canvas, np.uint8)
    rt, rl, rh, rw = geo.region
    ct, cl, ch, cw = geo.content
    if ch and cw:
        part = arr[rt:rt + rh, rl:rl + rw].transpose(2, 0, 1)
        if geo.flip:
            part = part[:, :, ::-1]
            cl = plan.canvas[1] - cl - cw
        out[:, ct:ct + ch, cl:cl + cw] = part
    return out


def _rebuild(source, exact, dct_margin, limits):
    return JointFusedTransform(source, exact=exact, dct_margin=dct_margin, **limits)


def fuse_joint(transform: Any, *, exact: bool = False, dct_margin: float = DCT_MARGIN,
               max_pixels: Optional[int] = _D["max_pixels"],
               max_work_per_byte: Optional[int] = _D["max_work_per_byte"]
               ) -> JointFusedTransform:
    """Fuses a v2 joint chain: ``f(data, target)`` on encoded bytes and a target.

    Parameters
    ----------
    transform : callable or list
        The v2 chain (see :class:`JointFusedTransform`).
    exact : bool, default False
        v2's pixels bit for bit (full-resolution decode).
    dct_margin : float, default 2.0
        As for :func:`fastdecode.transforms.fuse`.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        The limit of every decode.
    max_work_per_byte : int or None, default 2048
        The work limit of every decode.

    Returns
    -------
    JointFusedTransform
        ``f``: ``f(data, target)`` or ``f((data, target))`` returns
        ``(image, target)`` as the chain does on the decoded image.

    Raises
    ------
    TypeError
        A step of the chain is not callable.
    """
    return JointFusedTransform(transform, exact=exact, dct_margin=dct_margin,
                               max_pixels=max_pixels, max_work_per_byte=max_work_per_byte)
