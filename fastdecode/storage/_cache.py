"""The shared RAM cache of a dataset's encoded file bytes, one for all workers and epochs.

``cache=`` of the datasets is its byte budget. The cache is one unlinked file
in /dev/shm (nothing is ever left there, whatever kills the processes) that
forked workers inherit and spawned ones receive with the pickled dataset: a
header (the fill pointer, the shared counters), one table entry per sample
(state, offset, length, a hash of its path), then the bytes. A sample is
stored once, never evicted: claimed under a POSIX record lock (and a thread
lock), written, then published (FILLED); an entry a killed process left
FILLING is read from its file from then on; a hit checks the path's hash.
Past the budget, samples are read from their files (``rejected``). The budget
is checked against /dev/shm's free space and the available RAM before
anything is filled (:class:`~fastdecode.errors.CacheSpaceError`); space is
reserved with ``posix_fallocate`` before each write, so a full /dev/shm stops
the filling, never a bus error. Publication relies on the lock's system calls
ordering the writes (x86-64; a weakly ordered CPU is not verified). Decision
record: docs/decisions/storage.md, "The RAM cache of encoded bytes".
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import struct
import threading
import warnings
import weakref
from multiprocessing import context as mp_context
from multiprocessing import reduction
from typing import Any, Optional

from fastdecode._system import SHM_PATH
from fastdecode.errors import CacheSpaceError

__all__ = ["SharedCache", "available_ram"]

_MAGIC = 0x46444341434845  # "FDCACHE"
_HEADER = struct.Struct("<8q")  # magic, entries, capacity, used, hits, misses, stored, rejected
_ENTRY = struct.Struct("<4q")  # state, offset, length, path hash
_EMPTY, _FILLING, _FILLED = 0, 1, 2
_USED, _HITS, _MISSES, _STORED, _REJECTED = 3, 4, 5, 6, 7


def available_ram() -> Optional[int]:
    """MemAvailable of /proc/meminfo, in bytes (None where unreadable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _path_hash(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(os.fsencode(path), digest_size=8).digest(),
                          "little", signed=True)


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


class _Mapping:
    """The descriptor and its mapping (closed by the cache's finalizer)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def close(self) -> None:
        try:
            self.map.close()
        finally:
            os.close(self.fd)


class SharedCache:
    """``entries`` samples' encoded bytes, ``capacity`` bytes in all, in one
    shared-memory file (see the module doc)."""

    def __init__(self, capacity: int, entries: int, directory: str = SHM_PATH) -> None:
        if capacity < 1:
            raise ValueError(f"cache= must be a budget of at least 1 byte, got {capacity}")
        self.capacity = capacity
        self.entries = entries
        self._check_space(directory)
        fd = self._create(directory)
        try:
            os.ftruncate(fd, self._size)
            self._attach(fd)
        except BaseException:
            os.close(fd)
            raise
        _HEADER.pack_into(self._mapping.map, 0, _MAGIC, entries, capacity, 0, 0, 0, 0, 0)

    @property
    def _table_bytes(self) -> int:
        return _HEADER.size + _ENTRY.size * self.entries

    @property
    def _data_start(self) -> int:
        return -(-self._table_bytes // mmap.PAGESIZE) * mmap.PAGESIZE

    @property
    def _size(self) -> int:
        return self._data_start + self.capacity

    def _check_space(self, directory: str) -> None:
        need = self._size
        try:
            usage = os.statvfs(directory)
            free: Optional[int] = usage.f_bavail * usage.f_frsize
        except OSError:
            free = None
        ram = available_ram()
        short = []
        if free is not None and need > free:
            short.append(f"{directory} has {_mib(free)} free (docker run --shm-size=...; "
                         f"Kubernetes: an emptyDir with medium: Memory on /dev/shm)")
        if ram is not None and need > ram:
            short.append(f"the available RAM is {_mib(ram)}")
        if short:
            raise CacheSpaceError(
                f"cache={self.capacity} ({_mib(self.capacity)}, plus {_mib(self._table_bytes)} "
                f"for its table of {self.entries} samples) does not fit: "
                + "; ".join(short) + ": pass a smaller cache= or free the space")

    @staticmethod
    def _create(directory: str) -> int:
        for _ in range(100):
            name = os.path.join(directory, f"fastdecode-cache-{os.getpid()}-{os.urandom(6).hex()}")
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            os.unlink(name)  # nothing left behind, whatever happens next
            return fd
        raise FileExistsError(f"cannot create a cache file in {directory}")

    def _attach(self, fd: int) -> None:
        self._mapping = _Mapping(fd, self._size)
        self._finalizer = weakref.finalize(self, self._mapping.close)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._warned = False

    # -- sharing with workers -------------------------------------------------

    def __reduce__(self) -> Any:
        if mp_context.get_spawning_popen() is None:
            # pickled to somewhere else (a file, a copy): a cache of its own there
            return (SharedCache, (self.capacity, self.entries))
        return (_attach_shared, (reduction.DupFd(self._mapping.fd), self.capacity, self.entries))

    def __deepcopy__(self, memo: dict) -> "SharedCache":
        return self  # one cache per process tree: copies of the dataset share it

    def __copy__(self) -> "SharedCache":
        return self

    # -- the lock -----------------------------------------------------------

    def _locked(self) -> "_Locked":
        if self._pid != os.getpid():  # a forked child: the parent's thread lock may be held
            self._pid = os.getpid()
            self._lock = threading.Lock()
        return _Locked(self)

    def _header(self, field: int) -> int:
        return struct.unpack_from("<q", self._mapping.map, 8 * field)[0]

    def _add(self, field: int, n: int = 1) -> None:  # under the lock
        struct.pack_into("<q", self._mapping.map, 8 * field, self._header(field) + n)

    def _entry_at(self, index: int) -> int:
        return _HEADER.size + _ENTRY.size * index

    # -- use -----------------------------------------------------------------

    def holds(self, index: int, path: str) -> bool:
        """True when sample ``index`` (at ``path``) is stored (not counted)."""
        if not 0 <= index < self.entries:
            return False
        state, _, _, key = _ENTRY.unpack_from(self._mapping.map, self._entry_at(index))
        return state == _FILLED and key == _path_hash(path)

    def get(self, index: int, path: str) -> Optional[bytes]:
        """The cached bytes of sample ``index`` (at ``path``), or None (a miss)."""
        m = self._mapping.map
        if not 0 <= index < self.entries:  # samples appended after the cache was made
            with self._locked():
                self._add(_MISSES)
            return None
        state, offset, length, key = _ENTRY.unpack_from(m, self._entry_at(index))
        hit = state == _FILLED and key == _path_hash(path)
        with self._locked():
            self._add(_HITS if hit else _MISSES)
        if not hit:
            return None
        start = self._data_start + offset
        return m[start:start + length]

    def put(self, index: int, path: str, data: bytes) -> bool:
        """Stores sample ``index``'s bytes unless it is stored (or being
        stored) already or the budget is spent; True when this call stored them."""
        m = self._mapping.map
        if not 0 <= index < self.entries:
            return False
        at = self._entry_at(index)
        n = len(data)
        with self._locked():
            if _ENTRY.unpack_from(m, at)[0] != _EMPTY:
                return False
            offset = self._header(_USED)
            if offset + n > self.capacity:
                self._add(_REJECTED)
                return False
            struct.pack_into("<q", m, 8 * _USED, offset + n)
            _ENTRY.pack_into(m, at, _FILLING, offset, n, _path_hash(path))
        start = self._data_start + offset
        try:
            if n:
                os.posix_fallocate(self._mapping.fd, start, n)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.ENOMEM):
                raise
            self._warn_full(exc)
            return False  # left FILLING: read from its file from now on
        m[start:start + n] = data
        with self._locked():
            _ENTRY.pack_into(m, at, _FILLED, offset, n, _path_hash(path))
            self._add(_STORED)
        return True

    def _warn_full(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"the dataset's cache stopped filling: /dev/shm ran out of space "
                          f"({exc.strerror}); the samples not cached are read from their files",
                          RuntimeWarning, stacklevel=4)

    def stats(self) -> dict[str, int]:
        """hits, misses, stored (samples), rejected (past the budget),
        used and capacity (bytes): counted over every process using it."""
        values = _HEADER.unpack_from(self._mapping.map, 0)
        return {"hits": values[_HITS], "misses": values[_MISSES], "stored": values[_STORED],
                "rejected": values[_REJECTED], "used": values[_USED], "capacity": self.capacity}

    def close(self) -> None:
        """Unmaps the cache here (its memory is freed once no process maps it)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


class _Locked:
    """The cache's lock: the thread lock, then the record lock on byte 0."""

    __slots__ = ("cache",)

    def __init__(self, cache: SharedCache) -> None:
        self.cache = cache

    def __enter__(self) -> None:
        self.cache._lock.acquire()
        try:
            fcntl.lockf(self.cache._mapping.fd, fcntl.LOCK_EX, 1, 0)
        except BaseException:
            self.cache._lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            fcntl.lockf(self.cache._mapping.fd, fcntl.LOCK_UN, 1, 0)
        finally:
            self.cache._lock.release()


def _attach_shared(fd: Any, capacity: int, entries: int) -> SharedCache:
    """A spawned worker's side of :meth:`SharedCache.__reduce__`."""
    cache = SharedCache.__new__(SharedCache)
    cache.capacity, cache.entries = capacity, entries
    cache._attach(fd.detach() if hasattr(fd, "detach") else fd)
    return cache
