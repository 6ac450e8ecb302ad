"""FastLoader.state_dict() / load_state_dict(): exact, elastic, O(1) mid-epoch resume (issue 30).

Every resume below goes through ``torch.save`` / ``torch.load(weights_only=True)``
(what Lightning's checkpoints do) and, where a fresh process would, re-seeds
torch's global generator as that process would before building its loader.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import random
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from torch.utils.data import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler
from torchvision import transforms as T

import fastdecode as fd
from fastdecode.errors import ResumeError
from fastdecode.loader import _setup as loader_mod
from fastdecode.loader._cuda_ring import RingWriter, SlottedSampler

from helpers.resume_run import StatefulShuffle  # a user's sampler with its own state
from helpers.trees import make_tree

FUSED = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.PILToTensor()])
FUSED_FLOAT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                         T.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])])
# unfused random steps after the fused run
PARTLY_FUSED = T.Compose([T.RandomResizedCrop(24), T.ToTensor(), T.RandomVerticalFlip(p=0.7)])
COLOUR = T.Compose([T.RandomResizedCrop(24), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.PILToTensor()])
FIXED = T.Compose([T.Resize(28), T.CenterCrop(24), T.PILToTensor()])

CHAINS = [pytest.param(FUSED, id="fully-fused"), pytest.param(FUSED_FLOAT, id="fused-float"),
          pytest.param(PARTLY_FUSED, id="partly-fused"), pytest.param(COLOUR, id="colour")]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("resumetree"), per_class=4)  # 12 samples


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("resumebig"), per_class=8)  # 24 samples


@pytest.fixture(autouse=True)
def fresh_warnings():
    loader_mod._warned.clear()
    yield


# -- helpers ---------------------------------------------------------------


def digest(x: torch.Tensor, y) -> str:
    h = hashlib.blake2b(x.contiguous().numpy().tobytes(), digest_size=12)
    h.update(repr(y.tolist() if isinstance(y, torch.Tensor) else y).encode())
    return h.hexdigest()


def hashed(batch) -> tuple[str, ...]:
    """One batch: a digest per sample (pixels and label), in order."""
    x, y = batch
    return tuple(digest(x[i], y[i]) for i in range(len(x)))


def epoch(loader, between, e, stop=None):
    between(loader, e)
    out = []
    if stop == 0:
        return out
    for batch in loader:
        out.append(hashed(batch))
        if len(out) == stop:
            break
    return out


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def fresh_process():
    """What a new process starts from: its own seeding, as the run's was."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def uninterrupted(make, between, epochs=2):
    fresh_process()
    loader = make()
    return [epoch(loader, between, e) for e in range(epochs)]


def interrupted(make, between, stop, make_again=None, epochs=2):
    """The run stopped after ``stop`` batches of epoch 0 (0: before its
    first iter()), saved, then resumed by a fresh loader (``make_again``):
    the batches it yields through ``epochs`` epochs."""
    fresh_process()
    loader = make()
    if stop == 0:
        between(loader, 0)
        state = loader.state_dict()
    else:
        epoch(loader, between, 0, stop)
        state = loader.state_dict()
    global_rng = torch.get_rng_state()  # a checkpoint keeps it (Lightning, accelerate)
    del loader
    fresh_process()
    again = (make_again or make)()
    again.load_state_dict(roundtrip(state))
    torch.set_rng_state(global_rng)
    length = len(again)
    first = 1 if state["finished"] else 0  # the loop's next epoch (what set_epoch is given)
    got = [epoch(again, between, e) for e in range(first, first + epochs)]
    return state, got, length


def expect_resumed(full, got, stop, length):
    """The resumed run's epochs are the uninterrupted run's from the next
    batch on; after an epoch's last batch, the next epoch's first."""
    if stop == length:
        assert got[0] == full[1]
    else:
        assert got[0] == full[0][stop:]
        assert got[1] == full[1]


def nothing(loader, e):
    pass


def set_epoch(loader, e):
    loader.sampler.set_epoch(e)


def set_epoch_inner(loader, e):
    loader.batch_sampler.sampler.set_epoch(e)


