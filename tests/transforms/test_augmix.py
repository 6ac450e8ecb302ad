"""AugMix's pieces (fastdecode/augment/augmix.py): Pillow's blend, and a Mix
step among native steps. The policies themselves, bit for bit against
torchvision and timm: test_augment_policies.py."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fastdecode.augment import Mix, apply, ops
from fastdecode.augment.augmix import blend

ALPHAS = [0.0, 1.0, 0.3, 0.5, 0.999, np.float32(0.123456), 1.7, -0.4]


@pytest.mark.parametrize("alpha", ALPHAS, ids=[f"alpha{float(a):g}" for a in ALPHAS])
def test_blend_is_pillows(alpha):
    rng = np.random.default_rng(5)
    one, two = (rng.integers(0, 256, (31, 47, 3), dtype=np.uint8) for _ in range(2))
    theirs = np.asarray(Image.blend(Image.fromarray(one), Image.fromarray(two), float(alpha)))
    out = np.empty_like(one)
    assert blend(one, two, alpha, out) is out
    assert np.array_equal(out, theirs)


class _Halve(Mix):
    """A mix that halves every value (records the pixels it saw)."""

    __slots__ = ("seen",)

    def __init__(self):
        self.seen = None

    def run(self, pixels, layout):
        self.seen = pixels.copy()
        pixels //= 2


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_a_mix_step_runs_in_its_turn_among_native_steps(layout):
    rng = np.random.default_rng(1)
    shape = (3, 20, 30) if layout == "CHW" else (20, 30, 3)
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    mix = _Halve()
    steps = (ops.invert(), mix, ops.posterize(3), ops.invert())
    out = apply(pixels.copy(), layout, steps)
    assert np.array_equal(mix.seen, 255 - pixels)  # after the step before it
    want = 255 - ((255 - pixels) // 2 & 0b11100000)
    assert np.array_equal(out, want)
