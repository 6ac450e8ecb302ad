"""DistributedSampler + gloo: two ranks see disjoint, complete shards."""

from __future__ import annotations

import multiprocessing as mp
import socket

import pytest

torch = pytest.importorskip("torch")

from helpers.trees import make_tree

pytest.importorskip("torchvision")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_get_disjoint_complete_shards(tmp_path):
    from helpers import ddp_worker

    root = make_tree(tmp_path / "tree", per_class=6)
    port = free_port()
    ctx = mp.get_context("spawn")
    outs = [tmp_path / f"rank{r}.pt" for r in range(2)]
    procs = [ctx.Process(target=ddp_worker.run, args=(r, 2, str(root), port, str(outs[r])))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"rank exited with {p.exitcode}"
    results = [torch.load(o) for o in outs]
    a, b = (set(r["indices"]) for r in results)
    assert not a & b and a | b == set(range(18))
    assert results[0]["shards"] == results[1]["shards"]
    for r in results:
        assert len(r["unsharded"]) == 1
        assert "runs 2 processes but this FastLoader's sampler (SequentialSampler)" in \
            r["unsharded"][0]
        assert torch.equal(r["runs"][0], r["runs"][1])
        assert r["runs"][0].shape == (9, 3, 32, 32)
