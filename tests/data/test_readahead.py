"""Read-ahead (fastdecode/storage/_window.py, its options _readahead.py): the window's bounds (count and
bytes) never exceeded, reads taken in order whatever order they complete in,
a failed read raised at its own take, fork safety; through the datasets: the
same batches with it on and off (in-process, stock DataLoader workers forked
and spawned, FastLoader's workers and threads), a file that vanishes or turns
unreadable mid-epoch named in its own sample, ``on_error`` as without it.

Storage latency here is a fake reader (a sleep per open); the FUSE tests of
tests/storage serve real files through a latency filesystem."""

import errno
import multiprocessing
import os
import random
import shutil
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

from fastdecode import FastLoader, _options, errors  # noqa: E402
from fastdecode.datasets import FastImageFolder  # noqa: E402
from fastdecode.loader._cpu_ring import RingSampler  # noqa: E402
from fastdecode.storage import _readahead, _readers  # noqa: E402
from fastdecode.storage._readahead import ReadAheadOptions  # noqa: E402
from fastdecode.storage._window import ReadAhead  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])


# ---------------------------------------------------------------------------
# fake readers


class _Sized:
    __slots__ = ("reader", "path", "size")

    def __init__(self, reader, path, size):
        self.reader, self.path, self.size = reader, path, size

    def read(self):
        return self.reader._read(self.path)


