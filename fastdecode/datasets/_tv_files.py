"""torchvision's file datasets (Food101, Flowers102, OxfordIIITPet, ...) on the fused path:
the same classes (subclasses), their files decoded fused, their batches in place.

One mechanism, :class:`FileDataset` (``fastdecode.datasets.FileDataset``): a
subclass of torchvision's class whose ``_pairs()`` lists the (path, target) of
each item from the attributes torchvision's constructor set (the target
exactly as its ``__getitem__`` computes it; a new file dataset costs that one
method). Those pairs become ``samples`` and everything after is
FastImageFolder's: an item reads the file, decodes it with the chain fused
(``PIL.Image.open(f).convert('RGB')``'s pixels, the chain's result for the
same seed), a batch goes through the in-place batch path
(``datasets/_batch.py``) under DataLoader and FastLoader, with ``exact=``,
``on_error=``, the limits, ``readahead=`` and ``cache=`` as FastImageFolder's.
Where a configuration's items are not one RGB file and a plain target
(OxfordIIITPet's segmentation masks), ``_pairs()`` is None and the items are
torchvision's own (said once, in a warning). The datasets that open files with
``PIL.Image.open`` and no ``convert('RGB')`` (Caltech101/256, CelebA,
INaturalist with ``loader=None``: :class:`_AsOpened`) keep the file's mode: a
YCbCr/RGB JPEG takes the fused path, a gray JPEG its one channel (fused as
gray pixels), any other file torchvision's way; only a DataLoader batch of RGB
JPEGs takes the batch path. LFWPairs (two images per item) keeps torchvision's
items, said once (docs/guides/torchvision-datasets.md). Decision record:
docs/decisions/datasets.md ("torchvision's built-in datasets").
"""

# No `from __future__ import annotations`: inspect.signature shows the
# constructors' annotations as objects.
import io
import os
import warnings
from typing import Any, Optional

import PIL.Image
import torch
from torchvision import datasets as tv

from fastdecode._options import DEFAULTS as _D
from fastdecode._system import settle_in_worker
from fastdecode.api import check_limits, decode_image, read_header
from fastdecode.batching._seeding import row_seed, seeding_of
from fastdecode.datasets._arrays import torchvision_signature
from fastdecode.datasets._chain import LiveFused
from fastdecode.datasets._dataset import _FastDataset
from fastdecode.datasets._loading import _naming
from fastdecode.datasets._planned import (
    SPAN,
    kept_rngs,
    rng_states,
    seed_rngs,
    set_rng_states,
)
from fastdecode.datasets._sample import ON_ERROR

__all__ = ["DTD", "GTSRB", "SUN397", "Caltech101", "Caltech256", "CelebA", "Country211",
           "FGVCAircraft", "FileDataset", "Flowers102", "Food101", "INaturalist", "LFWPairs",
           "LFWPeople", "OxfordIIITPet", "Places365", "StanfordCars"]


_OURS = """
    exact : bool, default False
        Bit-identical to torchvision (see :func:`~fastdecode.transforms.fuse`).
    on_error : {'raise', 'skip', 'warn'}, default 'raise'
        What a file that cannot be read or decoded does (as FastImageFolder's).
    max_pixels, max_work_per_byte : int or None
        The decode limits of every decode.
    readahead, cache : optional
        As FastImageFolder's ``readahead=`` and ``cache=``.
    """


