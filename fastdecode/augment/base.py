"""PixelOp, the contract of the ops run on the decoded pixels; ``apply``, their native call.

A pixel op holds its source transform and draws, per image, exactly what the
transform's ``forward`` would draw on a PIL image of the given size, from the
same generators in the same order, returning the native steps (a tuple of
``_native.augment`` step tuples; empty: the image passes unchanged). The
draws depend on the image size only, never on its pixels, so a plan draws
them before the decode. See docs/decisions/augment.md ("Draws and plans").
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastdecode import _native

__all__ = ["Mix", "PixelOp", "Steps", "apply", "draw"]

Steps = tuple  # a tuple of _native.augment's step tuples, and Mix steps


class PixelOp:
    """One step of a chain that runs on the pixels after the geometry.

    Parameters
    ----------
    transform : object
        The source transform (what explain() names).
    """

    # False: within a level of the library, not bit-exact (exact=True leaves it unfused)
    bit_exact = True
    # how it runs, for explain(): in the native call on the decoded pixels
    how = ("fused: drawn as its library draws it (the same generators, in the same order), its "
           "ops run natively on the decoded pixels with Pillow's arithmetic")

    def __init__(self, transform: Any):
        self.transform = transform

    def draw(self, size: tuple[int, int]) -> Steps:  # pragma: no cover - subclasses define it
        """Draws this image's parameters as the transform's ``forward`` would.

        Parameters
        ----------
        size : (int, int)
            (height, width) of the image the op sees.

        Returns
        -------
        tuple
            The native steps to apply; empty when the image passes unchanged.
        """
        raise NotImplementedError


class Mix:
    """A step that mixes augmented copies of the image (AugMix): drawn
    whole before the decode, run by :func:`apply` in Python (its branches'
    steps natively), drawing nothing."""

    __slots__ = ()

    def run(self, pixels: np.ndarray, layout: str) -> None:  # pragma: no cover - subclasses
        """Writes the mixed image into ``pixels`` (writable, C-contiguous,
        ``layout`` 'CHW' or 'HWC')."""
        raise NotImplementedError


def draw(ops: Sequence[PixelOp], size: tuple[int, int]) -> Steps:
    """The native steps of ``ops`` in chain order, each drawing as its transform would."""
    return tuple(step for op in ops for step in op.draw(size))


def apply(pixels: np.ndarray, layout: str, steps: Steps) -> np.ndarray:
    """``pixels`` (uint8 (3, H, W) for 'CHW', (H, W, 3) for 'HWC') after
    ``steps``: in place when writable and C-contiguous, else a copy; the
    native steps in chunks of the native limit (``_native.AUG_MAX_STEPS``),
    a :class:`Mix` step in its turn."""
    if not steps:
        return pixels
    if not (pixels.flags.writeable and pixels.flags.c_contiguous):
        pixels = np.array(pixels, order="C")
    start = 0
    for i, step in enumerate(steps):
        if isinstance(step, Mix):
            _run_native(pixels, layout, steps[start:i])
            step.run(pixels, layout)
            start = i + 1
    _run_native(pixels, layout, steps[start:])
    return pixels


def _run_native(pixels: np.ndarray, layout: str, steps: Steps) -> None:
    limit = _native.AUG_MAX_STEPS
    for start in range(0, len(steps), limit):
        _native.augment(pixels, layout, steps[start:start + limit])