class GlobalShuffle(Sampler):
    """A user's sampler with no state, drawing from torch's global generator."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())

    def __len__(self):
        return self.n


class GlobalBatches:
    """A user's batch sampler with no state (not a BatchSampler)."""

    def __init__(self, n, size):
        self.n, self.size = n, size

    def __iter__(self):
        order = torch.randperm(self.n).tolist()
        for i in range(0, self.n, self.size):
            yield order[i:i + self.size]

    def __len__(self):
        return -(-self.n // self.size)


def dataset(root, chain, **kwargs):
    """FastImageFolder(root, chain); a partly fused chain says so once: not here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        return fd.FastImageFolder(root, chain, **kwargs)


def gen(seed):
    return torch.Generator().manual_seed(seed)


# (loader kwargs from the dataset, between-epoch action)
SAMPLERS = [
    pytest.param(lambda ds: dict(shuffle=True, generator=gen(5)), nothing, id="random-generator"),
    pytest.param(lambda ds: dict(shuffle=True), nothing, id="random-global"),
    pytest.param(lambda ds: dict(sampler=RandomSampler(ds, replacement=True, num_samples=10,
                                                       generator=gen(3))),
                 nothing, id="random-replacement"),
    pytest.param(lambda ds: dict(shuffle=False), nothing, id="sequential"),
    pytest.param(lambda ds: dict(sampler=DistributedSampler(ds, num_replicas=2, rank=1, seed=9)),
                 set_epoch, id="distributed-set-epoch"),
    pytest.param(lambda ds: dict(sampler=WeightedRandomSampler([1.0 + i % 3 for i in range(len(ds))],
                                                               len(ds), generator=gen(3))),
                 nothing, id="weighted"),
    pytest.param(lambda ds: dict(sampler=WeightedRandomSampler([1.0 + i % 3 for i in range(len(ds))],
                                                               len(ds))),
                 nothing, id="weighted-global"),
    pytest.param(lambda ds: dict(batch_size=None, batch_sampler=BatchSampler(
        RandomSampler(ds, generator=gen(2)), 5, drop_last=True)), nothing,
        id="batch-sampler-drop-last"),
    pytest.param(lambda ds: dict(batch_size=None, batch_sampler=BatchSampler(
        SequentialSampler(ds), 5, drop_last=False)), nothing, id="batch-sampler-keep-last"),
    pytest.param(lambda ds: dict(sampler=StatefulShuffle(len(ds))), set_epoch,
                 id="user-sampler-with-state"),
]


def loader_of(ds, kwargs, **extra):
    kw = {"batch_size": 3, "resumable": True, "num_workers": 0, **kwargs, **extra}
    if isinstance(kw.get("generator"), int):  # a seed: each loader its own generator
        kw["generator"] = gen(kw["generator"])
    if kw.get("batch_size") is None and "batch_sampler" in kw:
        kw.pop("batch_size")
    return fd.FastLoader(ds, **kw)


# -- exact -----------------------------------------------------------------


@pytest.mark.parametrize("stop", [pytest.param(0, id="before-iter"), pytest.param(1, id="first"),
                                  pytest.param(2, id="middle"), pytest.param(-1, id="last")])
@pytest.mark.parametrize("kwargs, between", SAMPLERS)
def test_resume_yields_the_uninterrupted_batches(tree, kwargs, between, stop):
    """Same samples, order and augmentations bit for bit, to the end of the
    epoch and through the next, for each sampler; at the last batch, the
    next epoch (not an empty one)."""
    ds = dataset(tree, FUSED)

    def make():
        return loader_of(ds, kwargs(ds))

    full = uninterrupted(make, between)
    stop = len(full[0]) if stop == -1 else stop
    state, got, length = interrupted(make, between, stop)
    assert length == len(full[0])
    expect_resumed(full, got, stop, length)
    assert state["batches"] == stop and state["finished"] == (stop == length)


@pytest.mark.parametrize("stop", [pytest.param(2, id="middle"), pytest.param(4, id="last")])
@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("resume_with", [
    pytest.param(dict(num_workers=0), id="in-process"),
    pytest.param(dict(num_workers=2), id="two-workers"),
    pytest.param(dict(num_workers=2, persistent_workers=True), id="two-persistent-workers"),
    pytest.param(dict(threads=2), id="two-threads"),
])
def test_resume_with_other_workers_gives_the_same_stream(tree, chain, resume_with, stop):
    """Saved in-process, resumed with workers (persistent or not) or threads:
    the same batches, for each chain (fused, partly fused, colour)."""
    ds = dataset(tree, chain)
    kwargs = dict(shuffle=True, generator=5)

    full = uninterrupted(lambda: loader_of(ds, kwargs), nothing)
    _, got, length = interrupted(lambda: loader_of(ds, kwargs), nothing, stop,
                                 make_again=lambda: loader_of(ds, kwargs, **resume_with))
    expect_resumed(full, got, stop, length)


@pytest.mark.parametrize("saved_with", [
    pytest.param(dict(num_workers=2), id="two-workers"),
    pytest.param(dict(num_workers=2, persistent_workers=True), id="two-persistent-workers"),
    pytest.param(dict(threads=2), id="two-threads"),
    pytest.param(dict(num_workers=2, collate_fn=fd.collate), id="two-workers-no-ring"),
])
def test_a_state_saved_under_workers_resumes_in_process(tree, saved_with):
    ds = dataset(tree, FUSED_FLOAT)
    kwargs = dict(shuffle=True, generator=6)
    full = uninterrupted(lambda: loader_of(ds, kwargs), nothing)
    _, got, length = interrupted(lambda: loader_of(ds, kwargs, **saved_with), nothing, 3,
                                 make_again=lambda: loader_of(ds, kwargs))
    expect_resumed(full, got, 3, length)


def test_persistent_workers_resumed_in_the_same_loader(tree):
    """load_state_dict on a loader whose persistent workers drew the next
    epoch ahead: the prediction is dropped, silently, and the state holds."""
    ds = dataset(tree, FUSED)
    kwargs = dict(shuffle=True, generator=5, num_workers=2, persistent_workers=True)
    full = uninterrupted(lambda: loader_of(ds, kwargs), nothing, epochs=3)
    fresh_process()
    loader = loader_of(ds, kwargs)
    epoch(loader, nothing, 0, 2)
    state = roundtrip(loader.state_dict())
    epoch(loader, nothing, 0)  # the rest of epoch 0: the next drawn ahead meanwhile
    epoch(loader, nothing, 1)
    loader.load_state_dict(state)
    assert epoch(loader, nothing, 0) == full[0][2:]
    assert epoch(loader, nothing, 1) == full[1]


def test_three_resumes_within_an_epoch_accumulate(tree):
    ds = dataset(tree, PARTLY_FUSED)
    kwargs = dict(shuffle=True, generator=8, batch_size=2)  # 6 batches
    full = uninterrupted(lambda: loader_of(ds, kwargs), nothing)
    fresh_process()
    loader = loader_of(ds, kwargs)
    got = epoch(loader, nothing, 0, 1)
    for take, mode in ((2, dict(num_workers=2)), (0, dict(threads=2)), (1, {})):
        state = roundtrip(loader.state_dict())
        loader = loader_of(ds, kwargs, **mode)
        loader.load_state_dict(state)
        got += epoch(loader, nothing, 0, take)
    state = roundtrip(loader.state_dict())
    assert state["batches"] == 4
    loader = loader_of(ds, kwargs)
    loader.load_state_dict(state)
    assert got + epoch(loader, nothing, 0) == full[0]
    assert epoch(loader, nothing, 1) == full[1]


def test_default_loader_resumes_the_samples_exactly(tree):
    """Without resumable=, state_dict works too: the samples and their
    order are exact (a fixed chain: the batches are), the augmentations are
    DataLoader's stream (not compared)."""
    ds = dataset(tree, FIXED)

    def make(**extra):
        return fd.FastLoader(ds, batch_size=3, shuffle=True, generator=gen(5), num_workers=0,
                             **extra)

    full = uninterrupted(make, nothing)
    for stop in (1, 3, 4):
        state, got, length = interrupted(make, nothing, stop)
        assert state["base_seed"] is None
        expect_resumed(full, got, stop, length)
    ds_random = dataset(tree, FUSED)  # and a random chain's batches are DataLoader's
    fresh_process()
    ours = [hashed(b) for b in fd.FastLoader(ds_random, batch_size=3, shuffle=True,
                                             generator=gen(5), num_workers=0)]
    fresh_process()
    theirs = [hashed(b) for b in torch.utils.data.DataLoader(
        ds_random, batch_size=3, shuffle=True, generator=gen(5), collate_fn=fd.collate)]
    assert ours == theirs


def test_global_rngs_after_the_first_resumed_batch_are_the_uninterrupted_runs(tree):
    """A resumable loader draws nothing from torch's, NumPy's or Python's
    global generators (in-process too): the training loop's streams are as
    in the uninterrupted run after the first resumed batch."""
    ds = dataset(tree, PARTLY_FUSED)
    kwargs = dict(shuffle=True, generator=5)

    def states():
        return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].tobytes()

    fresh_process()
    loader = loader_of(ds, kwargs)
    it = iter(loader)
    for _ in range(3):
        next(it)
    expected = states()
    fresh_process()
    loader = loader_of(ds, kwargs)
    epoch(loader, nothing, 0, 2)
    state = roundtrip(loader.state_dict())
    fresh_process()
    again = loader_of(ds, kwargs)
    again.load_state_dict(state)
    next(iter(again))
    got = states()
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_nothing_before_the_resume_point_is_decoded_again(tree, monkeypatch):
    """O(1): the resumed pass reads only the samples after the saved one,
    at the epoch's last batch as at its first."""
    ds = dataset(tree, FUSED, readahead=0)
    kwargs = dict(shuffle=True, generator=5, batch_size=2)
    read: list[int] = []
    real = ds._read

    def counted(path, index=None):
        read.append(index)
        return real(path, index)

    monkeypatch.setattr(ds, "_read", counted)
    fresh_process()
    loader = loader_of(ds, kwargs)
    order = []
    for _ in loader:
        order.append(list(read))
        read.clear()
    for stop in (1, 3, 5):
        fresh_process()
        loader = loader_of(ds, kwargs)
        epoch(loader, nothing, 0, stop)
        state = roundtrip(loader.state_dict())
        again = loader_of(ds, kwargs)
        again.load_state_dict(state)
        read.clear()
        epoch(again, nothing, 0)
        assert read == [i for batch in order[stop:] for i in batch]


