"""A process that saves a state with ``fastdecode.save_state`` and stops at a
chosen point of the save, for its parent to SIGKILL it there.

Run as ``python -m helpers.kill_save PATH POINT MARKER`` (``tests/`` on the
path) by ``tests/data/test_save_state.py``. The state is a 16 MiB tensor and
a step number; at POINT the process creates MARKER and sleeps until killed:

- ``mid-write``: after the first MiB of the temporary file was written (and
  flushed to it), the rest not;
- ``before-fsync``: the temporary file written whole, not yet synced;
- ``before-rename``: synced, not yet renamed over PATH;
- ``after-rename``: renamed, the directory not yet synced.
"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import torch

import fastdecode as fd
from fastdecode import _atomic

POINTS = ("mid-write", "before-fsync", "before-rename", "after-rename")
STEP = 2  # the new state's step (the previous state's is 1)


def stop_here(marker: Path) -> None:
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


class StopsMidWrite(io.BufferedWriter):
    """A file that stops once its first MiB is written (flushed to the file)."""

    marker: Path

    def write(self, data) -> int:  # type: ignore[override]
        data = memoryview(data).cast("B")
        room = (1 << 20) - self.tell()
        if len(data) >= room:
            super().write(data[:room])
            self.flush()
            stop_here(self.marker)
        return super().write(data)


def main(argv: list[str]) -> int:
    path, point, marker = Path(argv[0]), argv[1], Path(argv[2])
    if point not in POINTS:
        raise SystemExit(f"POINT is one of {POINTS}")
    if point == "mid-write":
        def fdopen(fd: int, mode: str = "r", *args, **kwargs):
            slow = StopsMidWrite(io.FileIO(fd, "wb"))
            slow.marker = marker
            return slow

        os.fdopen = fdopen  # type: ignore[assignment]
    elif point == "before-fsync":
        os.fsync = lambda fd: stop_here(marker)  # type: ignore[assignment]
    elif point == "before-rename":
        os.replace = lambda src, dst: stop_here(marker)  # type: ignore[assignment]
    else:
        _atomic.fsync_directory = lambda directory: stop_here(marker)  # type: ignore[assignment]
    fd.save_state({"step": STEP, "weights": torch.full((4 << 20,), 7.0)}, path)
    return 1  # the kill never came


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
