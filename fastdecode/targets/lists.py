"""DetectionList: image files listed with COCO-style annotations, through the fused joint chain.

The file-list form of :class:`~fastdecode.targets.CocoDetection`, as
:class:`fastdecode.datasets.FastImageList` is ImageFolder's: the samples are
(path, annotations) pairs given in memory or read from a JSON manifest (a
COCO file, or a list of ``{path, annotations}`` objects), and each item is
what torchvision's ``CocoDetection`` under ``wrap_dataset_for_transforms_v2``
makes of that image and those annotations (boxes XYXY, labels the category
ids, masks from polygons or RLE), after the v2 chain, fused: the crop decoded
once, masks made at the output (docs/decisions/detection.md, "The file-list
form"). :func:`collate` and :func:`segmentation_collate` are the detection
and segmentation references' ``utils.collate_fn``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence, Union

import PIL.Image
import torch

from fastdecode import api
from fastdecode._options import DEFAULTS as _D
from fastdecode.targets.coco import coco_keys, coco_target
from fastdecode.targets.joint import fuse_joint

__all__ = ["DetectionList", "collate", "segmentation_collate"]

PathLike = Union[str, os.PathLike]


def collate(batch: Sequence[Any]) -> tuple:
    """torchvision's detection references' ``utils.collate_fn``:
    ``tuple(zip(*batch))``, the images and the targets each a tuple (their
    sizes and instance counts differ from sample to sample).

    Parameters
    ----------
    batch : sequence of (image, target)
        The samples of one batch.

    Returns
    -------
    tuple
        ``(images, targets)``, each a tuple in sample order.

    Raises
    ------
    TypeError
        A sample that is not a sequence (an ``(image, target)`` pair).
    """
    return tuple(zip(*batch))


def segmentation_collate(batch: Sequence[Any]) -> tuple:
    """torchvision's segmentation references' ``utils.collate_fn``: the images
    and the label maps each stacked into one tensor of the batch's largest
    size, images padded with 0 and labels with 255 (``cat_list``).

    Parameters
    ----------
    batch : sequence of (image, label)
        The samples of one batch: (C, H, W) images and (..., H, W) labels.

    Returns
    -------
    tuple
        ``(images, labels)``, two tensors.

    Raises
    ------
    ValueError
        An empty batch, or a sample that is not an ``(image, label)`` pair.
    """
    images, labels = zip(*batch)
    return _padded(images, 0), _padded(labels, 255)


def _padded(items: Sequence[torch.Tensor], fill: int) -> torch.Tensor:
    size = tuple(max(s) for s in zip(*[item.shape for item in items]))
    out = items[0].new_full((len(items),) + size, fill)
    for item, pad in zip(items, out):
        pad[..., : item.shape[-2], : item.shape[-1]].copy_(item)
    return out


class DetectionList(torch.utils.data.Dataset):
    """Image files, each with its COCO-style annotations, as torchvision's
    wrapped ``CocoDetection`` makes their samples (see the module docstring).

    Each target is the image's list of COCO annotation dicts: ``bbox``
    (XYWH), ``category_id``, and as the keys ask, ``segmentation``
    (polygons, or an RLE compressed or not), ``iscrowd``, ``area``. An item
    is ``(image, target)``: with ``transforms``, what the chain returns on
    torchvision's wrapped sample (the image decoded once, only the crop it
    keeps; ``exact=True``: the image bit for bit torchvision's); without,
    an RGB PIL image and the target with full-size masks. An image without
    annotations has the target ``{'image_id': id}``, as torchvision's.
    Files are local (``~`` expanded); one that cannot be read raises the
    OSError that names it.

    Parameters
    ----------
    samples : sequence of (path, annotations), optional
        The files and their annotation lists. Exactly one of ``samples``
        and ``paths`` is given.
    transforms : callable, optional
        A v2 joint chain (``presets.detection(...)``), fused with
        :func:`~fastdecode.targets.fuse_joint`.
    paths : sequence of path-like, optional
        The files, with ``targets``.
    targets : sequence of list of dict, optional
        One annotation list per path (the same length); None: no
        annotations. Used with ``paths`` only.
    root : str or path-like, optional
        The folder relative paths are under (absolute paths are kept).
    ids : sequence, optional
        Each sample's ``image_id`` (default: its index).
    classes : sequence of str, optional
        The category names, kept as ``classes`` (the labels are the
        annotations' ``category_id`` either way).
    exact : bool, default False
        Passed to the fuse.
    target_keys : sequence of str or 'all', optional
        The target's keys, as ``wrap_dataset_for_transforms_v2``'s for
        COCO (default ``image_id``, ``boxes``, ``labels``).
    max_pixels, max_work_per_byte : int or None, optional
        The limits of every decode, as :func:`fastdecode.decode_image`'s.

    Attributes
    ----------
    samples : list of (str, list)
        The (path, annotations) pairs, paths joined with ``root``.
    ids : list
        Each sample's ``image_id``.

    Raises
    ------
    ValueError
        Both or neither of ``samples`` and ``paths``; ``targets`` or
        ``ids`` of another length than the files; an unknown target key.
    TypeError
        A target that is not a list of annotation dicts.
    """

    def __init__(self, samples: Optional[Sequence[tuple[PathLike, Any]]] = None,
                 transforms: Optional[Any] = None, *,
                 paths: Optional[Sequence[PathLike]] = None,
                 targets: Optional[Sequence[Any]] = None, root: Optional[PathLike] = None,
                 ids: Optional[Sequence[Any]] = None, classes: Optional[Sequence[str]] = None,
                 exact: bool = False, target_keys: Optional[Any] = None,
                 max_pixels: Optional[int] = _D["max_pixels"],
                 max_work_per_byte: Optional[int] = _D["max_work_per_byte"]) -> None:
        if (samples is None) == (paths is None):
            raise ValueError("DetectionList takes samples, or paths (with targets), not both")
        if samples is not None:
            pairs = [(os.fspath(p), t) for p, t in samples]
        else:
            assert paths is not None
            anns = [[] for _ in paths] if targets is None else list(targets)
            if len(anns) != len(paths):
                raise ValueError(f"DetectionList: {len(paths)} paths but {len(anns)} targets")
            pairs = list(zip((os.fspath(p) for p in paths), anns))
        base = None if root is None else os.path.expanduser(os.fspath(root))
        self.samples: list[tuple[str, list]] = []
        for path, target in pairs:
            if not isinstance(target, (list, tuple)) or not all(isinstance(a, dict)
                                                                 for a in target):
                raise TypeError(f"{path}: a target is a list of COCO annotation dicts, got "
                                f"{type(target).__name__}")
            path = os.path.expanduser(path)
            self.samples.append((path if base is None else os.path.join(base, path),
                                 list(target)))
        self.ids = list(range(len(self.samples))) if ids is None else list(ids)
        if len(self.ids) != len(self.samples):
            raise ValueError(f"DetectionList: {len(self.samples)} files but {len(self.ids)} ids")
        self.classes = [] if classes is None else list(classes)
        self.keys = coco_keys(target_keys)
        self.transforms = None if transforms is None else fuse_joint(
            transforms, exact=exact, max_pixels=max_pixels, max_work_per_byte=max_work_per_byte)
        self.max_pixels, self.max_work_per_byte = max_pixels, max_work_per_byte

    @classmethod
    def from_json(cls, manifest: PathLike, transforms: Optional[Any] = None, *,
                  root: Optional[PathLike] = None, path_key: str = "path",
                  target_key: str = "annotations", **kwargs: Any) -> "DetectionList":
        """The files a JSON manifest names, with their annotations: a COCO
        file (``images`` of ``{id, file_name}``, ``annotations`` with
        ``image_id``, ``categories``): one sample per image in the file's
        order, its annotations in the file's order, ``ids`` the image ids,
        ``classes`` the category names in id order (as
        :meth:`fastdecode.datasets.FastImageList.from_json` lists it); or a
        list of objects with ``path_key`` and ``target_key`` (an object
        without ``target_key``: no annotations).

        Parameters
        ----------
        manifest : str or path-like
            The JSON file (UTF-8).
        transforms : callable, optional
            As the constructor's.
        root : str or path-like, optional
            The folder relative paths are under; None: the manifest's folder.
        path_key, target_key : str, default 'path', 'annotations'
            The keys of each object's path and annotation list (list
            manifests).
        **kwargs
            The constructor's other keywords (``exact``, ``target_keys``, ...).

        Returns
        -------
        DetectionList
            The dataset, in the file's order.

        Raises
        ------
        OSError
            The manifest cannot be read.
        ValueError
            The JSON is invalid, or neither a list nor a dict with ``images``.
        KeyError
            A COCO image without ``id`` or ``file_name``, or an object
            without ``path_key``.
        """
        name = os.fspath(manifest)
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
        base = os.path.dirname(os.path.abspath(name)) if root is None else root
        if isinstance(data, dict) and "images" in data:
            images = data["images"]
            per_image: dict[Any, list] = {im["id"]: [] for im in images}
            for ann in data.get("annotations") or []:
                if ann.get("image_id") in per_image:
                    per_image[ann["image_id"]].append(ann)
            cats = sorted(data.get("categories") or [], key=lambda c: c["id"])
            return cls([(im["file_name"], per_image[im["id"]]) for im in images], transforms,
                       root=base, ids=[im["id"] for im in images],
                       classes=[c["name"] for c in cats], **kwargs)
        if not isinstance(data, list):
            raise ValueError(f"{name}: a JSON manifest is a list of {{{path_key!r}, "
                             f"{target_key!r}}} objects or a COCO file with 'images'")
        return cls([(item[path_key], item.get(target_key, [])) for item in data], transforms,
                   root=base, **kwargs)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """(image, target) of sample ``index`` (the class docstring)."""
        path, anns = self.samples[index]
        with open(path, "rb") as f:
            data = f.read()
        info = api.read_header(data)
        canvas = (info.height, info.width)
        if self.transforms is None:
            image = PIL.Image.fromarray(api.decode_image(
                data, mode="RGB", max_pixels=self.max_pixels,
                max_work_per_byte=self.max_work_per_byte), "RGB")
            return image, coco_target(anns, self.keys, canvas, self.ids[index], False)
        return self.transforms(data, coco_target(anns, self.keys, canvas, self.ids[index], True))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} images, keys={sorted(self.keys)}, "
                f"transforms={self.transforms!r})")
