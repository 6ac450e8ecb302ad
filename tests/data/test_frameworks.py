"""FastLoader inside the frameworks that re-create a DataLoader to shard it:
Lightning's DDP and Accelerate's prepare(), two gloo ranks on 127.0.0.1,
each seeing a disjoint half of the samples and together all, every epoch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import fastdecode as fd

from helpers import ddp_worker
from helpers.trees import make_tree

SAMPLES = 18  # make_tree(per_class=6), three classes


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("fwtree"), per_class=6)


@pytest.fixture(scope="module")
def all_digests(tree):
    ds = fd.FastImageFolder(tree, ddp_worker._eval_chain())
    digests = ddp_worker._digests(torch.stack([ds[i][0] for i in range(len(ds))]))
    assert len(set(digests)) == len(ds) == SAMPLES
    return set(digests)


def run_ranks(target, tree, tmp_path):
    """``target`` on 2 spawned gloo ranks over ``tree``; each rank's results."""
    return ddp_worker.run_ranks(target, 2, (str(tree),),
                                [tmp_path / f"rank{r}.pt" for r in range(2)], timeout=150.0)


def assert_sharded(results, all_digests, how):
    a, b = (r["seen"][how] for r in results)
    assert sorted(a) == sorted(b) == list(range(ddp_worker.FRAMEWORK_EPOCHS))
    for epoch in a:
        mine, theirs = a[epoch], b[epoch]
        assert len(mine) == len(theirs) == SAMPLES // 2
        assert not set(mine) & set(theirs), f"{how}, epoch {epoch}: ranks overlap"
        assert set(mine) | set(theirs) == all_digests, f"{how}, epoch {epoch}: samples missing"


@pytest.mark.slow  # two DDP ranks under Lightning, ~20 s: make test-full
@pytest.mark.timeout(300)
def test_lightning_ddp_shards_a_fast_loader_and_keeps_it_fast(tree, tmp_path, all_digests):
    pytest.importorskip("lightning")
    results = run_ranks(ddp_worker.run_lightning, tree, tmp_path)
    for how in ("hook", "passed"):
        assert_sharded(results, all_digests, how)
        for r in results:
            # re-created as a FastLoader: threads and the zero-copy collate kept
            assert r["kinds"][how] == ("FastLoader", "DistributedSampler", 2, True)


@pytest.mark.slow  # two ranks under Accelerate, ~10 s: make test-full
@pytest.mark.timeout(300)
def test_accelerate_prepare_shards_a_fast_loader_and_keeps_its_collate(tree, tmp_path,
                                                                       all_digests):
    pytest.importorskip("accelerate")
    results = run_ranks(ddp_worker.run_accelerate, tree, tmp_path)
    assert_sharded(results, all_digests, "prepare")
    for r in results:
        assert r["kinds"] == (True, True)
