"""FastLoader's worker iterator's parts (fastdecode/loader/_workers.py) with
stand-in workers, queues and pipes: how a dead worker is named, the orphan
/dev/shm sweep meeting errors, NamingQueue's reads (a thread's queue, a
stalled, half or long-framed message, a held read lock, errors with and
without a dead worker), the pin-memory thread's read (PinSideQueue), the done
event's lock, and WorkerIter passing on torch's own errors. test_faults.py
kills real workers; test_loader.py runs the iterator end to end."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import queue
import struct
import types
import weakref

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL  # noqa: E402
from torch.utils.data._utils import pin_memory as pin_module  # noqa: E402
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter  # noqa: E402

from fastdecode.loader import _workers  # noqa: E402
from fastdecode.loader._workers import DeadWorkerError, NamingQueue, WorkerIter  # noqa: E402

CTX = multiprocessing.get_context("fork")


def _worker(pid=4242, exitcode=None, alive=True):
    return types.SimpleNamespace(pid=pid, exitcode=exitcode, is_alive=lambda: alive)


class FakeIter:
    """What NamingQueue asks of its iterator: the dead workers, and how often."""

    def __init__(self, dead=()):
        self.dead = list(dead)
        self.asked: list[float] = []

    def _dead_workers(self, grace):
        self.asked.append(grace)
        return self.dead


# -- how a dead worker is named -----------------------------------------------------

@pytest.mark.parametrize("exitcode, says", [
    (-9, "DataLoader worker (pid(s) 4242) exited unexpectedly (killed by signal SIGKILL)"),
    (-200, "DataLoader worker (pid(s) 4242) exited unexpectedly (killed by signal 200)"),
    (3, "DataLoader worker (pid(s) 4242) exited unexpectedly (exit code 3)"),
    (0, "DataLoader worker (pid(s) 4242) exited unexpectedly"),
    (None, "DataLoader worker (pid(s) 4242) exited unexpectedly"),
], ids=["signal", "unknown-signal", "exit-code", "exit-0", "not-reaped"])
def test_a_dead_worker_is_named_with_how_it_died(exitcode, says):
    assert str(DeadWorkerError([_worker(exitcode=exitcode)])) == says


def test_several_dead_workers_are_named_together():
    dead = [_worker(11, -15), _worker(12, 1)]
    assert str(DeadWorkerError(dead)) == ("DataLoader worker (pid(s) 11, 12) exited unexpectedly"
                                          " (killed by signal SIGTERM) (exit code 1)")


# -- the orphan sweep --------------------------------------------------------------

@pytest.fixture
def file_descriptor_sharing(monkeypatch):
    monkeypatch.setattr(torch.multiprocessing, "get_sharing_strategy",
                        lambda: "file_descriptor")


def test_an_unreadable_dev_shm_sweeps_nothing(file_descriptor_sharing, monkeypatch):
    def unreadable(path):
        raise PermissionError(13, "Permission denied", path)

    def no_unlink(path):
        raise AssertionError(f"unlinked {path}")
    monkeypatch.setattr(_workers.os, "listdir", unreadable)
    monkeypatch.setattr(_workers.os, "unlink", no_unlink)
    assert _workers.sweep_orphan_segments([4242]) is None


def test_a_name_that_cannot_be_removed_does_not_stop_the_sweep(file_descriptor_sharing,
                                                              monkeypatch):
    pid = 4_000_000 + os.getpid()  # above pid_max: no live process has it
    names = [f"torch_{pid}_{i}" for i in range(3)]
    for name in names:
        open(os.path.join("/dev/shm", name), "w").close()
    real = os.unlink
    tried = []

    def unlink(path):
        tried.append(os.path.basename(path))
        if path.endswith("_1"):
            raise PermissionError(13, "Operation not permitted", path)
        real(path)
    monkeypatch.setattr(_workers.os, "unlink", unlink)
    try:
        _workers.sweep_orphan_segments([pid])
        assert sorted(tried) == names
        assert [n for n in names if os.path.exists(os.path.join("/dev/shm", n))] == names[1:2]
    finally:
        for name in names:
            if os.path.exists(os.path.join("/dev/shm", name)):
                real(os.path.join("/dev/shm", name))


# -- NamingQueue: a thread's queue -------------------------------------------------

def test_a_threads_queue_is_read_as_it_is():
    q = queue.Queue()
    q.put("batch")
    it = FakeIter()
    naming = NamingQueue(q, it)
    assert naming.get(timeout=1.0) == "batch"
    assert naming.qsize() == 0 and naming.empty()  # the rest is the queue's own
    assert it.asked == []


@pytest.mark.parametrize("dead", [[], [_worker(exitcode=-9)]], ids=["none-dead", "one-dead"])
def test_an_empty_threads_queue_names_a_dead_worker(dead):
    it = FakeIter(dead)
    naming = NamingQueue(queue.Queue(), it)
    if dead:
        with pytest.raises(DeadWorkerError, match=r"pid\(s\) 4242\) exited unexpectedly "
                                                  r"\(killed by signal SIGKILL\)"):
            naming.get(timeout=0.01)
    else:
        with pytest.raises(queue.Empty):
            naming.get(timeout=0.01)
    assert it.asked == [0]  # looked once, without waiting


class Broken:
    """A queue whose hand-over broke (a worker died writing to it)."""

    def __init__(self, exc):
        self.exc = exc

    def get(self, block=True, timeout=None):
        raise self.exc


@pytest.mark.parametrize("exc", [ConnectionResetError(104, "Connection reset by peer"),
                                 EOFError("Ran out of input")], ids=["reset", "eof"])
def test_a_broken_hand_over_without_a_dead_worker_is_raised_as_it_is(exc):
    it = FakeIter()
    with pytest.raises(type(exc)) as info:
        NamingQueue(Broken(exc), it).get(timeout=1.0)
    assert info.value is exc
    assert it.asked == [_workers.DEATH_GRACE_S]  # it waited for a death to show


def test_a_broken_hand_over_with_a_dead_worker_names_it():
    exc = ConnectionResetError(104, "Connection reset by peer")
    it = FakeIter([_worker(exitcode=2)])  # held here: the queue keeps only a weak reference
    with pytest.raises(DeadWorkerError, match=r"\(exit code 2\)") as info:
        NamingQueue(Broken(exc), it).get(timeout=1.0)
    assert info.value.__cause__ is exc


def test_an_iterator_gone_names_nobody():
    it = FakeIter([_worker(exitcode=-9)])
    naming = NamingQueue(queue.Queue(), it)
    del it
    with pytest.raises(queue.Empty):
        naming.get(timeout=0.01)


# -- NamingQueue: multiprocessing's queue --------------------------------------------

@pytest.fixture
def mp_queue():
    q = CTX.Queue()
    yield q
    q.close()
    q.join_thread()


def test_a_message_is_read_whole(mp_queue):
    mp_queue.put({"batch": list(range(1000))})
    assert NamingQueue(mp_queue, FakeIter()).get(timeout=10.0) == {"batch": list(range(1000))}


@pytest.mark.parametrize("dead", [[], [_worker(exitcode=-6)]], ids=["none-dead", "one-dead"])
def test_an_empty_queue_times_out_or_names_a_dead_worker(mp_queue, dead):
    it = FakeIter(dead)
    with pytest.raises(DeadWorkerError if dead else queue.Empty):
        NamingQueue(mp_queue, it).get(timeout=0.01)
    assert it.asked == [0]


def test_a_held_read_lock_times_out_as_empty(mp_queue):
    it = FakeIter()
    naming = NamingQueue(mp_queue, it)
    assert mp_queue._rlock.acquire(True, 1.0)
    try:
        with pytest.raises(queue.Empty):
            naming.get(timeout=0.01)
    finally:
        mp_queue._rlock.release()
    assert it.asked == [0]


def _raw(q, data: bytes) -> None:
    os.write(q._writer.fileno(), data)


def test_a_half_message_from_a_closed_queue_is_an_eof(mp_queue):
    it = FakeIter()
    _raw(mp_queue, struct.pack("!i", 10) + b"abc")
    mp_queue._writer.close()
    with pytest.raises(EOFError, match="the data queue was closed mid-message"):
        NamingQueue(mp_queue, it).get(timeout=10.0)
    assert it.asked == [_workers.DEATH_GRACE_S]


class StallingConn:
    """A pipe's read end whose polls answer ``script`` first (False: nothing
    came within the wait), then what the pipe has."""

    def __init__(self, fd, script=()):
        self.fd, self.script, self.polls = fd, list(script), 0

    def poll(self, timeout):
        self.polls += 1
        if self.script:
            return self.script.pop(0)
        return multiprocessing.connection.wait([self.fd], timeout) != []

    def fileno(self):
        return self.fd


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_a_stalled_read_goes_on_while_no_worker_is_dead(pipe):
    r, w = pipe
    os.write(w, struct.pack("!i", 5) + b"hello")
    it = FakeIter()
    conn = StallingConn(r, [False, False])
    assert NamingQueue(None, it)._read_message(conn) == b"hello"
    assert it.asked == [0, 0] and conn.polls == 4  # two stalls looked, then header and body


def test_a_stalled_read_with_a_dead_worker_names_it(pipe):
    r, w = pipe
    os.write(w, struct.pack("!i", 100) + b"only part")
    it = FakeIter([_worker(pid=77, exitcode=-9)])
    conn = StallingConn(r, [True, True, False])  # the header, the part, then a stall
    with pytest.raises(DeadWorkerError, match=r"pid\(s\) 77\) exited unexpectedly"):
        NamingQueue(None, it)._read_message(conn)
    assert it.asked == [0]


def test_a_long_framed_message_is_read(pipe):
    """multiprocessing frames a message over 2 GiB as -1 then an 8-byte size."""
    r, w = pipe
    os.write(w, struct.pack("!i", -1) + struct.pack("!Q", 6) + b"sizeQ!")
    assert NamingQueue(None, FakeIter())._read_message(StallingConn(r)) == b"sizeQ!"


def test_a_message_is_read_in_chunks(pipe, monkeypatch):
    monkeypatch.setattr(_workers, "CHUNK", 4)
    r, w = pipe
    os.write(w, struct.pack("!i", 10) + b"0123456789")
    reads = []
    real = os.read

    def read(fd, n):
        reads.append(n)
        return real(fd, n)
    monkeypatch.setattr(_workers.os, "read", read)
    assert NamingQueue(None, FakeIter())._read_message(StallingConn(r)) == b"0123456789"
    assert reads == [4, 4, 4, 2]


# -- the done event's lock ---------------------------------------------------------

def _bare_iter():
    """A WorkerIter that started nothing (shut down already, for its __del__)."""
    it = WorkerIter.__new__(WorkerIter)
    it._shutdown = True
    return it


def _iter_with(event, workers):
    it = _bare_iter()  # only what _free_done_event reads
    it._workers_done_event = event
    it._workers = workers
    return it


def test_no_done_event_yet_is_nothing_to_free():
    _iter_with(None, [])._free_done_event()  # an iterator whose start failed


@pytest.mark.parametrize("alive, freed", [(True, False), (False, True)],
                         ids=["workers-alive-kept", "worker-dead-freed"])
def test_a_held_done_event_lock_is_freed_only_with_a_worker_dead(monkeypatch, alive, freed):
    monkeypatch.setattr(_workers, "STALE_LOCK_S", 0.01)
    event = CTX.Event()
    lock = event._cond._lock
    assert lock.acquire(False)  # as a worker killed mid-is_set leaves it
    _iter_with(event, [_worker(alive=True), _worker(alive=alive)])._free_done_event()
    assert lock.acquire(False) is freed
    lock.release()


@pytest.mark.parametrize("alive, freed", [(True, False), (False, True)],
                         ids=["workers-alive-kept", "worker-dead-freed"])
def test_the_shutdown_frees_the_result_queues_write_lock_of_a_dead_worker(monkeypatch, alive,
                                                                          freed):
    """With pin_memory, torch's shutdown writes to the workers' queue: a
    worker killed mid-hand-over holds its write lock."""
    monkeypatch.setattr(_workers, "STALE_LOCK_S", 0.01)
    shut = []
    monkeypatch.setattr(_MultiProcessingDataLoaderIter, "_shutdown_workers",
                        lambda self: shut.append(True))
    it = _iter_with(CTX.Event(), [_worker(alive=alive)])
    it._shutdown, it._pin_memory_thread = False, object()
    it._worker_result_queue = q = CTX.Queue()
    assert q._wlock.acquire(False)  # as a worker killed while it writes leaves it
    it._shutdown_workers()
    assert shut and q._wlock.acquire(False) is freed
    q._wlock.release()
    q.close()


def test_a_free_done_event_lock_is_left_free():
    event = CTX.Event()
    _iter_with(event, [_worker(alive=False)])._free_done_event()
    assert event._cond._lock.acquire(False)
    event._cond._lock.release()


# -- WorkerIter and torch's _try_get_data -------------------------------------------

@pytest.fixture
def torch_try_get(monkeypatch):
    calls = []

    def install(exc):
        def try_get(self, timeout):
            calls.append(timeout)
            raise exc
        monkeypatch.setattr(_MultiProcessingDataLoaderIter, "_try_get_data", try_get)
    return install, calls


def test_torchs_own_error_is_raised_as_it_is(torch_try_get):
    install, calls = torch_try_get
    exc = RuntimeError("Too many open files. Communication with the workers is no longer "
                       "possible.")
    install(exc)
    with pytest.raises(RuntimeError) as info:
        _bare_iter()._try_get_data()
    assert info.value is exc
    assert calls == [_workers.WORKER_CHECK_S]  # torch's 5 s check made every second


def test_torchs_error_over_ours_is_replaced_by_ours(torch_try_get):
    install, calls = torch_try_get
    ours = DeadWorkerError([_worker(pid=9, exitcode=-9)])
    theirs = RuntimeError("DataLoader worker (pid(s) 9) exited unexpectedly")
    theirs.__cause__ = ours
    install(theirs)
    with pytest.raises(DeadWorkerError) as info:
        _bare_iter()._try_get_data(timeout=2.5)
    assert info.value is ours and calls == [2.5]  # a timeout given is kept
    assert info.value.__context__ is None  # not chained to torch's (no cycle)
    assert MP_STATUS_CHECK_INTERVAL != 2.5


# -- the pin-memory thread's read (pin_memory on a CUDA machine) --------------------

def _put_a_tensor_and_exit(q):
    """A worker's hand-over, then its death before the reader unpickles: the
    tensor's storage is sent as a file descriptor the dead process serves."""
    q.put(torch.arange(64, dtype=torch.uint8))
    q.close()
    q.join_thread()  # the message is whole in the pipe
    os._exit(0)