def test_a_sampler_without_state_is_replayed_with_one_warning(tree):
    """No state_dict: its indices (never the decodes) are replayed from the
    epoch's saved random states; said once."""
    ds = dataset(tree, FUSED)
    cases = [lambda: loader_of(ds, dict(sampler=GlobalShuffle(len(ds)))),
             lambda: loader_of(ds, dict(batch_size=None, batch_sampler=GlobalBatches(len(ds), 4)))]
    for make in cases:
        loader_mod._warned.clear()
        full = uninterrupted(make, nothing)
        with pytest.warns(RuntimeWarning, match=r"has no state_dict, by replaying its "
                                                r"(indices|batches).*nothing is decoded.*Said once"
                          ) as record:
            _, got, length = interrupted(make, nothing, 1)
            _, got2, _ = interrupted(make, nothing, 2)
        assert len(record) == 1
        expect_resumed(full, got, 1, length)
        expect_resumed(full, got2, 2, length)


# -- elastic: another world size ---------------------------------------------


def world(ds, replicas, batch_size, make_kwargs=None):
    return [loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=replicas, rank=r,
                                                          shuffle=True, seed=9),
                               batch_size=batch_size)) for r in range(replicas)]


def steps(loaders, e, stop=None):
    """Each step's union of the ranks' batches, sorted (the samples'
    augmentations are keyed by their position: equal digests, equal positions)."""
    per_rank = [epoch(loader, set_epoch, e, stop) for loader in loaders]
    return [sorted(d for batch in step for d in batch) for step in zip(*per_rank, strict=True)]


