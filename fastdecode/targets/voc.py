"""VOCDetection: torchvision's VOC detection dataset, its v2 wrapping leaving the image encoded.

A subclass of ``torchvision.datasets.VOCDetection``: used as it is, it
returns what torchvision's returns. With a v2 chain as ``transforms`` (fused
by :func:`~fastdecode.targets.fuse_joint`), ``wrap_dataset_for_transforms_v2``
(a wrapper factory registered for this class, torchvision's own target
making) hands the fused call the encoded bytes, the boxes' canvas read from
the header. See docs/decisions/detection.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional
from xml.etree.ElementTree import parse as ET_parse

import PIL.Image
import torch
from torchvision import datasets, tv_tensors
from torchvision.tv_tensors._dataset_wrapper import (
    VOC_DETECTION_CATEGORY_TO_IDX,
    WRAPPER_FACTORIES,
    list_of_dicts_to_dict_of_lists,
    parse_target_keys,
)

from fastdecode import api
from fastdecode.targets.joint import JointFusedTransform, fuse_joint

__all__ = ["VOCDetection"]


class VOCDetection(datasets.VOCDetection):
    """``torchvision.datasets.VOCDetection`` with the fused joint path (see the module docstring).

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
    target_keys : sequence of str, optional
        The keys the v2 wrapper puts in the target (its ``target_keys``:
        ``wrap_dataset_for_transforms_v2`` refuses them for a subclass).
    """

    def __init__(self, root: Any, year: str = "2012", image_set: str = "train",
                 download: bool = False, transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None,
                 transforms: Optional[Callable] = None, *, exact: bool = False,
                 target_keys: Optional[Any] = None):
        super().__init__(root, year, image_set, download, transform, target_transform, transforms)
        if transforms is not None:
            self.transforms = fuse_joint(transforms, exact=exact)
        self.target_keys = target_keys
        self._encoded = False

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """A sample as torchvision's; under the v2 wrapper, the image's bytes and the parsed XML."""
        if not (self._encoded and self.transforms is None):
            return super().__getitem__(index)
        target = self.parse_voc_xml(ET_parse(self.annotations[index]).getroot())
        return Path(self.images[index]).read_bytes(), target


@WRAPPER_FACTORIES.register(VOCDetection)
def _voc_detection_wrapper_factory(dataset: VOCDetection, target_keys):
    """torchvision's VOC detection wrapper, the image left encoded when the chain is fused."""
    keys = parse_target_keys(dataset.target_keys if target_keys is None else target_keys,
                             available={"annotation", "boxes", "labels"},
                             default={"boxes", "labels"})
    fused = isinstance(dataset.transforms, JointFusedTransform)
    dataset._encoded = True

    def wrapper(idx, sample):
        data, target = sample
        info = api.read_header(data)
        if not fused:
            data = PIL.Image.open(dataset.images[idx]).convert("RGB")
        batched = list_of_dicts_to_dict_of_lists(target["annotation"]["object"])
        if "annotation" not in keys:
            target = {}
        if "boxes" in keys:
            target["boxes"] = tv_tensors.BoundingBoxes(
                [[int(box[part]) for part in ("xmin", "ymin", "xmax", "ymax")]
                 for box in batched["bndbox"]],
                format=tv_tensors.BoundingBoxFormat.XYXY, canvas_size=(info.height, info.width))
        if "labels" in keys:
            target["labels"] = torch.tensor(
                [VOC_DETECTION_CATEGORY_TO_IDX[name] for name in batched["name"]])
        return data, target

    return wrapper
