"""`fastdecode bench` on a tiny tree: sections run, one JSON report, the plot."""

from __future__ import annotations

import json

import pytest

from fastdecode.cli.__main__ import main

from helpers.trees import make_tree

pytest.importorskip("torchvision")


@pytest.mark.slow
@pytest.mark.no_sanitize
def test_bench_loader_section_writes_report_and_plot(tmp_path, capsys):
    root = make_tree(tmp_path / "tree", per_class=3)
    report_path, plot_path = tmp_path / "bench.json", tmp_path / "bench.png"
    code = main(["bench", "--sections", "loader", "--quick", "--data", str(root),
                 "--json", str(report_path), "--plot", str(plot_path)])
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["data"] == str(root) and report["quick"] is True
    assert report["machine"]["usable_cpus"] >= 1 and report["machine"]["cpu_count"] >= 1
    assert report["versions"]["fastdecode libjpeg-turbo"] and report["versions"]["torch"]
    loader = report["sections"]["loader"]
    assert loader["machine"]["usable_cpus"] >= 1 and loader["versions"]["torchvision"]
    train = loader["chains"]["train"]
    rows = train["rows"]
    assert {r["loader"] for r in rows} == {"ImageFolder+PIL", "FastImageFolder", "FastLoader"}
    assert {r["num_workers"] for r in rows} == {0, 2}
    for r in rows:
        assert len(r["round_images_per_s"]) == 3  # the median of three interleaved rounds
        assert r["min_images_per_s"] <= r["images_per_s"] <= r["max_images_per_s"]
        assert r["noisy"] == (r["spread"] > 0.10)
        assert r["speedup"] > 0 and r["efficiency"] > 0 and r["startup_s"] >= 0
        assert r["cpu_s_per_image"] > 0 and r["peak_pss_mib"] > 0
    limit = train["limit"]
    assert limit["images_per_s"] == pytest.approx(
        limit["usable_cpus"] / (limit["fused_ms_per_image"] / 1000))
    assert len(limit["fused_round_ms"]) == 3 * 2  # 3 rounds in each worker count's group
    assert {r["dataset"] for r in loader["file_list"]} == {"ImageFolder", "FastImageFolder"}
    assert len(report["summary"]) == 5
    captured = capsys.readouterr()
    assert "| loader | workers | images/s (median) | min-max | spread |" in captured.out
    assert "| **limit** | " in captured.out
    assert captured.out.rstrip().splitlines()[-5:] == report["summary"]  # it ends the run
    assert "loader: " in captured.err and "\r" not in captured.out  # the bar: stderr only
    pytest.importorskip("matplotlib")
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_a_missing_folder(tmp_path, capsys):
    assert main(["bench", "--data", str(tmp_path / "nope"), "--sections", "loader"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_quick_and_full_exclude_each_other(capsys):
    assert main(["bench", "--quick", "--full"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_bench_help_has_examples(capsys):
    assert main(["bench", "--help"]) == 0
    assert "fastdecode bench --quick" in capsys.readouterr().out
