"""Which window reads a reader's files, and a dataset's reads through its cache and window.

:func:`open_window` reads local files (a
:class:`~fastdecode.storage._readers.LocalReader`) with a :class:`_NativeWindow`:
the window's policy and bounds, its reads on threads in C
(``fastdecode._native.ReadPool``, src_c/fd_readahead.c) that never take the
GIL and read into private mappings, outside malloc, which the consumer copies
out (reused, bounded by the byte bound: a worker's memory does not grow with
the files read). Any other reader gets a
:class:`~fastdecode.storage._window.ReadAhead`, on Python threads.
``FASTDECODE_NATIVE_READS=0`` (an internal option, read when a window opens;
the benchmarks compare the two ways) reads local files on Python threads too.

:class:`DatasetReads` is a dataset's reads in whichever process it is: its
shared cache, then the calling thread's window. Decision records:
docs/decisions/storage-read-pool.md ("The read pool in C") and docs/decisions/listing.md
("Worker private memory").
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Optional

from fastdecode import _native
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import LocalReader, as_reader
from fastdecode.storage._window import ReadAhead, _Entry

__all__ = ["NATIVE_READS_ENV", "DatasetReads", "native_reads", "open_window"]

NATIVE_READS_ENV = "FASTDECODE_NATIVE_READS"


class _NativeWindow(ReadAhead):
    """A window over the local file system whose reads run on threads in C
    (``fastdecode._native.ReadPool``, src_c/fd_readahead.h): the same
    policy (order, keys, drops, the adaptive depth, probe and bypass) and
    the same bounds, but its read threads never take the GIL, and read into
    mappings of their own (the module doc). Only the consumer
    thread touches the Python side, so its lock is never contended. The
    pool measures each read's latency; it joins the measures at its take."""

    def _reset(self) -> None:
        super()._reset()
        self._pool = _native.ReadPool(self.options.max_bytes)
        self._configured: Optional[tuple[int, bool]] = None
        self._start_threads()

    def _start_threads(self) -> None:
        """Tells the pool the count bound and whether it holds (probe, bypass)."""
        now = (max(1, self._depth), self._holding())
        if now != self._configured:
            self._pool.configure(*now)
            self._configured = now

    def _queued(self, entry: _Entry) -> None:
        entry.job = self._pool.submit(entry.path, -1 if entry.size is None else entry.size)

    def take(self, path: str) -> bytes:
        self._here()
        with self._lock:
            entry = self._front(path)
            if entry is not None:
                self._forget(entry)
        if entry is None:
            return self._direct(path)
        taken = None
        try:
            taken = self._pool.take(entry.job, path)
        finally:
            with self._lock:
                self.counters["taken"] += 1
                self._last_take = self.clock()
                if taken is not None:
                    self.counters["waited"] += taken[2]
                    self._measured(taken[1])
        return taken[0]

    take.__doc__ = ReadAhead.take.__doc__

    def _drop(self, entry: _Entry) -> None:
        self._forget(entry)
        self.counters["dropped"] += 1
        self._pool.drop(entry.job)

    def _engine_stats(self) -> dict[str, int]:
        pool = self._pool.stats()
        return {"started": pool["started"], "failed": pool["failed"],
                "peak_in_flight": pool["peak_in_flight"], "peak_bytes": pool["peak_bytes"],
                "in_flight": pool["in_flight"], "in_flight_bytes": pool["bytes"]}

    def close(self) -> None:
        self._here()
        with self._lock:
            while self._order:
                self._drop(self._order[0])
            pool, self._pool = self._pool, _native.ReadPool(self.options.max_bytes)
            self._configured = None
            self._start_threads()
        pool.close()

    close.__doc__ = ReadAhead.close.__doc__


def native_reads() -> bool:
    """Whether local files are read on threads in C: ``FASTDECODE_NATIVE_READS``
    unset, empty or "1" (the default); "0" reads them on Python threads."""
    text = os.environ.get(NATIVE_READS_ENV, "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"{NATIVE_READS_ENV}={text!r}: '1' (threads in C, the default) or "
                         "'0' (Python threads)")
    return text != "0"


def open_window(options: Optional[ReadAheadOptions] = None, reader: Any = None,
                clock: Callable[[], float] = time.monotonic) -> ReadAhead:
    """A window for ``reader``: the local file system's reads on threads in
    C (:class:`_NativeWindow`, unless :func:`native_reads` says no), any
    other reader's on Python threads."""
    reader = as_reader(reader)
    if type(reader) is LocalReader and native_reads():
        return _NativeWindow(options, reader, clock)
    return ReadAhead(options, reader, clock)


class DatasetReads:
    """A dataset's reads, in whichever process it is: its shared cache
    (:mod:`fastdecode.storage._cache`) first, then the calling thread's window,
    else the file, read in the calling thread. Pickles as its options,
    cache and reader (the windows stay in their process)."""

    def __init__(self, options: ReadAheadOptions, cache: Any = None, reader: Any = None) -> None:
        self.options = options
        self.cache = cache
        self.reader = as_reader(reader)
        self._local = threading.local()

    def window(self) -> ReadAhead:
        """This thread's window (one per thread: a window has one consumer)."""
        window = getattr(self._local, "window", None)
        if window is not None and window.reader is not self.reader:
            window.close()
            window = None
        if window is None:
            window = self._local.window = open_window(self.options, self.reader)
        return window

    def reading_ahead(self) -> bool:
        """False while :meth:`ahead` would start nothing (read-ahead off, or
        this thread's adaptive window bypassed): a caller may skip listing
        the samples."""
        return self.options.depth != 0 and self.window().reading_ahead()

    def ahead(self, items: Iterable[tuple[int, str]]) -> None:
        """Starts the reads of samples ``items`` ((index, path), in the order
        they will be read) that the cache does not hold."""
        if not self.reading_ahead():
            return
        items = list(items)
        cache = self.cache
        # keyed by the samples: the batch a worker is given next is submitted
        # again when it comes (and by __getitems__ once more), and must not
        # be read twice; a path it shares with this batch is read for each
        self.window().submit([path for index, path in items
                              if cache is None or not cache.holds(index, path)],
                             key=tuple(index for index, _ in items))

    def read(self, index: Optional[int], path: str) -> bytes:
        """Sample ``index``'s bytes (at ``path``); stored in the cache on a
        miss. A failed read raises its OSError."""
        cache = self.cache
        if cache is not None and index is not None:
            data = cache.get(index, path)
            if data is not None:
                return data
        data = self.window().take(path)
        if cache is not None and index is not None:
            cache.put(index, path, data)
        return data

    def __getstate__(self) -> dict:
        return {"options": self.options, "cache": self.cache, "reader": self.reader}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
