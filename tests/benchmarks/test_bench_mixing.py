"""benchmarks/bench_mixing.py on a tiny tree: structure only (no timing
claims): its four loaders draw the same mixing (soft targets) for the same
seed, and a quick run reports each recipe's rows and the mixing alone."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from helpers.trees import make_tree

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
bench = pytest.importorskip("benchmarks.bench_mixing")


def _seeded():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.mark.parametrize("kind", bench.LOADERS[1:])
def test_each_row_draws_the_baselines_mixing(tmp_path, kind):
    from torchvision.transforms import v2

    root = make_tree(tmp_path / "tree", per_class=4)
    chain = v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(),
                        v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor()])
    make = bench.loader_maker(bench._tv_mix(bench.classes_of(root)))
    batches = {}
    for name in (bench.BASELINE, kind):
        loader, _ = make(name, root, chain, 0, 4, 12)
        loader.sampler.generator = torch.Generator().manual_seed(1)
        _seeded()
        batches[name] = list(loader)
    want, got = batches[bench.BASELINE], batches[kind]
    assert len(got) == len(want) == 3
    for (x, y), (a, b) in zip(got, want):  # (the pixels: fastdecode's default mode)
        assert x.shape == a.shape and torch.equal(y, b) and y.shape == (4, 3)


@pytest.mark.slow
@pytest.mark.no_sanitize
def test_quick_run_reports_each_recipe_and_the_mixing_alone(tmp_path, capsys):
    root = make_tree(tmp_path / "tree", per_class=2)
    out = tmp_path / "mixing.json"
    assert bench.main(["--quick", "--data", str(root), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["mode"] == "quick" and report["recipes"]
    for rows in report["recipes"].values():
        assert list(rows) == list(bench.LOADERS)
        assert rows[bench.BASELINE]["speedup"] == pytest.approx(1.0)
        assert all(r["images_per_s"] > 0 and len(r["rates"]) == 3 for r in rows.values())
    assert {"torchvision MixUp", "torchvision CutMix"} <= set(report["alone"])
    text = capsys.readouterr().out
    assert "### MixUp/CutMix end to end, 2 workers" in text and "### The mixing alone" in text
