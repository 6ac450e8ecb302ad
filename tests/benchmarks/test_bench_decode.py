"""The dataset generator and the benchmark script, on a tiny dataset.

These check structure only: timings on a shared machine say nothing about
correctness, so no test here ever compares a speed.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import fastdecode
from fastdecode.cli import datagen

ROOT = Path(__file__).resolve().parents[2]

SECTIONS = {"jpeg_full", "jpeg_min_size", "jpeg_crop", "threads", "header", "bmp"}
ROW_KEYS = {"name", "status", "note", "files_failed", "images_per_s", "ms_per_image",
            "cpu_ms_per_image", "speedup", "fastdecode_speedup", "vs_floor", "peak_rss_mib",
            "round_seconds", "median_images_per_s"}
# Where the kernel refuses to reset the peak RSS, the Python rows have none;
# the C floor reports its own either way.
PEAK_RSS_RESETTABLE = os.access("/proc/self/clear_refs", os.W_OK)
# Row name -> the module that must import for it to be measured.
PEER_MODULES = {"Pillow": "PIL", "simplejpeg": "simplejpeg", "PyTurboJPEG": "turbojpeg",
                "OpenCV": "cv2", "torchvision": "torchvision"}


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> Path:
    return datagen.generate_imagenet_like(tmp_path_factory.mktemp("data") / "set", n_images=12,
                                          n_classes=3, seed=1, progress=False)


def jpeg_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.JPEG"))


# --------------------------------------------------------------------------
# The generator.

def test_generator_writes_an_image_folder(tiny_dataset):
    files = jpeg_files(tiny_dataset)
    assert len(files) == 12
    assert {f.parent.name for f in files} == {"n00000000", "n00000001", "n00000002"}
    for f in files:
        image = fastdecode.decode_image(f.read_bytes())
        assert image.ndim == 3 and image.shape[2] == 3
        assert image.std() > 10  # not flat colour
    assert not [p for p in tiny_dataset.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_generator_is_deterministic_and_reuses_a_finished_set(tiny_dataset, tmp_path):
    stamps = {f: f.stat().st_mtime_ns for f in jpeg_files(tiny_dataset)}
    again = datagen.generate_imagenet_like(tiny_dataset, n_images=12, n_classes=3, seed=1,
                                           progress=False)
    assert again == tiny_dataset
    assert {f: f.stat().st_mtime_ns for f in jpeg_files(tiny_dataset)} == stamps  # not rewritten

    copy = datagen.generate_imagenet_like(tmp_path / "copy", n_images=12, n_classes=3, seed=1,
                                          progress=False)
    assert [f.read_bytes() for f in jpeg_files(copy)] == [f.read_bytes() for f in stamps]


def test_generator_remakes_its_own_set_with_other_parameters(tmp_path):
    root = datagen.generate_imagenet_like(tmp_path / "set", n_images=2, n_classes=1,
                                          progress=False)
    datagen.generate_imagenet_like(root, n_images=3, n_classes=1, progress=False)
    assert len(jpeg_files(root)) == 3


def test_generator_leaves_other_folders_alone(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        datagen.generate_imagenet_like(tmp_path / "mine", n_images=2, progress=False)
    assert (tmp_path / "mine" / "keep.txt").exists()


def test_default_dir_is_under_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = datagen.default_dataset_dir(n_images=10, n_classes=2, seed=3)
    assert path.parent == tmp_path / "fastdecode"
    assert "n10" in path.name and "c2" in path.name and "s3" in path.name


def test_planned_sizes_and_flavours_follow_imagenet(tmp_path):
    specs = datagen.plan_dataset(tmp_path, n_images=2000, n_classes=100, seed=0)
    assert statistics.median(s.width for s in specs) == 500
    assert statistics.median(s.height for s in specs) == 375
    assert max(max(s.width, s.height) for s in specs) <= 2000
    assert min(min(s.width, s.height) for s in specs) < 200
    assert 0.15 < sum(s.height > s.width for s in specs) / len(specs) < 0.35  # portraits
    shares = {kind: sum(s.flavour == kind for s in specs) / len(specs)
              for kind in ("420", "444", "gray", "cmyk")}
    assert shares["420"] > 0.7
    assert 0.1 < shares["444"] < 0.2
    assert 0.01 < shares["gray"] < 0.06 and 0.005 < shares["cmyk"] < 0.05
    assert 0.02 < sum(s.progressive for s in specs) / len(specs) < 0.1
    assert all(75 <= s.quality <= 95 for s in specs)


@pytest.mark.parametrize("flavour, mode", [("gray", "L"), ("cmyk", "CMYK"), ("444", "RGB")])
def test_each_flavour_encodes_as_planned(flavour, mode):
    spec = datagen.ImageSpec(path="unused", width=64, height=48, quality=90, flavour=flavour,
                             progressive=True, seed=(0, 0))
    image = Image.open(io.BytesIO(datagen.encode_image(spec)))
    assert image.mode == mode and image.size == (64, 48)
    assert image.info.get("progressive")


# --------------------------------------------------------------------------
# The benchmark script.

@pytest.fixture(scope="module")
def bench_run(tiny_dataset, tmp_path_factory) -> tuple[dict, str, str]:
    """The section run on its own, as the checkout runs it (python -m)."""
    out = tmp_path_factory.mktemp("bench") / "result.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_decode", "--data", str(tiny_dataset), "--quick",
         "--rounds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text()), run.stdout, run.stderr


def test_bench_json_has_every_section_and_fact(bench_run):
    result, _, _ = bench_run
    assert {s["key"] for s in result["sections"]} == SECTIONS
    assert result["dataset"]["files"] == 12
    assert result["machine"]["cpu_count"] >= 1 and result["machine"]["affinity"]
    assert result["machine"]["usable_cpus"] >= 1
    assert result["versions"]["fastdecode"] == fastdecode.__version__
    assert result["versions"]["pillow"] and "torchvision" in result["versions"]
    assert result["settings"]["rounds"] == 1
    assert {t["name"] for t in result["targets"]} >= {"full decode vs C floor",
                                                      "read_header per second"}


def test_bench_rows_are_measured_or_say_why_not(bench_run):
    result, _, _ = bench_run
    for section in result["sections"]:
        assert section["images"] > 0, section["key"]
        for row in section["rows"]:
            assert set(row) == ROW_KEYS
            if row["status"] == "ok":
                assert row["images_per_s"] > 0 and row["ms_per_image"] > 0
                assert row["cpu_ms_per_image"] > 0
                assert row["speedup"] > 0 and row["fastdecode_speedup"] > 0
                assert len(row["round_seconds"]) == 1
                if PEAK_RSS_RESETTABLE or row["name"].startswith("C floor"):
                    assert row["peak_rss_mib"] > 0, row
                else:
                    assert row["peak_rss_mib"] is None
            else:
                assert row["status"].startswith(("skipped", "failed")), row
                assert row["images_per_s"] is None
                assert row["speedup"] is None and row["peak_rss_mib"] is None


def test_bench_speedups_are_over_the_baseline_and_of_fastdecode(bench_run):
    """speedup: the row's images/s over the baseline's (Pillow; fastdecode on
    one thread in the threads section); fastdecode_speedup: the reference
    fastdecode row's images/s over the row's."""
    result, _, _ = bench_run
    for section in result["sections"]:
        rows = {row["name"]: row for row in section["rows"]}
        base, ref = rows[section["baseline"]], rows[section["reference"]]
        assert section["baseline"] == ("fastdecode, 1 thread" if section["key"] == "threads"
                                       else "Pillow")
        assert base["speedup"] == 1.0 and ref["fastdecode_speedup"] == 1.0
        for row in rows.values():
            if row["status"] == "ok":
                assert row["speedup"] == pytest.approx(
                    row["images_per_s"] / base["images_per_s"])
                assert row["fastdecode_speedup"] == pytest.approx(
                    ref["images_per_s"] / row["images_per_s"])


def test_bench_measures_fastdecode_and_every_installed_peer(bench_run):
    result, _, _ = bench_run
    section = next(s for s in result["sections"] if s["key"] == "jpeg_full")
    full = {row["name"]: row for row in section["rows"]}
    assert full["fastdecode"]["status"] == "ok" and full["fastdecode"]["fastdecode_speedup"] == 1.0
    for name, module in PEER_MODULES.items():
        installed = importlib.util.find_spec(module) is not None
        if not installed:
            assert full[name]["status"] == "skipped (not installed)"
        elif name != "PyTurboJPEG":  # may also lack its shared library
            assert full[name]["status"] == "ok", full[name]
    assert full["C floor"]["status"] == "ok" or full["C floor"]["status"].startswith("skipped")


def test_bench_prints_a_markdown_table_per_section(bench_run):
    result, stdout, _ = bench_run
    for section in result["sections"]:
        assert f"### {section['title']}" in stdout
    assert "| fastdecode |" in stdout and "### In short" in stdout
    # the measured ratios in a user's words, not the project's targets
    assert "| full decode: fastdecode / libjpeg-turbo in a plain C loop |" in stdout
    for internal in ("### Targets", "| met |", "**no**", "wanted"):
        assert internal not in stdout
    header = next(line for line in stdout.splitlines() if line.startswith("| library |"))
    for column in ("images/s", "CPU ms/image", "speedup vs Pillow", "speedup of fastdecode",
                   "vs C floor", "peak RSS MiB"):
        assert f"| {column} |" in header
    assert "| speedup vs fastdecode, 1 thread |" in stdout


def test_bench_shows_a_progress_bar_per_section_on_stderr(bench_run):
    result, stdout, stderr = bench_run
    for section in result["sections"]:
        assert f"{section['title']}: " in stderr  # tqdm's "desc: nn%|..."
    assert "%|" not in stdout and "\r" not in stdout  # stdout stays plain Markdown


def test_c_floor_serve_reports_cpu_time_and_peak_rss(tiny_dataset, tmp_path):
    bench = importlib.import_module("benchmarks.bench_decode")
    if bench.ensure_c_floor():
        pytest.skip("benchmarks/c_floor cannot be built here")
    samples, _ = bench.load_samples(tiny_dataset, 12)
    floor = bench.CFloor(bench.C_FLOOR, [], tmp_path)
    failed = floor.check(samples)  # CMYK: libjpeg will not make RGB of it
    floor.start([s for i, s in enumerate(samples) if i not in failed][:2])
    try:
        seconds, cpu = floor.measure(0, 2)
    finally:
        floor.stop()
    assert seconds > 0 and cpu > 0
    # Its own peak: getrusage would give, across exec, this process's own RSS.
    own = int(re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(),
                        re.MULTILINE).group(1)) / 1024
    assert 0 < floor.peak_rss_mib < own


def test_peak_rss_is_not_available_where_the_kernel_refuses_the_reset(monkeypatch, bench_run):
    common = importlib.import_module("benchmarks._common")
    bench = importlib.import_module("benchmarks.bench_decode")
    real_open = open

    def refusing(path, *args, **kwargs):
        if str(path) == "/proc/self/clear_refs":
            raise PermissionError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refusing)
    runs = []
    assert common.peak_rss_mib(lambda: runs.append(1)) is None and not runs
    result, _, _ = bench_run
    section = next(s for s in result["sections"] if s["key"] == "jpeg_full")
    rows = [{**row, "peak_rss_mib": None} for row in section["rows"]]
    table = bench.markdown_table({**section, "rows": rows})
    assert "| fastdecode |" in table and "| n/a | decode_jpeg(data) |" in table
