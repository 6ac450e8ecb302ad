"""benchmarks/bench_resume.py on tiny datasets: its code path and report's
structure only (no time is compared: a shared machine's timings say nothing
about correctness)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from fastdecode.cli import datagen  # noqa: E402


def load_bench():
    return importlib.import_module("benchmarks.bench_resume")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("bench")
    data = datagen.generate_imagenet_like(tmp / "set", n_images=4, n_classes=2, seed=3,
                                          progress=False)
    out = tmp / "result.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert load_bench().main(["--sizes", "12", "40", "--batch", "4", "--rounds", "2",
                                  "--data", str(data), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    result["stdout"] = stdout.getvalue()
    return result


def test_each_size_has_both_resume_points_timed_every_round(report):
    assert [row["samples"] for row in report["sizes"]] == [12, 40]
    for row in report["sizes"]:
        assert row["batches"] == row["samples"] // 4
        assert row["resume_batches"] == {"first": 1, "last": row["batches"] - 1}
        assert [len(row["seconds"][k]) for k in ("first", "last")] == [2, 2]
        assert len(row["ratios"]) == 2 and row["ratio_last_to_first"] > 0
        assert row["fingerprint_s_median"] >= 0


def test_the_state_size_does_not_grow_with_the_dataset(report):
    sizes = [b for row in report["sizes"] for b in row["state_bytes"].values()]
    # the numbers' own digits may differ; nothing per sample
    assert max(sizes) - min(sizes) <= 64 and max(sizes) < 16 * 1024


def test_the_report_names_the_ratio_and_the_acceptance(report):
    out = report["stdout"]
    assert "| 12 | 3 |" in out and "| 40 | 10 |" in out
    assert "acceptance: <= 1.2x" in out and "worst last / first ratio" in out
    assert report["command"].startswith("python -m benchmarks.bench_resume --sizes 12 40")


@pytest.mark.parametrize("worst, verdict", [pytest.param(1.05, "met", id="met"),
                                            pytest.param(1.5, "NOT met", id="not-met")])
def test_markdown_of_a_made_up_report(worst, verdict):
    row = {"samples": 1000, "batches": 4, "state_bytes": {"first": 9000, "last": 9001},
           "first_s_median": 0.01, "last_s_median": 0.01 * worst,
           "ratio_last_to_first": worst, "fingerprint_s_median": 0.002}
    text = load_bench().markdown({"rounds": 3, "batch": 256, "workers": 0, "sizes": [row]})
    assert f"| 1,000 | 4 | 9,000, 9,001 | 0.0100 | {0.01 * worst:.4f} | {worst:.2f}x | 0.0020 |" in text
    assert f"(acceptance: <= 1.2x: {verdict})" in text


def test_sizes_under_three_batches_are_refused(capsys):
    with pytest.raises(SystemExit):
        load_bench().main(["--sizes", "8", "--batch", "4"])
    assert "--sizes must be at least 3 batches (12 samples)" in capsys.readouterr().err
