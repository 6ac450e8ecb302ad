"""The v2 chains of torchvision's detection and segmentation reference presets, written out.

``references/`` is not installed with torchvision, so the chains that
``references/detection/presets.py`` (``DetectionPresetTrain(use_v2=True)``,
backend 'pil') and ``references/segmentation/presets.py`` build are spelled
here step for step. Two departures, both said where they occur: lsj's
``FixedSizeCrop`` is the references' own class (not in torchvision), here a
``RandomCrop(pad_if_needed=True)`` of the same size; segmentation's
``PadIfSmaller`` (the references' v2_extras) is likewise RandomCrop's
``pad_if_needed``. The tests (tests/targets) and benchmarks/bench_detection.py
run these. See docs/decisions/detection.md.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2 as T

__all__ = ["DETECTION", "MEAN", "detection", "segmentation"]

MEAN = (123.0, 117.0, 104.0)
DETECTION = ("hflip", "ssdlite", "ssd", "multiscale", "lsj")


def _mean() -> tuple[float, float, float]:
    """The image fill of ssd's zoom-out (the references' lambda, picklable)."""
    return MEAN


def detection(name: str, hflip_prob: float = 0.5) -> T.Compose:
    """``DetectionPresetTrain(data_augmentation=name, use_v2=True)``'s chain.

    Parameters
    ----------
    name : {'hflip', 'ssdlite', 'ssd', 'multiscale', 'lsj'}
        The ``data_augmentation`` policy.
    hflip_prob : float, default 0.5
        The flip's probability.

    Returns
    -------
    torchvision.transforms.v2.Compose
        The chain.

    Raises
    ------
    ValueError
        An unknown policy.
    """
    if name == "hflip":
        steps = [T.RandomHorizontalFlip(p=hflip_prob)]
    elif name == "lsj":  # FixedSizeCrop(size=(1024, 1024), fill=mean) in the references
        steps = [T.ScaleJitter(target_size=(1024, 1024), antialias=True),
                 T.RandomCrop(1024, pad_if_needed=True,
                              fill={tv_tensors.Mask: 0, "others": MEAN}),
                 T.RandomHorizontalFlip(p=hflip_prob)]
    elif name == "multiscale":
        steps = [T.RandomShortestSize(min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768,
                                                800), max_size=1333),
                 T.RandomHorizontalFlip(p=hflip_prob)]
    elif name == "ssd":
        steps = [T.RandomPhotometricDistort(),
                 T.RandomZoomOut(fill=defaultdict(_mean, {tv_tensors.Mask: 0})),
                 T.RandomIoUCrop(), T.RandomHorizontalFlip(p=hflip_prob)]
    elif name == "ssdlite":
        steps = [T.RandomIoUCrop(), T.RandomHorizontalFlip(p=hflip_prob)]
    else:
        raise ValueError(f"unknown preset {name!r}")
    return T.Compose(steps + [T.ToImage(), T.ToDtype(torch.float, scale=True),
                              T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
                              T.SanitizeBoundingBoxes(), T.ToPureTensor()])


def segmentation(base_size: int = 520, crop_size: int = 480, hflip_prob: float = 0.5,
                 mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)) -> T.Compose:
    """``SegmentationPresetTrain(use_v2=True)``'s chain (PadIfSmaller: see the module).

    Parameters
    ----------
    base_size, crop_size : int, default 520, 480
        The references' sizes.
    hflip_prob : float, default 0.5
        The flip's probability.
    mean, std : sequence of float
        Normalize's.

    Returns
    -------
    torchvision.transforms.v2.Compose
        The chain.
    """
    return T.Compose([
        T.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size)),
        T.RandomHorizontalFlip(hflip_prob),
        T.RandomCrop(crop_size, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}),
        T.ToImage(),
        T.ToDtype(dtype={tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64,
                         "others": None}, scale=True),
        T.Normalize(mean=mean, std=std),
        T.ToPureTensor(),
    ])