class FileDataset(_FastDataset):
    """The base of a torchvision file dataset on the fused path: subclass it
    to swap a dataset fastdecode does not list (the module doc).

    A subclass puts this class first and torchvision's class second
    (``class Imagenette(FileDataset, torchvision.datasets.Imagenette)``) and
    defines one method, ``_pairs()``: the (path, target) of each item, in
    order, from the attributes torchvision's constructor set, the target as
    its ``__getitem__`` returns it before ``target_transform`` (or None when
    the items are not one RGB image file each: then they stay torchvision's,
    said in one warning). It is called once, at the end of the constructor;
    the pairs become ``samples``, read and decoded as FastImageFolder's
    (``PIL.Image.open(f).convert('RGB')``'s pixels, the chain fused). The
    constructor's signature and docstring become torchvision's plus the
    keywords below; every other argument is torchvision's.

    Parameters
    ----------
    *args, **kwargs
        torchvision's constructor's arguments (root, split, transform,
        target_transform, download, loader...).
    exact : bool, default False
        Bit-identical to torchvision (see :func:`~fastdecode.transforms.fuse`).
    on_error : {'raise', 'skip', 'warn'}, default 'raise'
        What a file that cannot be read or decoded does (as FastImageFolder's).
    max_pixels, max_work_per_byte : int or None
        The decode limits of every decode.
    readahead, cache : optional
        As FastImageFolder's ``readahead=`` and ``cache=``.

    Raises
    ------
    ValueError
        ``on_error`` is not one of 'raise', 'skip', 'warn'; and whatever
        torchvision's constructor raises (RuntimeError for a missing
        dataset without ``download=True``, ValueError for a bad split...).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if any(c.__module__.startswith("torchvision.") for c in cls.__mro__):
            torchvision_signature(cls, FileDataset, _OURS)

    def __init__(self, *args: Any, exact: bool = False, on_error: str = "raise",
                 max_pixels: Optional[int] = _D["max_pixels"],
                 max_work_per_byte: Optional[int] = _D["max_work_per_byte"],
                 readahead: Any = None, cache: Any = None, **kwargs: Any) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.on_error = on_error
        self.skipped = 0
        self._live = LiveFused(bool(exact), check_limits(max_pixels, max_work_per_byte))
        super().__init__(*args, **kwargs)  # torchvision's constructor, next in the MRO
        pairs = self._pairs()
        self.__dict__["samples"] = None if pairs is None else list(pairs)
        if pairs is None:
            warnings.warn(f"fastdecode: {type(self).__name__} as configured ({self.extra_repr()}) "
                          "has items that are not one image file and a plain target: they load as "
                          "torchvision loads them, unfused", RuntimeWarning, stacklevel=2)
        self._setup_reads(readahead, None if pairs is None else cache)

    def _pairs(self) -> Optional[list]:  # pragma: no cover - every subclass has it
        """(path, target) per item, or None when the items are not."""
        raise NotImplementedError

    # torchvision's own items (no samples): no batch path, no split, nothing to read ahead

    def _batch_fused(self) -> Any:
        return None if self.samples is None else super()._batch_fused()

    def _plan_batch(self, indices: list[int], seed: int, keys: Optional[list[int]] = None) -> Any:
        return None if self.samples is None else super()._plan_batch(indices, seed, keys)

    def _read_ahead(self, indices: Any) -> None:
        if self.samples is not None:
            super()._read_ahead(indices)

    def _torchvision(self) -> Any:
        """torchvision's class this one derives from."""
        return next(c for c in type(self).__mro__ if c.__module__.startswith("torchvision."))

    def __len__(self) -> int:
        if self.samples is None:
            return self._torchvision().__len__(self)
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if self.samples is None:
            return self._torchvision().__getitem__(self, index)
        return super().__getitem__(index)

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: FastImageFolder's batch path
        (``datasets/_batch.py``), or torchvision's items one by one."""
        if self.samples is None:
            return [self[i] for i in indices]
        return super().__getitems__(indices)


class _FilesAndLabels(FileDataset):
    """The datasets that keep ``_image_files`` and ``_labels``."""

    def _pairs(self) -> Optional[list]:
        return list(zip(self._image_files, self._labels))


class Food101(_FilesAndLabels, tv.Food101):
    """torchvision's ``Food101`` on the fused path (:class:`FileDataset`)."""


class Flowers102(_FilesAndLabels, tv.Flowers102):
    """torchvision's ``Flowers102`` on the fused path (:class:`FileDataset`)."""


class DTD(_FilesAndLabels, tv.DTD):
    """torchvision's ``DTD`` on the fused path (:class:`FileDataset`)."""


class FGVCAircraft(_FilesAndLabels, tv.FGVCAircraft):
    """torchvision's ``FGVCAircraft`` on the fused path (:class:`FileDataset`)."""


class SUN397(_FilesAndLabels, tv.SUN397):
    """torchvision's ``SUN397`` on the fused path (:class:`FileDataset`)."""


class StanfordCars(FileDataset, tv.StanfordCars):
    """torchvision's ``StanfordCars`` on the fused path (:class:`FileDataset`)."""

    def _pairs(self) -> Optional[list]:
        return list(self._samples)


class GTSRB(FileDataset, tv.GTSRB):
    """torchvision's ``GTSRB`` on the fused path (:class:`FileDataset`)."""

    def _pairs(self) -> Optional[list]:
        return list(self._samples)


class Places365(FileDataset, tv.Places365):
    """torchvision's ``Places365`` on the fused path (:class:`FileDataset`)."""

    def _pairs(self) -> Optional[list]:
        return list(self.imgs)


class Country211(FileDataset, tv.Country211):
    """torchvision's ``Country211`` (an ImageFolder) on the fused path
    (:class:`FileDataset`)."""

    def _pairs(self) -> Optional[list]:
        return list(self.samples)


class LFWPeople(FileDataset, tv.LFWPeople):
    """torchvision's ``LFWPeople`` on the fused path (:class:`FileDataset`)."""

    def _pairs(self) -> Optional[list]:
        self.loader = self._loader  # (LFW's name for it): a custom loader is called as it is
        return list(zip(self.data, self.targets))


