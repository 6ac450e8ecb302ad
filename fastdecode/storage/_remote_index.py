"""A remote root's listing, kept as a local index file: :class:`TreeIndex`.

A root is listed once (:func:`list_tree`: one ``fs.find(detail=True)``) and
the listing written under :func:`cache_dir` (``$FASTDECODE_CACHE``, else
``~/.cache/fastdecode``) as ``index/<key>.npz``, keyed by the URL (its
credentials scrubbed) and the public storage options, with a fingerprint of
the listing's etags/mtimes/sizes and each file's size. Re-opening the root
reads that file and lists nothing; ``refresh_index=True`` lists again. A
process keeps the indexes it opened (``_TREES``). Listing and reading through
a root is :class:`~fastdecode.storage._remote.Remote`'s. Decision record:
docs/decisions/storage-remote.md.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from fastdecode._atomic import AtomicFile

__all__ = ["TreeIndex", "cache_dir", "index_file", "list_tree"]

_INDEX_VERSION = 2  # 2: the sizes


def cache_dir() -> str:
    """Where listing indexes are kept: ``$FASTDECODE_CACHE``, else
    ``~/.cache/fastdecode`` (``$XDG_CACHE_HOME/fastdecode`` when set)."""
    explicit = os.environ.get("FASTDECODE_CACHE")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastdecode")


def index_file(key: str) -> str:
    """The index file of the listing keyed ``key``."""
    return os.path.join(cache_dir(), "index", key + ".npz")


@dataclass
class TreeIndex:
    """A root's listing: its files (paths relative to the root, sorted) in one
    bytes blob, each ended by a newline, path i from ``offsets[i]`` to
    ``offsets[i + 1] - 1``, the top-level folders, the fingerprint of the
    listing's etags/mtimes/sizes, and each file's size (-1: not listed)."""

    root: str
    blob: np.ndarray
    offsets: np.ndarray
    folders: list[str]
    fingerprint: str
    sizes: np.ndarray
    _over: dict[int, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def relpath(self, i: int) -> str:
        return self.blob[self.offsets[i]:self.offsets[i + 1] - 1].tobytes().decode("utf-8")

    def relpaths(self) -> list[str]:
        return self.blob.tobytes().decode("utf-8").split("\n")[:len(self)] if len(self) else []

    def over(self, limit: int) -> dict[str, int]:
        """The files listed larger than ``limit`` bytes, with their sizes
        (usually none; made once per limit, then a lookup per read)."""
        found = self._over.get(limit)
        if found is None:
            found = self._over[limit] = {self.relpath(int(i)): int(self.sizes[i])
                                         for i in np.flatnonzero(self.sizes > limit)}
        return found


_TREES: dict[str, TreeIndex] = {}  # this process's open indexes, by key


def list_tree(fs: Any, url: str, scrub: Callable[[str], str]) -> TreeIndex:
    """The listing of the root ``url`` (its credentials scrubbed) on the fsspec
    filesystem ``fs``: one ``find``. FileNotFoundError naming the URL when it
    cannot be listed (the client's message through ``scrub``) or holds nothing."""
    root = fs._strip_protocol(url).rstrip("/")
    try:
        found = fs.find(url, withdirs=True, detail=True)
    except Exception as exc:  # noqa: BLE001 - any client error, named and scrubbed
        raise FileNotFoundError(scrub(f"cannot list {url}: "
                                      f"{type(exc).__name__}: {exc}")) from None
    prefix = root + "/"
    files, folders, stamp = [], set(), hashlib.sha256()
    for name, info in found.items():
        stripped = fs._strip_protocol(name).rstrip("/")
        if not stripped.startswith(prefix):
            continue
        rel = stripped[len(prefix):]
        if info.get("type") == "directory":
            if "/" not in rel:
                folders.add(rel)
            continue
        files.append(rel)
        if "/" in rel:
            folders.add(rel.split("/", 1)[0])
    files.sort()
    sizes = np.full(len(files), -1, np.int64)
    for i, rel in enumerate(files):
        info = found.get(prefix + rel) or found.get(fs.unstrip_protocol(prefix + rel)) or {}
        version = (info.get("ETag") or info.get("etag") or info.get("mtime")
                   or info.get("LastModified") or info.get("updated") or info.get("created"))
        stamp.update(f"{rel}\0{info.get('size')}\0{version}\n".encode())
        if isinstance(info.get("size"), int) and info["size"] >= 0:
            sizes[i] = info["size"]
    if not files and not folders:
        raise FileNotFoundError(f"no file under {url}")
    blob = np.frombuffer("".join(f"{rel}\n" for rel in files).encode("utf-8"), np.uint8)
    offsets = np.zeros(len(files) + 1, np.int64)
    np.cumsum(np.fromiter((len(r.encode("utf-8")) + 1 for r in files), np.int64,
                          count=len(files)), out=offsets[1:])
    return TreeIndex(url, blob, offsets, sorted(folders), stamp.hexdigest(), sizes)


def _index_key(protocol: str, root: str, options: dict) -> str:
    """The key of the root ``root`` (scrubbed, no trailing ``/``) listed with
    the public ``options``."""
    text = json.dumps([_INDEX_VERSION, protocol, root, options],
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _save_index(path: str, index: TreeIndex) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with AtomicFile(path, mode=0o600) as f:  # a private file, as mkstemp made it
        np.savez(f, blob=index.blob, offsets=index.offsets, sizes=index.sizes,
                 meta=np.frombuffer(json.dumps(
                     {"root": index.root, "folders": index.folders,
                      "fingerprint": index.fingerprint}).encode(), np.uint8))


def _load_index(path: str, url: str) -> Optional[TreeIndex]:
    """The index file at ``path`` when it lists the root ``url`` (scrubbed);
    None when it is missing, unreadable or another root's."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes())
            if meta["root"] != url:
                return None
            return TreeIndex(meta["root"], data["blob"], data["offsets"], meta["folders"],
                             meta["fingerprint"], data["sizes"])
    except (OSError, KeyError, ValueError):
        return None
