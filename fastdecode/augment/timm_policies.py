"""timm's RandAugment and AutoAugment as pixel ops, drawing as timm draws.

The policies of ``rand_augment_transform`` and ``auto_augment_transform``.

timm draws from NumPy (RandAugment's ``np.random.choice`` of its ops) and
Python's ``random``: each ``AugmentOp``'s probability, its ``mstd``
magnitude noise (``random.gauss``, or ``random.uniform`` for an infinite
std), the op's own level function (its sign), then ``random.choice`` of the
resample pair for the geometric ops. The same calls, on the same global
generators, in the same order, then the op as timm's function runs it on a
PIL image (:mod:`.ops`). timm is imported only when a chain holds a timm
object. See docs/decisions/augment.md ("Draws and plans").
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable, Optional

import numpy as np

from fastdecode.augment import ops
from fastdecode.augment.base import PixelOp, Steps

__all__ = ["TimmAutoAugment", "TimmRandAugment", "native_op", "policy_op"]

_LEVEL_DENOM = 10.0  # timm's _LEVEL_DENOM


def _module():
    from timm.data import auto_augment

    return auto_augment


def _affine_matrix(fn_name: str) -> Callable[[Any, tuple[int, int]], tuple]:
    """timm's geometric functions' matrices, from their argument and the size (height, width)."""
    return {
        "shear_x": lambda v, hw: (1, v, 0, 0, 1, 0),
        "shear_y": lambda v, hw: (1, 0, 0, v, 1, 0),
        "translate_x_rel": lambda v, hw: (1, 0, v * hw[1], 0, 1, 0),
        "translate_y_rel": lambda v, hw: (1, 0, 0, 0, 1, v * hw[0]),
        "translate_x_abs": lambda v, hw: (1, 0, v, 0, 1, 0),
        "translate_y_abs": lambda v, hw: (1, 0, 0, 0, 1, v),
    }[fn_name]


def _posterize(bits: int) -> Steps:
    return () if bits >= 8 else (ops.posterize(bits),)


def _desaturate(factor: float) -> Steps:
    return (ops.saturation(min(1.0, max(0.0, 1.0 - factor))),)


# timm function name -> its steps from its level arguments (the geometric ones: below)
_PIXEL: dict[str, Callable[..., Steps]] = {
    "auto_contrast": lambda: (ops.autocontrast(),),
    "equalize": lambda: (ops.equalize(),),
    "invert": lambda: (ops.invert(),),
    "solarize": lambda thresh: (ops.solarize(thresh),),
    "solarize_add": lambda add, thresh=128: (ops.solarize_add(add, thresh),),
    "posterize": _posterize,
    "contrast": lambda f: (ops.contrast(f),),
    "color": lambda f: (ops.saturation(f),),
    "brightness": lambda f: (ops.brightness(f),),
    "sharpness": lambda f: (ops.sharpness(f),),
    "desaturate": _desaturate,
}
_GEOMETRIC = frozenset({"shear_x", "shear_y", "translate_x_rel", "translate_y_rel",
                        "translate_x_abs", "translate_y_abs", "rotate"})


class _Op:
    """One timm ``AugmentOp``: its draws, in ``AugmentOp.__call__``'s order."""

    def __init__(self, op: Any, fn_name: str):
        self.op = op
        self.fn_name = fn_name
        self.geometric = fn_name in _GEOMETRIC
        kwargs = op.kwargs
        fill = kwargs.get("fillcolor")
        colour = None if fill is None else tuple(int(v) for v in fill)
        if colour is not None and (len(colour) != 3 or not all(0 <= v <= 255 for v in colour)):
            raise ValueError(f"fillcolor {fill!r}: not an RGB colour")
        self.fill: ops.Fill = colour
        resample = kwargs.get("resample", _module()._DEFAULT_INTERPOLATION)
        self.resamples = (tuple(resample) if isinstance(resample, (list, tuple))
                          else (resample,))
        if self.geometric and not all(int(r) in (0, 2, 3) for r in self.resamples):
            raise ValueError(f"resample {resample!r}: not one Image.transform takes")
        self.choose = isinstance(resample, (list, tuple))

    def draw(self, size: tuple[int, int]) -> Steps:
        op = self.op
        if op.prob < 1.0 and random.random() > op.prob:
            return ()
        magnitude = op.magnitude
        if op.magnitude_std > 0:
            if op.magnitude_std == float("inf"):
                magnitude = random.uniform(0, magnitude)
            elif op.magnitude_std > 0:
                magnitude = random.gauss(magnitude, op.magnitude_std)
        upper_bound = op.magnitude_max or _LEVEL_DENOM
        magnitude = max(0.0, min(magnitude, upper_bound))
        args: tuple = op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()
        if not self.geometric:
            return _PIXEL[self.fn_name](*args)
        resample = int(random.choice(self.resamples) if self.choose else self.resamples[0])
        if self.fn_name == "rotate":
            step = ops.pil_rotate(args[0], size, resample, self.fill)
            return () if step is None else (step,)
        return (ops.affine(_affine_matrix(self.fn_name)(args[0], size), resample, self.fill),)


