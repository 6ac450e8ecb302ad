"""The stock DataLoader over FastImageFolder: samples the stock collate takes
whole, batches on a worker's shared pool, slots released by the main process
(batching/_shared_pool.py, batching/_buffers.py). CPU-only; pinning needs CUDA. The
slot protocol itself, in one process: tests/data/test_slot_protocol.py."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from torch.utils.data import DataLoader, default_collate  # noqa: E402
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.batching import _buffers as _batches  # noqa: E402
from fastdecode.batching import _shared_pool  # noqa: E402
from fastdecode.batching._shared_pool import pool_counts  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

BATCH = 4
CHAINS = [
    pytest.param(lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]),
                 id="uint8"),
    pytest.param(lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(),
                                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
                 id="float"),
]
WORKERS = [
    pytest.param({"num_workers": 0}, id="in-process"),
    pytest.param({"num_workers": 1}, id="1-worker"),
    pytest.param({"num_workers": 2}, id="2-workers"),
    pytest.param({"num_workers": 2, "persistent_workers": True}, id="2-persistent"),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("pooltree"), per_class=6)  # 18 images: 5 batches


@pytest.fixture(autouse=True)
def taken_whole_fresh(monkeypatch):
    """This thread has not seen a collate take a batch whole."""
    monkeypatch.setattr(_batches._taken_whole, "flag", False, raising=False)


def expected(ds, batch_size=BATCH):
    """The batches, each sample loaded alone and stacked (no batch buffer)."""
    items = [ds[i] for i in range(len(ds))]
    return [(torch.stack([x for x, _ in items[k:k + batch_size]]),
             torch.tensor([t for _, t in items[k:k + batch_size]]))
            for k in range(0, len(items), batch_size)]


def assert_batches(got, want):
    assert len(got) == len(want)
    for (x, y), (u, v) in zip(got, want):
        assert type(x) is torch.Tensor and torch.equal(x, u) and torch.equal(y, v)


# -- values, kept or dropped -------------------------------------------------


@pytest.mark.parametrize("kwargs", WORKERS)
@pytest.mark.parametrize("chain", CHAINS)
def test_stock_collate_batches_equal_the_samples(tree, chain, kwargs):
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, **kwargs)
    for _ in range(3):  # each batch checked on arrival, then dropped: slots are reused
        for (x, y), (u, v) in zip(loader, want, strict=True):
            assert type(x) is torch.Tensor and torch.equal(x, u) and torch.equal(y, v)


@pytest.mark.parametrize("kwargs", WORKERS)
@pytest.mark.parametrize("chain", CHAINS)
def test_batches_all_kept_are_never_written_over(tree, chain, kwargs):
    """The consumer keeps every batch of three epochs: no slot is handed out
    while the main process holds it, so each still has its values at the end."""
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, **kwargs)
    kept = [list(loader) for _ in range(3)]
    for epoch in kept:
        assert_batches(epoch, want)


@pytest.mark.parametrize("chain", CHAINS)
def test_a_view_kept_outlives_its_batch_unchanged(tree, chain):
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=1, persistent_workers=True)
    sample = next(iter(loader))[0][1]  # a view of one sample; the batch is dropped
    for _ in range(3):
        for (x, y), (u, v) in zip(loader, want, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    assert torch.equal(sample, want[0][0][1])


@pytest.mark.slow  # spawned workers import torch, ~9 s: make test-full
def test_spawned_workers_register_the_rows_at_import(tree):
    """A spawned worker imports fastdecode when it unpickles the dataset: the
    rows reach collate_rows there too (taken whole: pooled, not is_shared)."""
    ds = fd.FastImageFolder(tree, CHAINS[1].values[0]())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=1, multiprocessing_context="spawn",
                        collate_fn=collate_with_counts)
    got = list(loader)
    assert_batches([(x, y) for x, y, _ in got], want)
    assert got[-1][2]["made"] >= 1 and not got[-1][0].is_shared()


def test_two_loaders_at_once_keep_their_batches_apart(tree):
    a = fd.FastImageFolder(tree, CHAINS[0].values[0]())
    b = fd.FastImageFolder(tree, CHAINS[1].values[0]())
    want_a, want_b = expected(a), expected(b)
    la = DataLoader(a, batch_size=BATCH, num_workers=1, persistent_workers=True)
    lb = DataLoader(b, batch_size=BATCH, num_workers=2)
    kept = [list(zip(la, lb, strict=True)) for _ in range(2)]
    for epoch in kept:
        assert_batches([x for x, _ in epoch], want_a)
        assert_batches([x for _, x in epoch], want_b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs CUDA")
@pytest.mark.parametrize("chain", CHAINS)
def test_pinned_batches_equal_the_samples_kept_or_dropped(tree, chain):
    """The batches arrive in the pin thread: its copy lets the slot go."""
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    for _ in range(2):
        for (x, y), (u, v) in zip(loader, want, strict=True):
            assert x.is_pinned() and torch.equal(x, u) and torch.equal(y, v)
    assert_batches([(x, y) for x, y in loader], want)


# -- the pool is reused, and says how ----------------------------------------


def collate_with_counts(batch):
    """The stock collate, and the worker's pool counters after it."""
    x, y = default_collate(batch)
    return x, y, pool_counts()


