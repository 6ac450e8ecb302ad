"""The reader factory: a root, path or URL (with its ``storage_options``)
turned into the reader that reads its files; the one place that tells a
remote path from a local one.

A path is remote when it is an fsspec URL other than a local ``file://``
one (``s3://``, ``gs://``, ``http(s)://``, ``memory://``...): a string with
``://``; a path-like object, bytes or a ``file://`` URL is local. Remote paths
are read by a :class:`~fastdecode.storage._remote.Remote`, local ones by
:class:`LocalReader`; both meet the :class:`Reader` protocol, what the
read-ahead window (:mod:`fastdecode.storage._window`) reads with. Every other module
asks here (:func:`is_remote`, :func:`reader_for` and the path helpers below)
rather than looking at the path itself. Decision records:
docs/decisions/layout.md (where a new storage backend goes) and
docs/decisions/storage-remote.md.
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol, Union

from fastdecode import _native

if TYPE_CHECKING:
    from fastdecode.storage._remote import Remote

__all__ = ["LocalReader", "Opened", "Reader", "as_reader", "expand", "is_remote", "join",
           "parent", "reader_for", "remote_paths", "remote_root", "scrub"]

PathLike = Union[str, "os.PathLike[str]"]


class Opened(Protocol):
    """A file a :class:`Reader` opened, not read yet.

    ``open`` and ``read`` raise OSError (an ImageFileError for a remote
    file) for a file that cannot be read. An opened file may also have
    ``close()``: the window calls it for a read dropped before it began.
    """

    @property
    def size(self) -> Optional[int]:
        """The file's size in bytes, learnt at its open; None when unknown
        before reading (the window then reserves the largest size seen)."""

    def read(self) -> bytes:
        """The whole file; releases what the open took, also on error."""


class Reader(Protocol):
    """What the read-ahead window reads files with: local files
    (:class:`LocalReader`), a remote root
    (:class:`~fastdecode.storage._remote.Remote`), or any object with
    ``open``; a plain callable ``path -> bytes`` is made one by
    :func:`as_reader`. Readers are picklable: a dataset sends its reader to
    its workers."""

    def open(self, path: str) -> Opened:
        """``path`` opened (its size learnt where the storage tells it cheaply)."""


class LocalReader:
    """The local file system: a file opened with its size (for the byte
    bound), then read whole, in C (``fastdecode._native.LocalFile``)."""

    def open(self, path: str) -> _native.LocalFile:
        return _native.LocalFile(path)

    def open_file(self, path: str) -> IO[bytes]:
        """``path`` opened for reading as a binary stream (for manifests)."""
        return open(path, "rb")

    def __repr__(self) -> str:
        return "LocalReader()"

    def __eq__(self, other: object) -> bool:
        return type(other) is LocalReader

    def __hash__(self) -> int:
        return hash(LocalReader)


class _CalledFile:
    __slots__ = ("call", "path", "size")

    def __init__(self, call: Callable[[str], bytes], path: str) -> None:
        self.call, self.path = call, path
        self.size: Optional[int] = None

    def read(self) -> bytes:
        return bytes(self.call(self.path))


class _CallableReader:
    """A plain ``path -> bytes`` callable as a :class:`Reader`."""

    def __init__(self, call: Callable[[str], bytes]) -> None:
        self.call = call

    def open(self, path: str) -> _CalledFile:
        return _CalledFile(self.call, path)


def as_reader(reader: Any) -> Reader:
    """``reader`` as a :class:`Reader`: None is the local file system, an
    object with ``open`` is one, a callable ``path -> bytes`` is wrapped."""
    if reader is None:
        return LocalReader()
    if callable(getattr(reader, "open", None)):
        return reader
    if callable(reader):
        return _CallableReader(reader)
    raise TypeError(f"a reader is an object with open(path) or a callable path -> bytes, "
                    f"got {reader!r}")


# -- local or remote ----------------------------------------------------------


def is_remote(path: object) -> bool:
    """True when ``path`` is read through a remote filesystem: a string
    fsspec URL other than a local ``file://`` one (``memory://x`` is one)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def reader_for(root: PathLike, storage_options: Optional[dict] = None) -> Union[LocalReader, Remote]:
    """The reader of ``root`` and the files under it: a
    :class:`~fastdecode.storage._remote.Remote` with ``storage_options``
    for a remote URL, else :class:`LocalReader` (``storage_options``
    unused)."""
    if is_remote(root):
        from fastdecode.storage._remote import Remote

        return Remote(os.fspath(root), storage_options)
    return LocalReader()


def remote_root(root: PathLike, storage_options: Optional[dict] = None,
                refresh: bool = False) -> Optional[Remote]:
    """The :class:`~fastdecode.storage._remote.Remote` of the remote tree
    ``root``, its listing loaded from its index file (listed when absent, or
    when ``refresh``); None for a local root, which is left unread."""
    if not is_remote(root):
        return None
    from fastdecode.storage._remote import open_root

    return open_root(os.fspath(root), storage_options, refresh)[0]


def remote_paths(paths: Iterable[str]) -> list[str]:
    """The remote ones of ``paths``, in order."""
    return [p for p in paths if is_remote(p)]


def scrub(path: str) -> str:
    """``path`` without the credentials a remote URL may carry
    (user:password); a local path as it is."""
    if not is_remote(path):
        return path
    from fastdecode.storage._remote import scrub_url

    return scrub_url(path)


def expand(path: PathLike) -> str:
    """A local path with ``~`` expanded; a remote URL as it is."""
    return os.fspath(path) if is_remote(path) else os.path.expanduser(path)


def join(root: Optional[str], path: str) -> str:
    """``path`` under ``root``: as it is when ``root`` is None or ``path`` is
    absolute or remote; under a remote root joined with one ``/``; under a
    local one with ``os.path.join``."""
    if root is None or is_remote(path) or os.path.isabs(path):
        return path
    if is_remote(root):
        return root.rstrip("/") + "/" + path.lstrip("/")
    return os.path.join(root, path)


def parent(path: str) -> str:
    """The folder holding ``path``: a remote URL's last segment dropped, a
    local path's absolute folder."""
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(path))
