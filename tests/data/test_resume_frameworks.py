"""Lightning and Accelerate resume a FastLoader exactly mid-epoch (issue 30),
with the real packages, on 2 gloo ranks on 127.0.0.1 (CPU, DDP).

One uninterrupted run per framework checkpoints as it goes; each case then
resumes, in fresh processes, from the checkpoint saved after one batch: the
batches each rank's training step sees from there on, through the end of
the next epoch, equal the uninterrupted run's digest by digest (samples,
order, augmentations under ``resumable=``), and the dataset reads exactly
the images of those batches: no position before the resume point is
decoded again.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import fastdecode as fd
from fastdecode.errors import ResumeError
from fastdecode.integrations import accelerate as fd_accelerate
from fastdecode.loader import _resume

from helpers import resume_ranks
from helpers.ddp_worker import run_ranks
from helpers.trees import make_tree

WORLD = 2
EPOCHS = 3
PER_RANK = 6  # 24 samples, 2 ranks, batch 2: batches per rank per epoch


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("fwresume"), per_class=8)  # 24 samples


def after(steps, epoch, k):
    """The steps after batch ``k`` of ``epoch`` (step = (epoch, batch, ...))."""
    return [s for s in steps if (s[0], s[1]) >= (epoch, k)]


def expect_exact(full, resumed, epoch, k):
    """Each rank's resumed steps are its uninterrupted steps from the next
    batch on (after an epoch's last batch: the next epoch's first) through
    the last epoch, and read the images of those batches only."""
    if k == PER_RANK:
        epoch, k = epoch + 1, 0
    for rank, (f, r) in enumerate(zip(full, resumed)):
        want = after(f["steps"], epoch, k)
        got = r["steps"]
        assert [(e, b) for e, b, *_ in got] == [(e, b) for e, b, *_ in want], f"rank {rank}"
        assert [d for _, _, d, _ in got] == [d for _, _, d, _ in want], \
            f"rank {rank}: other batches than the uninterrupted run's"
        assert [i for _, _, _, i in got] == [i for _, _, _, i in want], \
            f"rank {rank}: read other images than those of the batches after the resume point"
        assert got[-1][0] == EPOCHS - 1 and epoch < EPOCHS - 1  # through the next epoch, whole
    # together the ranks saw every sample of each resumed epoch once
    for e in range(epoch + 1, EPOCHS):
        seen = [d for r in resumed for s in r["steps"] if s[0] == e for d in s[2]]
        assert len(seen) == len(set(seen)) == WORLD * PER_RANK * 2


# (epoch, batches taken) at the checkpoint
# (each case is two spawned runs of 2 ranks, ~1 min on 2 cores: make test-full runs them;
# make test runs the in-process replays of each framework's order below)
SLOW = pytest.mark.slow
POINTS = [pytest.param((0, 1), id="epoch0-first-batch", marks=SLOW),
          pytest.param((0, 3), id="epoch0-middle", marks=SLOW),
          pytest.param((0, PER_RANK), id="epoch0-last-batch", marks=SLOW),
          pytest.param((1, 4), id="epoch1-middle", marks=SLOW)]


# -- Lightning -------------------------------------------------------------------


@pytest.fixture(scope="module")
def lightning_run(tree, tmp_path_factory):
    pytest.importorskip("lightning")
    d = tmp_path_factory.mktemp("lightning")
    outs = [d / f"full{r}.pt" for r in range(WORLD)]
    full = run_ranks(resume_ranks.lightning, WORLD, (str(tree), str(d / "ckpt"), None, EPOCHS),
                     outs)
    return d, full


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", POINTS)
def test_lightning_fit_from_a_mid_epoch_checkpoint_resumes_at_the_next_batch(lightning_run,
                                                                              tree, point):
    """trainer.fit(model, train_dataloaders=FastLoader(...), ckpt_path=...)
    under DDP: Lightning saves the re-created FastLoader's state in the
    checkpoint (it is a _Stateful loader) and loads it into the loader it
    re-creates in the fresh run."""
    d, full = lightning_run
    epoch, k = point
    ckpt = d / "ckpt" / f"step={epoch * PER_RANK + k}.ckpt"
    saved = torch.load(ckpt, weights_only=True)  # primitives only: Lightning may load it so
    (state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert state["kind"] == _resume.KIND and (state["epoch"], state["batches"]) == point
    case = d / f"resume-{epoch}-{k}"
    case.mkdir()
    resumed = run_ranks(resume_ranks.lightning, WORLD,
                        (str(tree), str(case / "ckpt"), str(ckpt), EPOCHS),
                        [case / f"rank{r}.pt" for r in range(WORLD)])
    for r in full + resumed:  # re-created with the DistributedSampler, resumable kept
        assert r["kinds"] == ("FastLoader", "DistributedSampler", resume_ranks.SEED)
    expect_exact(full, resumed, epoch, k)


# -- Accelerate ------------------------------------------------------------------

ACCELERATE_SAVE = [pytest.param((0, 2), id="epoch0-second-batch", marks=SLOW),
                   pytest.param((1, PER_RANK - 1), id="epoch1-next-to-last", marks=SLOW),
                   pytest.param((0, PER_RANK), id="epoch0-last-batch", marks=SLOW)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", ACCELERATE_SAVE)
def test_accelerate_load_state_and_skip_first_batches_resume_exactly(tree, tmp_path, point):
    """save_state after batch k; a fresh run's load_state, then
    accelerator.skip_first_batches(loader, k): the loader itself, positioned
    in O(1) (nothing before batch k is read), then the whole later epochs."""
    pytest.importorskip("accelerate")
    epoch, k = point
    ckpt = tmp_path / "ckpt"
    full = run_ranks(resume_ranks.accelerate, WORLD, (str(tree), str(ckpt), point, False, EPOCHS),
                     [tmp_path / f"full{r}.pt" for r in range(WORLD)])
    state = torch.load(ckpt / "custom_checkpoint_0.pkl", weights_only=True)
    assert state["kind"] == _resume.KIND and (state["epoch"], state["batches"]) == point
    skip = 0 if k == PER_RANK else k  # the recipe: after an epoch's last batch, the next epoch
    resumed = run_ranks(resume_ranks.accelerate, WORLD,
                        (str(tree), str(ckpt), (epoch + (k == PER_RANK), skip), True, EPOCHS),
                        [tmp_path / f"rank{r}.pt" for r in range(WORLD)])
    for r in resumed:
        assert r["kinds"] == ("FastLoader", True)  # skip_first_batches returned the FastLoader
    expect_exact(full, resumed, epoch, k)


# -- skip_first_batches in one process --------------------------------------------


def loader_of(ds, workers=0, **kwargs):
    return fd.FastLoader(ds, batch_size=2, num_workers=workers, resumable=resume_ranks.SEED,
                         **kwargs)


SKIP_LOADERS = [
    pytest.param(lambda ds: dict(shuffle=True, generator=torch.Generator().manual_seed(3)),
                 id="random-generator"),
    pytest.param(lambda ds: dict(shuffle=True), id="random-global"),
    pytest.param(lambda ds: dict(shuffle=True, generator=torch.Generator().manual_seed(3),
                                 workers=1, persistent_workers=True),
                 id="random-persistent-worker"),
    pytest.param(lambda ds: dict(threads=2, shuffle=False), id="sequential-threads"),
    pytest.param(lambda ds: dict(sampler=torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=2, rank=1, seed=4)), id="distributed"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [pytest.param(0, id="skip-0"), pytest.param(1, id="skip-1"),
                               pytest.param(-1, id="skip-to-last")])
@pytest.mark.parametrize("make", SKIP_LOADERS)
def test_skip_first_batches_cuts_the_next_epoch_without_decoding(tree, make, n):
    """After a whole epoch, skip_first_batches(loader, n): the next epoch's
    batches from n on are the uninterrupted epoch's, only their images are
    read, a state saved after the first of them resumes exactly, and the
    epoch after is whole."""
    ds, reads = resume_ranks.counted_dataset(str(tree))

    def made():
        torch.manual_seed(0)
        kw = make(ds)
        return loader_of(ds, kw.pop("workers", 0), **kw)

    def epochs(loader, first, count):
        out = []
        for e in range(first, first + count):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(e)
            batches, order = [], []
            for b in loader:
                batches.append(resume_ranks.digests(b))
                order.append(list(reads))
                reads.clear()
            out.append((batches, order))
        return out

    full = epochs(made(), 0, 3)
    loader = made()
    n = len(loader) - 1 if n < 0 else n  # -1: to the epoch's last batch
    epochs(loader, 0, 1)
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(1)
    reads.clear()
    assert fd_accelerate.skip_first_batches(loader, n) is loader
    got, order, state = [], [], None
    for b in loader:
        got.append(resume_ranks.digests(b))
        order.append(list(reads))
        reads.clear()
        if state is None:
            state = loader.state_dict()
    length = len(full[1][0])
    assert len(got) == length - n > 0
    assert got == full[1][0][n:]
    # nothing before n read (flattened: threads read batches ahead of the one taken)
    assert [i for o in order for i in o] == [i for o in full[1][1] for i in o][2 * n:]
    assert state["batches"] == n + 1 and state["epoch"] == 1
    assert epochs(loader, 2, 1)[0][0] == full[2][0]
    if n + 1 < length:  # the state saved inside the cut epoch resumes exactly
        again = made()
        again.load_state_dict(state)
        assert epochs(again, 1, 2)[0][0] == full[1][0][n + 1:]


def test_skip_first_batches_after_a_loaded_state_only_checks_its_batch(tree):
    ds, _ = resume_ranks.counted_dataset(str(tree))
    torch.manual_seed(0)
    loader = loader_of(ds, shuffle=True, generator=torch.Generator().manual_seed(3))
    it = iter(loader)
    taken = [resume_ranks.digests(next(it)) for _ in range(3)]
    state = loader.state_dict()
    want = resume_ranks.digests(next(it))
    again = loader_of(ds, shuffle=True, generator=torch.Generator().manual_seed(3))
    again.load_state_dict(state)
    with pytest.raises(ResumeError, match=r"resumes epoch 0 after batch 3, not 1"):
        fd_accelerate.skip_first_batches(again, 1)
    assert fd_accelerate.skip_first_batches(again, 3) is again
    assert resume_ranks.digests(next(iter(again))) == want and want not in taken


def test_skip_first_batches_refuses_what_it_cannot_cut(tree):
    ds, _ = resume_ranks.counted_dataset(str(tree))

    class Batches:
        def __iter__(self):
            return iter([[0, 1], [2, 3]])

        def __len__(self):
            return 2

    with pytest.raises(ResumeError, match=r"needs a BatchSampler over a sampler FastLoader "
                                          r"draws again"):
        fd_accelerate.skip_first_batches(
            fd.FastLoader(ds, batch_sampler=Batches(), num_workers=0), 1)
    with pytest.raises(ValueError, match=r"batches must be an int >= 0, not -1"):
        fd_accelerate.skip_first_batches(loader_of(ds), -1)


def test_prepare_keeps_the_loader_and_routes_skip_first_batches(tree):
    """prepare(): the FastLoader itself, registered for checkpointing;
    accelerator.skip_first_batches goes through fastdecode for it, through
    Accelerate for any other loader; an unsharded loader under 2 processes
    is an error naming the sampler to pass."""
    pytest.importorskip("accelerate")
    ds, _ = resume_ranks.counted_dataset(str(tree))

    class FakeAccelerator:  # Accelerate's attributes prepare() reads, and its skip
        def __init__(self, processes, index):
            self.num_processes, self.process_index = processes, index
            self.registered = []

        def register_for_checkpointing(self, *objects):
            self.registered.extend(objects)

        def skip_first_batches(self, dataloader, num_batches=0):
            return ("accelerate", dataloader, num_batches)

    acc = FakeAccelerator(1, 0)
    loader = loader_of(ds, shuffle=True)
    assert fd_accelerate.prepare(acc, loader) is loader and acc.registered == [loader]
    fd_accelerate.prepare(acc, loader)  # twice: routed once
    assert acc.skip_first_batches(loader, 1) is loader and loader._tracker.skipping
    plain = torch.utils.data.DataLoader(ds)
    assert acc.skip_first_batches(plain, 2) == ("accelerate", plain, 2)
    with pytest.raises(ValueError, match=r"does not shard the data for process 1: pass "
                                         r"sampler=DistributedSampler\(dataset, "
                                         r"num_replicas=2, rank=1\)"):
        fd_accelerate.prepare(FakeAccelerator(2, 1), loader_of(ds, shuffle=True))
    with pytest.raises(TypeError, match=r"takes a FastLoader, not DataLoader"):
        fd_accelerate.prepare(acc, plain)


# -- Lightning's order of calls, in one process -------------------------------------

LIGHTNING_WAYS = [
    pytest.param(dict(num_workers=0), id="in-process"),
    pytest.param(dict(threads=2), id="threads"),
    pytest.param(dict(num_workers=1), id="worker-cpu-ring"),
    # a loader Lightning re-created passes collate_fn=fastdecode.collate, which turns the
    # CPU ring off: DataLoader's worker iterator then draws the pass at iter(), before
    # set_epoch: the load set the saved epoch (docs/decisions/loaders.md, resume section)
    pytest.param(dict(num_workers=1, collate_fn=fd.collate), id="worker-explicit-collate"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("way", LIGHTNING_WAYS)
def test_lightnings_order_load_iter_set_epoch_next_resumes_a_later_epoch(tree, way):
    """Lightning resumes with load_state_dict, iter(), then the
    DistributedSampler's set_epoch(e), then the first batch: a state saved
    mid-epoch 1 (a fresh sampler is at epoch 0 until set_epoch) resumes at
    its next batch where the pass is drawn at the first batch."""
    from torch.utils.data.distributed import DistributedSampler

    ds, _ = resume_ranks.counted_dataset(str(tree))

    def made():
        return fd.FastLoader(ds, batch_size=2, resumable=resume_ranks.SEED,
                             sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=0),
                             **{"num_workers": 0, **way})

    first = made()
    first.sampler.set_epoch(1)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    want = resume_ranks.digests(next(it))
    del it
    again = made()
    again.load_state_dict(state)
    it = iter(again)
    again.sampler.set_epoch(1)
    assert resume_ranks.digests(next(it)) == want