@pytest.mark.parametrize("chain", CHAINS)
def test_a_loop_that_drops_its_batches_reuses_the_slots(tree, chain, held):
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=1, persistent_workers=True,
                        collate_fn=collate_with_counts)
    counts = {}
    for _ in range(4):
        for (x, y, counts), (u, v) in zip(loader, want, strict=True):  # noqa: B007
            assert torch.equal(x, u) and torch.equal(y, v)
    # 20 batches, at most the pool's slots ever made, none made fresh
    assert counts["made"] <= _shared_pool.POOL_SLOTS and counts["full"] == 0
    assert counts["reused"] + counts["made"] == 4 * len(want) and counts["reused"] >= 10
    del x, y
    gc.collect()
    assert held() == 0  # the main process keeps nothing of a dropped batch


@pytest.mark.parametrize("chain", CHAINS)
def test_a_consumer_keeping_every_batch_gets_fresh_ones_past_the_pool(tree, chain, held):
    ds = fd.FastImageFolder(tree, chain())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=1, persistent_workers=True,
                        collate_fn=collate_with_counts)
    kept = list(loader) + list(loader)
    assert_batches([(x, y) for x, y, _ in kept], want + want)
    counts = kept[-1][2]
    assert counts["made"] == _shared_pool.POOL_SLOTS and counts["reused"] == 0
    assert counts["full"] == 2 * len(want) - _shared_pool.POOL_SLOTS
    assert held() == _shared_pool.POOL_SLOTS
    del kept
    gc.collect()
    assert held() == 0


# -- collates that wrap, modify or replace the stock collate's batch ---------


def mix_in_place(batch):
    """A mixup-style collate: default_collate, then the batch changed in place."""
    x, y = default_collate(batch)
    x = x.float()  # a float batch: the batch itself, changed in place
    rolled = x.roll(1, 0)
    x.mul_(0.75).add_(rolled, alpha=0.25)
    return x, y


def channels_last_view(batch):
    x, y = default_collate(batch)
    return x.permute(0, 2, 3, 1)[:, 2:30], y  # a view of the slot


def samples_as_they_are(batch):
    return [x for x, _ in batch], [t for _, t in batch]  # the slot's rows, uncollated


def reversed_samples(batch):
    return default_collate(batch[::-1])  # not one batch in order: stacked as torch does


def uint8_in_place(batch):
    x, y = default_collate(batch)
    if x.dtype == torch.uint8:
        x.bitwise_not_()  # the slot itself, changed before it leaves
    else:
        x.neg_()
    return x, y


