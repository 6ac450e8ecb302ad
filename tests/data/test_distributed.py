"""DistributedSampler + gloo: two ranks see disjoint, complete shards."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from helpers.trees import make_tree

pytest.importorskip("torchvision")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)


@pytest.mark.slow  # two gloo ranks, ~8 s: make test-full
def test_two_gloo_ranks_get_disjoint_complete_shards(tmp_path):
    from helpers import ddp_worker

    root = make_tree(tmp_path / "tree", per_class=6)
    results = ddp_worker.run_ranks(ddp_worker.run, 2, (str(root),),
                                   [tmp_path / f"rank{r}.pt" for r in range(2)], timeout=120)
    a, b = (set(r["indices"]) for r in results)
    assert not a & b and a | b == set(range(18))
    assert results[0]["shards"] == results[1]["shards"]
    for r in results:
        assert len(r["unsharded"]) == 1
        assert "runs 2 processes but this FastLoader's sampler (SequentialSampler)" in \
            r["unsharded"][0]
        assert torch.equal(r["runs"][0], r["runs"][1])
        assert r["runs"][0].shape == (9, 3, 32, 32)
