"""FastImageFolder / FastDatasetFolder: torchvision's ImageFolder contract,
with the decode and the leading transforms fused into one native call.

Swap ``ImageFolder`` for ``FastImageFolder`` and keep the transforms and the
DataLoader: the same classes, samples, targets and (for the same seed) the
same tensors, several times faster (bit-identical with ``exact=True``).
With torchvision installed they are instances of its ImageFolder /
DatasetFolder / VisionDataset; torchvision is not needed to import this.

Importing this package is light (no torchvision, no PIL): the dataset classes
are imported on first access of their names here, because with torchvision
installed they subclass its classes and ``torchvision.datasets`` imports PIL
and tqdm. The package's modules and the direction of their imports are in
docs/architecture.md; one batch's path through them is ``datasets/_batch.py``'s
docstring. Decision record: docs/decisions/datasets.md.
"""

from typing import TYPE_CHECKING

from fastdecode._lazy import lazy_attributes
from fastdecode.datasets._loading import default_loader
from fastdecode.storage._folder import (
    IMG_EXTENSIONS,
    find_classes,
    has_file_allowed_extension,
    is_image_file,
    make_dataset,
)
from fastdecode.storage._readahead import ReadAheadOptions

if TYPE_CHECKING:
    from fastdecode.datasets._folder import FastDatasetFolder, FastImageFolder
    from fastdecode.datasets._image_list import FastImageList

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

__getattr__, __dir__ = lazy_attributes(globals(), {
    "FastDatasetFolder": "fastdecode.datasets._folder",
    "FastImageFolder": "fastdecode.datasets._folder",
    "FastImageList": "fastdecode.datasets._image_list",
})
