"""SharedCache (fastdecode/storage/_cache.py) on its own, at its edges: the
space check with /dev/shm or the RAM unknown or short, a cache file name
taken, a failed setup leaking no descriptor, indexes outside the table, an
empty sample, /dev/shm filling up mid-run (said once, never a bus error),
a failed record lock releasing the thread lock, copies sharing the cache,
a spawned worker's attach, close. test_cache.py covers the datasets' use."""

from __future__ import annotations

import copy
import errno
import io
import os

import pytest

from fastdecode.errors import CacheSpaceError
from fastdecode.storage import _cache
from fastdecode.storage._cache import SharedCache

MiB = 1 << 20


def _open_fds() -> set[str]:
    """This process's descriptors of cache files (other threads of a test
    session may open and close others meanwhile)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if "fastdecode-cache-" in target:
            out.add(f"{fd}:{target}")
    return out


@pytest.fixture
def cache():
    c = SharedCache(64 * 1024, 4)
    yield c
    c.close()


# -- available_ram -------------------------------------------------------------

def test_available_ram_reads_memavailable():
    ram = _cache.available_ram()
    assert ram is not None and ram > 0 and ram % 1024 == 0


def _meminfo(text):
    def fake_open(path, *args, **kwargs):
        assert path == "/proc/meminfo"
        if isinstance(text, Exception):
            raise text
        return io.StringIO(text)
    return fake_open


@pytest.mark.parametrize("meminfo", [
    PermissionError(errno.EACCES, "Permission denied"),
    "MemTotal:       16000000 kB\nMemAvailable:\n",
    "MemAvailable:   lots kB\n",
    "MemTotal:       16000000 kB\nMemFree:         8000000 kB\n",
], ids=["unreadable", "no-number", "not-a-number", "no-memavailable-line"])
def test_available_ram_is_unknown_when_meminfo_does_not_say(monkeypatch, meminfo):
    monkeypatch.setattr(_cache, "open", _meminfo(meminfo), raising=False)
    assert _cache.available_ram() is None


# -- the space check -------------------------------------------------------------

class _Usage:
    def __init__(self, free):
        self.f_bavail, self.f_frsize = free // 4096, 4096


@pytest.mark.parametrize("shm_free, ram, named, not_named", [
    (1 * MiB, 1 << 40, ["/dev/shm has 1 MiB free", "--shm-size"], ["available RAM"]),
    (1 << 40, 2 * MiB, ["the available RAM is 2 MiB"], ["--shm-size"]),
    (1 * MiB, 2 * MiB, ["/dev/shm has 1 MiB free", "; the available RAM is 2 MiB"], []),
], ids=["shm-short", "ram-short", "both-short"])
def test_the_space_error_names_what_is_short(monkeypatch, shm_free, ram, named, not_named):
    monkeypatch.setattr(_cache.os, "statvfs", lambda d: _Usage(shm_free))
    monkeypatch.setattr(_cache, "available_ram", lambda: ram)
    with pytest.raises(CacheSpaceError, match=r"cache=16777216 \(16 MiB, plus 0 MiB for its "
                                              r"table of 10 samples\) does not fit: ") as info:
        SharedCache(16 * MiB, 10, directory="/dev/shm")
    for text in named:
        assert text in str(info.value)
    for text in not_named:
        assert text not in str(info.value)
    assert str(info.value).endswith(": pass a smaller cache= or free the space")


def test_space_unknown_is_not_refused(monkeypatch, tmp_path):
    def no_statvfs(directory):
        raise OSError(errno.ENOSYS, "Function not implemented")
    monkeypatch.setattr(_cache.os, "statvfs", no_statvfs)
    monkeypatch.setattr(_cache, "available_ram", lambda: None)
    c = SharedCache(4096, 1, directory=str(tmp_path))
    try:
        assert c.put(0, "a", b"xyz") and c.get(0, "a") == b"xyz"
    finally:
        c.close()


def test_a_bad_capacity_is_refused():
    with pytest.raises(ValueError, match="cache= must be a budget of at least 1 byte, got 0"):
        SharedCache(0, 4)


# -- creating the file -----------------------------------------------------------

def _taken_name(directory, suffix: bytes) -> str:
    return os.path.join(directory, f"fastdecode-cache-{os.getpid()}-{suffix.hex()}")


def test_a_taken_name_is_skipped(monkeypatch, tmp_path):
    taken, free = b"\x01" * 6, b"\x02" * 6
    open(_taken_name(tmp_path, taken), "w").close()
    draws = iter([taken, free])
    monkeypatch.setattr(_cache.os, "urandom", lambda n: next(draws))
    c = SharedCache(4096, 1, directory=str(tmp_path))
    try:
        assert os.listdir(tmp_path) == [os.path.basename(_taken_name(tmp_path, taken))]
        assert c.put(0, "a", b"1")  # its own file, already unlinked
    finally:
        c.close()


def test_no_free_name_after_100_tries_is_an_error(monkeypatch, tmp_path):
    taken = b"\x03" * 6
    open(_taken_name(tmp_path, taken), "w").close()
    monkeypatch.setattr(_cache.os, "urandom", lambda n: taken)
    before = _open_fds()
    with pytest.raises(FileExistsError, match=f"cannot create a cache file in {tmp_path}"):
        SharedCache(4096, 1, directory=str(tmp_path))
    assert _open_fds() == before


def test_a_failed_setup_closes_its_descriptor(monkeypatch, tmp_path):
    def no_room(fd, size):
        raise OSError(errno.EFBIG, "File too large")
    monkeypatch.setattr(_cache.os, "ftruncate", no_room)
    before = _open_fds()
    with pytest.raises(OSError, match="File too large"):
        SharedCache(4096, 1, directory=str(tmp_path))
    assert _open_fds() == before
    assert os.listdir(tmp_path) == []  # unlinked at birth


# -- use -----------------------------------------------------------------------

@pytest.mark.parametrize("index", [-1, 4, 100], ids=["negative", "one-past-the-end", "far"])
def test_an_index_outside_the_table_is_never_stored(cache, index):
    assert cache.put(index, "p", b"data") is False
    assert cache.holds(index, "p") is False
    assert cache.get(index, "p") is None
    assert cache.stats() == {"hits": 0, "misses": 1, "stored": 0, "rejected": 0, "used": 0,
                             "capacity": 64 * 1024}


def test_holds_checks_the_path_and_does_not_count(cache):
    assert cache.put(1, "a.jpg", b"bytes")
    assert cache.holds(1, "a.jpg") and not cache.holds(1, "b.jpg") and not cache.holds(2, "a.jpg")
    assert cache.stats()["hits"] == cache.stats()["misses"] == 0


def test_an_empty_sample_is_stored(cache):
    assert cache.put(0, "empty", b"") is True
    assert cache.get(0, "empty") == b""
    assert cache.put(0, "empty", b"again") is False  # stored once
    assert cache.stats()["stored"] == 1 and cache.stats()["used"] == 0


def test_a_sample_past_the_budget_is_rejected(cache):
    assert cache.put(0, "big", b"x" * (64 * 1024 + 1)) is False
    assert cache.put(1, "fits", b"x" * (64 * 1024)) is True
    assert cache.stats()["rejected"] == 1 and cache.stats()["used"] == 64 * 1024


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.ENOMEM], ids=["ENOSPC", "ENOMEM"])
def test_dev_shm_filling_up_stops_the_filling_said_once(cache, monkeypatch, code):
    def full(fd, offset, length):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(_cache.os, "posix_fallocate", full)
    with pytest.warns(RuntimeWarning, match=r"cache stopped filling: /dev/shm ran out of space "
                                            rf"\({os.strerror(code)}\)"):
        assert cache.put(0, "a", b"abc") is False
    assert cache.put(1, "b", b"def") is False  # no second warning (warnings are errors)
    # left FILLING: never served, never stored again
    assert cache.get(0, "a") is None and not cache.holds(0, "a")
    monkeypatch.undo()
    assert cache.put(0, "a", b"abc") is False
    assert cache.put(2, "c", b"ghi") is True and cache.get(2, "c") == b"ghi"


def test_another_fallocate_error_is_raised(cache, monkeypatch):
    def broken(fd, offset, length):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(_cache.os, "posix_fallocate", broken)
    with pytest.raises(OSError, match="Input/output error"):
        cache.put(0, "a", b"abc")


def test_a_failed_record_lock_releases_the_thread_lock(cache, monkeypatch):
    real = _cache.fcntl.lockf

    def deadlock(fd, cmd, *args):
        if cmd == _cache.fcntl.LOCK_EX:
            raise OSError(errno.EDEADLK, "Resource deadlock avoided")
        return real(fd, cmd, *args)
    monkeypatch.setattr(_cache.fcntl, "lockf", deadlock)
    with pytest.raises(OSError, match="deadlock"):
        cache.put(0, "a", b"abc")
    assert not cache._lock.locked()
    monkeypatch.undo()
    assert cache.put(0, "a", b"abc") is True  # the next call is not stuck


# -- sharing -------------------------------------------------------------------

@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_copies_of_a_dataset_share_its_cache(cache, make_copy):
    assert make_copy(cache) is cache
    assert make_copy({"cache": cache})["cache"] is cache


class _DupFd:
    """What a spawned worker unpickles: a descriptor to detach."""

    def __init__(self, fd):
        self.fd = fd

    def detach(self):
        return self.fd


@pytest.mark.parametrize("wrap", [_DupFd, int], ids=["dupfd", "plain-fd"])
def test_an_attached_cache_shares_the_bytes_and_counters(cache, wrap):
    assert cache.put(0, "a", b"shared")
    other = _cache._attach_shared(wrap(os.dup(cache._mapping.fd)), cache.capacity, cache.entries)
    try:
        assert other.get(0, "a") == b"shared"
        assert other.put(1, "b", b"back")
        assert cache.get(1, "b") == b"back"
        assert cache.stats() == other.stats()
        assert cache.stats()["hits"] == 2 and cache.stats()["stored"] == 2
    finally:
        other.close()
    assert cache.get(0, "a") == b"shared"  # the first mapping is still open


def test_close_is_idempotent_and_frees_the_descriptor(tmp_path):
    before = _open_fds()
    c = SharedCache(4096, 1, directory=str(tmp_path))
    assert not c.closed and _open_fds() != before
    c.close()
    assert c.closed and _open_fds() == before
    c.close()
    assert c.closed
