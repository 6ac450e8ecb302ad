"""One file into an image, with errors naming it: ``default_loader`` (the RGB PIL
image torchvision's ``default_loader`` returns, decoded by fastdecode) and the
context that turns a decode or read error into an ImageFileError naming the
file and the sample (docs/decisions/datasets.md, "Bad files").
"""

import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

from fastdecode import _native
from fastdecode._decode_paths import DecodePaths, charging
from fastdecode.api import decode_image
from fastdecode.errors import FastDecodeError, file_error

__all__ = ["default_loader"]


@contextmanager
def _naming(path: str, index: Optional[int],
            counts: Optional[DecodePaths] = None) -> Iterator[None]:
    """Errors inside become ImageFileErrors (a DecodeError and an OSError)
    naming the file and, for a dataset item, its index; the decodes inside
    count as ``counts``' (a dataset's decode paths), if given."""
    where = "" if index is None else f"sample {index}: "
    try:
        with nullcontext() if counts is None else charging(counts):
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
