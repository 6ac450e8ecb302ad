"""The ImageFolder walk: which files torchvision's ImageFolder loads, in its
order, with its class indices. Shared by the datasets and ``fastdecode
convert``; torchvision is not needed to import it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional, Union

__all__ = ["IMG_EXTENSIONS", "find_classes", "has_file_allowed_extension", "is_image_file",
           "make_dataset"]

# torchvision.datasets.folder.IMG_EXTENSIONS (a test keeps them equal).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _is_url(path: object) -> bool:
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def has_file_allowed_extension(filename: str, extensions: Union[str, tuple[str, ...]]) -> bool:
    """True if ``filename`` ends with one of ``extensions`` (lowercase)."""
    suffixes = extensions if isinstance(extensions, str) else tuple(extensions)
    return filename.lower().endswith(suffixes)


def is_image_file(filename: str) -> bool:
    return has_file_allowed_extension(filename, IMG_EXTENSIONS)


def find_classes(directory: Union[str, Path]) -> tuple[list[str], dict[str, int]]:
    """Class folders of ``directory``, sorted, and their indices (a remote
    URL: from its listing index, see :mod:`fastdecode.data._remote`)."""
    if _is_url(directory):
        from fastdecode.data._remote import folder_classes

        return folder_classes(os.fspath(directory))
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: i for i, name in enumerate(classes)}


def make_dataset(
    directory: Union[str, Path],
    class_to_idx: Optional[dict[str, int]] = None,
    extensions: Optional[Union[str, tuple[str, ...]]] = None,
    is_valid_file: Optional[Callable[[str], bool]] = None,
    allow_empty: bool = False,
) -> list[tuple[str, int]]:
    """(path, class_index) pairs, walked exactly as torchvision walks them."""
    if not _is_url(directory):
        directory = os.path.expanduser(directory)
    if class_to_idx is None:
        _, class_to_idx = find_classes(directory)
    elif not class_to_idx:
        raise ValueError("'class_to_index' must have at least one entry to collect any samples.")
    if (extensions is None) == (is_valid_file is None):
        raise ValueError(
            "Both extensions and is_valid_file cannot be None or not None at the same time"
        )
    if extensions is not None:
        def is_valid_file(path: str) -> bool:
            return has_file_allowed_extension(path, extensions)
    assert is_valid_file is not None  # for the type checker: one of the two is set

    instances: list[tuple[str, int]] = []
    available: set[str] = set()
    if _is_url(directory):
        from fastdecode.data._remote import folder_samples

        instances, available = folder_samples(os.fspath(directory), class_to_idx, is_valid_file)
    for target_class in () if _is_url(directory) else sorted(class_to_idx):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if is_valid_file(path):
                    instances.append((path, class_index))
                    available.add(target_class)
    empty = set(class_to_idx) - available
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            listed = extensions if isinstance(extensions, str) else ", ".join(extensions)
            msg += f"Supported extensions are: {listed}"
        raise FileNotFoundError(msg)
    return instances
