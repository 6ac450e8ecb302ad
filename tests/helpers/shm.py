"""The /dev/shm names torch made for given processes."""

from __future__ import annotations

import os
from collections.abc import Iterable


def torch_shm_entries(pids: Iterable[int]) -> set[str]:
    """torch's /dev/shm entries of the processes ``pids`` (torch_PID_...),
    the others left out: the machine's other processes, a parallel test
    run's among them, make theirs too."""
    mine = tuple(f"torch_{p}_" for p in pids)
    try:
        return {e for e in os.listdir("/dev/shm") if e.startswith(mine)}
    except OSError:
        return set()
