"""helpers/loader_iters.py, which every test's teardown runs: a loader left
alive is shut down, and one whose done event's lock stays held (a fault
test's SIGKILL can land inside a worker's ``done_event.is_set()``, leaving it
held for good) has its workers killed instead of hanging the run in torch's
shutdown."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from helpers import loader_iters  # noqa: E402


@pytest.mark.timeout(120)
@pytest.mark.parametrize("held", [False, True], ids=["lock-free", "lock-held"])
def test_a_loader_left_alive_is_shut_down(held):
    loader_iters.track()
    it = iter(torch.utils.data.DataLoader(range(64), batch_size=2, num_workers=2,
                                          multiprocessing_context="fork"))
    next(it)
    workers = list(it._workers)
    lock = it._workers_done_event._cond._lock
    if held:  # here by this process; in a fault test, by a worker killed holding it
        assert lock.acquire(timeout=10)
    try:
        loader_iters.shut_down_left_alive()
    finally:
        if held:
            lock.release()
    assert it._shutdown and not any(w.is_alive() for w in workers)