WRAPPERS = [
    pytest.param(mix_in_place, lambda x: (lambda f: f.mul(0.75).add(f.roll(1, 0), alpha=0.25))(
        x.float()), id="mixup-like"),
    pytest.param(channels_last_view, lambda x: x.permute(0, 2, 3, 1)[:, 2:30], id="view"),
    pytest.param(uint8_in_place, lambda x: x.bitwise_not() if x.dtype == torch.uint8 else x.neg(),
                 id="in-place"),
    pytest.param(reversed_samples, lambda x: x.flip(0), id="reordered"),
]


@pytest.mark.parametrize("kwargs", WORKERS)
@pytest.mark.parametrize("collate_fn,effect", WRAPPERS)
@pytest.mark.parametrize("chain", CHAINS)
def test_collates_wrapping_the_stock_one_give_its_values(tree, chain, collate_fn, effect, kwargs):
    ds = fd.FastImageFolder(tree, chain())
    want = [(effect(u), v.flip(0) if collate_fn is reversed_samples else v)
            for u, v in expected(ds)]
    loader = DataLoader(ds, batch_size=BATCH, collate_fn=collate_fn, **kwargs)
    kept = list(loader)  # held while the later epochs run
    for _ in range(2):
        for (x, y), (u, v) in zip(loader, want, strict=True):
            assert type(x) is torch.Tensor and torch.equal(x, u) and torch.equal(y, v)
    for (x, y), (u, v) in zip(kept, want, strict=True):
        assert torch.equal(x, u) and torch.equal(y, v)


@pytest.mark.parametrize("kwargs", WORKERS)
def test_uncollated_samples_cross_intact(tree, kwargs):
    ds = fd.FastImageFolder(tree, CHAINS[1].values[0]())
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, collate_fn=samples_as_they_are, **kwargs)
    kept = [list(loader) for _ in range(2)]
    for epoch in kept:
        for (xs, ys), (u, v) in zip(epoch, want, strict=True):
            assert torch.equal(torch.stack(xs), u) and ys == v.tolist()


@pytest.mark.parametrize("chain", CHAINS)
def test_torchvision_mixup_over_the_stock_collate(tree, chain):
    """torchvision's references: collate_fn=lambda b: mixup(*default_collate(b))."""
    from torchvision.transforms import v2

    mixup = v2.MixUp(num_classes=3)
    ds = fd.FastImageFolder(tree, T.Compose([*chain().transforms, T.ConvertImageDtype(
        torch.float32)]))
    want = expected(ds)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=2,
                        collate_fn=_MixupCollate(mixup))
    for (x, y), (u, _) in zip(list(loader), want, strict=True):
        rolled = u.roll(1, 0)
        diff = (u - rolled).abs()
        if diff.max() < 0.05:
            continue
        k = int(diff.flatten().argmax())
        lam = float((x.flatten()[k] - rolled.flatten()[k]) / (u - rolled).flatten()[k])
        torch.testing.assert_close(x, lam * u + (1 - lam) * rolled)
        assert y.shape == (len(u), 3)


class _MixupCollate:
    def __init__(self, mixup):
        self.mixup = mixup

    def __call__(self, batch):
        return self.mixup(*default_collate(batch))


def test_a_batch_stacked_by_a_user_collate_is_a_plain_copy(tree):
    ds = fd.FastImageFolder(tree, CHAINS[0].values[0]())
    batch = ds.__getitems__([0, 1, 2])
    assert all(type(x) is _batches.BatchRow for x, _ in batch)
    assert type(ds[0][0]) is torch.Tensor  # one sample, as ImageFolder gives it
    stacked = torch.stack([x for x, _ in batch])
    assert type(stacked) is torch.Tensor and stacked.data_ptr() != batch[0][0].data_ptr()
    whole = default_collate(batch)[0]
    assert type(whole) is torch.Tensor and whole.data_ptr() == batch[0][0].data_ptr()
    assert type(default_collate(batch[1:])[0]) is torch.Tensor  # rows 1.. : stacked, a copy
    assert default_collate(batch[1:])[0].data_ptr() != batch[1][0].data_ptr()