def native_op(op: Any) -> _Op:
    """The draws of one AugmentOp (``draw(size)``: its steps).

    Raises
    ------
    ValueError
        Not an AugmentOp of timm's own functions (a blur, a user's), or
        arguments Pillow's transform does not take.
    """
    aa = _module()
    if type(op) is not aa.AugmentOp:
        raise ValueError(f"{op!r} is not timm's AugmentOp")
    fn = getattr(op.aug_fn, "__name__", None)
    if fn not in _PIXEL and fn not in _GEOMETRIC or getattr(aa, fn, None) is not op.aug_fn:
        raise ValueError(f"{op.name}: no native op")
    return _Op(op, fn)


class TimmRandAugment(PixelOp):
    """timm's RandAugment: ``np.random.choice`` of ``num_layers`` ops
    (weighted or not), then each op's own draws."""

    def __init__(self, transform: Any):
        super().__init__(transform)
        self.ops = [native_op(op) for op in transform.ops]
        weights = transform.choice_weights
        self.weights = None if weights is None else np.asarray(weights)

    def draw(self, size: tuple[int, int]) -> Steps:
        """The picked ops' steps (see :meth:`PixelOp.draw`)."""
        t = self.transform
        if self.weights is None:
            # RandomState.choice(n, k) with replacement and no weights is its
            # randint(0, n, size=k), and that is k scalar randint(0, n) (one
            # masked 32-bit draw each, in order): the same draws without
            # choice's checks and size's array set-up (~6 us; NumPy keeps
            # the legacy stream fixed; test_augment_policies.py compares states)
            n = len(self.ops)
            picks = [np.random.randint(0, n) for _ in range(t.num_layers)]
        else:
            picks = np.random.choice(len(self.ops), t.num_layers, replace=False, p=self.weights)
        return tuple(step for i in picks for step in self.ops[i].draw(size))


class TimmAutoAugment(PixelOp):
    """timm's AutoAugment: ``random.choice`` of a sub-policy, then each op's draws."""

    def __init__(self, transform: Any):
        super().__init__(transform)
        self.policy = [[native_op(op) for op in sub] for sub in transform.policy]

    def draw(self, size: tuple[int, int]) -> Steps:
        """The picked sub-policy's steps (see :meth:`PixelOp.draw`)."""
        sub = random.choice(self.policy)
        return tuple(step for op in sub for step in op.draw(size))


@functools.cache
def _classes() -> dict[type, type]:
    aa = _module()
    return {aa.RandAugment: TimmRandAugment, aa.AutoAugment: TimmAutoAugment}


def policy_op(t: Any) -> Optional[PixelOp]:
    """The pixel op of timm's RandAugment / AutoAugment, or None (another
    step, or one holding an op without a native form, e.g. a blur)."""
    if not type(t).__module__.startswith("timm."):
        return None
    try:
        make = _classes().get(type(t))
        return None if make is None else make(t)
    except (ImportError, TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
