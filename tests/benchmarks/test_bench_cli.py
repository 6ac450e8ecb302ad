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


def test_bench_help_is_plain_text_for_users(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out  # no reStructuredText markup
    assert "benchmarks/" not in out and ".py" not in out and "DESIGN" not in out  # no source paths
    assert "about 4 minutes on a quiet 2-core machine" in out


def _sections() -> dict:
    """The sections of a report, in the shape `fastdecode bench` writes them."""
    return {
        "decode": {"sections": [{"key": "jpeg_full", "rows": [
            {"name": "fastdecode", "speedup": 1.5}, {"name": "Pillow", "speedup": 1.0}]}]},
        "transforms": {"sections": [{"key": "train_float", "rows": [
            {"name": "fastdecode fuse", "speedup": 2.9}]}]},
        "loader": {"chains": {"train": {
            "summary": {"num_workers": 2, "speedup_fastimagefolder": 2.74,
                        "speedup_fastloader": 2.76, "efficiency_fastimagefolder": 0.91,
                        "efficiency_fastloader": 0.92},
            "limit": {"usable_cpus": 2, "fused_ms_per_image": 2.5, "images_per_s": 800.0}}}},
    }


def test_summary_lines_name_each_ratio():
    from fastdecode.cli.bench import summary_lines

    lines = summary_lines(_sections())
    assert lines == [
        "decode:     fastdecode 1.50x Pillow (full JPEG decode, one thread)",
        "fused:      fastdecode fuse 2.90x torchvision + PIL (decode + train chain to float, one "
        "thread)",
        "loader:     DataLoader(FastImageFolder) 2.74x ImageFolder (train chain, 2 workers, "
        "steady state)",
        "FastLoader: 2.76x ImageFolder (train chain, 2 workers, steady state)",
        "limit:      this machine decodes at most 800 images/s (2 CPUs / 2.50 ms per fused "
        "image); reached: DataLoader(FastImageFolder) 91%, FastLoader 92%",
    ]


def test_summary_lines_speak_in_images_per_second_and_say_noisy_in_words():
    from fastdecode.cli.bench import summary_lines

    sections = _sections()
    sections["decode"]["sections"][0]["rows"][0]["images_per_s"] = 847.0
    sections["decode"]["sections"][0]["rows"][1]["images_per_s"] = 542.0
    sections["loader"]["chains"]["train"]["rows"] = [
        {"loader": "ImageFolder+PIL", "num_workers": 2, "images_per_s": 545.0, "noisy": False},
        {"loader": "FastImageFolder", "num_workers": 2, "images_per_s": 1432.0, "noisy": True,
         "spread": 0.53},
        {"loader": "FastLoader", "num_workers": 2, "images_per_s": 1431.0, "noisy": False}]
    lines = summary_lines(sections)
    assert lines[0] == ("decode:     fastdecode 847 images/s, 1.50x Pillow's 542 (full JPEG "
                        "decode, one thread)")
    assert lines[2] == ("loader:     DataLoader(FastImageFolder) 1,432 images/s, 2.74x "
                        "ImageFolder's 545 (train chain, 2 workers, steady state; noisy: its "
                        "rounds differed by 53%, rerun on a quiet machine)")
    assert lines[3].startswith("FastLoader: 1,431 images/s, 2.76x ImageFolder's 545 (")
    for line in lines:  # the project's own targets are never a user's business
        assert not any(word in line for word in ("target", "met", "**no**"))


def test_summary_lines_say_what_was_not_measured():
    from fastdecode.cli.bench import summary_lines

    lines = summary_lines({})
    assert len(lines) == 5
    assert all(line.endswith("not measured") for line in lines)


@pytest.mark.parametrize("argv, expected", [
    ([], "fastdecode bench --plot fastdecode-bench.png"),  # the default figure
    (["--quick", "--data", "d", "--json", "b.json", "--plot", "b.png"],
     "fastdecode bench --data d --quick --json b.json --plot b.png"),
    (["--full", "--sections", "decode", "loader"],
     "fastdecode bench --full --sections decode loader --plot fastdecode-bench.png"),
], ids=["default", "quick-files", "full-sections"])
def test_command_line_gives_the_run_again(argv, expected):
    from fastdecode.cli.__main__ import build_parser
    from fastdecode.cli.bench import command_line

    args = build_parser().parse_args(["bench", *argv])
    assert command_line(args) == expected


@pytest.mark.no_sanitize
def test_plot_draws_the_published_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from fastdecode.cli.bench import plot

    sections = _sections()
    sections["decode"]["sections"][0].update(title="JPEG", baseline="Pillow")
    for row in sections["decode"]["sections"][0]["rows"]:
        row.update(status="ok", images_per_s=100 * row["speedup"])
    report = {"mode": "quick", "sections": {"decode": sections["decode"]}}
    path = tmp_path / "bench.png"
    plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
