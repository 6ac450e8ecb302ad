"""`fastdecode bench`'s driver (fastdecode/cli/bench.py run()) with stand-in
benchmark modules: which sections run with which arguments, what a skipped,
missing or failing section does to the report and the exit code, the figure
and the JSON report. No section is measured (test_bench_cli.py runs a real one,
slow)."""

from __future__ import annotations

import json
import types

import pytest

from fastdecode.cli import bench
from fastdecode.cli.__main__ import main


class Benchmarks:
    """Stand-in for the benchmarks/ package: `_common` and one module per
    section, each section's `main` recording its argv and writing `result`
    (or not, or exiting with `rc`)."""

    def __init__(self, default_data):
        self.default_data = default_data
        self.calls: dict[str, list[str]] = {}
        self.results: dict[str, dict] = {}
        self.rc: dict[str, int] = {}
        self.no_json: set[str] = set()
        self.missing: set[str] = set()
        self.emitted: list[str] = []
        self.plotted: list[dict] = []

    def common(self):
        return types.SimpleNamespace(
            default_data=lambda: self.default_data,
            machine_facts=lambda: {"usable_cpus": 2},
            library_versions=lambda: {"fastdecode": "test"},
            emit=lambda text: (self.emitted.append(text), print(text)))

    def section(self, name: str):
        def run(argv: list[str]) -> int:
            self.calls[name] = argv
            if name not in self.no_json:
                path = argv[argv.index("--json") + 1]
                with open(path, "w") as f:
                    json.dump(self.results.get(name, {"name": name}), f)
            return self.rc.get(name, 0)
        return types.SimpleNamespace(main=run)

    def module(self, name: str):
        if name in self.missing:
            raise ModuleNotFoundError(f"No module named 'benchmarks.{name}'")
        if name == "_common":
            return self.common()
        if name == "results":
            def figure(report, path):
                self.plotted.append(report)
                return f"figure written to {path}"
            return types.SimpleNamespace(figure=figure)
        section = {module: key for key, module in bench.SECTIONS.items()}[name]
        return self.section(section)


