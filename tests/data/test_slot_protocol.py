"""The worker pool's slot protocol, in this process (batching/_shared_pool.py):
every view of a slot crosses counted, a slot is free only once every tensor
received of it is gone, in any thread; lost and repeated messages. The
loaders over it: tests/data/test_shared_pool.py."""

from __future__ import annotations

import os
import threading
from multiprocessing.reduction import ForkingPickler

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing  # noqa: E402,F401,F811  (registers torch's reductions)

from fastdecode.batching import _shared_pool  # noqa: E402
from fastdecode.batching._shared_pool import SlotView  # noqa: E402


@pytest.fixture
def pool():
    return _shared_pool.WorkerPool(slots=2)


@pytest.fixture
def as_worker(monkeypatch, pool):
    """This process's pool is ``pool`` (as in a worker)."""
    monkeypatch.setattr(_shared_pool, "_pool", pool)
    monkeypatch.setattr(_shared_pool, "_pool_pid", os.getpid())
    return pool


def slot_batch(pool):
    x = pool.take((3, 4), torch.float32)
    x.copy_(torch.arange(12.0).view(3, 4))
    return x.as_subclass(SlotView)


VIEWS = [
    pytest.param(lambda x: x[1:], id="slice"),
    pytest.param(lambda x: x.permute(1, 0), id="permute"),
    pytest.param(lambda x: x.unbind(0)[2], id="unbind"),
    pytest.param(lambda x: x.view(12), id="view"),
    pytest.param(lambda x: x.detach(), id="detach"),
    pytest.param(lambda x: x.data, id="data"),
    pytest.param(lambda x: x.narrow(1, 1, 2), id="narrow"),
]


@pytest.mark.parametrize("make_view", VIEWS)
def test_every_view_of_a_slot_crosses_by_the_pool_rules(as_worker, make_view, held):
    """A view a collate makes is a SlotView too (never torch's reduction,
    which would send the slot's memory and leave the flag down)."""
    view = make_view(slot_batch(as_worker))
    assert type(view) is SlotView
    sent = ForkingPickler.dumps(view)
    slot = as_worker.slots[0]
    del view
    assert not slot.free()  # flagged: in the main process's hands
    got = ForkingPickler.loads(sent)
    assert type(got) is torch.Tensor and not got.is_shared()
    assert held() == 1
    del got
    assert slot.free() and held() == 0


def test_a_slot_is_free_only_when_every_received_view_is_gone(as_worker):
    x = slot_batch(as_worker)
    got = ForkingPickler.loads(ForkingPickler.dumps((x, x[1])))
    del x
    slot = as_worker.slots[0]
    row = got[0][2]  # a view of the received batch
    del got
    assert not slot.free()
    assert torch.equal(row, torch.arange(8.0, 12.0))
    del row
    assert slot.free()


def test_a_batch_sent_twice_is_free_only_once_both_messages_are_dropped(as_worker):
    """A collate that sends the same batch again (a cache): the counters
    count each tensor, so releasing the first does not free the slot while
    the second is still in flight."""
    x = slot_batch(as_worker)
    first, second = ForkingPickler.dumps(x), ForkingPickler.dumps(x)
    del x
    slot = as_worker.slots[0]
    got = ForkingPickler.loads(first)
    del got
    assert not slot.free()  # the second is in flight
    got = ForkingPickler.loads(second)
    assert torch.equal(got, torch.arange(12.0).view(3, 4))
    del got
    assert slot.free()


def test_two_messages_both_received_release_the_slot(as_worker):
    x = slot_batch(as_worker)
    a = ForkingPickler.loads(ForkingPickler.dumps(x))
    b = ForkingPickler.loads(ForkingPickler.dumps(x[1:]))
    del x
    slot = as_worker.slots[0]
    del a
    assert not slot.free() and torch.equal(b[0], torch.arange(4.0, 8.0))
    del b
    assert slot.free()


def test_a_slot_released_in_another_thread(as_worker):
    """pin_memory=True unpickles in the pin thread; the loop drops it in its own."""
    x = slot_batch(as_worker)
    sent = ForkingPickler.dumps(x)
    del x
    got = []
    thread = threading.Thread(target=lambda: got.append(ForkingPickler.loads(sent)))
    thread.start()
    thread.join()
    slot = as_worker.slots[0]
    assert not slot.free()
    got.clear()
    assert slot.free()


def test_a_message_never_received_keeps_its_slot(as_worker):
    x = slot_batch(as_worker)
    ForkingPickler.dumps(x)  # lost: never unpickled
    del x
    assert not as_worker.slots[0].free()
    y = as_worker.take((3, 4), torch.float32)  # the pool's other slot
    z = as_worker.take((3, 4), torch.float32)  # none left: the caller makes a fresh one
    assert y is not None and z is None and as_worker.full == 1
    assert y.untyped_storage().data_ptr() != as_worker.slots[0].storage.data_ptr()


def test_a_batch_held_in_the_worker_is_not_handed_out(as_worker):
    x = slot_batch(as_worker)
    y = as_worker.take((3, 4), torch.float32)
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    del x, y
    again = as_worker.take((2, 4), torch.float32)  # a shorter batch fits a free slot
    assert again is not None and as_worker.reused == 1 and as_worker.made == 2


def test_a_received_batch_sent_on_is_a_copy(as_worker):
    """Sending a received batch to another process moves it to fresh shared
    memory (it is not shared): the slot is let go, the copy goes on."""
    got = ForkingPickler.loads(ForkingPickler.dumps(slot_batch(as_worker)))
    ForkingPickler.dumps(got)
    assert got.is_shared() and as_worker.slots[0].free()
    assert torch.equal(got, torch.arange(12.0).view(3, 4))


def test_a_copy_a_collate_made_crosses_as_torch_sends_it(as_worker, held):
    copy = slot_batch(as_worker) * 2  # a SlotView not on a slot
    assert type(copy) is SlotView
    got = ForkingPickler.loads(ForkingPickler.dumps(copy))
    assert type(got) is torch.Tensor and got.is_shared() and held() == 0
    assert torch.equal(got, torch.arange(12.0).view(3, 4) * 2)
