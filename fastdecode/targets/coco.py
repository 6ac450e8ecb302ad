"""CocoDetection: torchvision's COCO dataset whose v2 wrapping decodes the crop and makes masks at the output.

A subclass of ``torchvision.datasets.CocoDetection``: used as it is, it
returns what torchvision's returns. Its ``transforms`` are fused
(:func:`~fastdecode.targets.fuse_joint`), and through
``wrap_dataset_for_transforms_v2`` (a wrapper factory registered for this
class) a sample is the encoded bytes and a target whose ``masks`` are
:class:`CocoMasks`: COCO polygons and RLE kept as they are until the fused
call knows which source pixels the output reads, then rasterized only there
(``fastdecode._native.raster_polygons`` / ``raster_rle``, pycocotools'
arithmetic). See docs/decisions/detection.md.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import numpy as np
import PIL.Image
import torch
from torchvision import datasets, tv_tensors
from torchvision.transforms.v2 import functional as F
from torchvision.tv_tensors._dataset_wrapper import (
    WRAPPER_FACTORIES,
    list_of_dicts_to_dict_of_lists,
    parse_target_keys,
)

from fastdecode import _native, api
from fastdecode.targets.joint import JointFusedTransform, fuse_joint
from fastdecode.targets.plan import JointPlan

__all__ = ["CocoDetection", "CocoMasks", "coco_keys", "coco_target"]

_KEYS = {"segmentation", "area", "iscrowd", "image_id", "bbox", "category_id", "boxes", "masks",
         "labels"}


class CocoMasks:
    """The instance masks of one image, as COCO stores them, made at the output when asked.

    Parameters
    ----------
    segmentations : sequence
        Each annotation's ``segmentation``: a list of polygons, an
        uncompressed RLE (``counts`` a list) or a compressed one (a string).
    canvas_size : (int, int)
        (H, W) of the image.
    """

    def __init__(self, segmentations: Sequence[Any], canvas_size: tuple[int, int]):
        self.segmentations = list(segmentations)
        self.canvas_size = (int(canvas_size[0]), int(canvas_size[1]))

    def __len__(self) -> int:
        return len(self.segmentations)

    def select(self, keep: Sequence[bool]) -> CocoMasks:
        """The masks of the instances ``keep`` marks (SanitizeBoundingBoxes' verdict).

        Parameters
        ----------
        keep : sequence of bool
            One per annotation.

        Returns
        -------
        CocoMasks
            The kept ones, in order.
        """
        return CocoMasks([s for s, k in zip(self.segmentations, keep) if k], self.canvas_size)

    def at_plan(self, plan: JointPlan) -> np.ndarray:
        """The (N, H, W) uint8 masks at the plan's output, as v2 makes them from
        pycocotools' full-size masks (NEAREST resize, crop, pad with the mask fill, flip).

        Parameters
        ----------
        plan : JointPlan
            The sample's plan.

        Returns
        -------
        numpy.ndarray
            One mask per annotation.

        Raises
        ------
        ValueError
            A segmentation that is neither polygons nor an RLE (torchvision's message).
        """
        rows, cols = plan.source_indices()
        h, w = self.canvas_size
        out = np.zeros((len(self.segmentations), len(rows), len(cols)), np.uint8)
        for i, seg in enumerate(self.segmentations):
            if isinstance(seg, dict):
                counts = seg["counts"]
                counts = (_native.rle_from_string(counts) if isinstance(counts, (str, bytes))
                          else np.asarray(counts, np.uint32))
                _native.raster_rle(counts, h, w, rows, cols, out[i])
            elif isinstance(seg, list):
                if seg and len(seg[0]) == 4:  # pycocotools reads four numbers as a box
                    x, y, bw, bh = seg[0]
                    seg = [[x, y, x, y + bh, x + bw, y + bh, x + bw, y]]
                _native.raster_polygons(seg, h, w, rows, cols, out[i])
            else:
                raise ValueError(
                    f"COCO segmentation expected to be a dict or a list, got {type(seg)}")
        return plan.fill_mask(out)

    def full(self) -> tv_tensors.Mask:
        """The masks at the image's own size (what torchvision's wrapper makes).

        Returns
        -------
        torchvision.tv_tensors.Mask
            (N, H, W) uint8.
        """
        return tv_tensors.Mask(torch.from_numpy(self.at_plan(JointPlan(*self.canvas_size))))


class CocoDetection(datasets.CocoDetection):
    """``torchvision.datasets.CocoDetection`` with the fused joint path (see the module docstring).

    Parameters
    ----------
    root : str or path-like
        The image folder.
    annFile : str
        The annotation JSON.
    transform, target_transform : callable, optional
        As torchvision's (these run unfused).
    transforms : callable, optional
        A v2 joint chain: fused with :func:`~fastdecode.targets.fuse_joint`.
    exact : bool, default False
        Passed to the fuse: images bit-identical to torchvision's.
    target_keys : sequence of str, optional
        The keys ``wrap_dataset_for_transforms_v2`` puts in the target (as
        its ``target_keys``; default ``image_id``, ``boxes``, ``labels``).
        ``wrap_dataset_for_transforms_v2(ds, target_keys=...)`` itself
        raises for a subclass, so they are given here.
    """

    def __init__(self, root: Any, annFile: str, transform: Optional[Any] = None,
                 target_transform: Optional[Any] = None, transforms: Optional[Any] = None, *,
                 exact: bool = False, target_keys: Optional[Sequence[str]] = None):
        super().__init__(root, annFile, transform, target_transform, transforms)
        if transforms is not None:
            self.transforms = fuse_joint(transforms, exact=exact)
        self.target_keys = target_keys
        self._encoded = False

    def _load_bytes(self, id: int) -> bytes:
        path = self.coco.loadImgs(id)[0]["file_name"]
        with open(os.path.join(self.root, path), "rb") as f:
            return f.read()

    def _load_image(self, id: int) -> PIL.Image.Image:
        return PIL.Image.fromarray(api.decode_image(self._load_bytes(id), mode="RGB"), "RGB")

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """A sample as torchvision's; under the v2 wrapper with a fused
        chain, the encoded bytes and the annotations."""
        if not (self._encoded and self.transforms is None):
            return super().__getitem__(index)
        if not isinstance(index, int):
            raise ValueError(f"Index must be of type integer, got {type(index)} instead.")
        id = self.ids[index]
        return self._load_bytes(id), self._load_target(id)


def coco_target(anns: Sequence[dict], keys: set, canvas_size: tuple[int, int], image_id: Any,
                fused: bool) -> dict[str, Any]:
    """One image's COCO annotations as torchvision's v2 COCO wrapper makes its target.

    Parameters
    ----------
    anns : sequence of dict
        The image's annotation dicts (``bbox`` XYWH, ``category_id``,
        ``segmentation``, ...), in the file's order.
    keys : set of str
        The target keys (``parse_target_keys``' result).
    canvas_size : (int, int)
        (H, W) of the image.
    image_id : object
        The ``image_id`` entry.
    fused : bool
        The masks stay :class:`CocoMasks` (made at the fused call's output);
        False: made at full size, as torchvision's wrapper makes them.

    Returns
    -------
    dict
        ``{'image_id': image_id}`` for an image without annotations (as
        torchvision's); else the ``keys`` asked for: ``boxes`` (XYXY
        ``BoundingBoxes``), ``masks``, ``labels`` (the category ids) and the
        annotations' own fields as lists.
    """
    if not anns:
        return dict(image_id=image_id)
    batched = list_of_dicts_to_dict_of_lists(anns)
    target: dict[str, Any] = {}
    if "image_id" in keys:
        target["image_id"] = image_id
    if "boxes" in keys:
        target["boxes"] = F.convert_bounding_box_format(
            tv_tensors.BoundingBoxes(batched["bbox"], format=tv_tensors.BoundingBoxFormat.XYWH,
                                     canvas_size=canvas_size),
            new_format=tv_tensors.BoundingBoxFormat.XYXY)
    if "masks" in keys:
        masks = CocoMasks(batched["segmentation"], canvas_size)
        target["masks"] = masks if fused else masks.full()
    if "labels" in keys:
        target["labels"] = torch.tensor(batched["category_id"])
    for key in keys - {"image_id", "boxes", "masks", "labels"}:
        target[key] = batched[key]
    return target


def coco_keys(target_keys: Optional[Any]) -> set:
    """``target_keys`` checked as torchvision's COCO wrapper checks them
    (default ``image_id``, ``boxes``, ``labels``; ``'all'``: every key)."""
    return parse_target_keys(target_keys, available=_KEYS,
                             default={"image_id", "boxes", "labels"})


@WRAPPER_FACTORIES.register(CocoDetection)
def _coco_wrapper_factory(dataset: CocoDetection, target_keys):
    """torchvision's COCO wrapper, with the masks deferred when the chain is fused."""
    keys = coco_keys(dataset.target_keys if target_keys is None else target_keys)
    fused = isinstance(dataset.transforms, JointFusedTransform)
    dataset._encoded = True

    def wrapper(idx, sample):
        data, anns = sample
        if isinstance(data, PIL.Image.Image):
            canvas_size = (data.height, data.width)
        else:
            info = api.read_header(data)
            canvas_size = (info.height, info.width)
            if not fused:
                data = PIL.Image.fromarray(api.decode_image(data, mode="RGB"), "RGB")
        return data, coco_target(anns, keys, canvas_size, dataset.ids[idx], fused)

    return wrapper
