"""One atomic file write: a temporary file beside the target, renamed over it.

A reader of the target sees the previous file or the new one, never part of
one. :class:`AtomicFile` creates the temporary file in the target's directory
when it is made, exclusively (``.<name>.<pid>.<random>.tmp``: no other
writer's file is reused) unless the caller names it (a fixed name a rerun
overwrites); the ``with`` block writes it; on the block's success it is
flushed, fsync'ed when ``durable``, renamed over the target with
``os.replace`` (atomic on POSIX and Windows within one filesystem), and the
directory fsync'ed when ``durable`` (where the platform can). On any failure,
interrupts included, the temporary file is removed and the error raised; a
process killed mid-write leaves it behind. Its users: ``save_state``
(durable), conversion's outputs (a fixed partial name, no fsync) and the
listing index files. Decision records: docs/decisions/datasets.md
("Crash-safe saves"), docs/decisions/cli.md ("``convert`` under faults").
"""

from __future__ import annotations

import errno
import os
from types import TracebackType
from typing import BinaryIO, Optional, Union

__all__ = ["AtomicFile", "fsync_directory"]

PathLike = Union[str, "os.PathLike[str]"]


class AtomicFile:
    """A file written whole or not at all: ``with AtomicFile(path) as f:``
    writes ``f``, a temporary file renamed over ``path`` when the block
    ends without an error (see the module doc).

    The temporary file is created when the object is made: an OSError there
    leaves nothing behind (so a caller may treat an unwritable directory
    apart from a failed write). Use it once.

    Parameters
    ----------
    path : str or path-like
        The file to write (replaced whole when it exists). Its directory
        must exist.
    temp : str or path-like, optional
        The temporary file's name: created or truncated, and removed if its
        creation fails (a fixed name, which a rerun overwrites). None (the
        default): a new ``.<name>.<pid>.<random>.tmp`` beside ``path``,
        created exclusively.
    mode : int, default 0o666
        The permission bits of the new file, the umask applied.
    durable : bool, default False
        True: the file is fsync'ed before the rename and the directory
        after it, so the new file survives a machine that fails too.

    Raises
    ------
    OSError
        The temporary file cannot be created, written, synced or renamed:
        ``path`` is left as it was. (With ``durable``, after the rename a
        directory that cannot be synced raises too: the new file is then in
        place, but a machine failure may still undo the rename.)
    """

    def __init__(self, path: PathLike, *, temp: Optional[PathLike] = None,
                 mode: int = 0o666, durable: bool = False) -> None:
        self.path = os.fspath(path)
        self.durable = durable
        self.directory, name = os.path.split(os.path.abspath(self.path))
        binary = getattr(os, "O_BINARY", 0)
        if temp is None:
            self.temp = os.path.join(self.directory,
                                     f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
            fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | binary, mode)
        else:
            self.temp = os.fspath(temp)
            try:
                fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | binary, mode)
            except BaseException:
                self._remove()
                raise
        try:
            self.file: BinaryIO = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self._remove()
            raise

    def __enter__(self) -> BinaryIO:
        return self.file

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        try:
            with self.file:
                if error is None:
                    self.file.flush()
                    if self.durable:
                        os.fsync(self.file.fileno())
            if error is None:
                os.replace(self.temp, self.path)
        except BaseException:
            self._remove()
            raise
        if error is not None:
            self._remove()
            return
        if self.durable:
            fsync_directory(self.directory)

    def _remove(self) -> None:
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


def fsync_directory(directory: str) -> None:
    """The renames in ``directory`` made durable: its entry synced. Not on
    Windows (a directory cannot be opened there), nor where the filesystem
    says it cannot sync a directory.

    Parameters
    ----------
    directory : str
        The directory to sync.

    Raises
    ------
    OSError
        The directory cannot be opened, or its sync fails otherwise than
        with EINVAL, ENOTSUP or EBADF.
    """
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
