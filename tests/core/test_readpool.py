"""The read pool in C (src_c/fd_readahead.c, ``fastdecode._native.ReadPool``)
and the window over it (``_reads._NativeWindow``), on real local files:
whole files in order at the mapping sizes' edges, the count and byte bounds
never exceeded, drops and keys, a failed read raised at its own take naming
its file, files that changed after their size was known, mappings reused,
fork, close and reuse, and a random mix of submits, drops and takes checked
against the files (run under ASan and UBSan by ``make test``)."""

import errno
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fastdecode import _native, _options
from fastdecode.storage import _readers, _reads
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._reads import open_window
from fastdecode.storage._window import ReadAhead

from helpers.trees import random_files

ReadPool = _native.ReadPool
HERE = Path(__file__).resolve().parent
SRC_C = HERE.parent.parent / "src_c"


def _content(path):
    with open(path, "rb") as f:
        return f.read()


def _window(depth, cap=64 << 20, max_depth=None):
    window = open_window(ReadAheadOptions(depth, cap, max_depth))
    assert type(window) is _reads._NativeWindow
    return window


# ---------------------------------------------------------------------------
# which engine


class _Callable:
    def __call__(self, path):
        return b""


@pytest.mark.parametrize("reader,native", [
    pytest.param(None, True, id="local-files"),
    pytest.param(_readers.LocalReader(), True, id="local-reader"),
    pytest.param(_Callable(), False, id="a-callable"),
])
def test_local_files_are_read_on_threads_in_c(reader, native):
    window = open_window(ReadAheadOptions(4), reader)
    assert (type(window) is _reads._NativeWindow) is native
    assert isinstance(window, ReadAhead)


def test_the_switch_reads_local_files_on_python_threads(monkeypatch):
    monkeypatch.setenv(_reads.NATIVE_READS_ENV, "0")
    assert type(open_window(ReadAheadOptions(4))) is ReadAhead


# ---------------------------------------------------------------------------
# the window over the pool

EDGES = [0, 1, 4095, 65_535, 65_536, 65_537, 131_072, 300_000]


@pytest.mark.parametrize("depth", [1, 3, 16], ids=lambda d: f"depth{d}")
def test_whole_files_in_order_at_the_mapping_edges(tmp_path, depth):
    paths = random_files(tmp_path, EDGES * 2)
    window = _window(depth)
    window.submit(paths)
    assert [window.take(p) for p in paths] == [_content(p) for p in paths]
    stats = window.stats()
    assert stats["taken"] == len(paths) and stats["started"] == len(paths)
    assert stats["in_flight"] == 0 and stats["in_flight_bytes"] == 0
    window.close()


BOUNDS = [
    pytest.param(1, 1 << 20, id="depth1"),
    pytest.param(4, 1 << 20, id="depth4-count-bound"),
    pytest.param(16, 150_000, id="depth16-byte-bound"),
    pytest.param(32, 64 << 20, id="depth32"),
]


@pytest.mark.parametrize("depth,cap", BOUNDS)
def test_bounds_never_exceeded(tmp_path, depth, cap):
    sizes = [random.Random(i).randrange(1, 60_000) for i in range(120)]
    paths = random_files(tmp_path, sizes)
    window = _window(depth, cap)
    for start in range(0, len(paths), 40):  # batches of 40, each submitted whole
        window.submit(paths[start:start + 40])
        for p in paths[start:start + 40]:
            assert window.take(p) == _content(p)
    stats = window.stats()
    assert stats["peak_in_flight"] <= depth
    assert stats["peak_bytes"] <= cap
    assert stats["taken"] == len(paths)
    window.close()


def test_a_file_larger_than_the_cap_is_read_alone(tmp_path):
    paths = random_files(tmp_path, [10_000, 500_000, 10_000])
    window = _window(8, 100_000)
    window.submit(paths)
    assert [window.take(p) for p in paths] == [_content(p) for p in paths]
    assert window.stats()["peak_bytes"] == 500_000
    window.close()