@pytest.mark.parametrize("replicas, batch_size", [pytest.param(2, 4, id="4-to-2-ranks"),
                                                  pytest.param(8, 1, id="4-to-8-ranks"),
                                                  pytest.param(4, 2, id="4-to-4-ranks")])
def test_another_world_size_keeping_the_global_batch(big_tree, replicas, batch_size):
    """Saved by 4 ranks (batch 2: global 8) after step 1 of 3; resumed by
    2 or 8 ranks with the same global batch: each later step's union is the
    uninterrupted one's (every remaining sample once), and so is the next
    epoch's, drawn by the new world's DistributedSampler."""
    ds = dataset(big_tree, FUSED)
    fresh_process()
    ranks = world(ds, 4, 2)
    full = [steps(ranks, e) for e in range(2)]
    fresh_process()
    old = world(ds, 4, 2)
    assert steps(old, 0, 1) == full[0][:1]
    states = [roundtrip(loader.state_dict()) for loader in old]
    assert all(s == states[0] for s in states)  # rank-agnostic: any rank's will do
    fresh_process()
    new = world(ds, replicas, batch_size)
    for loader in new:
        loader.load_state_dict(states[0])
    assert steps(new, 0) == full[0][1:]
    assert steps(new, 1) == full[1]
    seen = sorted(d for step in full[0][1:] for d in step)
    assert len(seen) == 16 and len(set(seen)) == 16  # none twice, none skipped


