"""The recipes' augmentation ops: which run natively, drawn as their library draws them.

``pixel_op(t)`` turns a transform (torchvision's v1 / v2 RandAugment,
TrivialAugmentWide, AutoAugment and AugMix; timm's RandAugment, AutoAugment
and AugMix) into a :class:`PixelOp` whose ``draw(size)`` consumes the global
generators exactly as the transform's ``forward`` would on a PIL image of
that size and returns the steps; ``apply`` runs them in one native call
(``_native.augment``) on the uint8 pixels, bit for bit what Pillow computes,
and an AugMix's :class:`Mix` step in its turn (:mod:`.augmix`).
:mod:`fastdecode.transforms` puts these ops after the geometry, beside the
colour steps. See docs/decisions/augment.md.
"""

from __future__ import annotations

from fastdecode.augment._mix import MixCollate, mix_batch  # batch mixing (H2, issue 50)
from fastdecode.augment.base import Mix, PixelOp, Steps, apply, draw
from fastdecode.augment.select import pixel_op, why_not

__all__ = ["Mix", "MixCollate", "PixelOp", "Steps", "apply", "draw", "mix_batch", "pixel_op", "why_not"]