def test_a_batch_that_did_not_come_is_dropped_and_its_bytes_released(tmp_path):
    paths = random_files(tmp_path, [20_000] * 30)
    window = _window(8, 1 << 20)
    window.submit(paths[:20])  # this batch, and the one predicted next
    for p in paths[:10]:
        window.take(p)
    window.submit(paths[20:])  # another batch came instead
    for p in paths[20:]:
        assert window.take(p) == _content(p)
    window.close()  # waits for the dropped reads still running
    stats = window.stats()
    assert stats["dropped"] == 10 and stats["taken"] == 20


def test_a_keyed_submit_is_added_once_and_a_path_twice_is_read_twice(tmp_path):
    paths = random_files(tmp_path, [5000, 6000, 7000])
    window = _window(4)
    batch = [paths[0], paths[1], paths[0]]
    window.submit(batch, key=(0, 1, 0))
    window.submit(batch, key=(0, 1, 0))  # the same batch, again: nothing added
    assert [window.take(p) for p in batch] == [_content(p) for p in batch]
    window.submit([paths[2]], key=(0, 1, 0))  # its reads were taken: added
    assert window.take(paths[2]) == _content(paths[2])
    stats = window.stats()
    assert stats["submitted"] == 4 and stats["taken"] == 4 and stats["direct"] == 0
    window.close()


def test_a_path_never_submitted_is_read_by_the_consumer(tmp_path):
    paths = random_files(tmp_path, [5000, 6000])
    window = _window(4)
    window.submit(paths[:1])
    assert window.take(paths[1]) == _content(paths[1])  # read here, the first left
    assert window.take(paths[0]) == _content(paths[0])
    stats = window.stats()
    assert stats["direct"] == 1 and stats["taken"] == 1 and stats["dropped"] == 0
    window.close()


def _break(path, how):
    os.remove(path)
    if how == "a-directory":
        os.mkdir(path)


@pytest.mark.parametrize("how", ["missing", "a-directory"])
@pytest.mark.parametrize("native", [True, False], ids=["c-threads", "python-threads"])
def test_a_failed_read_is_raised_at_its_own_take_naming_its_file(tmp_path, how, native,
                                                                monkeypatch):
    monkeypatch.setenv(_reads.NATIVE_READS_ENV, "1" if native else "0")
    paths = random_files(tmp_path, [5000] * 5)
    _break(paths[2], how)
    window = open_window(ReadAheadOptions(4))
    window.submit(paths)
    for i, p in enumerate(paths):
        if i == 2:
            with pytest.raises(OSError, match=f"{'No such file' if how == 'missing' else 'Is a directory'}"):
                window.take(p)
        else:
            assert window.take(p) == _content(p)
    assert window.stats()["failed"] == 1
    window.close()


def test_a_path_with_a_null_byte_is_refused_as_os_open_refuses_it(tmp_path):
    pool = ReadPool(1 << 20)
    with pytest.raises(ValueError, match="embedded null byte"):
        pool.submit(str(tmp_path / "a\0b.jpg"))
    with pytest.raises(ValueError, match="embedded null byte"):
        os.open(str(tmp_path / "a\0b.jpg"), os.O_RDONLY)
    pool.close()


def test_the_c_pool_names_the_file_it_could_not_read(tmp_path):
    path = str(tmp_path / "gone.jpg")
    pool = ReadPool(1 << 20)
    pool.configure(2, False)
    with pytest.raises(FileNotFoundError, match="No such file or directory: '.*gone.jpg'"):
        pool.take(pool.submit(path), path)
    pool.close()


@pytest.mark.parametrize("given", [100, 90_000, 0],
                         ids=["grew-past-its-size", "shorter-than-its-size", "given-as-empty"])
def test_a_size_given_at_submit_that_is_not_the_file_s(tmp_path, given):
    """A listing's size that is no longer the file's (it grew or shrank
    since): the whole file is read, the bytes held counted as they are."""
    path, = random_files(tmp_path, [70_000])
    pool = ReadPool(1 << 20)
    pool.configure(2, False)
    data, latency, _ = pool.take(pool.submit(path, given), path)
    assert data == _content(path) and latency >= 0
    assert pool.stats()["peak_bytes"] == max(given, 70_000)
    pool.close()


