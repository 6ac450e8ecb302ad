"""timm's dataset factory loads through fastdecode: one line for train.py/validate.py.

timm's scripts build their datasets with ``timm.data.create_dataset``, which
uses timm's own ``ImageDataset`` for folders (and torchvision's ImageFolder,
imported by name, only for ``--dataset torch/image_folder``), so replacing
``torchvision.datasets.ImageFolder`` changes nothing there. :func:`install`
replaces the two names inside ``timm.data.dataset_factory`` instead, so every
``create_dataset`` call, however it was imported, gets a FastImageFolder:

* run a script unchanged::

      python -m fastdecode.integrations.timm train.py /data/imagenet --model resnet50 ...

* or add one line at the top of your own script::

      import fastdecode.integrations.timm as fd_timm; fd_timm.install()

A folder dataset (``--dataset ''``, timm's default) becomes a
:class:`TimmImageFolder`: timm's own file list and labels (its reader's leaf
folder names, natural sort, extensions and ``--class-map``), so the class
indices are timm's; ``torch/image_folder`` becomes a FastImageFolder
(torchvision's labels, as before). timm's transforms (``create_loader`` sets
``dataset.transform``) run through fastdecode's fused decode; what cannot be
fused runs unfused, and the dataset says so once. Configurations fastdecode
does not serve (``load_bytes``, an ``input_img_mode`` other than RGB, a .tar
root, hfds/tfds/wds readers) stay timm's, with a warning for the folder cases.

:func:`install` also gives timm's prefetcher path (``create_loader(...,
use_prefetcher=True)``) two collates that take FastImageFolder's uint8 batch
as it is: ``timm.data.loader.fast_collate`` hands the batch on without a
zeroed copy, and ``timm.data.FastCollateMixup`` (what train.py builds for
``--mixup``/``--cutmix`` with the prefetcher) mixes it in place
(:func:`fastdecode.augment.mix_batch`'s rules): the same batches, targets and
draws as timm's. Decision records: docs/decisions/datasets.md (timm's
scripts), augment.md ("Batch mixing").
"""

from __future__ import annotations

import os
import runpy
import sys
import warnings
from typing import Any, Callable, Optional

import torch

from fastdecode.augment._mix import fast_collate_mixup
from fastdecode.batching._buffers import note_batch_taken_whole, whole_batch
from fastdecode.datasets import FastImageFolder

__all__ = ["TimmImageFolder", "install", "installed", "main", "uninstall"]

_ORIGINAL: dict[str, Any] = {}
_OPTIONS: dict[str, Any] = {}


