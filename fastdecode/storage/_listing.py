"""Which files a read covers, in which order, with which labels.

:func:`list_images` (``fastdecode.ray``): a local ImageFolder tree as
FastImageFolder walks it, other paths and URIs (through pyarrow's
filesystems) as sorted image files. :func:`folder_listing`:
FastDatasetFolder's own listing of a local tree, the files torchvision's
``make_dataset`` gives, in its order, walked on bytes into a
:class:`~fastdecode.storage._samples.SampleStore`; a tree of
:data:`INDEX_MIN_FILES` files or more (or any listed with
``refresh_index=True``) is kept as an index file,
``cache_dir()/index/local-<key>.npz``, with the (mtime, inode) of every
folder walked. Re-opening the root stats those folders and reads the file;
a folder changed, or changed within :data:`RACY_NS` of the walk, makes the
index stale: the tree is walked again and the index rewritten.
``refresh_index=True`` walks again whatever the mtimes say. Decision record:
docs/decisions/listing.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from fastdecode._atomic import AtomicFile
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset
from fastdecode.storage._readers import remote_paths
from fastdecode.storage._remote_index import cache_dir
from fastdecode.storage._samples import SampleStore

__all__ = ["FolderListing", "INDEX_MIN_FILES", "Listing", "PathsLike", "folder_listing",
           "index_path", "list_images"]

PathsLike = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]



@dataclass
class Listing:
    """The rows of a read: paths in order, their labels (-1: no class) and
    the filesystem they are on (None: local files)."""

    paths: list[str]
    labels: np.ndarray
    classes: list[str]
    filesystem: Optional[Any] = None


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
    if filesystem is None and not remote_paths(items):
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


# -- FastDatasetFolder's local listing and its index --------------------------

INDEX_MIN_FILES = 20_000  # a tree this large is kept as an index (walking it: ~30 ms)
RACY_NS = 2_000_000_000  # a folder changed this close to the walk is not trusted
_INDEX_VERSION = 1
_STORE_ARRAYS = ("folders", "folder_offsets", "folder_index", "names", "offsets", "targets")


@dataclass
class FolderListing:
    """A local tree's classes and samples, and where they came from
    (``source``: 'walked', 'index', or 'stale index' when the index was
    found out of date and the tree walked again)."""

    classes: list[str]
    class_to_idx: dict[str, int]
    store: SampleStore
    targets: list[int]
    source: str
    index_file: Optional[str]


def index_path(root: Union[str, os.PathLike], extensions: Sequence[str]) -> str:
    """The index file of the local tree ``root`` listed with ``extensions``."""
    text = json.dumps([_INDEX_VERSION, "local", os.fspath(root),
                       os.path.abspath(os.fspath(root)), list(extensions)])
    key = hashlib.sha256(text.encode()).hexdigest()[:32]
    return os.path.join(cache_dir(), "index", f"local-{key}.npz")


def folder_listing(root: Union[str, os.PathLike], extensions: Union[str, Sequence[str]],
                   allow_empty: bool = False, refresh: bool = False) -> FolderListing:
    """``find_classes`` + ``make_dataset(root, class_to_idx, extensions)`` of
    a local tree, from its index when it is fresh (module doc): the same
    classes, paths, order and targets as torchvision's, and its errors."""
    exts = (extensions,) if isinstance(extensions, str) else tuple(extensions)
    path = index_path(root, exts)
    source = "walked"
    if not refresh:
        loaded = _load_local(path, root)
        if isinstance(loaded, FolderListing):
            _check_empty(loaded.classes, loaded.store.target_array, exts, allow_empty)
            return loaded
        source = loaded
    started = time.time_ns()
    top = os.fsencode(root)
    folders: list[tuple[bytes, int, int]] = [(top, *_stamp(top))]  # every folder walked
    classes, class_to_idx = find_classes(os.fspath(root))
    store, counts = _walk(os.fspath(root), classes, exts, folders)
    _check_empty(classes, None, exts, allow_empty, counts)
    targets: list[int] = []
    for name, count in zip(classes, counts):
        targets += [class_to_idx[name]] * count
    written = None
    if refresh or source == "stale index" or len(store) >= INDEX_MIN_FILES:
        written = _save_local(path, root, classes, store, folders, started)
    return FolderListing(classes, class_to_idx, store, targets, source, written)


def _stamp(path: bytes) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return -1, -1
    return st.st_mtime_ns, st.st_ino