# ---------------------------------------------------------------------------
# a file read in the calling thread (LocalReader.open)


@pytest.mark.parametrize("size", EDGES, ids=lambda n: f"{n}B")
def test_a_local_file_is_read_whole_with_its_size(tmp_path, size):
    path, = random_files(tmp_path, [size])
    opened = _readers.LocalReader().open(path)
    assert opened.size == size and opened.path == path
    assert opened.read() == _content(path)


@pytest.mark.parametrize("change", [
    pytest.param(lambda f: f.write(os.urandom(70_000)), id="grew-after-open"),
    pytest.param(lambda f: f.write(os.urandom(300_000)), id="grew-past-its-double"),
    pytest.param(lambda f: f.truncate(1000), id="shrank-after-open"),
    pytest.param(lambda f: f.truncate(0), id="emptied-after-open"),
])
def test_a_local_file_that_changed_after_open_is_read_as_it_now_is(tmp_path, change):
    path, = random_files(tmp_path, [5000])
    opened = _native.LocalFile(path)
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        change(f)
    assert opened.size == 5000
    assert opened.read() == _content(path)


@pytest.mark.parametrize("how, error, match", [
    pytest.param("missing", FileNotFoundError, "No such file or directory: '.*a.jpg'",
                 id="missing"),
    pytest.param("a-directory", IsADirectoryError, "Is a directory: '.*a.jpg'",
                 id="a-directory"),
])
def test_a_local_file_that_cannot_be_read_names_itself(tmp_path, how, error, match):
    path = str(tmp_path / "a.jpg")
    if how == "a-directory":
        os.mkdir(path)
    with pytest.raises(error, match=match) as caught:
        _readers.LocalReader().open(path).read()
    assert caught.value.filename == path


def _odd(dirs, kind):
    """A path that is not a regular file of its size; (path, error, match)."""
    tmp, shm = dirs
    path = tmp / f"{kind}.jpg"
    if kind == "a-fifo":  # its open would wait for a writer; a read, for its bytes
        os.mkfifo(path)
    elif kind == "dev-zero":  # its size is 0 and its bytes never end
        os.symlink("/dev/zero", path)
    elif kind == "a-directory":
        os.mkdir(path)
        return str(path), IsADirectoryError, "Is a directory"
    else:  # sparse: larger than any bytes object, or than any address space
        size, message = ((2**63 - 1, "File too large") if kind == "larger-than-a-bytes-object"
                         else (2**50, "Cannot allocate memory"))
        path = shm / f"{kind}.jpg"
        path.touch()
        try:
            os.truncate(path, size)
        except OSError as exc:
            pytest.skip(f"no file system here holds a {size} byte file: {exc}")
        return str(path), OSError, message
    return str(path), OSError, r"not a regular file \(a device, a FIFO or a socket\)"


ODD_FILES = ["a-fifo", "dev-zero", "a-directory", "larger-than-a-bytes-object",
             "a-petabyte"]


@pytest.fixture
def odd_dirs(tmp_path):
    """(tmp_path, a folder on tmpfs, where a sparse file may be 2**63 - 1 bytes)."""
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    shm = shm / f"fd-test-{os.getpid()}"
    shm.mkdir(exist_ok=True)
    yield tmp_path, shm
    shutil.rmtree(shm, ignore_errors=True)


@pytest.mark.timeout(30)  # a FIFO's open or /dev/zero's read would never return
@pytest.mark.parametrize("reader", ["the-consumer", "the-pool"])
@pytest.mark.parametrize("kind", ODD_FILES)
def test_a_path_that_is_not_a_regular_file_is_refused_naming_it(odd_dirs, monkeypatch, kind,
                                                                reader):
    """(With the per-file limit lifted: the sparse files are over the default;
    the limit has its own tests below.)"""
    monkeypatch.setenv(_options.MAX_FILE_BYTES_ENV, str(2**63 - 1))
    path, error, match = _odd(odd_dirs, kind)
    with pytest.raises(error, match=f"{match}: '.*{os.path.basename(path)}'") as caught:
        if reader == "the-consumer":
            _readers.LocalReader().open(path).read()
        else:
            pool = ReadPool(1 << 20)
            pool.configure(2, False)
            try:
                pool.take(pool.submit(path), path)
            finally:
                pool.close()
    assert caught.value.filename == path


