"""The ImageFolder walk: which files torchvision's ImageFolder loads, in its
order, with its class indices; a remote root (the reader factory's
:func:`~fastdecode.storage._readers.is_remote`) is walked from its listing
index. Shared by the datasets and ``fastdecode convert``; torchvision is not
needed to import it. Decision record: docs/decisions/listing.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional, Union

from fastdecode.storage._readers import expand, is_remote

__all__ = ["IMG_EXTENSIONS", "find_classes", "has_file_allowed_extension", "is_image_file",
           "make_dataset"]

# torchvision.datasets.folder.IMG_EXTENSIONS (a test keeps them equal).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def has_file_allowed_extension(filename: str, extensions: Union[str, tuple[str, ...]]) -> bool:
    """True if ``filename`` ends with one of ``extensions`` (lowercase).

    Parameters
    ----------
    filename : str
        A file name or path; compared in lower case.
    extensions : str or tuple of str
        One suffix or several, given in lower case (e.g. ``".jpg"`` or
        ``IMG_EXTENSIONS``).

    Returns
    -------
    bool
        Whether the lower-cased ``filename`` ends with one of them.
    """
    suffixes = extensions if isinstance(extensions, str) else tuple(extensions)
    return filename.lower().endswith(suffixes)


def is_image_file(filename: str) -> bool:
    """True if ``filename`` has one of torchvision's image extensions.

    Parameters
    ----------
    filename : str
        A file name or path; compared in lower case.

    Returns
    -------
    bool
        Whether it ends with one of ``IMG_EXTENSIONS`` (.jpg, .jpeg, .png,
        .ppm, .bmp, .pgm, .tif, .tiff, .webp), as
        ``torchvision.datasets.folder.is_image_file``.
    """
    return has_file_allowed_extension(filename, IMG_EXTENSIONS)


def find_classes(directory: Union[str, Path]) -> tuple[list[str], dict[str, int]]:
    """Class folders of ``directory``, sorted, and their indices (a remote
    URL: from its listing index, see :mod:`fastdecode.storage._remote`).

    Parameters
    ----------
    directory : str or path-like
        The dataset root: each subfolder is a class. A string with ``://``
        (other than ``file://``) is a remote URL.

    Returns
    -------
    classes : list of str
        The subfolder names, sorted.
    class_to_idx : dict of str to int
        Each class's index: its position in ``classes``.

    Raises
    ------
    FileNotFoundError
        ``directory`` has no subfolder (or does not exist).
    OSError
        ``directory`` cannot be listed.
    """
    if is_remote(directory):
        from fastdecode.storage._remote import folder_classes

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
    """(path, class_index) pairs, walked exactly as torchvision walks them.

    Parameters
    ----------
    directory : str or path-like
        The dataset root (``~`` expanded); a string with ``://`` (other than
        ``file://``) is a remote URL, walked from its listing index.
    class_to_idx : dict of str to int, optional
        The classes to collect and their indices; None (the default):
        :func:`find_classes` of ``directory``.
    extensions : str or tuple of str, optional
        The lower-case suffixes of the files to keep. Exactly one of
        ``extensions`` and ``is_valid_file`` must be given.
    is_valid_file : callable, optional
        ``path -> bool``: whether to keep a file.
    allow_empty : bool, default False
        If True, a class with no valid file is allowed; else it raises.

    Returns
    -------
    list of (str, int)
        Each kept file's path and class index: classes in sorted order, each
        class folder walked (symlinks followed) with directories and file
        names sorted.

    Raises
    ------
    ValueError
        ``class_to_idx`` is empty, or ``extensions`` and ``is_valid_file``
        are both given or both None.
    FileNotFoundError
        A class has no valid file (unless ``allow_empty``), or
        ``class_to_idx`` is None and ``directory`` has no class folder.
    """
    directory = expand(directory)
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

    if is_remote(directory):
        from fastdecode.storage._remote import folder_samples

        instances, available = folder_samples(os.fspath(directory), class_to_idx, is_valid_file)
    else:
        instances, available = _walk(directory, class_to_idx, is_valid_file)
    empty = set(class_to_idx) - available
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            listed = extensions if isinstance(extensions, str) else ", ".join(extensions)
            msg += f"Supported extensions are: {listed}"
        raise FileNotFoundError(msg)
    return instances


def _walk(directory: str, class_to_idx: dict[str, int],
          is_valid_file: Callable[[str], bool]) -> tuple[list[tuple[str, int]], set[str]]:
    """The local walk of :func:`make_dataset`: (path, class_index) pairs and
    the classes seen."""
    instances: list[tuple[str, int]] = []
    available: set[str] = set()
    for target_class in sorted(class_to_idx):
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
    return instances, available
