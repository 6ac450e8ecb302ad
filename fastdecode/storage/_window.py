"""The read-ahead window: many file reads in flight per process, taken in sample order.

A :class:`ReadAhead` starts the reads of the paths it is given (a batch, the
next batch) on read threads, which only read bytes (no decode runs in them),
within the bounds of its :class:`~fastdecode.storage._readahead.ReadAheadOptions`:
at most ``depth`` reads started and not yet taken, holding at most
``max_bytes`` of file bytes, reserved in submission order from the size the
reader learns at open or was given (a file larger than ``max_bytes`` is read
only when nothing else is reserved; a size unknown before the read is taken
as the largest file seen so far, corrected when the bytes arrive). One
consumer thread takes each file's bytes (:meth:`~ReadAhead.take`) in sample order
(a read's OSError is raised at its take; a path never submitted, or dropped,
is read in the consumer). A path given twice is read once per occurrence; a
submit whose ``key`` still has reads in the window adds nothing.

Adaptive options keep ``HEADROOM x latency / time per file + SLACK`` reads in
flight (Little's law, between ``depth`` and ``max_depth``), measured as moving
averages; the window first probes (the consumer reads the first two files),
and bypasses its threads while the median read takes under ``BYPASS_BELOW`` of
the consumer's median time per file, until it takes over ``BYPASS_ABOVE``. An
explicit depth is fixed, never bypassed. A window belongs to the process that
made it: first used in a forked child, it starts empty, with threads of its
own. Readers: :mod:`fastdecode.storage._readers`; the window for local
files, in C: :mod:`fastdecode.storage._reads`. Decision records:
docs/decisions/storage.md ("Slow storage: read-ahead") and
docs/decisions/storage-bypass.md.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import deque
from typing import Any, Callable, Hashable, Iterable, Iterator, Optional, TypeVar

from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import as_reader

__all__ = ["BYPASS_ABOVE", "BYPASS_BELOW", "BYPASS_SAMPLES", "EWMA", "HEADROOM", "SLACK",
           "ReadAhead"]

# the adaptive depth: reads in flight >= HEADROOM x (read latency / the
# consumer's time per file) + SLACK (Little's law, with room for jitter)
HEADROOM = 1.5
SLACK = 2
EWMA = 0.1  # the weight of one new read's latency / one file's consumer time
# the adaptive window reads in the consumer while latency < BYPASS_BELOW x
# its time per file, and ahead again once latency > BYPASS_ABOVE x that
BYPASS_BELOW = 0.2
BYPASS_ABOVE = 0.4
# the bypass decides on the medians of the last BYPASS_SAMPLES latencies and
# times per file (a few reads slowed by a wait for a CPU move the EWMA past
# BYPASS_ABOVE on their own, not the median)
BYPASS_SAMPLES = 7

_QUEUED, _STARTED, _DONE = 0, 1, 2
T = TypeVar("T")


class _Entry:
    __slots__ = ("path", "size", "group", "state", "reserved", "data", "error", "dropped", "room",
                 "job")

    def __init__(self, path: str, size: Optional[int], group: Hashable = None) -> None:
        self.path = path
        self.size = size
        self.group = group  # the key of the submit that made it (None: none given)
        self.state = _QUEUED
        self.reserved: Optional[int] = None  # bytes held against the cap, once reserved
        self.data: Optional[bytes] = None
        self.error: Optional[BaseException] = None
        self.dropped = False  # discarded while its read ran: released when it ends
        self.room: Optional[threading.Condition] = None  # its read thread waits here for bytes
        self.job: Any = None  # its read in a _NativeWindow's pool


class ReadAhead:
    """One process's window of reads (see the module doc). ``submit`` the
    paths in the order they will be taken; ``take`` each (a path never
    submitted, or dropped, is read in the calling thread). One consumer
    thread per window. ``clock``: the seconds the adaptive window measures
    reads and the consumer with (``time.monotonic``; every interval is
    taken within one thread, so a test may give a per-thread virtual one)."""

    def __init__(self, options: Optional[ReadAheadOptions] = None,
                 reader: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options or ReadAheadOptions()
        self.reader = as_reader(reader)
        self.clock = clock
        self._pid = -1
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        lock = threading.Lock()
        self._lock = lock
        self._work = threading.Condition(lock)  # idle read threads wait here
        self._done = threading.Condition(lock)  # the consumer waits for its read here
        self._order: deque[_Entry] = deque()  # live entries, in submission order
        self._queue: deque[_Entry] = deque()  # entries not started (dropped ones skipped)
        # entries whose bytes are not reserved, in submission order (reserved
        # and dropped ones skipped at the front): only the first may reserve,
        # so only its thread is woken (a notify_all woke every waiting read
        # thread at each event: at depth 64, ~0.5 ms of CPU per file)
        self._unreserved: deque[_Entry] = deque()
        self._by_path: dict[str, list[_Entry]] = {}  # live entries of a path, in order
        self._groups: dict[Hashable, int] = {}  # a submit's key -> its live entries
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a read to start
        self._started = 0  # reads started and not yet released (the count bound)
        self._bytes = 0  # bytes reserved by them (the byte bound)
        self._largest = 0  # the largest file seen (the estimate for unknown sizes)
        self._closed = False
        self._depth = self.options.depth  # the count bound now (adaptive: moves)
        self._latency = 0.0  # EWMA of a read's seconds, open to bytes (0: none yet)
        self._per_file = 0.0  # EWMA of the consumer's seconds between takes, waits excluded
        # the last BYPASS_SAMPLES of each, whose medians decide the bypass
        self._recent_latency: deque[float] = deque(maxlen=BYPASS_SAMPLES)
        self._recent_per_file: deque[float] = deque(maxlen=BYPASS_SAMPLES)
        self._last_take: Optional[float] = None  # when the last take returned
        self._bypass = False  # adaptive, reads this fast: submits add nothing (the module doc)
        self.counters = {"submitted": 0, "started": 0, "taken": 0, "dropped": 0, "direct": 0,
                         "failed": 0, "peak_in_flight": 0, "peak_bytes": 0,
                         "waited": 0, "depth": self._depth, "peak_depth": self._depth}

    def _here(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's threads are not here
            self._reset()

    # -- the consumer ------------------------------------------------------

    def submit(self, paths: Iterable[str], sizes: Optional[Iterable[Optional[int]]] = None,
               key: Hashable = None) -> None:
        """Starts reading ``paths`` (in order, within the bounds), one read
        per occurrence: a path given twice (a batch drawn with replacement,
        or the next batch sharing a file with this one) is read for each,
        as the decoding thread would without read-ahead. ``sizes``: their
        sizes when known (a listing). ``key`` (e.g. the batch's indices)
        makes the submit idempotent: while reads of an earlier submit with
        the same key are still in the window, nothing is added (a batch
        submitted as the next one, then again when it comes)."""
        if not self.reading_ahead():
            return
        sized = list(zip(paths, sizes)) if sizes is not None else [(p, None) for p in paths]
        with self._lock:
            if key is not None and key in self._groups:
                return
            for path, size in sized:
                entry = _Entry(path, size, key)
                self._queued(entry)
                self._order.append(entry)
                self._by_path.setdefault(path, []).append(entry)
                self.counters["submitted"] += 1
            if key is not None and sized:
                self._groups[key] = len(sized)
            self._start_threads()

    def _queued(self, entry: _Entry) -> None:
        """A new entry joins the read threads' queue (under the lock)."""
        self._queue.append(entry)
        self._unreserved.append(entry)

    def reading_ahead(self) -> bool:
        """False while :meth:`submit` adds nothing (read-ahead off, or the
        adaptive window bypassed): a caller may skip listing the paths."""
        self._here()
        return self.options.depth != 0 and not self._bypass

    def take(self, path: str) -> bytes:
        """The bytes of ``path``; its read's OSError raised here. Entries
        submitted before it and not taken are dropped (the consumer went
        another way: a predicted batch that did not come)."""
        self._here()
        with self._lock:
            entry = self._front(path)
            if entry is not None:
                if entry.state != _DONE:
                    self.counters["waited"] += 1  # the reads were not far enough ahead
                # no thread took it yet: read it here, in bounds; while this
                # waits for a free place, a read thread may take it (the place
                # that freed is then its): wait for that read instead
                while entry.state == _QUEUED and self._started >= self._depth:
                    self._done.wait()
                if entry.state == _QUEUED:
                    self._claim_and_read(entry)
                else:  # at the front, so its bytes are reserved first
                    self._wake_first()
                    while entry.state != _DONE:
                        self._done.wait()
                self._forget(entry)
                self._release(entry)
                self.counters["taken"] += 1
                self._last_take = self.clock()
        if entry is None:
            return self._direct(path)
        if entry.error is not None:
            error, entry.error = entry.error, None
            raise error
        data = entry.data
        entry.data = None
        assert data is not None
        return data

    def _front(self, path: str) -> Optional[_Entry]:
        """A take begins (under the lock): the consumer's time joins the
        measures; ``path``'s first entry, those before it dropped (None:
        never submitted, or dropped)."""
        self._consumed()
        entries = self._by_path.get(path)
        entry = entries[0] if entries else None
        if entry is not None:
            while self._order[0] is not entry:
                self._drop(self._order[0])
        return entry

    def _direct(self, path: str) -> bytes:
        """``path`` read in the consumer (never submitted, or dropped), timed."""
        self.counters["direct"] += 1
        began = self.clock()
        direct = self.reader.open(path).read()
        with self._lock:  # its latency: what decides the bypass
            self._measured(self.clock() - began)
            self._last_take = self.clock()
        return direct

    def ahead_of(self, items: Iterable[T], path_of: Callable[[T], str]) -> Iterator[T]:
        """``items`` in order, each yielded once its read and those of up to
        ``4 x depth`` items after it were submitted: the caller takes
        ``path_of(item)`` (a long run of files never queues them all)."""
        span = 4 * self.options.limit
        buffer: deque[T] = deque()
        for item in items:
            buffer.append(item)
            self.submit([path_of(item)])
            if len(buffer) > span:
                yield buffer.popleft()
        while buffer:
            yield buffer.popleft()

    def clear(self) -> None:
        """Drops every read not taken (their bytes are released as they end)."""
        self._here()
        with self._lock:
            while self._order:
                self._drop(self._order[0])

    def stats(self) -> dict[str, int]:
        """Counters: reads submitted, started, taken, dropped (not taken:
        the consumer went another way), direct (read by the consumer),
        failed, waited (takes whose read had not ended); the peaks of reads
        in flight and of bytes reserved; the count bound now and its peak
        (``depth``, ``peak_depth``: they move when adaptive); the reads
        and bytes in flight now; ``bypass``: 1 while the adaptive window
        reads in the consumer (reads this fast gain nothing ahead: the
        module doc); and the measured read latency and the consumer's time
        per file, in microseconds."""
        self._here()
        with self._lock:
            return {**self.counters, **self._engine_stats(), "bypass": int(self._bypass),
                    "latency_us": round(self._latency * 1e6),
                    "per_file_us": round(self._per_file * 1e6)}

    def _engine_stats(self) -> dict[str, int]:
        """The counters the read threads keep (under the lock)."""
        return {"in_flight": self._started, "in_flight_bytes": self._bytes}

    def close(self) -> None:
        """Drops what is in flight and ends the threads (a later read starts them again)."""
        self._here()
        with self._lock:
            while self._order:
                self._drop(self._order[0])
            self._closed = True
            self._work.notify_all()
            threads, self._threads = self._threads, []
        for t in threads:
            t.join(timeout=5)
        with self._lock:
            self._closed = False

    def __getstate__(self) -> dict:
        return {"options": self.options, "reader": self.reader}  # the window stays here

    def __setstate__(self, state: dict) -> None:
        self.options, self.reader = state["options"], state["reader"]
        self.clock = time.monotonic
        self._reset()

    # -- bookkeeping, under the lock ----------------------------------------

    def _consumed(self) -> None:
        """A take begins: the consumer's time since the last one returned
        (its decode, not its waits) joins the EWMA; the depth follows."""
        if self._last_take is None:
            return
        spent = self.clock() - self._last_take
        self._per_file = spent if not self._per_file else \
            self._per_file + EWMA * (spent - self._per_file)
        self._recent_per_file.append(spent)
        self._adapt()

    def _adapt(self) -> None:
        """Adaptive options: the depth Little's law asks of the measured
        latency and consumption (HEADROOM x latency / time per file + SLACK),
        between ``depth`` and ``max_depth``; the byte bound holds apart. The
        bypass follows the medians of the last ``BYPASS_SAMPLES`` of each."""
        top = self.options.max_depth
        if top is None or not self._latency or not self._per_file:
            return
        ratio = (statistics.median(self._recent_latency)
                 / max(statistics.median(self._recent_per_file), 1e-9))
        self._bypass = ratio < (BYPASS_ABOVE if self._bypass else BYPASS_BELOW)
        want = math.ceil(HEADROOM * self._latency / max(self._per_file, 1e-6)) + SLACK
        depth = min(top, max(self.options.depth, want))
        if depth != self._depth:
            self._depth = depth
            self.counters["depth"] = depth
            self.counters["peak_depth"] = max(self.counters["peak_depth"], depth)
        self._start_threads()  # more room, or the probe ended, or the bypass did

    def _measured(self, seconds: float) -> None:
        """One read's latency (open to bytes) joins the EWMA and the recent ones."""
        self._latency = seconds if not self._latency else \
            self._latency + EWMA * (seconds - self._latency)
        self._recent_latency.append(seconds)

    def _forget(self, entry: _Entry) -> None:
        if self._order[0] is entry:
            self._order.popleft()
        else:
            self._order.remove(entry)
        same = self._by_path[entry.path]
        same.remove(entry)
        if not same:
            del self._by_path[entry.path]
        if entry.group is not None:
            left = self._groups[entry.group] - 1
            if left:
                self._groups[entry.group] = left
            else:
                del self._groups[entry.group]

    def _drop(self, entry: _Entry) -> None:
        self._forget(entry)
        self.counters["dropped"] += 1
        if entry.state == _DONE:
            self._release(entry)
        else:  # queued: skipped; running: released when its read ends
            entry.dropped = True
            if entry.room is not None:  # waiting for bytes: not to be read now
                entry.room.notify()
            self._wake_first()

    def _release(self, entry: _Entry) -> None:
        self._started -= 1
        self._bytes -= entry.reserved or 0
        entry.reserved = 0
        self._wake_first()
        self._done.notify()  # a consumer waiting for a free place
        self._start_threads()

    def _holding(self) -> bool:
        """True while the read threads start nothing: an adaptive window
        probing (no latency and time per file measured yet) or bypassed
        (the consumer reads each queued file itself; the module doc)."""
        return self.options.max_depth is not None and (
            self._bypass or not (self._latency and self._per_file))

    def _pruned_queue(self) -> deque[_Entry]:
        """The queue, its front cleared of entries dropped or already taken
        (by a read thread, or by the consumer itself)."""
        queue = self._queue
        while queue and (queue[0].dropped or queue[0].state != _QUEUED):
            queue.popleft()
        return queue

    def _next_queued(self) -> Optional[_Entry]:
        if self._started >= self._depth or self._holding():
            return None
        queue = self._pruned_queue()
        return queue.popleft() if queue else None

    def _start_threads(self) -> None:
        """Wakes (or starts) threads for the queued reads the count bound lets start."""
        if self._holding():
            return
        want = min(len(self._pruned_queue()), self._depth - self._started)
        if want <= 0:
            return
        self._work.notify(want)
        while self._idle < want and len(self._threads) < self._depth:
            t = threading.Thread(target=self._run, name="fastdecode-read", daemon=True)
            self._threads.append(t)
            self._idle += 1  # counted idle until it takes a read
            t.start()

    def _claim(self, entry: _Entry) -> None:
        entry.state = _STARTED
        self._started += 1
        self.counters["started"] += 1
        self.counters["peak_in_flight"] = max(self.counters["peak_in_flight"], self._started)

    def _first_unreserved(self) -> Optional[_Entry]:
        waiting = self._unreserved
        while waiting and (waiting[0].dropped or waiting[0].reserved is not None):
            waiting.popleft()
        return waiting[0] if waiting else None

    def _wake_first(self) -> None:
        """Wakes the read thread of the first entry still to reserve its
        bytes, if it waits (room was made, or the one before it reserved)."""
        first = self._first_unreserved()
        if first is not None and first.room is not None:
            first.room.notify()

    def _reserve(self, entry: _Entry, size: int) -> bool:
        """Waits until ``entry`` may hold ``size`` bytes: in submission order,
        within the cap (alone when larger than the cap). False: it was
        dropped meanwhile, nothing reserved, not to be read."""
        cap = self.options.max_bytes
        while not (entry.dropped or (self._first_unreserved() is entry
                                     and (self._bytes + size <= cap or self._bytes == 0))):
            if entry.room is None:
                entry.room = threading.Condition(self._lock)
            entry.room.wait()
        if entry.dropped:
            entry.reserved = 0
            self._wake_first()
            return False
        entry.reserved = size
        self._bytes += size
        self.counters["peak_bytes"] = max(self.counters["peak_bytes"], self._bytes)
        self._wake_first()  # the next in order may reserve now
        return True

    # -- the read threads --------------------------------------------------

    def _run(self) -> None:
        with self._lock:
            while True:
                if self._closed or self._pid != os.getpid():
                    self._idle -= 1
                    return
                entry = self._next_queued()
                if entry is None:
                    self._work.wait()
                    continue
                self._idle -= 1
                self._claim_and_read(entry)
                self._idle += 1

    def _claim_and_read(self, entry: _Entry) -> None:
        """Claims ``entry`` and reads it, the lock released meanwhile (called
        and returning under the lock)."""
        self._claim(entry)
        self._lock.release()
        try:
            self._read(entry)
        finally:
            self._lock.acquire()

    def _read(self, entry: _Entry) -> None:
        """Reads ``entry`` (in a read thread, or the consumer's)."""
        data: Optional[bytes] = None
        error: Optional[BaseException] = None
        began = self.clock()
        waited = 0.0  # for its bytes' room: not the storage's latency
        try:
            opened = self.reader.open(entry.path)
            size = entry.size if entry.size is not None else opened.size
            with self._lock:
                if size is None:
                    size = self._largest or max(1, self.options.max_bytes // self._depth)
                opened_at = self.clock()
                wanted = self._reserve(entry, size)
                waited = self.clock() - opened_at
            if wanted:
                data = opened.read()
            else:
                close = getattr(opened, "close", None)
                if close is not None:
                    close()
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, raised in take()
            error = exc
        with self._lock:
            if entry.reserved is None:  # failed before it reserved: the next one may
                entry.reserved = 0
                self._wake_first()
            if data is not None:
                self._largest = max(self._largest, len(data))
                self._measured(self.clock() - began - waited)
                if len(data) > entry.reserved:  # an unknown size, or a file that grew
                    self._bytes += len(data) - entry.reserved
                    entry.reserved = len(data)
                    self.counters["peak_bytes"] = max(self.counters["peak_bytes"], self._bytes)
            if error is not None:
                self.counters["failed"] += 1
            entry.data, entry.error, entry.state = data, error, _DONE
            if entry.dropped:
                entry.data = entry.error = None
                self._release(entry)
            else:
                self._done.notify()