@pytest.fixture
def benchmarks(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    fake = Benchmarks(default_data=data)
    monkeypatch.setattr(bench, "benchmark_module", fake.module)
    return fake


def test_benchmark_module_names_the_package_when_it_does_not_import(monkeypatch):
    monkeypatch.setattr(bench, "PACKAGE", "fastdecode_no_such_pkg")
    with pytest.raises(ModuleNotFoundError, match=r"not installed \(fastdecode_no_such_pkg does not import"):
        bench.benchmark_module("_common")


def test_benchmark_module_imports_from_the_package(monkeypatch):
    monkeypatch.setattr(bench, "PACKAGE", "json")
    assert bench.benchmark_module("decoder") is json.decoder


def test_bench_without_the_benchmarks_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(bench, "PACKAGE", "fastdecode_no_such_pkg")
    assert main(["bench", "--sections", "decode"]) == 2
    assert "fastdecode bench: the benchmarks are not installed" in capsys.readouterr().err


@pytest.mark.parametrize("argv, sections, mode", [
    ([], ["decode", "transforms", "loader"], "default"),
    (["--quick"], ["decode", "transforms", "loader"], "quick"),
    (["--full"], list(bench.SECTIONS), "full"),
    (["--quick", "--sections", "loader", "decode"], ["loader", "decode"], "quick"),
], ids=["default", "quick", "full-every-section", "sections-in-order"])
def test_bench_runs_the_sections_of_its_mode_with_their_arguments(
        benchmarks, monkeypatch, tmp_path, argv, sections, mode):
    monkeypatch.setattr(bench.importlib.util, "find_spec",
                        lambda name: object())  # ray "installed": every section runs
    report_path = tmp_path / "report.json"
    assert main(["bench", "--data", str(benchmarks.default_data), "--json", str(report_path),
                 *argv]) == 0
    assert list(benchmarks.calls) == sections
    for name, section_argv in benchmarks.calls.items():
        assert section_argv[:2] == ["--data", str(benchmarks.default_data)]
        assert section_argv[4:] == bench.MODE_ARGS[mode][name]
    report = json.loads(report_path.read_text())
    assert report["mode"] == mode and report["quick"] == (mode == "quick")
    assert list(report["sections"]) == sections and report["skipped"] == {}
    assert all(report["sections"][name]["name"] == name for name in sections)
    assert all(report["sections"][name]["seconds"] >= 0 for name in sections)


def test_bench_measures_the_generated_set_without_data(benchmarks, tmp_path, capsys):
    assert main(["bench", "--sections", "decode", "--plot", str(tmp_path / "f.png")]) == 0
    assert benchmarks.calls["decode"][:2] == ["--data", str(benchmarks.default_data)]
    out = capsys.readouterr().out
    assert f"figure written to {tmp_path / 'f.png'}" in out
    assert "report written" not in out  # no --json, no report file


def test_bench_reports_and_figure_carry_the_run(benchmarks, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    assert main(["bench", "--sections", "decode", "--json", str(report_path),
                 "--plot", str(tmp_path / "f.png")]) == 0
    report = json.loads(report_path.read_text())
    assert report["data"] == str(benchmarks.default_data)
    assert report["command"] == bench.command_line(
        bench_args(["--sections", "decode", "--json", str(report_path),
                    "--plot", str(tmp_path / "f.png")]))
    assert report["machine"] == {"usable_cpus": 2}
    assert report["versions"] == {"fastdecode": "test"}
    assert report["summary"] == bench.summary_lines(report["sections"])
    assert [p["sections"] for p in benchmarks.plotted] == [report["sections"]]
    out = capsys.readouterr().out
    assert f"report written to {report_path}" in out
    assert out.rstrip().splitlines()[-5:] == report["summary"]  # the summary ends the run


def bench_args(argv):
    from fastdecode.cli.__main__ import build_parser

    return build_parser(only="bench").parse_args(["bench", *argv])


@pytest.mark.parametrize("rc, writes_json", [(3, True), (0, False)],
                         ids=["nonzero-exit", "no-json-written"])
def test_a_failing_section_fails_the_run_but_the_others_run(
        benchmarks, tmp_path, rc, writes_json):
    benchmarks.rc["decode"] = rc
    if not writes_json:
        benchmarks.no_json.add("decode")
    report_path = tmp_path / "report.json"
    assert main(["bench", "--sections", "decode", "loader", "--json", str(report_path)]) == 1
    report = json.loads(report_path.read_text())
    assert report["skipped"] == {"decode": f"failed with exit code {rc}"}
    assert list(report["sections"]) == ["loader"]  # the next section still ran


def test_a_section_without_its_optional_package_is_skipped(benchmarks, monkeypatch, tmp_path):
    real = bench.importlib.util.find_spec
    monkeypatch.setattr(bench.importlib.util, "find_spec",
                        lambda name: None if name == "ray" else real(name))
    report_path = tmp_path / "report.json"
    assert main(["bench", "--sections", "ray", "decode", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["skipped"] == {"ray": "needs ray (pip install fastdecode[ray])"}
    assert "ray" not in benchmarks.calls and list(report["sections"]) == ["decode"]
    assert "\n## ray: skipped (needs ray (pip install fastdecode[ray]))\n" in benchmarks.emitted


def test_a_section_whose_module_is_missing_is_skipped(benchmarks, tmp_path):
    benchmarks.missing.add("bench_recipes")
    report_path = tmp_path / "report.json"
    assert main(["bench", "--sections", "recipes", "--json", str(report_path),
                 "--plot", str(tmp_path / "f.png")]) == 0
    report = json.loads(report_path.read_text())
    assert report["skipped"] == {"recipes": "No module named 'benchmarks.bench_recipes'"}
    assert report["sections"] == {}
    assert benchmarks.plotted == []  # nothing measured, no figure
    assert all(line.endswith("not measured") for line in report["summary"])


def test_a_section_that_skipped_itself_is_listed_as_skipped(benchmarks, tmp_path):
    benchmarks.results["storage"] = {"skipped": "no FUSE (fusermount3 not found)"}
    report_path = tmp_path / "report.json"
    assert main(["bench", "--sections", "storage", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["skipped"] == {"storage": "no FUSE (fusermount3 not found)"}
    assert report["sections"]["storage"]["skipped"] == "no FUSE (fusermount3 not found)"


def test_run_without_a_plot_path_draws_no_figure(benchmarks, tmp_path):
    import argparse

    args = argparse.Namespace(data=None, quick=True, full=False, sections=["decode"],
                              json=tmp_path / "report.json", plot=None)
    assert bench.run(args) == 0
    assert benchmarks.plotted == []
    report = json.loads(args.json.read_text())
    assert report["command"] == f"fastdecode bench --quick --sections decode --json {args.json}"


def test_summary_lines_find_their_part_among_several():
    sections = {"decode": {"sections": [
        {"key": "bmp_full", "rows": [{"name": "fastdecode", "speedup": 9.0}]},
        {"key": "jpeg_full", "rows": [{"name": "Pillow", "speedup": 1.0},
                                      {"name": "fastdecode", "speedup": 1.25}]}]}}
    assert bench.summary_lines(sections)[0] == (
        "decode:     fastdecode 1.25x Pillow (full JPEG decode, one thread)")


@pytest.mark.parametrize("argv, said", [
    ([], "runs the decode, transforms and loader sections, in turn, on "),
    (["--quick"], "It takes about 2 minutes on a quiet 2-core machine"),
    (["--sections", "storage"], "No duration is recorded for this run."),
])
def test_bench_says_what_it_will_do_and_how_long_first(benchmarks, tmp_path, capsys, argv, said):
    assert main(["bench", "--data", str(benchmarks.default_data), "--plot",
                 str(tmp_path / "f.png"), *argv]) in (0, 1)
    err = capsys.readouterr().err
    assert said in err and err.startswith("fastdecode bench runs the ")


def test_the_default_estimate_is_about_four_minutes():
    from pathlib import Path

    text = bench.plan(list(bench.DEFAULT_SECTIONS), "default", Path("/data"))
    assert "It takes about 4 minutes on a quiet 2-core machine, more on a busy one." in text
