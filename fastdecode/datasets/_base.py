"""The base classes of the fast datasets: torchvision's own when importable.

With torchvision, FastDatasetFolder derives from ``torchvision.datasets.
DatasetFolder`` and FastImageFolder from ``ImageFolder`` (and so both from
``VisionDataset``), so code that dispatches on those types accepts them.
Without it, stand-ins with the same constructor, attributes and ``repr`` (what
torchvision's classes do, repeated on purpose) take their place, so the
datasets import and work without torchvision.

Decision record: docs/decisions/datasets.md ("The ImageFolder contract").
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from torch.utils.data import Dataset

__all__ = ["DatasetFolder", "HAVE_TORCHVISION", "ImageFolder", "TV_DEFAULT_LOADER",
           "VisionDataset", "is_pil_loader"]

try:
    from torchvision.datasets import DatasetFolder, ImageFolder, VisionDataset
    from torchvision.datasets.folder import default_loader as _tv_default_loader
    from torchvision.datasets.folder import pil_loader as _tv_pil_loader

    HAVE_TORCHVISION = True
except ImportError:
    HAVE_TORCHVISION = False
    _tv_default_loader = _tv_pil_loader = None

    class _StandardTransform:
        """torchvision's StandardTransform: the transform and the target's."""

        def __init__(self, transform: Optional[Callable] = None,
                     target_transform: Optional[Callable] = None) -> None:
            self.transform = transform
            self.target_transform = target_transform

        def __call__(self, input: Any, target: Any) -> tuple[Any, Any]:
            if self.transform is not None:
                input = self.transform(input)
            if self.target_transform is not None:
                target = self.target_transform(target)
            return input, target

        @staticmethod
        def _format(transform: Callable, head: str) -> list[str]:
            lines = repr(transform).splitlines()
            return [f"{head}{lines[0]}"] + [" " * len(head) + line for line in lines[1:]]

        def __repr__(self) -> str:
            body = [type(self).__name__.lstrip("_")]
            if self.transform is not None:
                body += self._format(self.transform, "Transform: ")
            if self.target_transform is not None:
                body += self._format(self.target_transform, "Target transform: ")
            return "\n".join(body)

    class VisionDataset(Dataset):  # type: ignore[no-redef]
        """Stand-in for torchvision's VisionDataset (same init and repr)."""

        _repr_indent = 4

        def __init__(self, root: Any = None, transforms: Optional[Callable] = None,
                     transform: Optional[Callable] = None,
                     target_transform: Optional[Callable] = None) -> None:
            if isinstance(root, str):
                root = os.path.expanduser(root)
            self.root = root
            separate = transform is not None or target_transform is not None
            if transforms is not None and separate:
                raise ValueError(
                    "Only transforms or transform/target_transform can be passed as argument")
            self.transform = transform
            self.target_transform = target_transform
            if separate:
                transforms = _StandardTransform(transform, target_transform)
            self.transforms = transforms

        def __repr__(self) -> str:
            body = [f"Number of datapoints: {self.__len__()}"]  # type: ignore[attr-defined]
            if self.root is not None:
                body.append(f"Root location: {self.root}")
            body += self.extra_repr().splitlines()
            if getattr(self, "transforms", None) is not None:
                body += [repr(self.transforms)]
            lines = ["Dataset " + type(self).__name__]
            return "\n".join(lines + [" " * self._repr_indent + line for line in body])

        def extra_repr(self) -> str:
            return ""

    class DatasetFolder(VisionDataset):  # type: ignore[no-redef]
        """Stand-in for torchvision's DatasetFolder (a marker base)."""

    class ImageFolder(DatasetFolder):  # type: ignore[no-redef]
        """Stand-in for torchvision's ImageFolder (a marker base)."""


# torchvision's default_loader (ImageFolder's default), or None without torchvision
TV_DEFAULT_LOADER: Optional[Callable[[str], Any]] = _tv_default_loader


def is_pil_loader(loader: Any) -> bool:
    """True when ``loader`` is torchvision's default (PIL) loader, whose
    result fastdecode's own loader reproduces: such a loader keeps the fast
    path. With the accimage backend torchvision's default_loader returns
    accimage images, so it is then treated as a custom loader."""
    if loader is None or loader is _tv_pil_loader:
        return loader is not None
    if loader is _tv_default_loader:
        from torchvision import get_image_backend

        return get_image_backend() == "PIL"
    return False
