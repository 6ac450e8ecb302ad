"""The multi-process DataLoader iterators a test left alive, shut down when it ends.

A test that catches an error raised out of a loader (``pytest.raises``) keeps
the iterator alive in a reference cycle (the exception's traceback holds the
iterator's frames, the test's frame holds the exception). The garbage
collector frees such a cycle later, in some other test, and calls the weakref
callbacks of everything in it before any ``__del__``: the iterator's index
queues are closed (multiprocessing's finalizer stops their feeder threads)
before ``_MultiProcessingDataLoaderIter.__del__`` puts the workers' stop
message on them, so the message never leaves, and torch waits its
``MP_STATUS_CHECK_INTERVAL`` (5 s) per worker before it terminates them:
a 10 s stall in an unrelated test for every such loader with 2 workers.
Shut down at the end of the test that made them, while their queues work,
the workers stop at once.

Tracked from the first test that starts after torch's import (each test's
setup installs the tracking once ``torch.utils.data.dataloader`` is loaded;
nothing imports torch for it).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

_live: "weakref.WeakSet[Any]" = weakref.WeakSet()
_MARK = "_fastdecode_tests_track_iters"


def track() -> None:
    """Records every multi-process iterator made from now on (once torch's
    dataloader module is loaded; a no-op before, and after the first time)."""
    module = sys.modules.get("torch.utils.data.dataloader")
    if module is None or getattr(module, _MARK, False):
        return
    cls = module._MultiProcessingDataLoaderIter
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _live.add(self)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    setattr(module, _MARK, True)


def shut_down_left_alive() -> None:
    """Shuts down the workers of every tracked iterator still alive, and
    forgets them all. An iterator whose done event's lock a killed worker
    left held (a fault test's SIGKILL at random can land inside the worker's
    ``done_event.is_set()``) would wait for it forever in torch's
    ``_shutdown_workers``: its workers are killed instead."""
    for it in list(_live):
        if getattr(it, "_shutdown", True) is False:
            if _lock_free(it._workers_done_event):
                it._shutdown_workers()
            else:
                it._shutdown = True
                if it._worker_pids_set:  # torch's SIGCHLD handler: not these workers' deaths
                    sys.modules["torch.utils.data._utils.signal_handling"]._remove_worker_pids(
                        id(it))
                    it._worker_pids_set = False
                for worker in it._workers:
                    if worker.is_alive():
                        worker.kill()
                        worker.join(timeout=10)
    _live.clear()


def _lock_free(event: Any, wait: float = 5.0) -> bool:
    """True unless ``event``'s lock (a multiprocessing Event's condition)
    stays held ``wait`` seconds: a live worker holds it for microseconds."""
    lock = event._cond._lock
    if not lock.acquire(timeout=wait):
        return False
    lock.release()
    return True