def _walk(root: str, classes: list[str], exts: tuple[str, ...],
          folders: list[tuple[bytes, int, int]]) -> tuple[SampleStore, list[int]]:
    """make_dataset's walk: per class (sorted), ``os.walk(followlinks=True)``
    sorted by folder, each folder's files sorted, kept when
    ``path.lower().endswith(exts)``; on bytes while a folder's names are
    ASCII (the same order and the same test as on str), on str otherwise."""
    ascii_exts = all(e.isascii() and "/" not in e for e in exts)
    bexts = tuple(e.encode("ascii") for e in exts) if ascii_exts else ()
    # one count per extension finds how many names end with one of them,
    # unless an extension ends another (".tif" in "x.tiff" is no suffix, "f" is)
    disjoint = ascii_exts and not any(a != b and a.endswith(b) for a in bexts for b in bexts)
    prefixes: list[bytes] = []
    index_runs: list[int] = []
    names: list[bytes] = []
    counts = []
    for target_class in classes:
        found = 0
        target_dir = os.path.join(root, target_class)
        if not os.path.isdir(target_dir):
            counts.append(0)
            continue
        groups: list[tuple[str, bytes, list[bytes]]] = []
        _walk_folder(os.fsencode(target_dir), groups, folders)
        groups.sort(key=lambda g: g[0])  # sorted(os.walk(...)): by the folder's str
        for _, top, files in groups:
            if bexts and (b"/".join(files)).isascii():
                files.sort()
                if disjoint:
                    lowered = (b"/".join(files) + b"/").lower()
                    if sum(lowered.count(e + b"/") for e in bexts) != len(files):
                        files = [f for f in files if f.lower().endswith(bexts)]
                else:
                    files = [f for f in files if f.lower().endswith(bexts)]
            else:  # str's order and lower(): decode, as os.walk gives them
                decoded = sorted((os.fsdecode(f), f) for f in files)
                prefix = os.fsdecode(top)
                files = [f for s, f in decoded if os.path.join(prefix, s).lower().endswith(exts)]
            if files:
                prefixes.append(os.path.join(top, b""))
                index_runs.append(len(files))
                names += files
                found += len(files)
        counts.append(found)
    folder_index = np.repeat(np.arange(len(prefixes)), index_runs)
    targets = np.repeat(np.arange(len(classes)), counts)
    return SampleStore.from_folders(prefixes, folder_index, names, targets), counts


def _walk_folder(top: bytes, groups: list[tuple[str, bytes, list[bytes]]],
                 folders: list[tuple[bytes, int, int]]) -> None:
    """os.walk(top, followlinks=True) as (str key, folder, file names)."""
    folders.append((top, *_stamp(top)))  # before the names: a change while read shows
    try:
        with os.scandir(top) as it:
            entries = list(it)
    except OSError:  # os.walk skips a folder it cannot list
        return
    subdirs: list[bytes] = []
    files: list[bytes] = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        (subdirs if is_dir else files).append(entry.name)
    groups.append((os.fsdecode(top), top, files))
    for name in subdirs:
        _walk_folder(os.path.join(top, name), groups, folders)


def _check_empty(classes: list[str], targets: Optional[np.ndarray], exts: tuple[str, ...],
                 allow_empty: bool, counts: Optional[list[int]] = None) -> None:
    if allow_empty:
        return
    if counts is None:
        assert targets is not None
        counts = np.bincount(targets, minlength=len(classes)).tolist()
    empty = [name for name, count in zip(classes, counts) if not count]
    if empty:
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. "
                                f"Supported extensions are: {', '.join(exts)}")


def _save_local(path: str, root: Union[str, os.PathLike], classes: list[str],
                store: SampleStore, folders: list[tuple[bytes, int, int]],
                started: int) -> Optional[str]:
    """Writes the index (atomically); None when the cache folder cannot be written."""
    meta = {"version": _INDEX_VERSION, "root": os.fspath(root), "classes": classes,
            "listed_ns": started}
    walked = b"\0".join(f for f, _, _ in folders)
    arrays = {**store.arrays(), "walked": np.frombuffer(walked, np.uint8),
              "walked_stamps": np.array([(m, i) for _, m, i in folders], np.int64),
              "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        index = AtomicFile(path, mode=0o600)  # a private file, as mkstemp made it
    except OSError:
        return None
    with index as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    return path


def _load_local(path: str, root: Union[str, os.PathLike]) -> Union[FolderListing, str]:
    """The index at ``path`` when every folder it walked is unchanged; else
    why not ('walked': none, 'stale index': a folder changed or is racy)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes())
            if meta.get("version") != _INDEX_VERSION or meta.get("root") != os.fspath(root):
                return "walked"
            walked = data["walked"].tobytes().split(b"\0")
            stamps = data["walked_stamps"]
            racy = meta["listed_ns"] - RACY_NS
            for folder, (mtime, inode) in zip(walked, stamps.tolist()):
                if (mtime, inode) != _stamp(folder) or mtime >= racy:
                    return "stale index"
            arrays = {name: data[name] for name in _STORE_ARRAYS}
    except (OSError, KeyError, ValueError):
        return "walked"
    classes = meta["classes"]
    store = SampleStore.from_arrays(arrays)
    from fastdecode.storage._samples import shared_int_list

    targets = shared_int_list(store.target_array)
    return FolderListing(classes, {name: i for i, name in enumerate(classes)}, store, targets,
                         "index", path)