def test_a_world_size_that_does_not_divide_the_global_batch_is_an_error(big_tree):
    ds = dataset(big_tree, FUSED)
    old = world(ds, 4, 2)
    steps(old, 0, 1)
    state = roundtrip(old[0].state_dict())
    with pytest.raises(ResumeError, match=r"global batch 8 \(2 x 4 ranks\) is not divisible by "
                                          r"the new world size 3"):
        world(ds, 3, 3)[0].load_state_dict(state)
    with pytest.raises(ResumeError, match=r"another global batch: saved 8 \(2 x 4 ranks\), now "
                                          r"6 \(3 x 2\); use batch_size=4"):
        world(ds, 2, 3)[0].load_state_dict(state)


# -- the state ---------------------------------------------------------------


class Numbers(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def test_state_is_small_primitive_and_independent_of_the_dataset_size():
    sizes = []
    for n in (1200, 1_281_167):
        loader = fd.FastLoader(Numbers(n), batch_size=256, shuffle=True, generator=gen(1),
                               num_workers=0, resumable=True)
        it = iter(loader)
        first = [next(it) for _ in range(3)]
        state = loader.state_dict()
        buf = io.BytesIO()
        torch.save(state, buf)
        sizes.append(len(buf.getvalue()))
        assert torch.load(io.BytesIO(buf.getvalue()), weights_only=True) == state
        assert pickle.loads(pickle.dumps(state)) == state
        again = fd.FastLoader(Numbers(n), batch_size=256, shuffle=True, generator=gen(1),
                              num_workers=0, resumable=True)
        again.load_state_dict(state)
        nxt = next(iter(again))
        ref = next(it)
        assert torch.equal(nxt, ref) and not any(torch.equal(nxt, f) for f in first)
    assert abs(sizes[0] - sizes[1]) <= 64 and max(sizes) < 16 * 1024  # the size's own digits


def tree_copy(src, dst, rename=None, drop=None):
    shutil.copytree(src, dst)
    if rename:
        (dst / rename[0]).rename(dst / rename[1])
    if drop:
        (dst / drop).unlink()
    return dst


def saved(ds, **kwargs):
    loader = loader_of(ds, {"shuffle": True, "generator": gen(5), **kwargs})
    epoch(loader, nothing, 0, 1)
    return roundtrip(loader.state_dict())


def test_mismatches_are_errors_naming_what_differs(tree, tmp_path):
    ds = dataset(tree, FUSED)
    state = saved(ds)

    def load_into(state_, **kwargs):
        loader_of(ds, {"shuffle": True, "generator": gen(5), **kwargs}).load_state_dict(state_)

    smaller = fd.FastImageFolder(tree_copy(tree, tmp_path / "smaller", drop="cat/img0.jpg"), FUSED)
    with pytest.raises(ResumeError, match=r"another dataset: its size differs \(saved 12, now 11\)"):
        loader_of(smaller, {"shuffle": True, "generator": gen(5)}).load_state_dict(state)
    renamed = fd.FastImageFolder(tree_copy(tree, tmp_path / "renamed",
                                           rename=("dog/img0.jpg", "dog/img9.jpg")), FUSED)
    with pytest.raises(ResumeError, match=r"another dataset: its file list differs"):
        loader_of(renamed, {"shuffle": True, "generator": gen(5)}).load_state_dict(state)
    classes = fd.FastImageFolder(tree_copy(tree, tmp_path / "classes", rename=("eel", "fox")),
                                 FUSED)
    with pytest.raises(ResumeError, match=r"another dataset: its class list differs"):
        loader_of(classes, {"shuffle": True, "generator": gen(5)}).load_state_dict(state)
    with pytest.raises(ResumeError, match=r"another seed: the state's base seed is 5, this "
                                          r"loader's 6"):
        load_into(state, generator=gen(6))
    with pytest.raises(ResumeError, match=r"another seed: the state's base seed is 5, this "
                                          r"loader's None"):
        fd.FastLoader(ds, batch_size=3, shuffle=True, generator=gen(5),
                      num_workers=0).load_state_dict(state)
    with pytest.raises(ResumeError, match=r"another sampler: saved BatchSampler > RandomSampler, "
                                          r"now BatchSampler > SequentialSampler"):
        load_into(state, shuffle=False, generator=None, resumable=5)
    with pytest.raises(ResumeError, match=r"another batch size: saved 3, now 4"):
        load_into(state, batch_size=4)
    with pytest.raises(ResumeError, match=r"another sampler: its drop_last was False, now True"):
        load_into(state, drop_last=True)
    with pytest.raises(ResumeError, match=r"not a FastLoader state: dict \(kind None\)"):
        load_into({})
    with pytest.raises(ResumeError, match=r"FastLoader state version 99; this fastdecode reads "
                                          r"version 1"):
        load_into({**state, "version": 99})


def test_a_distributed_sampler_at_another_epoch_is_an_error(tree):
    ds = dataset(tree, FUSED)
    loader = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    epoch(loader, set_epoch, 3, 1)
    state = roundtrip(loader.state_dict())
    again = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    again.sampler.set_epoch(2)
    again.load_state_dict(state)  # a sampler set before the load is left as it is
    with pytest.raises(ResumeError, match=r"saved in epoch 3 of the DistributedSampler, which is "
                                          r"at 2 now: call set_epoch\(3\) before iter\(\)"):
        next(iter(again))
    later = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    later.load_state_dict(state)
    later.sampler.set_epoch(4)  # set after the load, before iter()
    with pytest.raises(ResumeError, match=r"at 4 now: call set_epoch\(3\) before iter\(\)"):
        next(iter(later))


def test_a_fresh_distributed_sampler_takes_the_saved_epoch_at_the_load(tree):
    """A new process's sampler is at epoch 0: a mid-epoch state sets the
    saved epoch (Lightning calls set_epoch only after iter()); a state saved
    after an epoch's end leaves it to the loop's set_epoch."""
    ds = dataset(tree, FUSED)
    loader = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    epoch(loader, set_epoch, 3, 1)
    state = roundtrip(loader.state_dict())
    again = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    again.load_state_dict(state)
    assert again.sampler.epoch == 3
    whole = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    epoch(whole, set_epoch, 3)
    done = roundtrip(whole.state_dict())
    assert done["finished"]
    fresh = loader_of(ds, dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=9)))
    fresh.load_state_dict(done)
    assert fresh.sampler.epoch == 0


