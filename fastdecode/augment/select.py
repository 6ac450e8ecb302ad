"""Which augmentation transforms run natively (``pixel_op``), and why one does not (``why_not``).

Exact types only (a subclass may override ``forward``): torchvision's v1 and
v2 policies (:mod:`.tv_policies`), timm's (:mod:`.timm_policies`), both
libraries' AugMix (:mod:`.augmix`). See
docs/decisions/augment.md ("Draws and plans").
"""

from __future__ import annotations

from typing import Any, Optional

from fastdecode.augment import augmix, timm_policies, tv_policies, tv_single
from fastdecode.augment.base import PixelOp

__all__ = ["pixel_op", "why_not"]

_POLICY_NAMES = frozenset({"RandAugment", "TrivialAugmentWide", "AutoAugment", "AugMix",
                           "AugMixAugment"})
_SINGLE_NAMES = frozenset({"RandomRotation", "RandomAffine", "RandomPosterize", "RandomSolarize",
                           "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
                           "RandomInvert"})


def pixel_op(t: Any) -> Optional[PixelOp]:
    """The pixel op for ``t``, or None when it is not one fuse runs natively."""
    module = type(t).__module__
    if module.startswith("torchvision."):
        return tv_policies.policy_op(t) or tv_single.single_op(t) or augmix.augmix_op(t)
    if module.startswith("timm."):
        return timm_policies.policy_op(t) or augmix.augmix_op(t)
    return None


def why_not(t: Any) -> Optional[str]:
    """Why an augmentation policy did not run natively (for the fusion
    report), or None when ``t`` is not one of the policies' classes."""
    name = type(t).__name__
    module = type(t).__module__
    if name == "GaussianBlur" and module.startswith("torchvision."):
        return ("GaussianBlur fuses in the default mode only (within one level of torchvision's "
                "conv2d, not bit-exact): with exact=True it runs unfused, in torchvision")
    if name in _SINGLE_NAMES and module.startswith("torchvision."):
        if getattr(t, "expand", False):
            return f"{name} with expand=True changes the image size: it runs unfused"
        return (f"{name}: a subclass, an interpolation Image.transform does not take (nearest, "
                "bilinear, bicubic), or a fill that is not an RGB colour: it runs unfused")
    if name not in _POLICY_NAMES or not module.startswith(("torchvision.", "timm.")):
        return None
    if module.startswith("timm."):
        return (f"timm's {name} holds an op without a native form (a blur, or an "
                "interpolation Image.transform does not take): it runs unfused")
    return (f"{name}'s interpolation is not nearest / bilinear / bicubic, or its fill is not "
            "an RGB colour: it runs unfused")
