"""Which files a read covers, in which order, with which labels: a local
ImageFolder tree as FastImageFolder walks it, other paths and URIs (through
pyarrow's filesystems) as sorted image files. Used by ``fastdecode.ray``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from fastdecode.data._folder import IMG_EXTENSIONS, find_classes, make_dataset

__all__ = ["Listing", "PathsLike", "list_images"]

PathsLike = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]



@dataclass
class Listing:
    """The rows of a read: paths in order, their labels (-1: no class) and
    the filesystem they are on (None: local files)."""

    paths: list[str]
    labels: np.ndarray
    classes: list[str]
    filesystem: Optional[Any] = None


def _is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return os.path.expanduser(path[len("file://"):] if path.startswith("file://") else path)


def _is_image(path: str) -> bool:
    return path.lower().endswith(IMG_EXTENSIONS)


def _has_subfolders(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    with os.scandir(path) as entries:
        return any(e.is_dir() for e in entries)


def list_images(paths: PathsLike, filesystem: Optional[Any] = None) -> Listing:
    """One directory with class folders is an ImageFolder tree: its files in
    FastImageFolder's order with its class indices. Otherwise the image files
    of each path (a directory: all of them, recursively, sorted), label -1."""
    items = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if not items:
        raise ValueError("read_images: no paths given")
    if filesystem is None and not any(map(_is_uri, items)):
        roots = [_local(p) for p in items]
        if len(roots) == 1 and _has_subfolders(roots[0]):
            classes, class_to_idx = find_classes(roots[0])
            samples = make_dataset(roots[0], class_to_idx, extensions=IMG_EXTENSIONS)
            return Listing([p for p, _ in samples], np.array([t for _, t in samples], np.int64),
                           classes)
        found: list[str] = []
        for root in roots:
            if not os.path.isdir(root):
                if not os.path.exists(root):
                    raise FileNotFoundError(f"read_images: no such file or directory: {root}")
                found.append(root)
                continue
            found += sorted(os.path.join(d, f) for d, _, files in os.walk(root, followlinks=True)
                            for f in files if _is_image(f))
        return Listing(found, np.full(len(found), -1, np.int64), [])
    return _list_remote(items, filesystem)


def _list_remote(items: list[str], filesystem: Optional[Any]) -> Listing:
    """URIs through pyarrow's filesystems; a class tree is ordered as
    make_dataset orders a local one (class folders sorted, then each file by
    its folder and name)."""
    import pyarrow.fs as pafs

    resolved = []
    fs: Any = filesystem
    for item in items:
        if filesystem is None:  # each URI names its filesystem; the first one is used
            uri_fs, item = pafs.FileSystem.from_uri(item)
            fs = fs or uri_fs
        resolved.append(item.rstrip("/"))
    infos = fs.get_file_info(resolved)
    if len(resolved) == 1 and infos[0].type == pafs.FileType.Directory:
        top = fs.get_file_info(pafs.FileSelector(resolved[0]))
        classes = sorted(i.base_name for i in top if i.type == pafs.FileType.Directory)
        if classes:
            paths, labels = [], []
            for label, name in enumerate(classes):
                found = fs.get_file_info(pafs.FileSelector(f"{resolved[0]}/{name}",
                                                           recursive=True))
                files = sorted((os.path.dirname(i.path), i.base_name) for i in found
                               if i.type == pafs.FileType.File and _is_image(i.base_name))
                paths += [f"{d}/{b}" for d, b in files]
                labels += [label] * len(files)
            return Listing(paths, np.array(labels, np.int64), classes, fs)
    paths = []
    for item, info in zip(resolved, infos):
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"read_images: no such file or directory: {item}")
        if info.type == pafs.FileType.Directory:
            found = fs.get_file_info(pafs.FileSelector(item, recursive=True))
            paths += sorted(i.path for i in found
                            if i.type == pafs.FileType.File and _is_image(i.base_name))
        else:
            paths.append(item)
    return Listing(paths, np.full(len(paths), -1, np.int64), [], fs)
