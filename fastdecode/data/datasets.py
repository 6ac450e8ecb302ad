"""FastImageFolder / FastDatasetFolder: torchvision's ImageFolder contract,
with the decode and the leading transforms fused into one native call.

Swap ``ImageFolder`` for ``FastImageFolder`` and keep the transforms and the
DataLoader: the same classes, samples, targets and (for the same seed) the
same tensors, several times faster (bit-identical with ``exact=True``).
With torchvision installed they are instances of its ImageFolder /
DatasetFolder / VisionDataset; torchvision is not needed to import this.

Importing this module is light (no torchvision, no PIL): the two classes live
in :mod:`fastdecode.data._fast_folder`, imported on first access of their
names here, because with torchvision installed they subclass its classes and
``torchvision.datasets`` imports PIL and tqdm.
"""

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

import numpy as np

from fastdecode import _native
from fastdecode.api import decode_image
from fastdecode.data._batches import _taken_whole  # noqa: F401  (tests reach it here)
from fastdecode.data._folder import (
    IMG_EXTENSIONS,
    find_classes,
    has_file_allowed_extension,
    is_image_file,
    make_dataset,
)
from fastdecode.data._readahead import ReadAheadOptions
from fastdecode.errors import FastDecodeError, file_error

if TYPE_CHECKING:
    from fastdecode.data._fast_folder import FastDatasetFolder, FastImageFolder
    from fastdecode.data._image_list import FastImageList

__all__ = [
    "IMG_EXTENSIONS",
    "ReadAheadOptions",
    "FastDatasetFolder",
    "FastImageFolder",
    "FastImageList",
    "default_loader",
    "find_classes",
    "has_file_allowed_extension",
    "is_image_file",
    "make_dataset",
]

_CLASSES = {"FastDatasetFolder": "_fast_folder", "FastImageFolder": "_fast_folder",
            "FastImageList": "_image_list"}


def __getattr__(name: str) -> Any:
    if name in _CLASSES:
        import importlib

        value = getattr(importlib.import_module(f"fastdecode.data.{_CLASSES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CLASSES))


@contextmanager
def _naming(path: str, index: Optional[int]) -> Iterator[None]:
    """Errors inside become ImageFileErrors (a DecodeError and an OSError)
    naming the file and, for a dataset item, its index."""
    where = "" if index is None else f"sample {index}: "
    try:
        yield
    except FastDecodeError as exc:
        raise file_error(exc, f"{where}{exc.reason}", path) from exc
    except OSError as exc:
        raise file_error(exc, f"{where}cannot read file: {exc.strerror or exc}", path) from exc


def _to_pil(array: np.ndarray) -> Any:
    from PIL import Image

    return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)


def default_loader(path: Union[str, Path]) -> Any:
    """The RGB PIL image of the file at ``path``: what torchvision's
    ``default_loader`` returns (PIL backend), decoded by fastdecode (JPEG and
    BMP natively, other formats through Pillow). Errors are ImageFileErrors.

    Parameters
    ----------
    path : str or path-like
        A local file, read whole. It is decoded with fastdecode's defaults
        (the EXIF orientation is not applied, as PIL's ``Image.open`` does
        not; the ``max_pixels`` and ``max_work_per_byte`` limits hold).

    Returns
    -------
    PIL.Image.Image
        The decoded image, mode 'RGB'.

    Raises
    ------
    ImageFileError
        The file cannot be read (``errno`` set) or decoded;
        :class:`UnsupportedImageFileError` and :class:`ImageFileTooLargeError`
        where the format is not decodable or the image is above the size
        limits. Each names the file (``path``, ``filename``).
    """
    name = os.fspath(path)
    with _naming(name, None):
        return _to_pil(decode_image(_native.read_file(name)))
