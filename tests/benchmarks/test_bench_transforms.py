"""benchmarks/bench_transforms.py on a tiny dataset: structure only.

Timings on a shared machine say nothing about correctness, so nothing here
compares a speed; the quality column is checked where it is deterministic.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from fastdecode.cli import datagen  # noqa: E402

# Where the kernel refuses to reset the peak RSS, no row has one.
PEAK_RSS_RESETTABLE = os.access("/proc/self/clear_refs", os.W_OK)


def load_bench():
    """The script as a module of the benchmarks package, run in this process
    (a fresh one would spend ~10 s importing torch); only its pillow-simd
    helper gets a process, which runs the script as a file."""
    return importlib.import_module("benchmarks.bench_transforms")


def restore(threads: int) -> None:
    """What a section run here changes in this process, put back: torch's
    threads, and the objects its peak-RSS rows froze (_common.collect)."""
    torch.set_num_threads(threads)
    importlib.import_module("benchmarks._common").thaw()


def run_bench(argv: list[str], capsys) -> str:
    module = load_bench()
    threads = torch.get_num_threads()
    try:
        assert module.main(argv) == 0
    finally:
        restore(threads)
    return capsys.readouterr().out


SECTIONS = {"train_uint8", "train_float", "eval_uint8", "eval_float"}
METHODS = ["torchvision + PIL", "torchvision + pillow-simd", "fastdecode fuse",
           "fastdecode decode_into", "fastdecode fuse exact", "simplejpeg + OpenCV",
           "full decode + OpenCV AREA"]
TIMED_KEYS = {"images_per_s", "ms_per_image", "median_images_per_s", "cpu_ms_per_image",
              "speedup", "peak_rss_mib", "round_seconds", "files_failed"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("bench")
    data = datagen.generate_imagenet_like(tmp / "set", n_images=5, n_classes=2, seed=3,
                                          progress=False)
    out = tmp / "result.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            assert load_bench().main(["--quick", "--limit", "5", "--rounds", "1", "--data",
                                      str(data), "--json", str(out)]) == 0
    finally:
        restore(threads)
    result = json.loads(out.read_text())
    result["_stdout"], result["_stderr"] = stdout.getvalue(), stderr.getvalue()
    return result


@pytest.mark.no_sanitize
def test_sections_and_rows(report):
    assert {s["key"] for s in report["sections"]} == SECTIONS
    for section in report["sections"]:
        assert [r["name"] for r in section["rows"]] == METHODS
        # the files every method decodes (simplejpeg refuses CMYK, for one)
        assert 1 <= section["files"] <= 5
        for row in section["rows"]:
            if row["status"] == "ok":
                assert TIMED_KEYS <= set(row), row
                assert row["images_per_s"] > 0 and row["speedup"] > 0
                assert row["cpu_ms_per_image"] > 0  # pillow-simd's: its helper's
                if PEAK_RSS_RESETTABLE:
                    assert row["peak_rss_mib"] > 0, row
                else:
                    assert row["peak_rss_mib"] is None
                assert len(row["round_seconds"]) == 1
            else:
                assert row["status"].startswith("skipped"), row  # always says why
        base = section["rows"][0]
        assert base["status"] == "ok" and base["speedup"] == 1.0 and "psnr_mean" not in base


@pytest.mark.no_sanitize
def test_quality_column(report):
    for section in report["sections"]:
        rows = {r["name"]: r for r in section["rows"]}
        exact = rows["fastdecode fuse exact"]
        assert exact["psnr_min"] >= 50  # full-resolution decode: Pillow within a level
        assert rows["fastdecode decode_into"]["psnr_min"] == rows["fastdecode fuse"]["psnr_min"]


@pytest.mark.no_sanitize
def test_markdown_and_metadata(report):
    text = report["_stdout"]
    for title in ("### train:", "### eval:", "### In short (fastdecode fuse)"):
        assert title in text
    for internal in ("Targets", "target >=", "NOT met", "BEHIND"):  # the project's, not a user's
        assert internal not in text
    assert "| torchvision + PIL |" in text
    for column in ("images/s", "CPU ms/image", "speedup vs torchvision + PIL", "peak RSS MiB"):
        assert f"| {column} |" in text
    assert "\r" not in text and "transforms: " in report["_stderr"]  # the bar is on stderr
    assert report["settings"]["threads"] == 1
    assert report["dataset"]["files"] == 5
    assert "Methods:" in text and "pillow-simd" in text  # measured, or why not
    assert {t["section"] for t in report["targets"]} == SECTIONS
    for key in ("torch", "torchvision", "pillow", "fastdecode libjpeg-turbo"):
        assert report["versions"][key]
    assert report["machine"]["usable_cpus"] >= 1


@pytest.mark.no_sanitize
def test_methods_filter(tmp_path, capsys):
    data = datagen.generate_imagenet_like(tmp_path / "set", n_images=2, n_classes=1, seed=4,
                                          progress=False)
    out = tmp_path / "r.json"
    text = run_bench(["--limit", "2", "--rounds", "1", "--data", str(data),
                      "--methods", "fuse exact", "--json", str(out)], capsys)
    assert "| fastdecode fuse exact |" in text and "simplejpeg" not in text
    for section in json.loads(out.read_text())["sections"]:
        names = [r["name"] for r in section["rows"]]
        assert names == ["torchvision + PIL", "fastdecode fuse exact"]


def test_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_bench(["--rounds", "0"], capsys)
    assert exit_info.value.code == 2
    assert "--limit and --rounds must be >= 1" in capsys.readouterr().err
