"""FastLoader's multi-process iterator: a dead worker is always named, never a hang.

:class:`WorkerIter` (the iterator of FastLoader's workers) takes its workers
out of torch's SIGCHLD handler's list and finds dead workers itself,
synchronously: every second while it waits for a batch, and wherever reading
a batch stalls or breaks; the error (:class:`DeadWorkerError`) names the
worker and how it died. Each message is read with a bounded wait between
chunks (:class:`NamingQueue`; :class:`PinSideQueue` for torch's pin-memory
thread, for which a dead worker's broken hand-over is an empty wait). A
worker named dead has its orphaned /dev/shm names removed
(:func:`sweep_orphan_segments`) and the locks it died holding released;
after the shutdown the reaped workers give their descriptors back at once.
With persistent workers it dispatches the next epoch's batches while this
one ends (``loader/_next_epoch.py``).

Decision record: docs/decisions/loaders-workers.md ("A dead worker is named,
found without torch's SIGCHLD handler" and the entries after it).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing.queues
import os
import queue
import signal
import struct
import threading
import time
import warnings
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any, Optional

import torch.multiprocessing
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL, signal_handling
from torch.utils.data._utils import pin_memory as _pin_memory_module
from torch.utils.data.dataloader import _DatasetKind, _MultiProcessingDataLoaderIter

from fastdecode.loader._next_epoch import NextEpoch

__all__ = ["DEATH_GRACE_S", "STALE_LOCK_S", "WORKER_CHECK_S", "DeadWorkerError", "NamingQueue",
           "PinSideQueue", "WorkerIter", "sweep_orphan_segments"]

# How long a failed hand-over waits for the worker's death to become visible:
# a SIGKILLed worker's sockets close before it is reaped, so the main process
# can see the broken connection while the worker still looks alive.
DEATH_GRACE_S = 5.0
# How often a wait for a batch, or a stalled read of one, looks for dead
# workers (torch: every 5 s).
WORKER_CHECK_S = 1.0
# How long the workers' done event's lock may stay held, with a worker dead,
# before it is taken to be the dead worker's (WorkerIter._free_if_stale).
STALE_LOCK_S = 1.0
# The most a read of one message asks for at a time.
CHUNK = 1 << 20


def sweep_orphan_segments(pids: Any) -> None:
    """Removes the /dev/shm segments that dead workers ``pids`` left named.

    Under torch's ``file_descriptor`` sharing strategy (Linux's default) a
    worker creates each batch's segment as ``/dev/shm/torch_<pid>_...`` and
    unlinks the name at once, passing the descriptor; a worker killed between
    the two leaves the name, and nothing else ever removes it. Any such name
    of a dead pid is an orphan: the segment lives on only through descriptors
    already passed. Under ``file_system`` the names are the sharing itself
    (torch_shm_manager removes them), so nothing is swept then."""
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        return
    prefixes = tuple(f"torch_{pid}_" for pid in pids)
    if not prefixes:
        return
    try:
        names = [n for n in os.listdir("/dev/shm") if n.startswith(prefixes)]
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join("/dev/shm", name))
        except OSError:  # gone already, or not ours to remove
            pass


def _how(worker: Any) -> str:
    code = worker.exitcode
    if code is not None and code < 0:
        try:
            return f" (killed by signal {signal.Signals(-code).name})"
        except ValueError:
            return f" (killed by signal {-code})"
    return f" (exit code {code})" if code else ""


class DeadWorkerError(RuntimeError):
    """torch's "DataLoader worker (pid(s) N) exited unexpectedly" error, saying
    how each worker died (the signal torch's SIGCHLD handler would name)."""

    def __init__(self, dead: list) -> None:
        pids = ", ".join(str(w.pid) for w in dead)
        super().__init__(f"DataLoader worker (pid(s) {pids}) exited unexpectedly"
                         + "".join(_how(w) for w in dead))


class NamingQueue:
    """The iterator's data queue, except that a broken hand-over from a dead
    worker raises the named error right where it happens (before torch's own
    handling opens its probe files), and that a message is read with a
    bounded wait (see the module doc) rather than one blocking read."""

    def __init__(self, queue_: Any, it: "WorkerIter") -> None:
        self._queue = queue_
        self._it = weakref.ref(it)  # no cycle: the iterator must die (and stop its workers) at once

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        try:
            if isinstance(self._queue, multiprocessing.queues.Queue) and block \
                    and timeout is not None:
                return self._get(timeout)
            return self._queue.get(block, timeout)  # a thread's queue (pin_memory)
        except queue.Empty:
            dead = self._dead(0)
            if not dead:
                raise
            raise DeadWorkerError(dead) from None
        except (OSError, EOFError) as exc:
            dead = self._dead(DEATH_GRACE_S)
            if not dead:
                raise
            raise DeadWorkerError(dead) from exc

    def _dead(self, grace: float) -> list:
        it = self._it()
        return [] if it is None else it._dead_workers(grace)

    def _get(self, timeout: float) -> Any:
        # multiprocessing.Queue.get(timeout=), written again on purpose: its
        # read of the message after the poll is one blocking read.
        q = self._queue
        deadline = time.monotonic() + timeout
        if not q._rlock.acquire(True, timeout):
            raise queue.Empty
        try:
            if not q._reader.poll(max(0.0, deadline - time.monotonic())):
                raise queue.Empty
            message = self._read_message(q._reader)
            q._sem.release()
        finally:
            q._rlock.release()
        return ForkingPickler.loads(message)  # outside the lock, as multiprocessing does

    def _read_message(self, conn: Any) -> bytes:
        """One message of ``conn`` (multiprocessing's framing: a 4-byte size,
        or -1 and an 8-byte size); a stall with a worker dead raises."""
        (size,) = struct.unpack("!i", self._read(conn, 4))
        if size == -1:
            (size,) = struct.unpack("!Q", self._read(conn, 8))
        return self._read(conn, size)

    def _read(self, conn: Any, n: int) -> bytes:
        chunks = []
        while n:
            if not conn.poll(WORKER_CHECK_S):
                dead = self._dead(0)
                if dead:
                    raise DeadWorkerError(dead)
                continue
            chunk = os.read(conn.fileno(), min(n, CHUNK))
            if not chunk:
                raise EOFError("the data queue was closed mid-message")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class PinSideQueue(NamingQueue):
    """The workers' queue as torch's pin-memory thread reads it: NamingQueue's
    bounded read, with a dead worker's broken hand-over an empty wait (the
    thread goes on until the shutdown stops it) where the main thread's
    NamingQueue would raise: the main thread, waiting on the pin thread's
    queue, finds the dead worker itself and names it."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        try:
            return super().get(block, timeout)
        except DeadWorkerError:
            raise queue.Empty from None


# torch starts its pin-memory thread inside the iterator's __init__, with the
# loop it looks up there (``_utils.pin_memory._pin_memory_loop``) and the raw
# workers' queue: WorkerIter puts _pin_loop in its place for that moment.
_PIN_LOOP_SWAP = threading.Lock()


def _pin_loop(real: Any, it_ref: Any, in_queue: Any, *args: Any, **kwargs: Any) -> Any:
    """torch's pin-memory loop, reading the queue of ``it_ref``'s workers
    through :class:`PinSideQueue` (another iterator's queue, started by a
    thread while the loop was swapped, is read as torch reads it)."""
    it = it_ref()
    if it is not None and in_queue is getattr(it, "_worker_result_queue", None):
        in_queue = PinSideQueue(in_queue, it)
    del it  # the thread must not keep the iterator alive
    return real(in_queue, *args, **kwargs)


_warned_unpredicted = False


def _warn_unpredicted(exc: BaseException) -> None:
    global _warned_unpredicted
    if not _warned_unpredicted:
        _warned_unpredicted = True
        warnings.warn(f"FastLoader could not draw the next epoch's batches ahead ({exc!r}): "
                      "its workers wait between epochs, as DataLoader's do", RuntimeWarning,
                      stacklevel=3)


_warned_dropped = False


def _warn_dropped() -> None:
    global _warned_dropped
    if not _warned_dropped:
        _warned_dropped = True
        warnings.warn("FastLoader dropped the next epoch's batches it had drawn ahead: the "
                      "sampler, or the random state it draws from, changed between epochs (a "
                      "changed sampler, no set_epoch on a DistributedSampler, the training loop "
                      "drawing from torch's global generator with shuffle=True). The workers' "
                      "random augmentations from here on differ from what DataLoader's "
                      "persistent workers would draw (reproducibly, run to run); give the "
                      "loader its own generator (generator=torch.Generator().manual_seed(s)) "
                      "to keep them. Said once.", RuntimeWarning, stacklevel=4)


class WorkerIter(_MultiProcessingDataLoaderIter):
    """DataLoader's multi-process iterator, except that a dead worker is
    always reported as "DataLoader worker (pid(s) N) exited unexpectedly",
    found synchronously (see the module doc), never as the
    ConnectionResetError / EOFError of a broken hand-over, never as a hang;
    and that persistent workers never wait between epochs: once the epoch's
    sampler has run out, the next epoch's batches are dispatched in its
    place (``loader/_next_epoch.py``), kept at the next ``iter()`` only if
    they are what its sampler draws then."""

    def __init__(self, loader: Any) -> None:
        self._ahead: Optional[NextEpoch] = None
        self._epoch_end: Optional[int] = None  # the task id where this epoch's tasks end
        self.made_ahead = 0  # batches of this epoch dispatched before it began
        self.ahead_kept = self.ahead_dropped = 0  # epochs whose batches were drawn ahead
        with _PIN_LOOP_SWAP:
            real = _pin_memory_module._pin_memory_loop
            _pin_memory_module._pin_memory_loop = functools.partial(
                _pin_loop, real, weakref.ref(self))
            try:
                super().__init__(loader)
            finally:
                _pin_memory_module._pin_memory_loop = real
        self._data_queue = NamingQueue(self._data_queue, self)  # type: ignore[assignment]

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        # torch registers the workers with its SIGCHLD handler just before
        # its first _reset: take them out again, first thing.
        if first_iter and getattr(self, "_worker_pids_set", False):
            signal_handling._remove_worker_pids(id(self))
            self._worker_pids_set = False
        ahead, end = self._ahead, self._epoch_end
        self._ahead = self._epoch_end = None
        self.made_ahead = 0
        if ahead is None or end is None or first_iter:
            super()._reset(loader, first_iter)  # drains what is left, resumes, primes
            return
        self._drop_tasks(below=end)  # an epoch left before its end: its last batches
        if ahead.failed or not ahead.holds(self._index_sampler):
            self.ahead_dropped += 1
            if ahead.items:  # the workers drew for them: their random streams moved on
                _warn_dropped()
            self._drop_tasks(below=self._send_idx)
            super()._reset(loader, first_iter)
            return
        # torch's _reset, for tasks already under way: no _ResumeIteration
        # round trip (for a map-style dataset the worker's answer to it only
        # makes a new, stateless fetcher), ids go on where they are
        self.ahead_kept += 1
        self.made_ahead = len(ahead.items)
        self._sampler_iter = ahead.adopt()
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        hold_only = getattr(self._index_sampler, "hold_only", None)
        if hold_only is not None:
            hold_only(ahead.items)
        for _ in range(self._prefetch_factor * self._num_workers - len(ahead.items)):
            self._try_put_index()

    def _next_index(self) -> Any:
        if self._epoch_end is None:
            try:
                return next(self._sampler_iter)
            except StopIteration:
                self._epoch_end = self._send_idx
                if (self._persistent_workers and self._in_order and not self._shutdown
                        and self._dataset_kind == _DatasetKind.Map):
                    try:
                        self._ahead = NextEpoch.predict(self._index_sampler)
                    except Exception as exc:  # noqa: BLE001 - an optimization: never the user's error
                        _warn_unpredicted(exc)
                if self._ahead is None:
                    raise
                # the next epoch's first task goes to worker 0, as after torch's _reset
                self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if self._ahead is None or self._ahead.failed:
            raise StopIteration
        try:
            return self._ahead.pull()
        except StopIteration:
            raise
        except Exception as exc:  # noqa: BLE001 - dropped at the next iter(), said once
            self._ahead.failed = True
            _warn_unpredicted(exc)
            raise StopIteration from None

    def _next_data(self) -> Any:
        if self._ahead is not None and self._epoch_end is not None \
                and self._rcvd_idx >= self._epoch_end:
            raise StopIteration  # what is still in flight is the next epoch's
        return super()._next_data()

    def _drop_tasks(self, below: int) -> None:
        """Waits for the tasks with ids below ``below`` and throws their
        results away (what torch's _reset does with an unfinished epoch's)."""
        while any(i < below and len(info) == 1 for i, info in self._task_info.items()):
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            self._task_info[idx] += (data,)
        for idx in [i for i in self._task_info if i < below]:
            self._workers_num_tasks[self._task_info.pop(idx)[0]] -= 1
        self._rcvd_idx = max(self._rcvd_idx, below)

    def _try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL) -> Any:
        # torch looks for dead workers each time a wait times out (5 s): look
        # every second instead.
        if timeout == MP_STATUS_CHECK_INTERVAL:
            timeout = WORKER_CHECK_S
        try:
            return super()._try_get_data(timeout)
        except RuntimeError as exc:  # torch's own error, raised from ours: ours says more
            ours = exc.__cause__
            if not isinstance(ours, DeadWorkerError):
                raise
        # raised out here, so that ours does not get torch's as its context:
        # the two would form a cycle, through their tracebacks, with this
        # iterator, which gc would then collect closing its queues before
        # __del__ runs the shutdown (whose last message to a live worker is
        # then never sent: a 5 s join and a terminate); and not kept in a
        # local once raised, for the same reason
        try:
            raise ours
        finally:
            del ours

    def _mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        self._free_done_event()
        super()._mark_worker_as_unavailable(worker_id, shutdown)

    def _shutdown_workers(self) -> None:
        starting = not getattr(self, "_shutdown", True)
        # torch's shutdown wakes its pin thread with a message on the workers'
        # queue, written by a feeder thread under the queue's write lock: a
        # worker killed while it writes there holds that lock, and the feeder
        # would wait on it for ever, its pipe open. Freed before, and again
        # after, for a worker killed meanwhile (the pin thread still reads).
        wlock = getattr(getattr(self, "_worker_result_queue", None), "_wlock", None) \
            if starting and hasattr(self, "_pin_memory_thread") else None
        if starting:
            self._free_done_event()
            self._free_if_stale(wlock)
        super()._shutdown_workers()
        self._free_if_stale(wlock)
        if starting:
            self._release_reaped_workers()

    def _release_reaped_workers(self) -> None:
        """Closes the two descriptors each reaped worker's process object
        keeps (its sentinel and its pipe's write end) now, not when that
        object is collected: torch 2.11 keeps persistent, pinned workers'
        process objects in ``atexit`` until the interpreter exits, so every
        such iterator left four descriptors open (seen on a GPU). A reaped
        worker's later ``join`` or ``is_alive`` reads its kept exit code,
        not the descriptors."""
        for w in getattr(self, "_workers", ()):
            popen = getattr(w, "_popen", None)
            if popen is not None and popen.poll() is not None:
                popen.close()

    def _free_done_event(self) -> None:
        """Frees the workers' done event's lock where a dead worker holds it.

        Each worker looks at the event (``is_set``) after every task, under
        the event's lock, a lock shared by all the processes; a worker killed
        while it looks leaves the lock held for ever, and the main process,
        which looks at it when it marks a worker unavailable and sets it at
        the shutdown, would wait on it for ever (torch's own iterator relies
        on its SIGCHLD handler to interrupt that wait; this one takes its
        workers out of that handler, see the module doc)."""
        event = getattr(self, "_workers_done_event", None)
        self._free_if_stale(getattr(getattr(event, "_cond", None), "_lock", None))

    def _free_if_stale(self, lock: Any) -> None:
        """Releases ``lock``, a lock the workers share, if it stays held for
        longer than :data:`STALE_LOCK_S` while a worker is dead: it is taken
        to be the dead worker's (a live worker holds such a lock for
        microseconds; multiprocessing's Lock may be released by any
        process)."""
        if lock is None:
            return
        if lock.acquire(True, STALE_LOCK_S):
            lock.release()
            return
        if any(not w.is_alive() for w in self._workers):
            lock.release()

    def _dead_workers(self, grace: float) -> list:
        deadline = time.monotonic() + grace
        while True:
            dead = [w for i, w in enumerate(self._workers)
                    if self._workers_status[i] and not w.is_alive()]
            if dead or time.monotonic() >= deadline:
                sweep_orphan_segments(w.pid for w in dead)
                return dead
            time.sleep(0.01)

