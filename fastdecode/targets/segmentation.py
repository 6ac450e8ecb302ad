"""Segmentation datasets: image + label PNG pairs (VOC, Cityscapes- and ADE20K-style folders), fused.

:class:`VOCSegmentation` is torchvision's (a subclass): unwrapped it returns
what torchvision's returns; under ``wrap_dataset_for_transforms_v2`` (a
wrapper factory registered for it) with a v2 chain as ``transforms`` its
samples come from the joint fused transform: the image decoded once, only
its kept crop, the label map (a ``Mask``, as torchvision's wrapper makes it)
taken at the output's rows and columns (NEAREST, as v2 resizes masks).
:class:`LabelFolder` pairs an image folder with a label folder by relative
path and stem (Cityscapes' ``leftImg8bit`` / ``gtFine``, ADE20K's
``images`` / ``annotations``). See docs/decisions/detection.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import PIL.Image
import torch
from torchvision import datasets, tv_tensors
from torchvision.tv_tensors._dataset_wrapper import WRAPPER_FACTORIES

from fastdecode.targets.joint import JointFusedTransform, fuse_joint

__all__ = ["LabelFolder", "VOCSegmentation", "read_label"]

_IMAGES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def read_label(path: Any) -> tv_tensors.Mask:
    """A label PNG as torchvision's wrapper makes it: ``Mask(PIL.Image.open(path))``,
    (1, H, W), the palette indices or grey levels as they are stored.

    Parameters
    ----------
    path : str or path-like
        The label image.

    Returns
    -------
    torchvision.tv_tensors.Mask
        (1, H, W).
    """
    with PIL.Image.open(path) as im:
        return tv_tensors.Mask(im)


class VOCSegmentation(datasets.VOCSegmentation):
    """``torchvision.datasets.VOCSegmentation`` with the fused joint path (see the module docstring).

    Parameters
    ----------
    root : str or path-like
        As torchvision's.
    year, image_set, download, transform, target_transform : optional
        As torchvision's.
    transforms : callable, optional
        A v2 joint chain: fused with :func:`~fastdecode.targets.fuse_joint`.
    exact : bool, default False
        Passed to the fuse.
    """

    def __init__(self, root: Any, year: str = "2012", image_set: str = "train",
                 download: bool = False, transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None,
                 transforms: Optional[Callable] = None, *, exact: bool = False):
        super().__init__(root, year, image_set, download, transform, target_transform, transforms)
        if transforms is not None:
            self.transforms = fuse_joint(transforms, exact=exact)
        self._encoded = False

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """A sample as torchvision's; under the v2 wrapper, the image's bytes and its label path."""
        if not (self._encoded and self.transforms is None):
            return super().__getitem__(index)
        return Path(self.images[index]).read_bytes(), self.masks[index]


@WRAPPER_FACTORIES.register(VOCSegmentation)
def _voc_wrapper_factory(dataset: VOCSegmentation, target_keys):
    """torchvision's segmentation wrapper, the image left encoded when the chain is fused."""
    fused = isinstance(dataset.transforms, JointFusedTransform)
    dataset._encoded = True

    def wrapper(idx, sample):
        data, label_path = sample
        if not fused:
            data = PIL.Image.open(dataset.images[idx]).convert("RGB")
        return data, read_label(label_path)

    return wrapper


class LabelFolder(torch.utils.data.Dataset):
    """Images and their label PNGs in two folder trees, paired by relative path and stem.

    Parameters
    ----------
    images : str or path-like
        The image tree.
    labels : str or path-like
        The label tree (the same relative folders).
    transforms : callable, optional
        A v2 joint chain on (image, ``Mask``), fused; None: (PIL image, Mask).
    label_name : callable, optional
        The label file's path relative to ``labels`` for an image's relative
        path (default: the same stem with ``.png``; Cityscapes:
        ``lambda p: p.replace('_leftImg8bit.png', '_gtFine_labelIds.png')``).
    exact : bool, default False
        Passed to the fuse.

    Raises
    ------
    FileNotFoundError
        An image without its label, or no image at all.
    """

    def __init__(self, images: Any, labels: Any, transforms: Optional[Callable] = None, *,
                 label_name: Optional[Callable[[str], str]] = None, exact: bool = False):
        self.images_root, self.labels_root = Path(images), Path(labels)
        name = label_name or (lambda rel: os.path.splitext(rel)[0] + ".png")
        self.samples: list[tuple[Path, Path]] = []
        for path in sorted(self.images_root.rglob("*")):
            if path.suffix.lower() not in _IMAGES or not path.is_file():
                continue
            label = self.labels_root / name(str(path.relative_to(self.images_root)))
            if not label.is_file():
                raise FileNotFoundError(f"{path}: no label at {label}")
            self.samples.append((path, label))
        if not self.samples:
            raise FileNotFoundError(f"no image under {self.images_root}")
        self.transforms = None if transforms is None else fuse_joint(transforms, exact=exact)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """(image, label) after the fused chain; (PIL image, Mask) without one."""
        image, label = self.samples[index]
        mask = read_label(label)
        if self.transforms is None:
            return PIL.Image.open(image).convert("RGB"), mask
        return self.transforms(image.read_bytes(), mask)

