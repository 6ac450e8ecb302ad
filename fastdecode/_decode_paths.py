"""Which path each decode took, native or Pillow, counted per dataset: the slow path made visible.

``api.decode_format`` records every decode (the format, and whether the C
core or Pillow produced the pixels) to the counter of the dataset whose
sample the calling thread is loading (``charging``, around the datasets'
read and decode of one sample); a dataset reports them (``decode_stats``, ``explain``) and warns
once when more than ``PILLOW_WARN_SHARE`` of at least ``PILLOW_WARN_AFTER``
decodes took Pillow. Counts are this process's: a DataLoader worker counts
its own. See docs/decisions/png-webp.md ("The slow path, visible").
"""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Optional

__all__: list[str] = []  # private

PILLOW_WARN_SHARE = 0.5
PILLOW_WARN_AFTER = 64

_local = threading.local()


class DecodePaths:
    """One dataset's decode counts: {format: {"native": n, "pillow": n}}."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, int]] = {}
        self._warned = False

    def __getstate__(self) -> dict[str, Any]:  # a worker starts its own counts
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def add(self, fmt: str, path: str) -> None:
        with self._lock:
            row = self._counts.setdefault(fmt, {"native": 0, "pillow": 0})
            row[path] += 1
            if self._warned:
                return
            native, pillow = self._totals()
            if native + pillow < PILLOW_WARN_AFTER or pillow <= PILLOW_WARN_SHARE * (
                    native + pillow):
                return
            self._warned = True
            text = self._summary()
        warnings.warn(f"fastdecode: {text}; those files decode at Pillow's speed. Convert them "
                      f"(fastdecode convert) or see dataset.decode_stats()", RuntimeWarning,
                      stacklevel=2)

    def _totals(self) -> tuple[int, int]:
        return (sum(r["native"] for r in self._counts.values()),
                sum(r["pillow"] for r in self._counts.values()))

    def stats(self) -> dict[str, Any]:
        """{"native": n, "pillow": n, "formats": {format: {"native": n, "pillow": n}}}."""
        with self._lock:
            native, pillow = self._totals()
            return {"native": native, "pillow": pillow,
                    "formats": {f: dict(r) for f, r in sorted(self._counts.items())}}

    def _summary(self) -> str:
        native, pillow = self._totals()
        total = native + pillow
        slow = ", ".join(f"{f} {r['pillow']}" for f, r in sorted(self._counts.items())
                         if r["pillow"])
        return (f"{pillow} of {total} decodes ({100 * pillow / total:.0f} %) took the Pillow "
                f"path ({slow})")

    def summary(self) -> Optional[str]:
        """One line for ``explain()``; None before any decode."""
        with self._lock:
            if not self._counts:
                return None
            native, pillow = self._totals()
            if not pillow:
                return f"decodes so far: all {native} native"
            return "decodes so far: " + self._summary()


@contextmanager
def charging(paths: Optional[DecodePaths]) -> Iterator[None]:
    """The calling thread's decodes inside go to ``paths`` (None: to no
    counter); the counter before is current again after."""
    previous = getattr(_local, "current", None)
    _local.current = paths
    try:
        yield
    finally:
        _local.current = previous


def record(fmt: Optional[str], native: bool) -> None:
    """One decode of format ``fmt`` (None: unknown to the C core), native or
    by Pillow, to the calling thread's current counter, if any."""
    paths = getattr(_local, "current", None)
    if paths is not None:
        paths.add(fmt or "other", "native" if native else "pillow")
