"""torchvision's file datasets (Food101, Flowers102, OxfordIIITPet, ...) on the fused path:
the same classes (subclasses), their files decoded fused, their batches in place.

One mechanism, :class:`FileDataset`: a subclass of torchvision's class whose
``_pairs()`` lists the (path, target) of each item from the attributes
torchvision's constructor set (the target exactly as its ``__getitem__``
computes it; a new file dataset costs that one method). Those pairs become
``samples`` and everything after is FastImageFolder's: an item reads the
file, decodes it with the chain fused (``PIL.Image.open(f).convert('RGB')``'s
pixels, the chain's result for the same seed), a batch goes through the
in-place batch path (``datasets/_batch.py``) under DataLoader and FastLoader,
with ``exact=``, ``on_error=``, the limits, ``readahead=`` and ``cache=`` as
FastImageFolder's. Where a configuration's items are not one RGB file and a
plain target (OxfordIIITPet's segmentation masks), ``_pairs()`` is None and
the items are torchvision's own (said once, in a warning). Datasets that open
files without ``convert('RGB')`` (Caltech101/256, CelebA, INaturalist's
default) or return two images (LFWPairs) are not swapped: see
docs/guides/torchvision-datasets.md. Decision record:
docs/decisions/datasets.md ("torchvision's built-in datasets").
"""

# No `from __future__ import annotations`: inspect.signature shows the
# constructors' annotations as objects.
import warnings
from typing import Any, Optional

from torchvision import datasets as tv

from fastdecode._options import DEFAULTS as _D
from fastdecode.api import check_limits
from fastdecode.datasets._arrays import torchvision_signature
from fastdecode.datasets._chain import LiveFused
from fastdecode.datasets._dataset import _FastDataset
from fastdecode.datasets._sample import ON_ERROR

__all__ = ["DTD", "GTSRB", "SUN397", "Country211", "FGVCAircraft", "FileDataset", "Flowers102",
           "Food101", "LFWPeople", "OxfordIIITPet", "Places365", "StanfordCars"]


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
    """A torchvision file dataset on the fused path (the module doc).

    Subclasses put this class first and torchvision's class second, and
    define :meth:`_pairs`. The keywords below are fastdecode's (as
    FastImageFolder's); every other argument is torchvision's.

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
                          "has items that are not one RGB file and a target: they load as "
                          "torchvision loads them, unfused", RuntimeWarning, stacklevel=2)
        self._setup_reads(readahead, cache)

    def _pairs(self) -> Optional[list]:  # pragma: no cover - every subclass has it
        """(path, target) per item, or None when the items are not."""
        raise NotImplementedError

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
