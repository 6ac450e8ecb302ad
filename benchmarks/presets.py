"""torchvision's classification reference presets (references/classification/
presets.py), written the way it writes them: a class holding
``self.transforms = Compose(...)``, v1 or v2, PIL or tensor backend.

The one copy that ``bench_recipes`` measures and ``tests/transforms/
test_recipes.py`` fuses (that the wrapper class and its chain fuse is the
point of both).
"""

from __future__ import annotations

import torch
from torchvision import transforms as T
from torchvision.transforms import v2 as T2

__all__ = ["MEAN", "STD", "ClassificationPresetEval", "ClassificationPresetTrain", "get_module"]

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def get_module(use_v2: bool):
    """(transforms module, tv_tensors or None), as the reference's helper."""
    return (T2, None) if use_v2 else (T, None)


class ClassificationPresetTrain:
    def __init__(self, *, crop_size, mean=MEAN, std=STD,
                 interpolation=T.InterpolationMode.BILINEAR, hflip_prob=0.5,
                 auto_augment_policy=None, ra_magnitude=9, augmix_severity=3,
                 random_erase_prob=0.0, backend="pil", use_v2=False):
        T_, _ = get_module(use_v2)
        transforms = []
        backend = backend.lower()
        if backend == "tensor":
            transforms.append(T_.PILToTensor())
        elif backend != "pil":
            raise ValueError(f"backend can be 'tensor' or 'pil', but got {backend}")
        transforms.append(T_.RandomResizedCrop(crop_size, interpolation=interpolation,
                                               antialias=True))
        if hflip_prob > 0:
            transforms.append(T_.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy is not None:
            if auto_augment_policy == "ra":
                transforms.append(T_.RandAugment(interpolation=interpolation,
                                                 magnitude=ra_magnitude))
            elif auto_augment_policy == "ta_wide":
                transforms.append(T_.TrivialAugmentWide(interpolation=interpolation))
            elif auto_augment_policy == "augmix":
                transforms.append(T_.AugMix(interpolation=interpolation, severity=augmix_severity))
            else:
                aa_policy = T_.AutoAugmentPolicy(auto_augment_policy)
                transforms.append(T_.AutoAugment(policy=aa_policy, interpolation=interpolation))
        if backend == "pil":
            transforms.append(T_.PILToTensor())
        transforms.extend([
            T_.ToDtype(torch.float, scale=True) if use_v2 else T_.ConvertImageDtype(torch.float),
            T_.Normalize(mean=mean, std=std),
        ])
        if random_erase_prob > 0:
            transforms.append(T_.RandomErasing(p=random_erase_prob))
        if use_v2:
            transforms.append(T_.ToPureTensor())
        self.transforms = T_.Compose(transforms)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size=256, mean=MEAN, std=STD,
                 interpolation=T.InterpolationMode.BILINEAR, backend="pil", use_v2=False):
        T_, _ = get_module(use_v2)
        transforms = []
        backend = backend.lower()
        if backend == "tensor":
            transforms.append(T_.PILToTensor())
        elif backend != "pil":
            raise ValueError(f"backend can be 'tensor' or 'pil', but got {backend}")
        transforms += [
            T_.Resize(resize_size, interpolation=interpolation, antialias=True),
            T_.CenterCrop(crop_size),
        ]
        if backend == "pil":
            transforms.append(T_.PILToTensor())
        transforms += [
            T_.ToDtype(torch.float, scale=True) if use_v2 else T_.ConvertImageDtype(torch.float),
            T_.Normalize(mean=mean, std=std),
        ]
        if use_v2:
            transforms.append(T_.ToPureTensor())
        self.transforms = T_.Compose(transforms)

    def __call__(self, img):
        return self.transforms(img)