# ---------------------------------------------------------------------------
# the per-file limit (FASTDECODE_MAX_FILE_BYTES)


LIMIT = 100_000
OVER_THE_LIMIT = (r"larger than the per-file limit of 100,000 bytes \(set "
                  r"FASTDECODE_MAX_FILE_BYTES to read larger files\): '.*a.jpg'")


def _read_by(reader, path, given=-1):
    """``path``'s bytes as ``reader`` reads it (the limit from the environment);
    a pool's OSError carries the pool's stats after it (``pool_stats``)."""
    if reader == "the-consumer":
        return _readers.LocalReader().open(path).read()
    pool = ReadPool(1 << 20)
    pool.configure(2, False)
    try:
        return pool.take(pool.submit(path, given), path)[0]
    except OSError as exc:
        exc.pool_stats = pool.stats()
        raise
    finally:
        pool.close()


READERS = ["the-consumer", "the-pool", "the-pool-size-given"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT, LIMIT + 1, 1 << 40],
                         ids=["under", "at", "one-byte-over", "a-sparse-tib"])
def test_a_file_over_the_per_file_limit_is_refused_from_its_size(tmp_path, monkeypatch,
                                                                 reader, size):
    """Refused before anything is reserved, mapped or allocated (the pool's
    stats; a sparse TiB would not fit this machine's memory); EFBIG naming
    the file and the variable that raises the limit."""
    monkeypatch.setenv(_options.MAX_FILE_BYTES_ENV, str(LIMIT))
    path = str(tmp_path / "a.jpg")
    with open(path, "wb") as f:
        f.write(os.urandom(min(size, 4096)))
        f.truncate(size)
    given = size if reader == "the-pool-size-given" else -1
    if size > LIMIT:
        with pytest.raises(OSError, match=OVER_THE_LIMIT) as caught:
            _read_by(reader, path, given)
        assert caught.value.errno == errno.EFBIG and caught.value.filename == path
        if reader != "the-consumer":
            stats = caught.value.pool_stats
            assert stats["failed"] == 1 and stats["mappings"] == stats["peak_bytes"] == 0
    else:
        assert _read_by(reader, path, given) == _content(path)


@pytest.mark.parametrize("reader", ["the-consumer", "the-pool-size-given"])
@pytest.mark.parametrize("grown", [LIMIT, LIMIT + 1, 10 * LIMIT],
                         ids=["to-the-limit", "one-byte-over", "far-over"])
def test_a_file_that_grew_past_the_limit_is_refused_at_it(tmp_path, monkeypatch, reader, grown):
    """A file longer than its size when read (it grew after open, or after
    the listing that gave its size) is read to one byte past the limit, no
    further, and refused."""
    monkeypatch.setenv(_options.MAX_FILE_BYTES_ENV, str(LIMIT))
    path, = random_files(tmp_path, [5000])
    opened = _native.LocalFile(path) if reader == "the-consumer" else None
    with open(path, "ab") as f:
        f.write(os.urandom(grown - 5000))
    if grown > LIMIT:
        with pytest.raises(OSError, match=OVER_THE_LIMIT.replace("a.jpg", "")) as caught:
            opened.read() if opened else _read_by(reader, path, 5000)
        assert caught.value.errno == errno.EFBIG
    else:
        assert (opened.read() if opened else _read_by(reader, path, 5000)) == _content(path)


