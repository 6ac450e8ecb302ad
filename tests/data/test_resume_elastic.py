"""Elastic resume with real process groups (issue 30): a state saved by 4
gloo ranks (127.0.0.1) mid-epoch, resumed by 2 and by 8 fresh ranks keeping
the global batch (8 = 2 x 4 = 4 x 2 = 1 x 8).

What each case checks, step by step after the resume point: every rank
takes part in every step (a gloo all-reduce of the batch sizes gives the
global batch each time); the position-sorted union of the ranks' batches is
bitwise the uninterrupted 4-rank step's (the digests of the samples'
pixels and labels, augmentations included); the epoch's remaining samples
are covered exactly once; and the images read are those of the remaining
positions only (a decode counter: none before the resume point read
again). The next epoch, drawn by the new world's DistributedSampler, has
the uninterrupted run's step unions too. The in-process version of this
(every rank a loader in one process, no process group) is
tests/data/test_resume.py::test_another_world_size_keeping_the_global_batch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from fastdecode.loader import _resume

from helpers import resume_ranks
from helpers.ddp_worker import run_ranks
from helpers.trees import make_tree

GLOBAL_BATCH = 8
SAVE_AFTER = 1  # steps of epoch 0 (of 3: 24 samples, global batch 8)
EPOCHS = 2


def run_world(world, root, out_dir, state_path, resume, timeout=300.0):
    """``world`` spawned ranks of helpers.resume_ranks.elastic; all gone on return."""
    outs = [out_dir / f"rank{r}.pt" for r in range(world)]
    return run_ranks(
        resume_ranks.elastic, world,
        (str(root), str(state_path), GLOBAL_BATCH, SAVE_AFTER, resume, EPOCHS), outs, timeout)


def unions(ranks):
    """{(epoch, step): the step's digests over the ranks, sorted}, and
    {(epoch, step): the indices the ranks read during it}."""
    digests: dict = {}
    reads: dict = {}
    for r in ranks:
        for epoch, k, d, i in r["steps"]:
            digests.setdefault((epoch, k), []).extend(d)
            reads.setdefault((epoch, k), []).extend(i)
    return {s: sorted(d) for s, d in digests.items()}, reads


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("elastic"), per_class=8)  # 24 samples


@pytest.fixture(scope="module")
def four_ranks(tree, tmp_path_factory):
    d = tmp_path_factory.mktemp("four")
    state = d / "state.pt"
    ranks = run_world(4, tree, d, state, resume=False)
    return ranks, state


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world", [
    # real ranks: make test-full (test_resume.py covers the resplit in one process)
    pytest.param(2, id="4-to-2-ranks", marks=pytest.mark.slow),
    # 8 processes: 90 s on a loaded 2-core machine (the 4-rank run and 4 -> 2: ~3 min there)
    pytest.param(8, id="4-to-8-ranks", marks=pytest.mark.slow),
])
def test_resume_in_another_world_size_on_gloo_ranks(four_ranks, tree, tmp_path, world):
    full, state_path = four_ranks
    # every rank's state at the save point, all-gathered: the same on every rank
    states = [s for per_rank in full[0]["states"] for s in per_rank]
    assert len(states) == 4 and all(s == states[0] for s in states)
    state = torch.load(state_path, weights_only=True)
    assert state == states[0] and state["kind"] == _resume.KIND
    assert (state["epoch"], state["batches"], state["samples_global"]) == \
        (0, SAVE_AFTER, SAVE_AFTER * GLOBAL_BATCH)
    want, want_reads = unions(full)
    steps_per_epoch = 24 // GLOBAL_BATCH
    assert sorted(want) == [(e, k) for e in range(EPOCHS) for k in range(steps_per_epoch)]

    resumed = run_world(world, tree, tmp_path, state_path, resume=True)
    got, got_reads = unions(resumed)
    later = [s for s in sorted(want) if s >= (0, SAVE_AFTER)]
    assert sorted(got) == later  # every step after the resume point, none before
    for step in later:
        assert got[step] == want[step], f"step {step}: not the uninterrupted step's samples"
    for r in resumed:  # every rank took part in every step, with the global batch
        assert r["sizes"] == [GLOBAL_BATCH] * len(later)
    rest = [d for s in later if s[0] == 0 for d in got[s]]
    remaining = 24 - SAVE_AFTER * GLOBAL_BATCH
    assert len(rest) == len(set(rest)) == remaining  # each remaining sample once
    before = {i for s, i in want_reads.items() if s < (0, SAVE_AFTER) for i in i}
    read = [i for s, i in got_reads.items() if s[0] == 0 for i in i]
    assert sorted(read) == sorted(i for s in later if s[0] == 0 for i in want_reads[s])
    assert not before & set(read) and len(read) == remaining  # nothing before it decoded
