"""AugMix as pixel ops: torchvision's (v1, v2) and timm's, drawn as they draw and mixed as they mix.

An AugMix draws its mixing weights and each branch's ops before the decode
(the draws depend on the image size only), and returns one :class:`Mix`
step: ``augment.apply`` runs it on the rendered pixels, in the render part,
which draws nothing.

- timm's ``AugMixAugment`` (``augmix-*``): NumPy's Dirichlet and Beta
  draws, then per branch NumPy's depth and ``choice`` of ops, each op's own
  draws from Python's ``random`` (:mod:`.timm_policies`). The ops run
  natively with Pillow's arithmetic on a copy of the pixels; the branches
  are summed in float32 as ``_apply_basic`` sums them, and the sum blended
  with the image as ``Image.blend`` computes it (``b1``: ``_apply_blended``,
  one blend per branch).
- torchvision's ``AugMix`` (v1, v2): the forward's ``_sample_dirichlet`` and
  ``randint`` / ``rand`` calls on torch's generator, in its order; the ops
  run with torchvision's own tensor functions on the decoded pixels, mixed
  with its float32 arithmetic (what its forward does on a PIL image after
  ``pil_to_tensor``: no PIL round trip).

Both are bit-identical to their library on the same pixels. Exact types
only. See docs/decisions/augment.md ("AugMix").
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np
import torch

from fastdecode.augment import timm_policies
from fastdecode.augment.base import Mix, PixelOp, Steps, apply

__all__ = ["TimmAugMix", "TvAugMix", "augmix_op", "blend"]

_MAX_SIZES = 64  # v1 augmentation spaces kept (one per image size seen)


def blend(im1: np.ndarray, im2: np.ndarray, alpha: Any, out: np.ndarray) -> np.ndarray:
    """``Image.blend(im1, im2, alpha)`` on uint8 arrays of one shape, into
    ``out``: Pillow's float arithmetic (``in1 + alpha * (in2 - in1)`` in
    float32, truncated; clipped only outside 0..1), its copies at 0 and 1."""
    a = np.float32(alpha)  # ImagingBlend takes a C float
    if a == 0.0:
        np.copyto(out, im1)
    elif a == 1.0:
        np.copyto(out, im2)
    else:
        first = im1.astype(np.float32)
        mixed = first + a * (im2.astype(np.float32) - first)
        if not 0.0 <= a <= 1.0:
            np.clip(mixed, 0.0, 255.0, out=mixed)
        np.copyto(out, mixed.astype(np.uint8))
    return out


class _TimmMix(Mix):
    """One image's timm AugMix: (weight, steps) per branch and the final blend's ``m``."""

    __slots__ = ("blended", "branches", "m")

    def __init__(self, branches: tuple, m: np.float32, blended: bool):
        self.branches, self.m, self.blended = branches, m, blended

    def run(self, pixels: np.ndarray, layout: str) -> None:
        """The mix into ``pixels`` (see :meth:`Mix.run`)."""
        if self.blended:  # _apply_blended: one Image.blend per branch, of the original's ops
            original = pixels.copy()
            for weight, steps in self.branches:
                blend(pixels, apply(original.copy(), layout, steps), weight, pixels)
            return
        mixed = np.zeros(pixels.shape, np.float32)  # _apply_basic
        for weight, steps in self.branches:
            mixed += weight * apply(pixels.copy(), layout, steps).astype(np.float32)
        np.clip(mixed, 0.0, 255.0, out=mixed)
        blend(pixels, mixed.astype(np.uint8), self.m, pixels)


class TimmAugMix(PixelOp):
    """timm's ``AugMixAugment``: its NumPy and Python draws, its ops
    natively, its float32 mix and Pillow blend."""

    how = ("fused: drawn as its library draws it (NumPy's weights, depths and op picks, each "
           "op's draws from Python's random), its ops run natively with Pillow's arithmetic, "
           "the branches mixed in float32 and blended as timm mixes them")

    def __init__(self, transform: Any):
        super().__init__(transform)
        self.ops = [timm_policies.native_op(op) for op in transform.ops]
        float(transform.alpha)  # a number, or TypeError: the policy runs unfused
        self.width, self.depth = int(transform.width), int(transform.depth)
        self.blended = bool(transform.blended)

    def draw(self, size: tuple[int, int]) -> Steps:
        """``__call__``'s draws (see :meth:`PixelOp.draw`): one :class:`Mix` step."""
        t = self.transform
        weights: Any = np.float32(np.random.dirichlet([t.alpha] * self.width))
        m = np.float32(np.random.beta(t.alpha, t.alpha))
        if self.blended:
            weights = t._calc_blended_weights(weights, m)  # arithmetic only, no draw
        branches = []
        for weight in weights:
            depth = self.depth if self.depth > 0 else np.random.randint(1, 4)
            # np.random.choice(ops, depth, replace=True) draws randint(0, len(ops), depth)
            picks = np.random.randint(0, len(self.ops), size=depth)
            branches.append((weight, tuple(s for i in picks for s in self.ops[i].draw(size))))
        return (_TimmMix(tuple(branches), m, self.blended),)