@pytest.mark.parametrize("text, want", [
    pytest.param("", _options.DEFAULT_MAX_FILE_BYTES, id="unset"),
    pytest.param("2KiB", 2048, id="2KiB"),
    pytest.param(" 4GiB ", 4 << 30, id="4GiB"),
    pytest.param("123", 123, id="plain"),
])
def test_the_per_file_limit_is_its_environment_variable_else_1_gib(monkeypatch, text, want):
    monkeypatch.setenv(_options.MAX_FILE_BYTES_ENV, text)
    assert _options.max_file_bytes() == want
    assert _options.DEFAULT_MAX_FILE_BYTES == 1 << 30


@pytest.mark.parametrize("text, match", [
    pytest.param("lots", "FASTDECODE_MAX_FILE_BYTES='lots': cannot read 'lots' as a byte count",
                 id="no-byte-count"),
    pytest.param("0", "FASTDECODE_MAX_FILE_BYTES='0': the limit must be at least one byte",
                 id="zero"),
])
def test_a_bad_per_file_limit_is_named_where_a_file_is_opened(tmp_path, monkeypatch, text,
                                                              match):
    path, = random_files(tmp_path, [10])
    monkeypatch.setenv(_options.MAX_FILE_BYTES_ENV, text)
    with pytest.raises(ValueError, match=match):
        _native.read_file(path)
    with pytest.raises(ValueError, match=match):
        ReadPool(1 << 20)


@pytest.mark.parametrize("bad", [0, -1])
def test_an_explicit_limit_below_one_byte_is_refused(tmp_path, bad):
    path, = random_files(tmp_path, [10])
    with pytest.raises(ValueError, match=f"max_size must be at least one byte, got {bad}"):
        _native.LocalFile(path, bad)


def test_a_local_file_is_read_once_and_closed(tmp_path):
    path, = random_files(tmp_path, [100])
    opened = _native.LocalFile(path)
    fds = len(os.listdir("/proc/self/fd"))
    assert opened.read() == _content(path)
    assert len(os.listdir("/proc/self/fd")) == fds - 1
    with pytest.raises(ValueError, match="already read or closed"):
        opened.read()
    closed = _native.LocalFile(path)
    closed.close()
    closed.close()
    with pytest.raises(ValueError, match="already read or closed"):
        closed.read()
    with pytest.raises(ValueError, match="embedded null byte"):
        _native.LocalFile(str(tmp_path / "a\0b.jpg"))
    unread = _native.LocalFile(path)
    del unread  # its descriptor closed with it
    assert len(os.listdir("/proc/self/fd")) == fds - 1


def test_mappings_are_reused_within_the_byte_bound(tmp_path):
    paths = random_files(tmp_path, [10_000, 70_000, 65_535, 65_536, 200_000] * 4)
    window = _window(4, 400_000)
    for start in range(0, len(paths), 5):
        window.submit(paths[start:start + 5])
        for path in paths[start:start + 5]:
            assert window.take(path) == _content(path)
    pool = window._pool.stats()
    assert pool["mappings"] <= 12  # reused, not one per file (20 files)
    assert pool["spare_bytes"] <= 400_000
    window.close()


def test_an_adaptive_window_over_fast_files_reads_them_itself(tmp_path):
    """The page cache: after the probe, the bypass (the consumer reads)."""
    paths = random_files(tmp_path, [5000] * 40)
    for p in paths:
        _content(p)
    window = _window(16, 64 << 20, max_depth=128)
    for p in paths:
        window.submit([p])
        assert window.take(p) == _content(p)
        _spin(0.002)  # the consumer's decode: much longer than a cached read
    stats = window.stats()
    assert stats["bypass"] == 1 and stats["direct"] > 20
    window.close()


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_close_ends_the_threads_and_a_later_read_starts_them_again(tmp_path):
    paths = random_files(tmp_path, [5000] * 8)
    window = _window(4)
    window.submit(paths)
    window.take(paths[0])
    window.close()  # drops the other seven
    assert window._pool.stats()["threads"] == 0
    window.submit(paths)
    assert [window.take(p) for p in paths] == [_content(p) for p in paths]
    window.close()


def _thread_ids():
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _thread_name(tid):
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:  # it ended
        return None


