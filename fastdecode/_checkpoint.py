"""save_state / load_state: a training state (a loader's ``state_dict()``, a
whole checkpoint) written so that a process killed while saving, at any
instruction, leaves the previous file whole and loadable.

The state goes to a temporary file of its own in the same directory (created
exclusively: no other writer's file is reused), is flushed and fsync'ed, then
renamed over the final name (``os.replace``: atomic on POSIX and Windows
within one filesystem), and the directory is fsync'ed so the rename itself
survives a machine that dies too. A reader sees the previous file or the new
one, never part of one. torch is imported on first use, so ``import
fastdecode`` stays light.
"""

from __future__ import annotations

import os
from typing import Any, Union

from fastdecode._atomic import AtomicFile

__all__ = ["load_state", "save_state"]

PathLike = Union[str, "os.PathLike[str]"]


def save_state(state: Any, path: PathLike) -> None:
    """Writes ``state`` to ``path`` with ``torch.save``, atomically: a process
    killed (SIGKILL included) or a machine that fails during the save leaves
    the previous file at ``path`` as it was, never a partial one.

    The state is written to a temporary file in ``path``'s directory (named
    ``.<name>.<pid>.<random>.tmp``, created exclusively), flushed and
    fsync'ed, renamed over ``path`` with ``os.replace``, and the directory is
    fsync'ed (where the platform can). A save that fails removes its
    temporary file; a killed one can leave it behind, next to the intact
    previous state (delete it at will).

    Parameters
    ----------
    state : object
        What to save, as ``torch.save`` takes it: for instance ``{"loader":
        loader.state_dict(), "model": model.state_dict(), "step": step}``.
        FastLoader's and StatefulDataLoader(FastImageFolder)'s states are
        primitives and tensors, so :func:`load_state` reads them back with
        ``weights_only=True``.
    path : str or path-like
        The file to write (replaced whole when it exists). Its directory
        must exist.

    Raises
    ------
    OSError
        The temporary file cannot be created, written or synced, or the
        rename fails: ``path`` is left as it was. (After the rename, a
        directory that cannot be synced raises too: the new state is then in
        place, but a machine failure may still undo the rename.)
    TypeError, pickle.PicklingError
        ``torch.save`` cannot save ``state`` (``path`` is left as it was).
    """
    import torch

    with AtomicFile(path, durable=True) as f:  # mode 0o666: the umask applies, as to any new file
        torch.save(state, f)


def load_state(path: PathLike, map_location: Any = None) -> Any:
    """Reads what :func:`save_state` wrote, with ``torch.load(...,
    weights_only=True)``: primitives, containers of them and tensors only,
    never arbitrary pickled objects (what Lightning does for checkpoints).

    Parameters
    ----------
    path : str or path-like
        The file :func:`save_state` wrote.
    map_location : optional
        As ``torch.load``'s: where to put the tensors (None: where they were
        saved).

    Returns
    -------
    object
        The saved state, for instance the dict whose ``"loader"`` entry goes
        to ``loader.load_state_dict``.

    Raises
    ------
    FileNotFoundError
        No file at ``path`` (no state saved yet).
    pickle.UnpicklingError
        The file holds something ``weights_only=True`` refuses (an arbitrary
        object), as ``torch.load`` raises it.
    """
    import torch

    return torch.load(os.fspath(path), map_location=map_location, weights_only=True)