class _TorchMix(Mix):
    """One image's torchvision AugMix: the original's weight, each branch's
    weight and (op name, magnitude) list, the transform's op function."""

    __slots__ = ("branches", "op", "original", "weights")

    def __init__(self, op: Callable, original: torch.Tensor, weights: list, branches: tuple):
        self.op, self.original, self.weights, self.branches = op, original, weights, branches

    def run(self, pixels: np.ndarray, layout: str) -> None:
        """The mix into ``pixels`` (see :meth:`Mix.run`): the forward's tensor arithmetic."""
        chw = pixels if layout == "CHW" else np.ascontiguousarray(pixels.transpose(2, 0, 1))
        batch = torch.from_numpy(chw).unsqueeze(0)
        mix = self.original * batch
        for weight, ops in zip(self.weights, self.branches):
            aug = batch
            for name, magnitude in ops:
                aug = self.op(aug, name, magnitude)
            mix.add_(weight * aug)
        result = mix[0].to(dtype=torch.uint8).numpy()
        np.copyto(pixels, result if layout == "CHW" else result.transpose(1, 2, 0))


class TvAugMix(PixelOp):
    """torchvision's ``AugMix`` (v1 or v2): its forward's draws, its tensor ops and mix."""

    how = ("fused: drawn as its library draws it (torch's Dirichlet weights, depths, ops and "
           "magnitudes, in its order), its ops run with torchvision's own tensor functions on "
           "the decoded pixels and mixed as its forward mixes them")

    def __init__(self, transform: Any, v2: bool):
        super().__init__(transform)
        self.v2 = v2
        self.width, self.depth = int(transform.mixture_width), int(transform.chain_depth)
        self.severity = int(transform.severity)
        self._spaces: dict[tuple[int, int], tuple[list, dict]] = {}
        if v2:
            self.space = (transform._AUGMENTATION_SPACE if transform.all_ops
                          else transform._PARTIAL_AUGMENTATION_SPACE)
            self.op = functools.partial(_v2_op, transform)
        else:
            self.op = functools.partial(_v1_op, transform)

    def _v1_space(self, size: tuple[int, int]) -> tuple[list, dict]:
        space = self._spaces.get(size)
        if space is None:
            t = self.transform
            meta = t._augmentation_space(t._PARAMETER_MAX, size)  # draws nothing
            space = (list(meta.keys()), meta)
            if len(self._spaces) >= _MAX_SIZES:
                self._spaces.clear()
            self._spaces[size] = space
        return space

    def _pick1(self, size: tuple[int, int]) -> tuple[str, float]:
        names, meta = self._v1_space(size)
        name = names[int(torch.randint(len(meta), (1,)).item())]
        magnitudes, signed = meta[name]
        magnitude = (float(magnitudes[torch.randint(self.severity, (1,), dtype=torch.long)].item())
                     if magnitudes.ndim > 0 else 0.0)
        if signed and torch.randint(2, (1,)):
            magnitude *= -1.0
        return name, magnitude

    def _pick2(self, size: tuple[int, int]) -> tuple[str, float]:
        name, (magnitudes_fn, signed) = self.transform._get_random_item(self.space)
        magnitudes = magnitudes_fn(self.transform._PARAMETER_MAX, *size)
        magnitude = 0.0
        if magnitudes is not None:
            magnitude = float(magnitudes[int(torch.randint(self.severity, ()))])
            if signed and torch.rand(()) <= 0.5:
                magnitude *= -1
        return name, magnitude

    def draw(self, size: tuple[int, int]) -> Steps:
        """The forward's draws (see :meth:`PixelOp.draw`): one :class:`Mix` step."""
        t = self.transform
        m = t._sample_dirichlet(torch.tensor([t.alpha, t.alpha]).expand(1, -1))
        combined = t._sample_dirichlet(
            torch.tensor([t.alpha] * self.width).expand(1, -1)) * m[:, 1].reshape([1, -1])
        pick = self._pick2 if self.v2 else self._pick1
        branches = []
        for _ in range(self.width):
            depth = (self.depth if self.depth > 0
                     else int(torch.randint(low=1, high=4, size=(1,)).item()))
            branches.append(tuple(pick(size) for _ in range(depth)))
        weights = [combined[:, i].reshape([1, 1, 1, 1]) for i in range(self.width)]
        return (_TorchMix(self.op, m[:, 0].reshape([1, 1, 1, 1]), weights, tuple(branches)),)


def _v1_op(t: Any, image: torch.Tensor, name: str, magnitude: float) -> torch.Tensor:
    from torchvision.transforms.autoaugment import _apply_op

    # the forward on a PIL image passes its fill as given (converted only for tensors)
    return _apply_op(image, name, magnitude, interpolation=t.interpolation, fill=t.fill)


def _v2_op(t: Any, image: torch.Tensor, name: str, magnitude: float) -> torch.Tensor:
    return t._apply_image_or_video_transform(image, name, magnitude,
                                             interpolation=t.interpolation, fill=t._fill)


@functools.cache
def _classes() -> dict[type, Callable[[Any], PixelOp]]:
    classes: dict[type, Callable[[Any], PixelOp]] = {}
    try:
        from torchvision.transforms import autoaugment as A
        from torchvision.transforms import v2 as T2

        classes[A.AugMix] = lambda t: TvAugMix(t, False)
        classes[T2.AugMix] = lambda t: TvAugMix(t, True)
    except ImportError:  # pragma: no cover - torchvision is what fuse plans
        pass
    try:
        from timm.data.auto_augment import AugMixAugment

        classes[AugMixAugment] = TimmAugMix
    except ImportError:
        pass
    return classes


def augmix_op(t: Any) -> Optional[PixelOp]:
    """The pixel op of torchvision's or timm's AugMix, or None (another step,
    a subclass, a timm op without a native form)."""
    if not type(t).__module__.startswith(("torchvision.", "timm.")):
        return None
    make = _classes().get(type(t))
    if make is None:
        return None
    try:
        return make(t)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