def _read_in_a_thread_with_policy(paths, policy):
    """The pool's threads (by their name), their policies and nice values,
    when a consumer thread of ``policy`` reads ``paths`` (a thread inherits
    the policy of the thread that starts it)."""
    out = {}

    def consume():
        os.sched_setscheduler(0, policy, os.sched_param(0))  # this thread only
        window = _window(4)
        before = _thread_ids()
        window.submit(paths)
        out["data"] = [window.take(p) for p in paths]
        # a thread names itself once settled, when it first runs: under load
        # (an idle-policy one most of all) that can be after the reads
        deadline = time.monotonic() + 20
        while True:
            started = _thread_ids() - before  # also any the test runner started
            out["threads"] = [t for t in started if _thread_name(t) == "fd-readahead"]
            if (len(out["threads"]) >= window._pool.stats()["threads"]
                    or time.monotonic() > deadline):
                break
            time.sleep(0.01)
        out["policies"] = {os.sched_getscheduler(t) for t in out["threads"]}
        out["nice"] = {os.getpriority(os.PRIO_PROCESS, t) for t in out["threads"]}
        out["pool_threads"] = window._pool.stats()["threads"]
        window.close()

    t = threading.Thread(target=consume)
    t.start()
    t.join(30)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's thread policies")
@pytest.mark.parametrize("caller, threads", [
    pytest.param(os.SCHED_OTHER, os.SCHED_BATCH, id="normal-caller-batch-threads"),
    pytest.param(os.SCHED_BATCH, os.SCHED_BATCH, id="batch-caller"),
    pytest.param(os.SCHED_IDLE, os.SCHED_IDLE, id="idle-caller-keeps-idle"),
])
def test_read_threads_are_named_and_do_not_preempt_on_wake_up(tmp_path, caller, threads):
    """SCHED_BATCH: a read that returns waits for the decode's slice to end
    (or an idle CPU) instead of preempting it; the nice value is the
    caller's, and a policy the caller chose is kept."""
    paths = random_files(tmp_path, [70_000] * 12)
    got = _read_in_a_thread_with_policy(paths, caller)
    assert got["data"] == [_content(p) for p in paths]
    assert got["threads"] and len(got["threads"]) == got["pool_threads"], \
        "not every read thread named itself fd-readahead"
    assert got["policies"] == {threads}
    assert got["nice"] == {os.getpriority(os.PRIO_PROCESS, 0)}


def test_a_pool_refuses_a_read_taken_twice_and_use_after_close(tmp_path):
    path, = random_files(tmp_path, [100])
    pool = ReadPool(1 << 20)
    pool.configure(1, False)
    job = pool.submit(path)
    assert pool.take(job, path)[0] == _content(path)
    with pytest.raises(ValueError, match="already taken or dropped"):
        pool.take(job, path)
    pool.drop(job)  # a no-op
    older, newer = pool.submit(path), pool.submit(path)
    with pytest.raises(ValueError, match="a read taken before an older one"):
        pool.take(newer, path)
    assert pool.take(older, path)[0] == pool.take(newer, path)[0] == _content(path)
    other = ReadPool(1 << 20)
    theirs = other.submit(path)
    with pytest.raises(ValueError, match="a read of another read pool"):
        pool.take(theirs, path)
    with pytest.raises(ValueError, match="a read of another read pool"):
        pool.drop(theirs)
    other.drop(theirs)
    other.close()
    pool.close()
    with pytest.raises(ValueError, match="the read pool is closed"):
        pool.submit(path)


def _child(window, paths, out):
    window.submit(paths)
    out.put([window.take(p) for p in paths])


