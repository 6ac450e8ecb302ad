"""benchmarks/bench_tv_datasets.py: the Food101 rows alone (``--rows food``) run end to end on
a few generated photos, one per round of the four loaders, and report the per-round ratio of the
two speedups with the interval of its median; the interval is the sign test's."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402

from benchmarks import bench_tv_datasets  # noqa: E402


@pytest.mark.parametrize("n,want", [(5, None), (6, (0, 5)), (21, (5, 15)), (42, (14, 27))])
def test_the_median_interval_is_the_sign_tests(n, want):
    """Binomial(n, 1/2): the order statistics k and n + 1 - k with at most 2.5 % below k."""
    assert bench_tv_datasets.median_interval([float(v) for v in range(n)]) == want


def test_the_food_rows_alone(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for c in ("apple_pie", "baklava"):
        (tmp_path / "photos" / c).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "photos" / c / f"{i}.jpg", quality=85)
    out = tmp_path / "r.json"
    assert bench_tv_datasets.main(["--data", str(tmp_path / "photos"), "--quick", "--rows", "food",
                                   "--rounds", "6", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["rows"]) == {bench_tv_datasets.FOOD, bench_tv_datasets.FOLDER}
    assert len(report["food101_vs_fastimagefolder_rounds"]) == 6
    low, high = report["food101_vs_fastimagefolder_interval"]
    assert low <= report["food101_vs_fastimagefolder"] <= high
    assert "95 % interval of the median" in capsys.readouterr().out
