"""benchmarks/bench_listing.py's worker-memory rows with a fake child (no
timing or memory asserted): which rows run, with which way of reading (--reads),
the build rounds skipped with --workers-only, the report."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

bench = pytest.importorskip("benchmarks.bench_listing")


def _fake_row(kind, window, mapped):
    rows = [{"samples": s, "seconds": s / 1000, "uss_mib": [20.0 + s / 1e4, 21.0 + s / 1e4]}
            for s in (64, 1000, 2000, 3000)]
    return {"kind": kind, "window": window, "batch": 64, "checkpoints": rows,
            "mapped_reads": None if kind == "ImageFolder" else mapped, "seconds": 3.0,
            **bench.growth(rows)}


@pytest.fixture
def children(monkeypatch):
    calls = []

    def run_child(*args):
        calls.append(args)
        assert args[0] == "workers", "no build child under --workers-only"
        _, kind, tree, window, checkpoints, batch, seed, mapped = args
        return _fake_row(kind, int(window), int(mapped))

    monkeypatch.setattr(bench, "_run_child", run_child)
    return calls


@pytest.mark.parametrize("reads, imagefolder, want", [
    (None, True, [("ImageFolder", "ImageFolder", "-1"), ("FastImageFolder", "FastImageFolder", "-1")]),
    (["heap", "mapped"], False, [("FastImageFolder (heap reads)", "FastImageFolder", "0"),
                                 ("FastImageFolder (mapped reads)", "FastImageFolder", "1")]),
    (["mapped"], True, [("ImageFolder", "ImageFolder", "-1"),
                        ("FastImageFolder (mapped reads)", "FastImageFolder", "1")]),
], ids=["default", "ab-no-imagefolder", "mapped-with-imagefolder"])
def test_worker_rows(children, tmp_path, reads, imagefolder, want):
    report = bench.measure(tmp_path, rounds=5, window=3000, checkpoints=3, batch=64,
                           workers=True, reads=reads, build=False, imagefolder=imagefolder)
    assert "build" not in report
    assert [(name, call[1], call[-1]) for name, call in zip(report["workers"], children)] == want
    assert all(call[3] == "3000" and call[6] == "0" for call in children)  # window, seed
    text = bench.markdown(report)
    for name, _, _ in want:
        assert f"- {name}, 2 workers, 3,000 samples in random order" in text


def test_main_passes_the_ways_of_reading(children, monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "tree_size", lambda tree: 100)
    assert bench.main(["--tree", str(tmp_path), "--files", "100", "--workers-only",
                       "--no-imagefolder", "--reads", "heap,mapped", "--window", "50"]) == 0
    assert [(c[1], c[3], c[-1]) for c in children] == [("FastImageFolder", "50", "0"),
                                                        ("FastImageFolder", "50", "1")]


def test_a_worker_child_sets_the_reads_its_workers_inherit(monkeypatch, tmp_path):
    """The child sets FASTDECODE_NATIVE_READS before the DataLoader forks (a
    tiny tree, in process)."""
    from fastdecode.storage import _readahead, _reads

    from helpers.trees import make_tree

    monkeypatch.setenv(_reads.NATIVE_READS_ENV, "1")
    root = make_tree(tmp_path / "tree", per_class=4)
    out = bench.child_workers("FastImageFolder", str(root), 8, 2, 4, 0, 0)
    assert _reads.native_reads() is False and out["mapped_reads"] is False
    # a fixed depth: the threads read every file, on a local disk too
    assert out["readahead"] == repr(_readahead.ReadAheadOptions(_readahead.DEFAULT_DEPTH))
    assert out["window"] == 8