def test_a_forked_child_starts_its_own_pool(tmp_path):
    paths = random_files(tmp_path, [30_000] * 24)
    window = _window(4)
    window.submit(paths[:12])  # the parent's threads run now
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child, args=(window, paths[12:], out))
    child.start()
    try:
        got = out.get(timeout=30)
    finally:
        child.join(timeout=30)
    assert got == [_content(p) for p in paths[12:]]
    assert child.exitcode == 0
    assert [window.take(p) for p in paths[:12]] == [_content(p) for p in paths[:12]]
    window.close()


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_a_random_mix_of_submits_drops_and_takes(tmp_path, seed):
    """Batches submitted, some predicted batches that never come, takes that
    skip ahead, a depth that moves and holds, small byte caps: every take
    is its file's bytes, and nothing is left in flight at the end."""
    rng = random.Random(seed)
    paths = random_files(tmp_path, [rng.choice([0, 1, 3000, 65_536, 120_000])
                                    for _ in range(40)])
    pool = ReadPool(rng.choice([50_000, 200_000, 1 << 20]))
    pending = []  # (job, path), submission order
    for _ in range(300):
        op = rng.random()
        if op < 0.35:
            for p in rng.sample(paths, rng.randrange(1, 8)):
                pending.append((pool.submit(p, rng.choice([-1, -1, 0, 70_000])), p))
        elif op < 0.45:
            pool.configure(rng.randrange(1, 12), rng.random() < 0.2)
        elif op < 0.55 and pending:
            job, _ = pending.pop(rng.randrange(len(pending)))
            pool.drop(job)
        elif pending:
            skip = rng.randrange(min(3, len(pending)))
            for job, _ in pending[:skip]:
                pool.drop(job)
            job, p = pending[skip]
            del pending[:skip + 1]
            assert pool.take(job, p)[0] == _content(p)
    for job, _ in pending:
        pool.drop(job)
    pool.configure(4, False)
    pool.close()


# ---------------------------------------------------------------------------
# the pool straight from C, under ThreadSanitizer and ASan + UBSan

SANITIZERS = {"thread": ["-fsanitize=thread"],
              "address-undefined": ["-fsanitize=address,undefined",
                                    "-fno-sanitize-recover=undefined"]}
STRESS_SIZES = [0, 1, 4095, 65_535, 65_536, 65_537, 150_000, 300_000]


def _sanitized(name, out):
    """The stress driver built with sanitizer ``name`` into ``out``; None
    where this compiler cannot build a program with that sanitizer, or the
    program cannot run here (TSan refuses some address-space layouts)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    flags = SANITIZERS[name] + ["-O1", "-g", "-pthread"]
    probe = out.with_suffix(".probe.c")
    probe.write_text("int main(void) { return 0; }\n")
    if subprocess.run([cc, *flags, str(probe), "-o", str(out)], capture_output=True).returncode:
        return None
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if subprocess.run([str(out)], capture_output=True, env=env, timeout=60).returncode:
        return None
    subprocess.run([cc, *flags, f"-I{SRC_C}", str(HERE / "readpool_stress.c"),
                    str(SRC_C / "fd_readahead.c"), str(SRC_C / "fd_common.c"), "-o", str(out)],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    root = tmp_path_factory.mktemp("stress")
    files = root / "files"
    files.mkdir()
    for i in range(32):
        size = STRESS_SIZES[i % len(STRESS_SIZES)]
        (files / f"f{i}").write_bytes(bytes((i * 7 + j) & 255 for j in range(size)))
    return root, files, {name: _sanitized(name, root / name) for name in SANITIZERS}


@pytest.mark.no_sanitize  # its own sanitizers; the ASan run's preload would clash
@pytest.mark.parametrize("hints", [0, 1], ids=["sizes-from-fstat", "sizes-given"])
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2))],
                         ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("sanitizer", list(SANITIZERS))
def test_the_pool_is_clean_under_sanitizers(stress, sanitizer, seed, hints):
    _, files, binaries = stress
    binary = binaries[sanitizer]
    if binary is None:
        pytest.skip(f"no C compiler with -fsanitize={sanitizer}")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["TSAN_OPTIONS"] = "halt_on_error=1 exitcode=66"
    env["ASAN_OPTIONS"] = "abort_on_error=0 exitcode=66"
    run = subprocess.run([str(binary), str(files), "32", str(seed), "2000", str(hints)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "taken" in run.stdout
