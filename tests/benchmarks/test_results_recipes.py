"""benchmarks/results.py puts the modern recipe's rows (IMAGENET1K_V2's
ta_wide + random erase at 176, issue 50) in the summary table from the
recipes section bench_recipes writes: per core and with workers, each with
its estimator (a report built from fake rounds through
bench_recipes.recipe_result, no timing)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from benchmarks import bench_recipes as br  # noqa: E402
from benchmarks import results  # noqa: E402


def _row(loader: str, workers: int, rates: list[float], cpu: list[float]) -> SimpleNamespace:
    row = SimpleNamespace(loader=loader, num_workers=workers, rates=rates)
    if workers == 0:
        row.cpu_per_image = cpu
    return row


def report(name: str = results.MODERN_RECIPE) -> dict:
    rows = [_row("ImageFolder+PIL", 0, [200.0, 210.0, 190.0], [0.0050, 0.0052, 0.0048]),
            _row("FastImageFolder", 0, [500.0, 520.0, 480.0], [0.0020, 0.0020, 0.0016]),
            _row("ImageFolder+PIL", 2, [400.0, 400.0, 400.0], []),
            _row("FastImageFolder", 2, [1000.0, 1010.0, 990.0], []),
            _row("FastLoader", 2, [1200.0, 1150.0, 1250.0], [])]
    recipe = br.recipe_result("augment", rows, {"decode": [], "tensor": [], "unfused": []})
    section = {"mode": "default", "settings": {"rounds": 3}, "recipes": {name: recipe}}
    return {"mode": "default", "date": "the run's date",
            "command": "fastdecode bench --sections recipes --json bench.json",
            "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "cpu_count": 2},
            "versions": {}, "summary": [], "skipped": {}, "sections": {"recipes": section}}


def test_the_summary_shows_the_modern_recipe_per_core_and_with_workers():
    block = results.summary_block(report())
    label = "ta_wide + random erase 0.1, crop 176 (IMAGENET1K_V2's recipe)"
    # per core: the median CPU ms per image each side; the ratio is the median of the
    # rounds' ratios (2.5, 2.6, 3.0), not the ratio of the medians (2.5)
    assert (f"| {label}, one thread, default mode (CPU ms/image) | median of 3 rounds; the "
            "ratio the median of per-round ratios | ImageFolder 5.00 | 2.00 | 2.60x |") in block
    assert (f"| {label}, DataLoader(FastImageFolder), 2 workers (images/s) | median of 3 "
            "rounds | ImageFolder 400 | 1,000 | 2.50x |") in block
    assert (f"| {label}, FastLoader, 2 workers (images/s) | median of 3 rounds | "
            "ImageFolder 400 | 1,200 | 3.00x |") in block


def test_a_recipe_without_a_fastloader_row_has_none_in_the_summary():
    rows = [_row("ImageFolder+PIL", 2, [400.0], []), _row("FastImageFolder", 2, [1000.0], [])]
    recipe = br.recipe_result("augment", rows, {"decode": [], "tensor": [], "unfused": []})
    assert "fastloader_speedup" not in recipe["settings"][0]
    assert "FastLoader" not in "".join(row[0] for row in results._recipe_rows(
        {"sections": {"recipes": {"recipes": {results.MODERN_RECIPE: recipe}}}}))


def test_the_recipe_is_one_bench_recipes_runs():
    assert results.MODERN_RECIPE in br.RECIPES


def test_a_report_without_the_recipe_has_no_recipe_rows():
    assert "IMAGENET1K_V2" not in results.summary_block(report("another recipe"))


def test_the_peers_of_the_v2_recipe_follow_it_per_core():
    """Where bench_recipes timed peers (on the v2 form of the recipe), the summary
    shows each: its CPU ms per image, ours, the median of the rounds' ratios."""
    rows = [_row("ImageFolder+PIL", 0, [200.0] * 3, [0.0050] * 3),
            _row("FastImageFolder", 0, [500.0] * 3, [0.0020, 0.0020, 0.0016]),
            _row("DALI CPU", 0, [300.0] * 3, [0.0040, 0.0036, 0.0040])]
    v2 = br.recipe_result("augment", rows, {"decode": [], "tensor": [], "unfused": []})
    assert v2["settings"][0]["peers"]["DALI CPU"]["cpu_ms_per_image"] == pytest.approx(4.0)
    full = report()
    full["sections"]["recipes"]["recipes"][results.PEER_RECIPE] = v2
    block = results.summary_block(full)
    label = "ta_wide + random erase 0.1, crop 176 (IMAGENET1K_V2's recipe)"
    # ratios 2.0, 1.8, 2.5: the median 2.0
    assert (f"| {label}, v2, one thread, vs DALI CPU (CPU ms/image) | median of 3 rounds; the "
            "ratio the median of per-round ratios | DALI CPU 4.00 | 2.00 | 2.00x |") in block
    assert "vs DALI" not in results.summary_block(report())  # no peers: no rows
    assert results.PEER_RECIPE in br.RECIPES
