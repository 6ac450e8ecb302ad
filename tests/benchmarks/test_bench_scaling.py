"""benchmarks/bench_scaling.py: one process and one per CPU, each row's figures from its
processes' own counts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchvision")

bench = pytest.importorskip("benchmarks.bench_scaling")

from helpers.trees import make_tree  # noqa: E402


@pytest.mark.slow  # a short scaling run, ~8 s: make test-full
@pytest.mark.timeout(300)
def test_one_process_and_one_per_cpu_are_measured(tmp_path, capsys):
    root = make_tree(tmp_path / "t", per_class=4, classes=("a", "b"))
    out = tmp_path / "scaling.json"
    assert bench.main(["--data", str(root), "--seconds", "0.2", "--rounds", "1",
                       "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert set(rows) == {"1", str(result["cpus"])}
    for row in rows.values():
        assert row["images_per_s"] > 0 and row["cpu_ms_per_image"] > 0
    assert result["scaling"] == pytest.approx(
        rows[str(result["cpus"])]["images_per_s"] / rows["1"]["images_per_s"])
    assert "| processes | images/s | CPU ms/image |" in capsys.readouterr().out


def test_a_folder_without_jpegs_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--data", str(tmp_path), "--seconds", "0.1", "--rounds", "1"])