@pytest.fixture
def orphaned_tensor():
    """A torch.multiprocessing queue holding a tensor whose sender has died."""
    ctx = torch.multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_put_a_tensor_and_exit, args=(q,))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    yield q, _worker(pid=proc.pid, exitcode=0, alive=False)
    q.close()
    q.join_thread()


@pytest.mark.skipif(torch.multiprocessing.get_sharing_strategy() != "file_descriptor",
                    reason="the file_descriptor sharing strategy (Linux's default)")
@pytest.mark.parametrize("reader", ["torch-reads", "pin-side-queue"])
def test_the_pin_thread_reads_a_dead_workers_hand_over_as_an_empty_wait(orphaned_tensor, reader):
    """torch's loop reads the workers' queue with a plain get: the tensor of a
    dead worker is an EOFError there, which ended the pin thread (seen on a
    GPU). Through PinSideQueue it is an empty wait; the main thread names the
    worker."""
    q, dead = orphaned_tensor
    it = FakeIter([dead])
    if reader == "torch-reads":
        with pytest.raises((EOFError, ConnectionError)):
            q.get(timeout=10.0)
    else:
        with pytest.raises(queue.Empty):
            _workers.PinSideQueue(q, it).get(timeout=10.0)
        assert it.asked == [_workers.DEATH_GRACE_S]


