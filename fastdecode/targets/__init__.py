"""fastdecode.targets: detection and segmentation targets through the fused crop (torch, torchvision).

:func:`fuse_joint` takes a torchvision v2 joint chain (the detection and
segmentation references' presets: RandomHorizontalFlip, RandomZoomOut,
RandomIoUCrop, RandomShortestSize, ScaleJitter, RandomResize, RandomCrop,
RandomPhotometricDistort, SanitizeBoundingBoxes, ToImage, ToDtype, ...) and
returns ``f(data, target)`` on *encoded* bytes and a v2 target (a dict of
``BoundingBoxes``, ``Mask``, ``KeyPoints``, labels; or a tuple): the image is
decoded once, only its kept crop, boxes and keypoints are moved by v2's own
kernels and masks are made at the output size. The datasets: :class:`CocoDetection`,
:class:`VOCDetection`, :class:`VOCSegmentation` (torchvision's, wrapped by
``wrap_dataset_for_transforms_v2``), :class:`LabelFolder` (image + label
trees) and :class:`DetectionList` (files listed with COCO annotations);
:func:`collate` batches detection samples as lists, :func:`segmentation_collate`
segmentation samples padded as the references do. Importing this package also
lets ``fastdecode.transforms.fuse(chain)`` take ``(data, target)``. See
docs/decisions/detection.md.
"""

from __future__ import annotations

from fastdecode.targets.coco import CocoDetection, CocoMasks
from fastdecode.targets.joint import JointFusedTransform, fuse_joint
from fastdecode.targets.lists import DetectionList, collate, segmentation_collate
from fastdecode.targets.segmentation import LabelFolder, VOCSegmentation
from fastdecode.targets.voc import VOCDetection
from fastdecode.transforms.kinds import register_joint

register_joint(fuse_joint)  # fuse(chain)((data, target)) runs fuse_joint(chain)

__all__ = ["CocoDetection", "CocoMasks", "DetectionList", "JointFusedTransform", "LabelFolder",
           "VOCDetection", "VOCSegmentation", "collate", "fuse_joint", "segmentation_collate"]
