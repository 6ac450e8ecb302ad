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

torchvision's built-in datasets with a one-line swap (``fastdecode.datasets.
CIFAR10`` for ``torchvision.datasets.CIFAR10``...): subclasses of
torchvision's classes whose items and batches take the fused path
(``datasets/_arrays.py``, ``datasets/_tv_files.py``; they need torchvision).
Their two bases, ``ArrayDataset`` and ``FileDataset``, are the one mechanism
a torchvision dataset not listed here is swapped with (a subclass, a method
or two: docs/guides/torchvision-datasets.md, "Adding a dataset").
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
    from fastdecode.datasets._arrays import (
        CIFAR10,
        CIFAR100,
        EMNIST,
        KMNIST,
        MNIST,
        QMNIST,
        STL10,
        SVHN,
        ArrayDataset,
        FashionMNIST,
    )
    from fastdecode.datasets._folder import FastDatasetFolder, FastImageFolder
    from fastdecode.datasets._image_list import FastImageList
    from fastdecode.datasets._tv_files import (
        DTD,
        GTSRB,
        SUN397,
        Caltech101,
        Caltech256,
        CelebA,
        Country211,
        FGVCAircraft,
        FileDataset,
        Flowers102,
        Food101,
        INaturalist,
        LFWPairs,
        LFWPeople,
        OxfordIIITPet,
        Places365,
        StanfordCars,
    )

__all__ = [
    "ArrayDataset",
    "FileDataset",
    "CIFAR10",
    "CIFAR100",
    "Caltech101",
    "Caltech256",
    "CelebA",
    "Country211",
    "DTD",
    "EMNIST",
    "FGVCAircraft",
    "FashionMNIST",
    "Flowers102",
    "Food101",
    "GTSRB",
    "INaturalist",
    "KMNIST",
    "LFWPairs",
    "LFWPeople",
    "MNIST",
    "OxfordIIITPet",
    "Places365",
    "QMNIST",
    "STL10",
    "SUN397",
    "SVHN",
    "StanfordCars",
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
    "ArrayDataset": "fastdecode.datasets._arrays",
    "FileDataset": "fastdecode.datasets._tv_files",
    "CIFAR10": "fastdecode.datasets._arrays",
    "CIFAR100": "fastdecode.datasets._arrays",
    "EMNIST": "fastdecode.datasets._arrays",
    "FashionMNIST": "fastdecode.datasets._arrays",
    "KMNIST": "fastdecode.datasets._arrays",
    "MNIST": "fastdecode.datasets._arrays",
    "QMNIST": "fastdecode.datasets._arrays",
    "STL10": "fastdecode.datasets._arrays",
    "SVHN": "fastdecode.datasets._arrays",
    "Caltech101": "fastdecode.datasets._tv_files",
    "Caltech256": "fastdecode.datasets._tv_files",
    "CelebA": "fastdecode.datasets._tv_files",
    "Country211": "fastdecode.datasets._tv_files",
    "DTD": "fastdecode.datasets._tv_files",
    "FGVCAircraft": "fastdecode.datasets._tv_files",
    "Flowers102": "fastdecode.datasets._tv_files",
    "Food101": "fastdecode.datasets._tv_files",
    "GTSRB": "fastdecode.datasets._tv_files",
    "INaturalist": "fastdecode.datasets._tv_files",
    "LFWPairs": "fastdecode.datasets._tv_files",
    "LFWPeople": "fastdecode.datasets._tv_files",
    "OxfordIIITPet": "fastdecode.datasets._tv_files",
    "Places365": "fastdecode.datasets._tv_files",
    "StanfordCars": "fastdecode.datasets._tv_files",
    "SUN397": "fastdecode.datasets._tv_files",
})
