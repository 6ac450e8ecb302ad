"""torchvision's v1 / v2 RandAugment, TrivialAugmentWide, AutoAugment as pixel ops.

Each draws torch's RNG as its ``forward`` does.

The magnitude tables come from the transform's own augmentation space
(v1's ``_augmentation_space`` method, v2's ``_AUGMENTATION_SPACE`` class
table), evaluated once per image size (they draw nothing); the draws are the
forward's calls on torch's global generator, in its order: v1 ``randint``
for the signs, v2 ``rand(()) <= 0.5``. The ops run as ``_apply_op`` /
``_apply_image_or_video_transform`` run them on a PIL image
(:mod:`.ops`). Exact types only. See docs/decisions/augment.md ("Draws and
plans").
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional

import numpy as np
import torch

from fastdecode import _rng
from fastdecode.augment import ops
from fastdecode.augment.base import PixelOp, Steps

__all__ = ["TvPolicy", "policy_op", "resample_of", "tv_fill", "tv_steps"]

_PIL_FILTERS = {"nearest": 0, "bilinear": 2, "bicubic": 3}  # what Image.transform takes
_MAX_SIZES = 64  # magnitude tables kept per op (one per image size seen)


@functools.cache
def _classes() -> dict[type, tuple[str, bool]]:
    """class -> (policy kind, is_v2); torchvision loads only when a chain is planned."""
    from torchvision.transforms import autoaugment as A
    from torchvision.transforms import v2 as T2

    return {A.RandAugment: ("rand", False), A.TrivialAugmentWide: ("trivial", False),
            A.AutoAugment: ("auto", False), T2.RandAugment: ("rand", True),
            T2.TrivialAugmentWide: ("trivial", True), T2.AutoAugment: ("auto", True)}


def resample_of(interpolation: Any, v2: bool) -> Optional[int]:
    """Pillow's filter number for a policy's interpolation (nearest,
    bilinear, bicubic: what Image.transform takes), or None."""
    from torchvision.transforms import InterpolationMode

    mode = interpolation
    if v2 and not isinstance(mode, InterpolationMode):
        from torchvision.transforms.v2.functional._geometry import _check_interpolation

        try:
            mode = _check_interpolation(mode)
        except (TypeError, ValueError):
            return None
    if not isinstance(mode, InterpolationMode):
        return None
    return _PIL_FILTERS.get(mode.value)


def tv_fill(fill: Any) -> ops.Fill:
    """The fillcolor torchvision hands Pillow for ``fill`` on an RGB image
    (its own ``_parse_fill``).

    Raises
    ------
    ValueError
        A fill torchvision would refuse, or one outside 0..255.
    """
    import PIL.Image
    from torchvision.transforms._functional_pil import _parse_fill

    colour = _parse_fill(fill, PIL.Image.new("RGB", (1, 1)))["fillcolor"]
    if not isinstance(colour, tuple) or not all(0 <= v <= 255 for v in colour):
        raise ValueError(f"fill {fill!r}: not an RGB colour")
    return colour


@functools.lru_cache(maxsize=4096)  # a policy's magnitudes are a few bins per op and size
def tv_steps(name: str, magnitude: float, size: tuple[int, int], resample: int,
             fill: ops.Fill, v2: bool) -> Steps:
    """What ``_apply_op`` (v1) / ``_apply_image_or_video_transform`` (v2)
    runs for op ``name`` on a PIL image of ``size`` (height, width)."""
    if name == "Identity":
        return ()
    if name in ("ShearX", "ShearY"):
        shear = math.degrees(math.atan(magnitude))
        pair = [shear, 0.0] if name == "ShearX" else [0.0, shear]
        return (ops.tv_affine(size, 0.0, [0, 0], 1.0, pair, resample, fill, [0, 0], v2),)
    if name in ("TranslateX", "TranslateY"):
        move = [int(magnitude), 0] if name == "TranslateX" else [0, int(magnitude)]
        return (ops.tv_affine(size, 0.0, move, 1.0, [0.0, 0.0], resample, fill, None, v2),)
    if name == "Rotate":
        step = ops.pil_rotate(magnitude, size, resample, fill)
        return () if step is None else (step,)
    enhance = _ENHANCE.get(name)
    if enhance is not None:
        return (enhance(1.0 + magnitude),)
    if name == "Posterize":
        return (ops.posterize(int(magnitude)),)
    if name == "Solarize":  # v2's magnitudes are fractions of the PIL bound, 255
        return (ops.solarize(255.0 * magnitude if v2 else magnitude),)
    if name in _PLAIN:
        return (_PLAIN[name](),)
    raise ValueError(f"The provided operator {name} is not recognized.")


_ENHANCE: dict[str, Callable[[float], tuple]] = {
    "Brightness": ops.brightness, "Color": ops.saturation, "Contrast": ops.contrast,
    "Sharpness": ops.sharpness}
_PLAIN: dict[str, Callable[[], tuple]] = {
    "AutoContrast": ops.autocontrast, "Equalize": ops.equalize, "Invert": ops.invert}
KNOWN = frozenset({"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
                   "Posterize", "Solarize", *_ENHANCE, *_PLAIN})


def _f32(p: float) -> float:
    """``p`` rounded to float32, as torch compares a float32 tensor with a Python float."""
    return float(np.float32(p))


def _values(magnitudes: Any) -> Optional[list[float]]:
    """A magnitude tensor as the Python floats ``float(m[i])`` gives (None: no magnitude)."""
    if magnitudes is None or magnitudes.ndim == 0:
        return None
    return [float(v) for v in magnitudes.tolist()]


class TvPolicy(PixelOp):
    """A torchvision policy: per image, its forward's draws, then its ops' steps."""

    def __init__(self, transform: Any, kind: str, v2: bool, resample: int, fill: ops.Fill):
        super().__init__(transform)
        self.kind, self.v2, self.resample, self.fill = kind, v2, resample, fill
        self._tables: dict[tuple[int, int], tuple[list, dict]] = {}
        # the policies' probabilities as float32: torch compares a float32 draw with them so
        self._p32 = [[_f32(p) for _, p, _ in sub] for sub in getattr(
            transform, "_policies" if v2 else "policies", ())] if kind == "auto" else []

    def _table(self, size: tuple[int, int]) -> list:
        """[(name, magnitudes or None, signed)] in the space's order, for ``size``."""
        return self._tables_of(size)[0]

    def _space(self, size: tuple[int, int]) -> dict:
        """name -> (magnitudes or None, signed), for ``size``."""
        return self._tables_of(size)[1]

    def _tables_of(self, size: tuple[int, int]) -> tuple[list, dict]:
        tables = self._tables.get(size)
        if tables is None:
            t, (h, w) = self.transform, size
            if self.v2:
                bins = 10 if self.kind == "auto" else t.num_magnitude_bins
                space = {k: (fn(bins, h, w), s) for k, (fn, s) in t._AUGMENTATION_SPACE.items()}
            elif self.kind == "trivial":
                space = t._augmentation_space(t.num_magnitude_bins)
            else:
                bins = 10 if self.kind == "auto" else t.num_magnitude_bins
                space = t._augmentation_space(bins, (h, w))
            table = [(k, _values(m), s) for k, (m, s) in space.items()]
            tables = (table, {k: (values, s) for k, values, s in table})
            if len(self._tables) >= _MAX_SIZES:
                self._tables.clear()
            self._tables[size] = tables
        return tables

    def _steps(self, name: str, magnitude: float, size: tuple[int, int]) -> Steps:
        return tv_steps(name, magnitude, size, self.resample, self.fill, self.v2)

    def draw(self, size: tuple[int, int]) -> Steps:
        """The forward's draws for ``size`` (see :meth:`PixelOp.draw`)."""
        return getattr(self, "_" + self.kind + ("2" if self.v2 else "1"))(size)

    # -- v1 (torchvision.transforms.autoaugment) ------------------------------------

    def _rand1(self, size):
        t, table = self.transform, self._table(size)
        steps: list = []
        for _ in range(t.num_ops):
            name, values, signed = table[_rng.randint(len(table))]
            magnitude = values[t.magnitude] if values is not None else 0.0
            if signed and _rng.randint(2):
                magnitude *= -1.0
            steps += self._steps(name, magnitude, size)
        return tuple(steps)

    def _trivial1(self, size):
        table = self._table(size)
        name, values, signed = table[_rng.randint(len(table))]
        magnitude = values[_rng.randint(len(values))] if values is not None else 0.0
        if signed and _rng.randint(2):
            magnitude *= -1.0
        return self._steps(name, magnitude, size)

    def _auto1(self, size):
        policies = self.transform.policies
        policy_id = _rng.randint(len(policies))
        probs = torch.rand((2,)).tolist()
        signs = torch.randint(2, (2,)).tolist()
        space, p32 = self._space(size), self._p32[policy_id]
        steps: list = []
        for i, (name, _, magnitude_id) in enumerate(policies[policy_id]):
            if probs[i] <= p32[i]:  # torch's float32 comparison
                values, signed = space[name]
                magnitude = values[magnitude_id] if magnitude_id is not None else 0.0
                if signed and signs[i] == 0:
                    magnitude *= -1.0
                steps += self._steps(name, magnitude, size)
        return tuple(steps)

    # -- v2 (torchvision.transforms.v2) -------------------------------------------

    def _rand2(self, size):
        t, table = self.transform, self._table(size)
        steps: list = []
        for _ in range(t.num_ops):
            name, values, signed = table[_rng.randint(len(table))]
            magnitude = 0.0
            if values is not None:
                magnitude = values[t.magnitude]
                if signed and _rng.uniform() <= 0.5:
                    magnitude *= -1
            steps += self._steps(name, magnitude, size)
        return tuple(steps)

    def _trivial2(self, size):
        t, table = self.transform, self._table(size)
        name, values, signed = table[_rng.randint(len(table))]
        magnitude = 0.0
        if values is not None:
            magnitude = values[_rng.randint(t.num_magnitude_bins)]
            if signed and _rng.uniform() <= 0.5:
                magnitude *= -1
        return self._steps(name, magnitude, size)

    def _auto2(self, size):
        policies = self.transform._policies
        policy_id = _rng.randint(len(policies))
        space, p32 = self._space(size), self._p32[policy_id]
        steps: list = []
        for i, (name, _, magnitude_id) in enumerate(policies[policy_id]):
            if not _rng.uniform() <= p32[i]:  # torch's float32 comparison
                continue
            values, signed = space[name]
            magnitude = 0.0
            if values is not None:
                magnitude = values[magnitude_id]
                if signed and _rng.uniform() <= 0.5:
                    magnitude *= -1
            steps += self._steps(name, magnitude, size)
        return tuple(steps)


def policy_op(t: Any) -> Optional[TvPolicy]:
    """The pixel op of a torchvision policy, or None (another step, a
    subclass, an interpolation Image.transform does not take, a fill that is
    not an RGB colour, an op outside the vocabulary)."""
    found = _classes().get(type(t))
    if found is None:
        return None
    kind, v2 = found
    try:
        resample = resample_of(t.interpolation, v2)
        if v2:
            import PIL.Image
            from torchvision.transforms.v2._utils import _get_fill

            fill = tv_fill(_get_fill(t._fill, PIL.Image.Image))
            names = set(type(t)._AUGMENTATION_SPACE)
        else:
            fill = tv_fill(t.fill)
            names = set(t._augmentation_space(10, (8, 8)) if kind != "trivial"
                        else t._augmentation_space(10))
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    if resample is None or not names <= KNOWN:
        return None
    return TvPolicy(t, kind, v2, resample, fill)