class TimmImageFolder(FastImageFolder):
    """A FastImageFolder over timm's folder layout: the samples, labels and
    order of timm's ``ImageDataset`` (its ``ReaderImageFolder``), with
    ImageDataset's ``filename``/``filenames``. Other arguments as
    FastImageFolder's; ``class_map`` and ``input_key`` as timm's reader's."""

    def __init__(self, root: str, *, class_map: Any = None, input_key: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None, exact: bool = False,
                 on_error: str = "raise") -> None:
        self._timm_listing = (class_map, input_key)
        super().__init__(root, transform=transform, target_transform=target_transform,
                         exact=exact, on_error=on_error)

    def find_classes(self, directory: Any) -> tuple[list[str], dict[str, int]]:
        """The classes timm's ImageDataset gives ``directory`` (its reader's leaf
        folder names, or ``class_map``'s); the samples, listed with them, are
        kept for :meth:`make_dataset`.

        Parameters
        ----------
        directory : path-like
            The dataset root.

        Returns
        -------
        (list of str, dict of str to int)
            The class names in index order and the class-to-index mapping.

        Raises
        ------
        RuntimeError
            No image was found (timm's own message).
        """
        from timm.data.readers.class_map import load_class_map
        from timm.data.readers.img_extensions import get_img_extensions
        from timm.data.readers.reader_image_folder import find_images_and_targets

        class_map, input_key = self.__dict__.pop("_timm_listing", (None, None))
        class_to_idx = load_class_map(class_map, directory) if class_map else None
        samples, class_to_idx = find_images_and_targets(
            os.fspath(directory), types=input_key.split(";") if input_key else None,
            class_to_idx=class_to_idx)
        if not samples:  # timm's own message
            raise RuntimeError(
                f"Found 0 images in subfolders of {directory}. "
                f"Supported image extensions are {', '.join(get_img_extensions())}")
        self._timm_samples = samples
        return sorted(class_to_idx, key=class_to_idx.__getitem__), class_to_idx

    def make_dataset(self, directory: Any, class_to_idx: dict[str, int],  # type: ignore[override]
                     extensions: Any = None, is_valid_file: Any = None,
                     allow_empty: bool = False) -> list[tuple[str, int]]:
        """The samples :meth:`find_classes` listed: timm's files, labels and order.

        Parameters
        ----------
        directory, class_to_idx, extensions, is_valid_file, allow_empty
            As FastImageFolder's; not used (timm's listing applies its own).

        Returns
        -------
        list of (str, int)
            (path, class index) per sample.
        """
        return self.__dict__.pop("_timm_samples")

    def filename(self, index: int, basename: bool = False, absolute: bool = False) -> str:
        """The sample's file name as timm's ImageDataset gives it."""
        name = self.samples[index][0]
        if basename:
            return os.path.basename(name)
        return name if absolute else os.path.relpath(name, self.root)

    def filenames(self, basename: bool = False, absolute: bool = False) -> list[str]:
        """Every sample's file name, as :meth:`filename` gives it.

        Parameters
        ----------
        basename : bool, default False
            Only the file's base name.
        absolute : bool, default False
            The path as listed instead of one relative to ``root``.

        Returns
        -------
        list of str
            One per sample, in index order.
        """
        return [self.filename(i, basename, absolute) for i in range(len(self))]


def _image_dataset(root: Any, reader: Any = None, split: str = "train", class_map: Any = None,
                   load_bytes: bool = False, input_img_mode: str = "RGB",
                   transform: Optional[Callable] = None,
                   target_transform: Optional[Callable] = None, **kwargs: Any) -> Any:
    """What timm's factory calls for ImageDataset: a TimmImageFolder for a
    folder of images, timm's ImageDataset for anything else."""
    original = _ORIGINAL["ImageDataset"]
    args = dict(reader=reader, split=split, class_map=class_map, load_bytes=load_bytes,
                input_img_mode=input_img_mode, transform=transform,
                target_transform=target_transform, **kwargs)
    folder = (reader is None or reader == "") and isinstance(root, (str, os.PathLike)) and (
        os.path.isdir(root))
    if not folder:
        return original(root, **args)
    why = ("load_bytes=True" if load_bytes else
           f"input_img_mode={input_img_mode!r}" if input_img_mode != "RGB" else
           f"reader options {sorted(set(kwargs) - {'input_key'})}"
           if set(kwargs) - {"input_key"} else None)
    if why is not None:
        warnings.warn(f"fastdecode.integrations.timm: {why} is timm's own path; this dataset "
                      "loads through timm's ImageDataset, not fastdecode", RuntimeWarning,
                      stacklevel=3)
        return original(root, **args)
    return TimmImageFolder(os.fspath(root), class_map=class_map,
                           input_key=kwargs.get("input_key"), transform=transform,
                           target_transform=target_transform, **_OPTIONS)


def _image_folder(root: Any, **kwargs: Any) -> FastImageFolder:
    """What timm's factory calls for ``torch/image_folder``."""
    return FastImageFolder(root, **kwargs, **_OPTIONS)


def _fast_collate(batch: Any) -> Any:
    """timm's ``fast_collate``; samples that are the rows of one uint8 batch
    (FastImageFolder's) are that batch, handed on without timm's zeroed copy."""
    from torch.utils.data import default_collate

    images = [b[0] for b in batch] if batch and isinstance(batch[0], tuple) else []
    whole = whole_batch(images) if images and isinstance(images[0], torch.Tensor) \
        and images[0].dtype == torch.uint8 else None
    if whole is None:
        from timm.data import loader

        return _ORIGINAL.get("fast_collate", loader.fast_collate)(batch)
    note_batch_taken_whole()
    targets = default_collate([b[1] for b in batch])
    return whole, targets.long() if targets.ndim == 1 else targets


