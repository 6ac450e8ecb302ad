"""benchmarks/bench_storage: its ratios from the rounds it measured (fake
rounds, no timing) and its skip line where FUSE is unavailable."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from benchmarks import _latencyfs, bench_storage  # noqa: E402
from benchmarks.bench_storage import Cell  # noqa: E402
from fastdecode.cli import bench  # noqa: E402


def cells() -> dict:
    return {
        ("ImageFolder+PIL", 2, 0): Cell([200.0, 210.0, 190.0], [0.003] * 3, [512] * 3,
                                        [0.1] * 3),
        ("ImageFolder+PIL", 2, 5): Cell([100.0, 100.0, 100.0], [0.003] * 3, [512] * 3,
                                        [0.1] * 3),
        ("FastLoader", 2, 0): Cell([800.0, 840.0, 760.0], [0.001] * 3, [512] * 3,
                                   [0.0512] * 3),
        ("FastLoader", 2, 5): Cell([400.0, 840.0, 380.0], [0.001] * 3, [512] * 3,
                                   [0.0512] * 3),
        ("FastLoader+cache", 2, 0): Cell([800.0] * 3, [0.001] * 3, [0] * 3, [0.0] * 3),
        ("FastLoader+cache", 2, 5): Cell([780.0] * 3, [0.001] * 3, [0] * 3, [0.0] * 3),
    }


def test_ratios_are_medians_of_round_by_round_ratios():
    rows = bench_storage.results(cells())
    fast5 = next(r for r in rows if r["loader"] == "FastLoader" and r["delay_ms"] == 5)
    assert fast5["vs_0ms"] == pytest.approx(0.5)  # rounds 0.5, 1.0, 0.5
    assert fast5["vs_imagefolder"] == pytest.approx(4.0)  # 4.0, 8.4, 3.8
    assert fast5["images_per_s"] == 400.0
    assert fast5["daemon_cpu_us_per_file"] == pytest.approx(100.0)
    assert fast5["cpu_ms_per_image"] == pytest.approx(1.0)
    base = next(r for r in rows if r["loader"] == "ImageFolder+PIL" and r["delay_ms"] == 5)
    assert base["vs_imagefolder"] is None
    assert [(r["delay_ms"], r["loader"]) for r in rows][:3] == [
        (0, "ImageFolder+PIL"), (0, "FastLoader"), (0, "FastLoader+cache")]


def test_summary_names_the_issues_ratios():
    out = bench_storage.summary(bench_storage.results(cells()), 2)
    assert out["FastLoader_5ms_vs_0ms"] == pytest.approx(0.5)
    assert out["FastLoader_20ms_vs_0ms"] is None  # not measured
    assert out["cache_5ms_vs_0ms"] == pytest.approx(780 / 800)
    assert out["cache_opens_at_5ms"] == [0, 0, 0]
    met = out["targets_met"]
    assert met["FastLoader 5 ms >= 0.9x of 0 ms"] is False
    assert met["FastLoader 20 ms >= 0.8x of 0 ms"] is None  # no row to judge
    assert met["cache epoch 2 at 5 ms >= 0.95x of 0 ms"] is True
    cached = next(r for r in bench_storage.results(cells()) if r["loader"] == "FastLoader+cache")
    assert cached["daemon_cpu_us_per_file"] is None  # no file opened


def test_skips_with_a_line_without_fuse(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(_latencyfs, "unavailable", lambda: "no /dev/fuse (test)")
    out = tmp_path / "storage.json"
    assert bench_storage.main(["--quick", "--json", str(out)]) == 0
    assert "storage: skipped, FUSE is unavailable here (no /dev/fuse (test))" in \
        capsys.readouterr().out
    assert json.loads(out.read_text())["skipped"] == "FUSE is unavailable: no /dev/fuse (test)"


def test_full_bench_runs_the_storage_section():
    assert "storage" in bench.SECTIONS and "storage" not in bench.DEFAULT_SECTIONS
    assert bench.section_argv("storage", bench.Path("d"), "full", bench.Path("j"))[-1] == "--full"
