"""torch's CPU random draws for the plain geometry ops, without torch, seeded per row.

What a detached plan (:mod:`.detached`) draws from in a process that never
imports torch (a Ray read task): :class:`Draws` gives the words, float32
uniform and integer draws torch's CPU generator gives after
``torch.manual_seed``, and :func:`sample_resized_crop` RandomResizedCrop's
box from them, equal to the torch-drawing originals (:mod:`.draws`) that
every other path keeps using. A range whose draw would not be exact
(:func:`exact_uniform`) or a canvas side from 2**28 up leaves for the full
transform. See docs/decisions/ray.md ("A read task imports no torch").
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from fastdecode.transforms.draws import central_crop
from fastdecode.transforms.geometry import FlipOp, Geometry, RandomResizedCropOp, Stop

__all__ = ["Draws", "RangeDraw", "draw_geometry", "exact_uniform", "range_draw"]

_WORDS = 8  # words drawn from numpy at a time (a box and a flip take 3-5)
_EXP_ULPS = 2  # the correctly rounded exp's neighbours torch's exp may give
_F32_INF = np.float32(np.inf)
_RANDINT_LIMIT = 2**28  # torch draws random_(0, n) differently from here on


class Draws:
    """torch's CPU generator's words and draws for one row at a time."""

    def __init__(self) -> None:
        self._state = np.random.RandomState(0)
        self._words: list[int] = []

    def manual_seed(self, seed: int) -> None:
        """``torch.manual_seed(seed)`` (its low 32 bits seed the twister)."""
        self._state.seed(int(seed) & 0xFFFFFFFF)
        self._words = []

    def word(self) -> int:
        """The generator's next 32-bit word (numpy draws ``_WORDS`` at a time).

        Returns
        -------
        int
            The word, as torch's Mersenne Twister would give it next.
        """
        if not self._words:
            self._words = self._state.randint(0, 2**32, size=_WORDS,
                                              dtype=np.uint64).tolist()[::-1]
        return self._words.pop()

    def uniform(self, draw: "RangeDraw") -> float:
        """``torch.empty(1).uniform_(a, b).item()`` (float32) for ``draw``'s range."""
        x = (self.word() & 0xFFFFFF) * 2.0**-24
        return float(np.float32(x * draw.span + draw.low))

    def randint(self, n: int) -> int:
        """``torch.randint(0, n, size=(1,)).item()`` for 0 < n < 2**28."""
        return self.word() % n


class RangeDraw:
    """A float32 uniform draw's range as torch holds it: ``low`` and ``span``
    (``b - a`` in float32)."""

    __slots__ = ("low", "span")

    def __init__(self, low: float, span: float) -> None:
        self.low = low
        self.span = span


def range_draw(a: float, b: float) -> RangeDraw:
    """The range of a float32 ``uniform_(a, b)`` as torch holds it.

    Parameters
    ----------
    a, b : float
        The bounds of the range.

    Returns
    -------
    RangeDraw
        ``low`` (``a`` in float32) and ``span`` (``b - a`` in float32).
    """
    low = np.float32(a)
    return RangeDraw(float(low), float(np.float32(b) - low))


def exact_uniform(a: float, b: float) -> bool:
    """Whether :meth:`Draws.uniform` is exact over ``[a, b)``: the float64
    sum ``x * span + low`` (x has 24 bits, span 24: the product is exact)
    needs at most 53 bits from its top bit to its lowest."""
    r = range_draw(a, b)
    if r.low == 0.0 or r.span == 0.0:
        return True
    if not (math.isfinite(r.low) and math.isfinite(r.span)):
        return False
    e_low, e_span = math.frexp(r.low)[1], math.frexp(r.span)[1]
    top = max(e_low, e_span) + 1
    lowest = min(e_span - 48, e_low - 24)
    return top - lowest <= 53


def _box_size(target_area: float, log_ratio: float) -> tuple[int, int]:
    """(w, h) from ``exp(log_ratio)`` as torch's float32 exp gives it."""
    v = np.float32(math.exp(log_ratio))
    lo, hi = v, v
    for _ in range(_EXP_ULPS):
        lo, hi = np.nextafter(lo, -_F32_INF), np.nextafter(hi, _F32_INF)
    low = _size(target_area, float(lo))
    if low == _size(target_area, float(hi)):
        return low
    import torch  # the two bounds differ: only torch's own exp decides

    return _size(target_area, torch.tensor([log_ratio], dtype=torch.float32).exp_().item())


def _size(target_area: float, aspect_ratio: float) -> tuple[int, int]:
    return (int(round(math.sqrt(target_area * aspect_ratio))),
            int(round(math.sqrt(target_area / aspect_ratio))))


def sample_resized_crop(draws: Draws, height: int, width: int, scale: RangeDraw,
                        log_ratio: RangeDraw, ratio) -> tuple[int, int, int, int]:
    """``draws.sample_resized_crop`` from :class:`Draws`: the same box."""
    area = height * width
    for _ in range(10):
        target_area = area * draws.uniform(scale)
        w, h = _box_size(target_area, draws.uniform(log_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = draws.randint(height - h + 1)
            j = draws.randint(width - w + 1)
            return i, j, h, w
    return central_crop(height, width, ratio)


_FLIP = RangeDraw(0.0, 1.0)  # torch.rand(1)


def draw_geometry(ops, ranges: list[Optional[tuple[RangeDraw, RangeDraw, tuple]]],
                  draws: Draws, height: int, width: int) -> tuple[Geometry, int]:
    """``geometry.draw_geometry`` over the four plain ops, drawing from
    ``draws``: the Geometry and the index of the op that stopped (len(ops)
    when none). ``ranges[k]``: op k's (scale, log ratio, ratio) when it is a
    RandomResizedCrop."""
    geo = Geometry.start(height, width)
    for index, op in enumerate(ops):
        try:
            if type(op) is RandomResizedCropOp:
                if geo.padded:
                    raise Stop("random crop of a zero-padded canvas")
                if max(geo.canvas) >= _RANDINT_LIMIT:
                    raise Stop("a canvas side beyond the emulated randint")
                scale, log_ratio, ratio = ranges[index]  # type: ignore[misc]
                top, left, h, w = sample_resized_crop(draws, geo.canvas[0], geo.canvas[1],
                                                      scale, log_ratio, ratio)
                flt = op.pick_filter()
                geo.do_crop(top, left, h, w)
                geo.do_resize(op.size[0], op.size[1], flt)
            elif type(op) is FlipOp:
                if draws.uniform(_FLIP) < op.p32:
                    geo.do_flip()
            else:
                op.apply(geo)
        except Stop:
            return geo, index
    return geo, len(ops)