_IN_PLACE: dict[str, type] = {}


def _in_place_mixup() -> type:
    """timm's FastCollateMixup whose 'batch' mode mixes in place (made once,
    timm imported on first use)."""
    if "class" not in _IN_PLACE:
        from timm.data.mixup import FastCollateMixup

        class InPlaceFastCollateMixup(FastCollateMixup):
            """timm's ``FastCollateMixup``; its 'batch' mode mixes the collated
            uint8 batch in place (``fastdecode.augment.MixCollate``), with
            timm's draws, batches and soft targets."""

            def __call__(self, batch: Any, _: Any = None) -> Any:
                return fast_collate_mixup(self, batch)

            def __reduce__(self) -> Any:  # pickled by its state: the class is made lazily
                return _rebuilt_mixup, (dict(self.__dict__),)

        _IN_PLACE["class"] = InPlaceFastCollateMixup
    return _IN_PLACE["class"]


def _rebuilt_mixup(state: dict) -> Any:
    mixup: Any = object.__new__(_in_place_mixup())
    mixup.__dict__.update(state)
    return mixup


def install(*, exact: bool = False, on_error: str = "raise") -> None:
    """Makes ``timm.data.create_dataset`` build fastdecode datasets (folders
    and ``torch/image_folder``), and timm's prefetcher collates take their
    batches as they are (the module doc); ``exact`` and ``on_error`` as
    FastImageFolder's. Calling it again changes the options; :func:`uninstall`
    undoes it."""
    import timm.data
    from timm.data import dataset_factory, loader

    if not _ORIGINAL:
        _ORIGINAL.update(ImageDataset=dataset_factory.ImageDataset,
                         ImageFolder=dataset_factory.ImageFolder,
                         fast_collate=loader.fast_collate,
                         FastCollateMixup=timm.data.FastCollateMixup)
    _OPTIONS.update(exact=exact, on_error=on_error)
    setattr(dataset_factory, "ImageDataset", _image_dataset)  # noqa: B010 (module globals)
    setattr(dataset_factory, "ImageFolder", _image_folder)  # noqa: B010
    setattr(loader, "fast_collate", _fast_collate)  # noqa: B010
    setattr(timm.data, "FastCollateMixup", _in_place_mixup())  # noqa: B010


def installed() -> bool:
    """Whether :func:`install` is in effect (and not undone by :func:`uninstall`).

    Returns
    -------
    bool
    """
    return bool(_ORIGINAL)


def uninstall() -> None:
    """Gives timm's factory its own classes back, and its collates."""
    if not _ORIGINAL:
        return
    import timm.data
    from timm.data import dataset_factory, loader

    setattr(dataset_factory, "ImageDataset", _ORIGINAL.pop("ImageDataset"))  # noqa: B010
    setattr(dataset_factory, "ImageFolder", _ORIGINAL.pop("ImageFolder"))  # noqa: B010
    setattr(loader, "fast_collate", _ORIGINAL.pop("fast_collate"))  # noqa: B010
    setattr(timm.data, "FastCollateMixup", _ORIGINAL.pop("FastCollateMixup"))  # noqa: B010
    _OPTIONS.clear()


def main(argv: Optional[list[str]] = None) -> None:
    """``python -m fastdecode.integrations.timm SCRIPT [ARGS...]``: runs a timm
    script (train.py, validate.py, ...) as ``python SCRIPT ARGS`` would, with
    :func:`install` done first. FASTDECODE_EXACT=1 asks for exact mode."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0] + "\n\nusage: python -m fastdecode.integrations.timm "
              "SCRIPT [ARGS...]")
        return
    install(exact=os.environ.get("FASTDECODE_EXACT", "") == "1")
    script = argv[0]
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` does
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":  # run as -m: use the importable module (its classes pickle by name)
    from fastdecode.integrations.timm import main as _main

    _main()