class OxfordIIITPet(FileDataset, tv.OxfordIIITPet):
    """torchvision's ``OxfordIIITPet`` on the fused path
    (:class:`FileDataset`); with a 'segmentation' target its items are
    torchvision's own (the mask is a second image)."""

    def _pairs(self) -> Optional[list]:
        if "segmentation" in self._target_types:
            return None
        pairs = []
        for i, image in enumerate(self._images):
            target: Any = [self._labels[i] if t == "category" else self._bin_labels[i]
                           for t in self._target_types]
            pairs.append((image, None if not target else
                          target[0] if len(target) == 1 else tuple(target)))
        return pairs


class LFWPairs(FileDataset, tv.LFWPairs):
    """torchvision's ``LFWPairs``, not swapped: an item is two images and a
    target, not one file (:class:`FileDataset`'s unit), so its items are
    torchvision's own, unfused (said in one warning at construction)."""

    def _pairs(self) -> Optional[list]:
        self.loader = self._loader  # as LFWPeople's (torchvision's items call ``_loader``)
        return None


def _rgb_jpeg(info: Any) -> bool:
    """Whether a file's header is a JPEG that Pillow opens as an RGB image."""
    return info.format == "jpeg" and info.channels == 3 and info.color_space in ("ycbcr", "rgb")


class _AsOpened(FileDataset):
    """The datasets whose ``__getitem__`` opens the file with
    ``PIL.Image.open`` and no ``convert('RGB')``: the chain sees the file's
    own mode. The decoder's header says which: a YCbCr or RGB JPEG (an RGB
    image there) takes the fused path as FileDataset's; a gray JPEG (an L
    image there) is decoded to its one channel and fused as gray pixels
    (``fuse`` keeps one channel, as torchvision keeps the L image: (1, H, W)
    after ToTensor); any other file (CMYK, another format) is opened by
    Pillow and the chain runs on it unfused, as torchvision runs it (warned
    once). An item's channel count is its file's, so there is no fixed sample
    shape (FastLoader's rings, ``threads=N``'s split: items whole); a
    DataLoader batch of RGB JPEGs only takes the batch path. A ``loader``
    (INaturalist's) is torchvision's way."""

    def _target_of(self, index: int, stored: Any) -> Any:
        """The target of item ``index`` (``stored``: its pair's second entry)."""
        return stored

    def _converts(self) -> bool:
        """Whether a ``loader`` is given (INaturalist's): then FileDataset's
        way throughout (``default_loader`` converts to RGB)."""
        return self.__dict__.get("loader") is not None

    def _batch_fused(self) -> Any:
        # each file's mode decides its channels: no fixed sample shape
        return super()._batch_fused() if self._converts() else None

    def _plan_batch(self, indices: list[int], seed: int,
                    keys: Optional[list[int]] = None) -> Any:
        # threads=N: items whole in the pool (FastLoader says so once)
        return super()._plan_batch(indices, seed, keys) if self._converts() else None

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: a batch whose files are all YCbCr/RGB
        JPEGs (their headers read first) takes the in-place batch path when
        the chain fixes the output size; any other batch, item by item (its
        files read again), as is a batch with a file that fails to decode
        under ``on_error='skip'``/``'warn'`` (the draws made again). Under
        ``FastLoader(resumable=True)`` each item is drawn under its
        position's seed (FastImageFolder's planned slot's)."""
        if self._converts():
            return super().__getitems__(indices)
        settle_in_worker()
        seeded = seeding_of(indices)
        if seeded is not None:
            items = []
            for key, index in zip(seeded[1], indices):
                with kept_rngs():
                    seed_rngs(row_seed(seeded[0], key * SPAN))
                    items.append(self[index])
            return items
        fused: Any = super()._batch_fused()  # FusedChain's: the plan's fixed shape
        files = None if fused is None else self._rgb_files(indices)
        if files is None:
            return [self[i] for i in indices]
        shape = (len(files), *fused.output_shape)
        buffers = self._batch_buffers()
        table = fused.tensor_table is not None
        pixels = buffers.get("pixels" if table else "batch", shape, torch.uint8, leaves=not table)
        slots = pixels.numpy()
        targets = []
        saved = None if self.on_error == "raise" else rng_states()
        try:
            for k, (index, path, data) in enumerate(files):  # torchvision's order: image, target
                with _naming(path, index, self._decode_paths()):
                    fused.decode_into(data, slots[k])
                target = self._target_of(index, self.samples[index][1])
                targets.append(target if self.target_transform is None
                               else self.target_transform(target))
        except Exception:
            if saved is None:
                raise
            set_rng_states(saved)  # on_error's replacements: item by item, drawn afresh
            return [self[i] for i in indices]
        batch = (fused.finish(pixels, out=buffers.get("batch", shape, fused.result_dtype))
                 if table else fused.finish(pixels))
        return list(zip(buffers.rows(batch), targets))

    def _rgb_files(self, indices: list[int]) -> Optional[list[tuple[int, str, Any]]]:
        """(index, path, bytes) of each sample when every file is a YCbCr or
        RGB JPEG, else None (a file that cannot be read: its item says so)."""
        n = len(self)
        files = []
        with self._prefetch(indices):
            for i in indices:
                index = range(n)[i]
                path = os.fspath(self.samples[index][0])
                try:
                    data = self._read(path, index)
                    info = read_header(data)
                except Exception:  # noqa: BLE001 - the item path raises it under on_error
                    return None
                if not _rgb_jpeg(info):
                    return None
                files.append((index, path, data))
        return files

    def _load(self, index: int) -> tuple[Any, Any]:
        if self._converts():
            return super()._load(index)  # default_loader converts to RGB, as FileDataset's
        path, stored = self.samples[index]
        target = self._target_of(index, stored)
        path = os.fspath(path)
        transform = self.transform
        with _naming(path, index, self._decode_paths()):
            data = self._read(path, index)
            if transform is None:  # torchvision's item: the image as opened
                return PIL.Image.open(io.BytesIO(data)), target
            info = read_header(data)
            if _rgb_jpeg(info):
                return self._live.get(transform)(data), target
            if info.format == "jpeg" and info.channels == 1 and info.color_space == "gray":
                gray = decode_image(data, mode="L", **self._live.limits)
                return self._live.get(transform)(gray), target
            image = PIL.Image.open(io.BytesIO(data))
        key = ("as opened", info.format, info.color_space)
        if key not in self._live.warned:
            self._live.warned.add(key)
            warnings.warn(f"fastdecode: {type(self).__name__} opens {os.path.basename(path)} "
                          f"({info.format}, {info.color_space}) as a {image.mode} image, as "
                          "torchvision does: the chain runs on it unfused", RuntimeWarning,
                          stacklevel=5)
        return transform(image), target