def test_the_pin_side_queue_passes_batches_and_live_errors_on(mp_queue):
    mp_queue.put("batch")
    assert _workers.PinSideQueue(mp_queue, FakeIter()).get(timeout=10.0) == "batch"
    exc = EOFError("Ran out of input")
    with pytest.raises(EOFError):  # no worker dead: not ours to swallow
        _workers.PinSideQueue(Broken(exc), FakeIter()).get(timeout=1.0)


def test_the_pin_loop_reads_its_iterators_queue_through_the_pin_side_queue():
    seen = []
    it = FakeIter()
    it._worker_result_queue = ours = CTX.Queue()
    other = CTX.Queue()
    for q in (ours, other):
        _workers._pin_loop(lambda in_queue, *args: seen.append((in_queue, args)), weakref.ref(it),
                           q, "out", 0)
    assert isinstance(seen[0][0], _workers.PinSideQueue) and seen[0][0]._queue is ours
    assert seen[1][0] is other and seen[0][1] == seen[1][1] == ("out", 0)
    del it
    for q in (ours, other):
        q.close()
        q.join_thread()
    assert pin_module._pin_memory_loop.__module__ == pin_module.__name__  # torch's, between inits


def test_an_iterator_puts_torchs_pin_loop_back():
    real = pin_module._pin_memory_loop
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=1)
    it = WorkerIter(loader)
    try:
        assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
    finally:
        it._shutdown_workers()
    assert pin_module._pin_memory_loop is real