class FakeStorage:
    """Files of given sizes behind a delay per read (random when jitter), with
    the reads at once counted; ``sized``: the size is known at open."""

    def __init__(self, sizes, delay=0.002, jitter=False, sized=True, failing=None,
                 sleep=time.sleep):
        self.sizes = dict(sizes)
        self.delay, self.jitter, self.sized, self.sleep = delay, jitter, sized, sleep
        self.failing = dict(failing or {})
        self.lock = threading.Lock()
        self.now = self.peak = self.opens = 0
        self.threads = set()

    def content(self, path):
        return (path.encode() * (self.sizes[path] // max(1, len(path)) + 1))[:self.sizes[path]]

    def open(self, path):
        with self.lock:
            self.opens += 1
        if path in self.failing:
            code = self.failing[path]
            raise OSError(code, os.strerror(code), path)
        return _Sized(self, path, self.sizes[path] if self.sized else None)

    def _read(self, path):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.threads.add(threading.get_ident())
        try:
            self.sleep(self.delay * (random.random() * 2 if self.jitter else 1))
            return self.content(path)
        finally:
            with self.lock:
                self.now -= 1


class VirtualClock:
    """Seconds per thread that pass only by ``sleep``: the window's measured
    read latency and consumer time are then exactly what a test says, on a
    loaded machine too (every interval the window measures is one thread's)."""

    def __init__(self):
        self.local = threading.local()

    def now(self):
        return getattr(self.local, "t", 0.0)

    def sleep(self, seconds):
        self.local.t = self.now() + seconds


def stats_when(window, condition, timeout=30.0) -> dict:
    """The window's stats once ``condition(stats)`` holds, polled for at most
    ``timeout`` seconds (the read threads run when the machine lets them);
    the last stats if it never did."""
    deadline = time.monotonic() + timeout
    stats = window.stats()
    while not condition(stats) and time.monotonic() < deadline:
        time.sleep(0.001)
        stats = window.stats()
    return stats


def _paths(n, size=1000, vary=False):
    return {f"f{i:03d}": size + (i * 137) % 3000 if vary else size for i in range(n)}


# ---------------------------------------------------------------------------
# the window


BOUNDS = [
    pytest.param(1, 10_000, id="depth1"),
    pytest.param(4, 1 << 20, id="depth4-count-bound"),
    pytest.param(16, 6000, id="depth16-byte-bound"),
    pytest.param(32, 64 << 20, id="depth32"),
]


@pytest.mark.parametrize("depth,cap", BOUNDS)
def test_bounds_never_exceeded(depth, cap):
    sizes = _paths(120, vary=True)
    storage = FakeStorage(sizes, delay=0.001, jitter=True)
    window = ReadAhead(ReadAheadOptions(depth, cap), storage)
    paths = list(sizes)
    for start in range(0, len(paths), 40):  # batches of 40, each submitted whole
        window.submit(paths[start:start + 40])
        for p in paths[start:start + 40]:
            assert window.take(p) == storage.content(p)
    stats = window.stats()
    assert stats["peak_in_flight"] <= depth and storage.peak <= depth
    assert stats["peak_bytes"] <= cap
    assert stats["taken"] + stats["direct"] == len(paths)
    assert stats["in_flight"] == 0 and stats["in_flight_bytes"] == 0
    window.close()


def test_the_byte_bound_binds_when_reads_are_fast():
    """Everything read before it is taken: the bytes held are the bound."""
    sizes = _paths(64, size=1000)
    storage = FakeStorage(sizes, delay=0)
    window = ReadAhead(ReadAheadOptions(32, 5000), storage)
    window.submit(list(sizes))
    # the threads read what the cap lets them: 32 opened (the count bound), 5
    # of them read (the bytes bound), the rest waiting
    held = stats_when(window, lambda s: s["in_flight_bytes"] == 5000 and s["in_flight"] == 32)
    assert held["in_flight_bytes"] == 5000 and held["in_flight"] == 32, held
    for p in sizes:
        window.take(p)
    assert window.stats()["peak_bytes"] == 5000


def test_a_file_larger_than_the_cap_is_read_alone():
    sizes = {"small0": 100, "huge": 10_000, "small1": 100}
    storage = FakeStorage(sizes, delay=0.001)
    window = ReadAhead(ReadAheadOptions(8, 1000), storage)
    window.submit(list(sizes))
    assert [window.take(p) for p in sizes] == [storage.content(p) for p in sizes]
    assert window.stats()["peak_bytes"] == 10_000  # alone: nothing else was held with it


def test_reads_complete_in_any_order_and_are_taken_in_order():
    sizes = _paths(80)
    storage = FakeStorage(sizes, delay=0.003, jitter=True)
    window = ReadAhead(ReadAheadOptions(16, 1 << 20), storage)
    window.submit(list(sizes))
    assert [window.take(p) for p in sizes] == [storage.content(p) for p in sizes]
    assert len(storage.threads) > 1


def test_unknown_sizes_are_accounted_as_they_arrive():
    sizes = _paths(40, size=500)
    storage = FakeStorage(sizes, delay=0.001, sized=False)
    window = ReadAhead(ReadAheadOptions(8, 1 << 20), storage)
    window.submit(list(sizes))
    for p in sizes:
        assert window.take(p) == storage.content(p)
    stats = window.stats()
    assert stats["in_flight_bytes"] == 0 and 500 <= stats["peak_bytes"] <= 8 * (1 << 20) // 8


def test_a_plain_callable_is_a_reader():
    window = ReadAhead(ReadAheadOptions(4), lambda path: path.encode())
    window.submit(["a", "b"])
    assert (window.take("a"), window.take("b"), window.take("c")) == (b"a", b"b", b"c")


FAILURES = [
    pytest.param(errno.ENOENT, id="vanished"),
    pytest.param(errno.EACCES, id="unreadable"),
    pytest.param(errno.EIO, id="io-error"),
]


@pytest.mark.parametrize("code", FAILURES)
def test_a_failed_read_is_raised_at_its_own_take(code):
    sizes = _paths(10)
    storage = FakeStorage(sizes, failing={"f004": code})
    window = ReadAhead(ReadAheadOptions(8), storage)
    window.submit(list(sizes))
    for p in sizes:
        if p == "f004":
            with pytest.raises(OSError, match=os.strerror(code)) as info:
                window.take(p)
            assert info.value.errno == code
        else:
            assert window.take(p) == storage.content(p)
    assert window.stats()["failed"] == 1


def test_a_path_given_twice_is_read_for_each_occurrence():
    """A batch drawn with replacement: each occurrence is a read of its own,
    taken from the window (before: the second was read by the consumer)."""
    sizes = _paths(4)
    storage = FakeStorage(sizes, delay=0.002)
    window = ReadAhead(ReadAheadOptions(8), storage)
    batch = ["f000", "f001", "f000", "f002", "f001", "f000"]
    window.submit(batch)
    assert [window.take(p) for p in batch] == [storage.content(p) for p in batch]
    stats = window.stats()
    assert stats["direct"] == 0 and stats["taken"] == len(batch) == storage.opens


def test_a_keyed_submit_is_added_once_while_its_reads_are_in_the_window():
    """FastLoader's workers submit the batch they get next, then that batch
    again when it comes (and __getitems__ once more): one read per sample;
    files it shares with the batch before it are read for each."""
    sizes = _paths(12)
    storage = FakeStorage(sizes, delay=0.002)
    window = ReadAhead(ReadAheadOptions(8), storage)
    paths = list(sizes)
    first, second = paths[:6], paths[3:9]  # three files in both
    window.submit(first, key=(0,))
    window.submit(second, key=(1,))
    window.submit(first, key=(0,))  # the batch itself, when it comes
    assert window.stats()["submitted"] == 12
    assert [window.take(p) for p in first] == [storage.content(p) for p in first]
    window.submit(second, key=(1,))
    assert [window.take(p) for p in second] == [storage.content(p) for p in second]
    stats = window.stats()
    assert stats["direct"] == 0 and stats["dropped"] == 0 and storage.opens == 12
    window.submit(first, key=(0,))  # taken: the same key is a new batch now
    assert window.stats()["submitted"] == 18
    assert [window.take(p) for p in first] == [storage.content(p) for p in first]


def test_the_adaptive_depth_follows_the_latency_within_its_bounds():
    """50 ms per read, a consumer spending ~0.5 ms per file: Little's law
    asks for ~100 reads in flight; the window grows past its start (4) and
    never past max_depth (24) nor the byte bound."""
    sizes = _paths(150, vary=True)
    storage = FakeStorage(sizes, delay=0.05)
    options = ReadAheadOptions(4, 200_000, max_depth=24)
    window = ReadAhead(options, storage)
    paths = list(sizes)
    window.submit(paths)
    for p in paths:
        assert window.take(p) == storage.content(p)
        time.sleep(0.0005)
    stats = window.stats()
    assert 4 < stats["peak_depth"] <= 24
    assert stats["peak_in_flight"] <= 24 and storage.peak <= 24
    assert stats["peak_bytes"] <= 200_000
    assert stats["latency_us"] > 0 and stats["per_file_us"] > 0


def test_the_adaptive_window_reads_fast_files_itself_and_reads_ahead_when_they_slow():
    """Reads far faster than the consumer's time per file (a local disk)
    gain nothing ahead: the adaptive window stops submitting and the
    consumer reads them, timed; when they slow down, reads ahead resume.
    On a virtual clock: 0.1 ms reads and 2 ms of decode per file, then
    10 ms reads (a timing here flaked in CI on a loaded machine)."""
    sizes = _paths(60)
    paths = list(sizes)
    clock = VirtualClock()
    storage = FakeStorage(sizes, delay=0.0001, sleep=clock.sleep)
    window = ReadAhead(ReadAheadOptions.adaptive(), storage, clock=clock.now)

    def batch(part):
        window.submit(part)
        for p in part:
            assert window.take(p) == storage.content(p)
            clock.sleep(0.002)  # the consumer's decode

    batch(paths[:10])
    stats = window.stats()
    assert (stats["bypass"], stats["latency_us"], stats["per_file_us"]) == (1, 100, 2000)
    # the probe (two files) found them fast: no read thread read one
    assert storage.threads == {threading.get_ident()} and stats["peak_in_flight"] == 1
    submitted = stats["submitted"]
    batch(paths[10:20])  # read by the consumer: nothing submitted
    stats = window.stats()
    assert stats["submitted"] == submitted and stats["direct"] == 10 and stats["bypass"] == 1
    storage.delay = 0.01  # the storage slows: 5x the time per file
    batch(paths[20:30])
    assert window.stats()["bypass"] == 0
    submitted = window.stats()["submitted"]
    batch(paths[30:40])
    assert window.stats()["submitted"] == submitted + 10


@pytest.mark.parametrize("slow", [1, 3], ids=["one-slow-read", "three-slow-reads"])
def test_a_few_slow_reads_do_not_end_the_bypass(slow):
    """A local disk's reads, a few of them slowed (the reading worker waited
    for a CPU: 20 ms against 0.1 ms): the bypass holds, and no read thread
    starts. An EWMA alone left it at the first such read (run F's FastLoader
    on the local disk). On a virtual clock."""
    sizes = _paths(40)
    paths = list(sizes)
    clock = VirtualClock()
    storage = FakeStorage(sizes, delay=0.0001, sleep=clock.sleep)
    window = ReadAhead(ReadAheadOptions.adaptive(), storage, clock=clock.now)
    for i, p in enumerate(paths):
        window.submit([p])
        storage.delay = 0.02 if 10 <= i < 10 + 2 * slow and i % 2 == 0 else 0.0001
        assert window.take(p) == storage.content(p)
        clock.sleep(0.002)
        if i >= 2:
            assert window.stats()["bypass"] == 1, f"the bypass ended at file {i}"
    assert storage.threads == {threading.get_ident()}
    stats = window.stats()  # the probe's two files were submitted, the rest not
    assert (stats["submitted"], stats["direct"], stats["peak_in_flight"]) == (2, 38, 1)


def test_an_adaptive_window_probes_then_reads_ahead_of_slow_storage():
    """A fresh adaptive window reads the first two files itself (their read
    latency and the consumer's time per file decide), then on storage far
    slower than the consumer the read threads take the rest of the batch."""
    sizes = _paths(12)
    paths = list(sizes)
    clock = VirtualClock()
    storage = FakeStorage(sizes, delay=0.01, sleep=clock.sleep)
    window = ReadAhead(ReadAheadOptions.adaptive(), storage, clock=clock.now)
    window.submit(paths)
    me = threading.get_ident()
    for i, p in enumerate(paths):
        assert window.take(p) == storage.content(p)
        if i == 0:  # probing (the time per file is measured at the next take)
            assert storage.threads == {me} and window.stats()["peak_in_flight"] == 1
        if i == 1:  # decided: the threads read the rest (on the virtual clock the
            # consumer never waits, so it gives them real time to start)
            deadline = time.monotonic() + 30
            while not storage.threads - {me} and time.monotonic() < deadline:
                time.sleep(0.005)
            assert storage.threads - {me}, "no read thread started after the probe"
        clock.sleep(0.002)
    stats = window.stats()
    assert (stats["bypass"], stats["latency_us"], stats["per_file_us"]) == (0, 10_000, 2000)
    assert stats["direct"] == 0 and stats["taken"] == 12


def test_a_fixed_depth_is_never_bypassed():
    sizes = _paths(20)
    storage = FakeStorage(sizes, delay=0)
    window = ReadAhead(ReadAheadOptions(8, 1 << 20), storage)
    for part in (list(sizes)[:10], list(sizes)[10:]):
        window.submit(part)
        for p in part:
            window.take(p)
            time.sleep(0.002)
    stats = window.stats()
    assert stats["bypass"] == 0 and stats["direct"] == 0 and stats["submitted"] == 20


def test_a_fixed_depth_never_moves():
    sizes = _paths(40)
    storage = FakeStorage(sizes, delay=0.01)
    window = ReadAhead(ReadAheadOptions(3), storage)
    window.submit(list(sizes))
    for p in sizes:
        window.take(p)
    stats = window.stats()
    assert stats["depth"] == stats["peak_depth"] == 3 and stats["peak_in_flight"] <= 3


@pytest.mark.parametrize("depth,max_depth", [pytest.param(8, 4, id="below-depth"),
                                             pytest.param(8, 2.5, id="float"),
                                             pytest.param(8, True, id="bool")])
def test_a_bad_max_depth_is_refused(depth, max_depth):
    with pytest.raises(ValueError, match="max_depth must be None or an int >= depth"):
        ReadAheadOptions(depth, max_depth=max_depth)


def test_a_batch_that_did_not_come_is_dropped_and_its_bytes_released():
    sizes = _paths(30)
    storage = FakeStorage(sizes, delay=0.002)
    window = ReadAhead(ReadAheadOptions(8, 1 << 20), storage)
    paths = list(sizes)
    window.submit(paths[:10] + paths[10:20])  # this batch, and the one predicted next
    for p in paths[:10]:
        window.take(p)
    window.submit(paths[20:])  # another batch came instead
    for p in paths[20:]:
        assert window.take(p) == storage.content(p)
    # the dropped reads still running end, and release what they held
    stats = stats_when(window, lambda s: s["in_flight"] == 0)
    assert stats["dropped"] == 10 and stats["in_flight"] == 0 and stats["in_flight_bytes"] == 0, \
        stats


class GatedStorage(FakeStorage):
    """FakeStorage whose read of ``gated`` waits until ``gate`` is set."""

    def __init__(self, sizes, gated):
        super().__init__(sizes, delay=0)
        self.gated, self.gate = gated, threading.Event()

    def _read(self, path):
        if path == self.gated:
            assert self.gate.wait(10), "the gate was never opened"
        return super()._read(path)


@pytest.mark.parametrize("trial", range(20), ids=lambda t: f"trial{t}")
def test_a_take_waiting_for_a_free_place_gets_its_file_when_a_thread_reads_it(trial):
    """The consumer takes B while the only place (depth 1) holds A, a read
    dropped by that take but still running: the take waits for the place.
    When A's read ends, the read thread that ended it usually takes B from
    the queue before the consumer wakes, and B, read, holds the place: the
    take must then wait for B's read, not for a free place (which it
    waited for forever: the storage benchmark's FastLoader hang)."""
    sizes = _paths(2)
    a, b = list(sizes)
    storage = GatedStorage(sizes, gated=a)
    window = ReadAhead(ReadAheadOptions(1, 1 << 20), storage)
    window.submit([a, b])
    got = []
    consumer = threading.Thread(target=lambda: got.append(window.take(b)), daemon=True)
    consumer.start()
    deadline = time.monotonic() + 10
    while window.stats()["waited"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)  # the take is waiting for the place
    storage.gate.set()
    consumer.join(timeout=10)
    assert not consumer.is_alive(), "the take never returned"
    assert got == [storage.content(b)]
    stats = window.stats()
    assert stats["in_flight"] == 0 and stats["dropped"] == 1 and stats["taken"] == 1


def test_depth_zero_reads_in_the_calling_thread():
    storage = FakeStorage(_paths(5), delay=0)
    window = ReadAhead(ReadAheadOptions(0), storage)
    window.submit(list(storage.sizes))
    assert [window.take(p) for p in storage.sizes] == [storage.content(p) for p in storage.sizes]
    assert storage.threads == {threading.get_ident()}
    assert window.stats()["direct"] == 5


def _child_reads(window, paths, out):
    window.submit(paths)
    out.put([window.take(p) for p in paths])


def test_a_forked_child_starts_its_own_threads():
    sizes = _paths(12)
    storage = FakeStorage(sizes, delay=0.001)
    window = ReadAhead(ReadAheadOptions(4), storage)
    window.submit(list(sizes)[:6])  # the parent's threads run now
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_reads, args=(window, list(sizes)[6:], out))
    child.start()
    try:
        got = out.get(timeout=30)
    finally:
        child.join(timeout=30)
    assert got == [storage.content(p) for p in list(sizes)[6:]]
    assert child.exitcode == 0
    assert [window.take(p) for p in list(sizes)[:6]] == [storage.content(p)
                                                         for p in list(sizes)[:6]]


# ---------------------------------------------------------------------------
# the knob


@pytest.mark.parametrize("env,want", [
    pytest.param("", ReadAheadOptions.adaptive(), id="unset"),
    pytest.param("auto", ReadAheadOptions.adaptive(), id="auto"),
    pytest.param("auto,16MiB", ReadAheadOptions.adaptive(16 << 20), id="auto-and-cap"),
    pytest.param("0", ReadAheadOptions(0), id="off"),
    pytest.param("24", ReadAheadOptions(24), id="depth"),
    pytest.param("8,16MiB", ReadAheadOptions(8, 16 << 20), id="depth-and-cap"),
])
def test_the_environment_sets_the_default(monkeypatch, env, want):
    monkeypatch.setenv(_readahead.ENV, env)
    assert ReadAheadOptions.resolve(None) == want
    assert ReadAheadOptions.resolve(3) == ReadAheadOptions(3)  # an argument wins


@pytest.mark.parametrize("env", ["x", "8,lots", "-1"])
def test_a_bad_environment_value_is_named(monkeypatch, env):
    monkeypatch.setenv(_readahead.ENV, env)
    with pytest.raises(ValueError, match=_readahead.ENV):
        ReadAheadOptions.resolve(None)


@pytest.mark.parametrize("value,match", [
    pytest.param(-1, "depth must be an int >= 0", id="negative"),
    pytest.param(2.5, "readahead must be None, an int depth", id="float"),
    pytest.param(True, "readahead must be None, an int depth", id="bool"),
])
def test_a_bad_readahead_argument_is_refused(tmp_path, value, match):
    root = make_tree(tmp_path / "t", per_class=1, classes=("a",))
    with pytest.raises((TypeError, ValueError), match=match):
        FastImageFolder(root, readahead=value)


@pytest.mark.parametrize("text,want", [
    pytest.param("4096", 4096, id="plain"), pytest.param("64MiB", 64 << 20, id="MiB"),
    pytest.param("2GiB", 2 << 30, id="GiB"), pytest.param("1.5GB", 1_500_000_000, id="GB"),
    pytest.param(123, 123, id="int"),
])
def test_byte_counts(text, want):
    assert _options.parse_bytes(text) == want


@pytest.mark.parametrize("text", ["lots", "2 parsecs", "-5"])
def test_a_bad_byte_count_is_named(text):
    with pytest.raises(ValueError, match="cannot read .* as a byte count"):
        _options.parse_bytes(text)


# ---------------------------------------------------------------------------
# through the datasets


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("ra"), per_class=8, classes=("a", "b", "c"))