class Caltech101(_AsOpened, tv.Caltech101):
    """torchvision's ``Caltech101`` on the fused path, each file in its own
    mode (``_AsOpened``); with an 'annotation' target its items are
    torchvision's own."""

    def _pairs(self) -> Optional[list]:
        if "annotation" in self.target_type or not self.target_type:
            return None
        folder = os.path.join(self.root, "101_ObjectCategories")
        return [(os.path.join(folder, self.categories[y], f"image_{k:04d}.jpg"),
                 y if len(self.target_type) == 1 else tuple(y for _ in self.target_type))
                for k, y in zip(self.index, self.y)]


class Caltech256(_AsOpened, tv.Caltech256):
    """torchvision's ``Caltech256`` on the fused path, each file in its own
    mode (``_AsOpened``)."""

    def _pairs(self) -> Optional[list]:
        folder = os.path.join(self.root, "256_ObjectCategories")
        return [(os.path.join(folder, self.categories[y], f"{y + 1:03d}_{k:04d}.jpg"), y)
                for k, y in zip(self.index, self.y)]


class CelebA(_AsOpened, tv.CelebA):
    """torchvision's ``CelebA`` on the fused path, each file in its own mode
    (``_AsOpened``); the targets are torchvision's, made per item."""

    def _pairs(self) -> Optional[list]:
        folder = os.path.join(self.root, self.base_folder, "img_align_celeba")
        return [(os.path.join(folder, name), i) for i, name in enumerate(self.filename)]

    def _target_of(self, index: int, stored: Any) -> Any:
        rows = {"attr": self.attr, "identity": self.identity, "bbox": self.bbox,
                "landmarks": self.landmarks_align}
        target: Any = []
        for t in self.target_type:
            if t not in rows:
                raise ValueError(f'Target type "{t}" is not recognized.')
            target.append(self.identity[index, 0] if t == "identity" else rows[t][index, :])
        return (tuple(target) if len(target) > 1 else target[0]) if target else None


class INaturalist(_AsOpened, tv.INaturalist):
    """torchvision's ``INaturalist`` on the fused path: with ``loader=None``
    each file in its own mode (``_AsOpened``), with torchvision's
    ``default_loader`` in RGB (FileDataset's path), a custom ``loader`` called
    as torchvision calls it."""

    def _pairs(self) -> Optional[list]:
        pairs = []
        for cat_id, name in self.index:
            target: Any = [cat_id if t == "full" else self.categories_map[cat_id][t]
                           for t in self.target_type]
            pairs.append((os.path.join(self.root, self.all_categories[cat_id], name),
                          tuple(target) if len(target) > 1 else target[0]))
        return pairs