def test_load_after_iter_warns_and_applies_to_the_next_iter(tree):
    """torchdata restarts silently here; FastLoader says the iterator made
    before goes on, and the state applies to the next iter()."""
    ds = dataset(tree, FUSED)
    kwargs = dict(shuffle=True, generator=5)
    full = uninterrupted(lambda: loader_of(ds, kwargs), nothing)
    state = saved(ds)
    fresh_process()
    loader = loader_of(ds, kwargs)
    it = iter(loader)
    with pytest.warns(RuntimeWarning, match=r"load_state_dict after iter\(\): the iterator "
                                            r"already made goes on"):
        loader.load_state_dict(state)
    assert [hashed(b) for b in it] == full[0]
    assert epoch(loader, nothing, 0) == full[0][1:]


def test_no_position_without_batches_or_a_map_style_dataset(tree):
    ds = dataset(tree, FUSED)
    loader = fd.FastLoader(ds, batch_size=None, num_workers=0)
    with pytest.raises(ResumeError, match=r"no position to save or load: it needs a map-style "
                                          r"dataset and batches"):
        loader.state_dict()
    with pytest.raises(ValueError, match=r"resumable= needs a map-style dataset and batches"):
        fd.FastLoader(ds, batch_size=None, num_workers=0, resumable=True)
    with pytest.raises(TypeError, match=r"resumable must be a bool or an int seed, not str"):
        fd.FastLoader(ds, batch_size=2, num_workers=0, resumable="yes")


# -- the CUDA ring's batches, without a GPU --------------------------------


def test_cuda_ring_writer_decodes_seeded_batches_as_in_process(tree):
    """The CUDA ring's sampler and writer (what its workers run) carry each
    batch's seeds: its slots hold the resumable in-process batches' pixels.
    (The ring itself needs CUDA: tests/data/test_loader_cuda.py.)"""
    ds = dataset(tree, FUSED)
    kwargs = dict(shuffle=True, generator=5)
    fresh_process()
    ref = [b[0] for b in loader_of(ds, kwargs)]
    fresh_process()
    loader = loader_of(ds, kwargs)
    tracker = loader._tracker
    tracker.start_epoch()
    ring = torch.zeros((3, 3, *ds.fixed_sample_shape()), dtype=torch.uint8)
    writer = RingWriter(ds, ring)
    for k, batch in enumerate(SlottedSampler(loader._batches(), 3)):
        batch = pickle.loads(pickle.dumps(batch))  # as it reaches a worker
        slot, targets = writer.__getitems__(batch)
        assert torch.equal(ring[slot][:len(batch)], ref[k])