def _batches(ds, way, seed=0):
    """Every batch of one epoch, reproducibly, the way named."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if way == "getitems":
        return [ds.__getitems__(list(range(k, min(len(ds), k + 7)))) for k in range(0, len(ds), 7)]
    if way == "getitem":
        return [ds[i] for i in range(len(ds))]
    if way.startswith("dataloader"):
        ctx = way.split("-")[1]
        loader = torch.utils.data.DataLoader(ds, batch_size=5, shuffle=True, generator=g,
                                             num_workers=2, multiprocessing_context=ctx)
    elif way == "fastloader-workers":
        loader = FastLoader(ds, batch_size=5, shuffle=True, generator=g, num_workers=2)
    else:
        loader = FastLoader(ds, batch_size=5, shuffle=True, generator=g, threads=2)
    return [[(x.clone(), y.clone()) for x, y in [tuple(b)]] for b in loader]


def _flat(batches):
    out = []
    for b in batches:
        if isinstance(b, tuple):
            b = [b]
        for x, y in b:
            out.append((torch.as_tensor(x), torch.as_tensor(y)))
    return out


# spawned workers: the slow tier (~16 s: two DataLoaders' workers importing
# torch and torchvision); make test has read-ahead under spawn in test_cache
WAYS = ["getitems", "getitem", "dataloader-fork",
        pytest.param("dataloader-spawn", marks=pytest.mark.slow), "fastloader-workers",
        "fastloader-threads"]


@pytest.mark.parametrize("way", WAYS)
def test_the_same_batches_with_readahead_on_and_off(tree, way):
    off = _flat(_batches(FastImageFolder(tree, transform=TRAIN, readahead=0), way))
    on = _flat(_batches(FastImageFolder(tree, transform=TRAIN, readahead=8), way))
    assert len(on) == len(off) > 0
    for (a, ta), (b, tb) in zip(off, on):
        assert torch.equal(a, b) and torch.equal(ta, tb)


def test_a_batch_is_read_at_once_within_the_bounds(tree):
    ds = FastImageFolder(tree, transform=TRAIN, readahead=ReadAheadOptions(4, 1 << 20))
    ds.__getitems__(list(range(len(ds))))
    stats = ds.readahead_stats()
    assert stats["submitted"] == len(ds) and stats["taken"] + stats["direct"] == len(ds)
    assert 1 <= stats["peak_in_flight"] <= 4 and stats["peak_bytes"] <= 1 << 20


class FailingReader:
    """The local reader, except that opens of ``path`` fail with ``code``."""

    def __init__(self, path, code):
        self.path, self.code = str(path), code
        self.local = _readers.LocalReader()

    def open(self, path):
        if path == self.path:
            raise OSError(self.code, os.strerror(self.code), path)
        return self.local.open(path)


BROKEN = [pytest.param("vanished", id="vanished"), pytest.param("eacces", id="unreadable"),
          pytest.param("eio", id="io-error")]


def _break(ds, tmp_tree, how, victim):
    if how == "vanished":
        os.unlink(victim)
    else:  # root reads any file whatever its mode: the reader fails it instead
        ds._reads.reader = FailingReader(victim, errno.EACCES if how == "eacces" else errno.EIO)


@pytest.mark.parametrize("workers", [pytest.param(0, id="in-process"),
                                     pytest.param(2, id="2-workers")])
@pytest.mark.parametrize("how", BROKEN)
def test_a_file_broken_mid_epoch_is_named_in_its_own_sample(tmp_path, how, workers):
    root = shutil.copytree(make_tree(tmp_path / "src", per_class=6, classes=("a", "b")),
                           tmp_path / "t")
    ds = FastImageFolder(root, transform=TRAIN, readahead=8)
    index = 7
    victim = ds.samples[index][0]
    ds.__getitems__(list(range(4)))  # the epoch is under way, the window warm
    _break(ds, root, how, victim)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None)
    with pytest.raises(errors.ImageFileError, match=f"sample {index}: cannot read file") as info:
        for _ in loader:
            pass
    assert victim in str(info.value)  # (from a worker torch re-raises it with the message)


@pytest.mark.parametrize("how", BROKEN)
def test_on_error_skips_as_without_readahead(tmp_path, how):
    root = shutil.copytree(make_tree(tmp_path / "src", per_class=6, classes=("a", "b")),
                           tmp_path / "t")
    results = []
    for depth in (0, 8):
        ds = FastImageFolder(root, transform=TRAIN, readahead=depth, on_error="skip")
        victim = ds.samples[5][0]
        with open(victim, "rb") as f:
            saved = f.read()
        _break(ds, root, how, victim)
        torch.manual_seed(0)
        batch = ds.__getitems__(list(range(len(ds))))
        results.append((torch.stack([x for x, _ in batch]), [t for _, t in batch], ds.skipped))
        if how == "vanished":
            with open(victim, "wb") as f:
                f.write(saved)
    (a, ta, sa), (b, tb, sb) = results
    assert torch.equal(a, b) and ta == tb and sa == sb == 1


def _sparse(path, size):
    with open(path, "wb") as f:
        try:
            f.truncate(size)
        except OSError as exc:
            pytest.skip(f"this file system holds no sparse {size} byte file: {exc}")


NOT_REGULAR = "not a regular file"
OVER_THE_LIMIT = (r"larger than the per-file limit of 1,073,741,824 bytes \(set "
                  r"FASTDECODE_MAX_FILE_BYTES to read larger files\)")
ODD_FILES = {  # name: (make it, what its error says)
    "fifo.jpg": (os.mkfifo, NOT_REGULAR),
    "zero.jpg": (lambda p: os.symlink("/dev/zero", p), NOT_REGULAR),
    "two-gib.jpg": (lambda p: _sparse(p, 2 << 30), OVER_THE_LIMIT),  # the default limit
}


@pytest.mark.timeout(60)  # a FIFO's open, or /dev/zero's read, would never end
@pytest.mark.parametrize("depth", [pytest.param(0, id="read-ahead-off"),
                                   pytest.param(8, id="depth-8"),
                                   pytest.param(None, id="adaptive")])
@pytest.mark.parametrize("name", list(ODD_FILES))
def test_a_path_that_is_not_a_regular_file_is_named_not_waited_for(tmp_path, monkeypatch,
                                                                  name, depth):
    """A FIFO or a device named like an image (listed, as ImageFolder lists
    it), or a file over the per-file limit: its sample raises the named
    error, or is skipped; never a hang, never a read that does not end, never
    a file read whole that no image needs."""
    monkeypatch.delenv("FASTDECODE_MAX_FILE_BYTES", raising=False)
    root = make_tree(tmp_path / "t", per_class=4, classes=("a", "b"))
    make, says = ODD_FILES[name]
    make(str(root / "a" / name))
    ds = FastImageFolder(root, transform=TRAIN, readahead=depth)
    index = next(i for i, (p, _) in enumerate(ds.samples) if p.endswith(name))
    with pytest.raises(errors.ImageFileError,
                       match=f"{name}: sample {index}: cannot read file: {says}"):
        ds.__getitems__(list(range(len(ds))))
    with pytest.raises(errors.ImageFileError, match=says):
        ds[index]
    skipping = FastImageFolder(root, transform=TRAIN, readahead=depth, on_error="skip")
    assert len(skipping.__getitems__(list(range(len(ds))))) == len(ds)
    assert skipping.skipped == 1


def test_a_batch_drawn_with_replacement_is_read_ahead_whole(tree):
    ds = FastImageFolder(tree, transform=TRAIN, readahead=8)
    indices = [0, 3, 0, 5, 3, 0, 7]
    ds.__getitems__(indices)
    stats = ds.readahead_stats()
    assert stats["direct"] == 0 and stats["taken"] == stats["submitted"] == len(indices)


def test_a_ring_worker_reads_each_sample_once_and_none_in_its_own_thread(tree):
    """The CPU ring's worker path, in-process: each batch's reads, then the
    next batch's (sharing files with it, as draws with replacement do), none
    read twice, none left to the decoding thread."""
    from fastdecode.loader._cpu_ring import CpuRing, RingFiller, SlotBatch

    ds = FastImageFolder(tree, transform=TRAIN, readahead=8)
    ring = CpuRing(1, (4, 3, 32, 32), torch.uint8)
    filler = RingFiller(ds, ring, lambda samples: samples)
    batches = [[0, 1, 2, 1], [2, 3, 0, 4], [4, 5, 5, 6]]
    for k, batch in enumerate(batches):
        later = batches[k + 1] if k + 1 < len(batches) else None
        filler.__getitems__(SlotBatch(batch, None, later))
    stats = ds.readahead_stats()
    assert stats["direct"] == 0 and stats["dropped"] == 0
    assert stats["taken"] == stats["submitted"] == sum(map(len, batches))


def test_with_later_never_pulls_past_a_given_length():
    """A wrapper without len (a generator over the batch sampler) gives its
    length: the pull that would end the pass is not made early."""
    pulls = []

    def batches():
        for k in range(5):
            pulls.append(k)
            yield [k]

    from fastdecode.batching._seeding import with_later

    it = with_later(batches(), 2, length=3)
    assert [next(it) for _ in range(3)] == [([0], [2]), ([1], None), ([2], None)]
    assert pulls == [0, 1, 2]


def test_fastloader_gives_each_worker_the_batch_it_gets_next():
    class Ring:
        in_flight: set = set()

        def pick(self):
            return None

    batches = [list(range(k, k + 3)) for k in range(0, 30, 3)]
    sampler = RingSampler(batches, Ring(), workers=2)
    got = list(iter(sampler))
    assert [list(b) for b in got] == batches
    assert [b.later for b in got] == batches[2:] + [None, None]


def test_fastloader_threads_read_the_next_batch_ahead(tree):
    ds = FastImageFolder(tree, transform=TRAIN, readahead=64)
    loader = FastLoader(ds, batch_size=4, threads=1)
    it = iter(loader)
    next(it)
    # the iterating thread's window: the first batch's reads and the second's
    assert ds.readahead_stats()["submitted"] >= 8
    for _ in it:
        pass
