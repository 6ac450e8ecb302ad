"""`fastdecode convert` and the command line around it."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastdecode
from fastdecode.cli import convert
from fastdecode.cli.__main__ import main
from fastdecode.conversion import jobs, output

PACKAGE_PARENT = Path(fastdecode.__file__).resolve().parent.parent
# (class-relative stem, suffix, height, width, Pillow mode); odd widths make BMP rows padded.
SOURCES = [
    ("cat/a", ".jpg", 48, 33, "RGB"),
    ("cat/b", ".png", 17, 30, "RGB"),
    ("cat/gray", ".png", 21, 26, "L"),
    ("dog/c", ".JPEG", 40, 61, "RGB"),
    ("dog/puppies/d", ".png", 9, 7, "RGB"),
]
CONVERTED = sorted(stem for stem, *_ in SOURCES)
BROKEN = "dog/broken.jpg"


def smooth_image(height: int, width: int, mode: str, seed: int) -> Image.Image:
    """Gradients with mild noise: JPEG keeps them close, resizing keeps them recognisable."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    ramps = [((c + 1) * x / width + (3 - c) * y / height) / 4 for c in range(3)]
    pixels = 30 + 180 * np.stack(ramps, axis=-1) + rng.integers(0, 8, (height, width, 3))
    image = Image.fromarray(pixels.astype(np.uint8))
    return image.convert(mode)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small ImageFolder: two classes, a nested folder, a corrupt JPEG, skipped files."""
    root = tmp_path / "src"
    for seed, (stem, suffix, height, width, mode) in enumerate(SOURCES):
        path = root / f"{stem}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        image = smooth_image(height, width, mode, seed)
        image.save(path, format="PNG" if suffix == ".png" else "JPEG")
    (root / BROKEN).write_bytes(b"\xff\xd8\xff\xe0" + b"not a JPEG after all" * 4)
    (root / "dog" / "notes.txt").write_text("not an image: ImageFolder skips it")
    (root / "MANIFEST.tsv").write_text("not in a class folder: ImageFolder skips it")
    return root


def outputs(destination: Path) -> list[str]:
    return sorted(str(path.relative_to(destination).with_suffix("")).replace(os.sep, "/")
                  for path in destination.rglob("*") if path.is_file())


def source_of(root: Path, stem: str) -> Path:
    return next(root.glob(f"{stem}.*"))


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- converting ----------------------------------------------------------------


def test_bmp_mirrors_the_tree_with_exact_pixels(tree, tmp_path, capsys):
    destination = tmp_path / "dst"
    code, out, _ = run_main(capsys, "convert", tree, destination, "--to", "bmp", "--workers", "2",
                            "--time-sample", "0")
    assert code == 0
    assert outputs(destination) == CONVERTED
    assert all(path.suffix == ".bmp" for path in destination.rglob("*") if path.is_file())
    assert "converted 5 images" in out and "failed 1" in out
    for stem in CONVERTED:
        with Image.open(destination / f"{stem}.bmp") as written:  # an independent BMP reader
            assert written.mode == "RGB"
            pixels = np.asarray(written)
        np.testing.assert_array_equal(pixels, fastdecode.read_image(source_of(tree, stem)))


def test_bmp_output_reads_back_with_fastdecode(tree, tmp_path):
    summary = convert.convert_tree(tree, tmp_path / "dst", to="bmp", workers=1)
    for stem in CONVERTED:
        np.testing.assert_array_equal(fastdecode.read_image(tmp_path / "dst" / f"{stem}.bmp"),
                                      fastdecode.read_image(source_of(tree, stem)))
    assert summary.timed_images == 5 and summary.decode_ms_after > 0


@pytest.mark.parametrize("to", [pytest.param("bmp", id="bmp"), pytest.param("jpeg", id="jpeg")])
def test_max_side_bounds_the_longer_side(tree, tmp_path, to):
    destination = tmp_path / "dst"
    summary = convert.convert_tree(tree, destination, to=to, max_side=32, workers=1, time_sample=0)
    assert summary.converted == 5
    for stem, _, height, width, _ in SOURCES:
        with Image.open(destination / f"{stem}{output.OUTPUT_SUFFIXES[to]}") as written:
            out_width, out_height = written.size
            pixels = np.asarray(written.convert("RGB"), dtype=np.float32)
        if max(height, width) <= 32:
            assert (out_height, out_width) == (height, width)
        else:
            assert max(out_height, out_width) == 32
            assert abs(out_height / out_width - height / width) < 0.05
        with Image.open(source_of(tree, stem)) as source:
            expected = source.convert("RGB").resize((out_width, out_height),
                                                    Image.Resampling.LANCZOS)
        assert np.abs(pixels - np.asarray(expected, dtype=np.float32)).mean() < 4


@pytest.mark.parametrize("subsampling", [pytest.param("4:2:0", id="420-default"),
                                         pytest.param("4:4:4", id="444")])
def test_jpeg_output_decodes_close_to_the_source(tree, tmp_path, capsys, subsampling):
    destination = tmp_path / "dst"
    extra = () if subsampling == "4:2:0" else ("--subsampling", subsampling)
    code, _, _ = run_main(capsys, "convert", tree, destination, "--to", "jpeg", "--quality", "95",
                          "--workers", "1", *extra)
    assert code == 0
    assert outputs(destination) == CONVERTED
    for stem in CONVERTED:
        output = destination / f"{stem}.jpg"
        assert fastdecode.read_header(output.read_bytes()).subsampling == subsampling
        source = fastdecode.read_image(source_of(tree, stem)).astype(np.float32)
        assert np.abs(fastdecode.read_image(output) - source).mean() < 4


def test_jpeg_quality_trades_size(tree, tmp_path):
    low, high = (convert.convert_tree(tree, tmp_path / f"q{quality}", to="jpeg", quality=quality,
                                      workers=1, time_sample=0) for quality in (30, 95))
    assert low.bytes_after < high.bytes_after


@pytest.mark.parametrize("to", [pytest.param("bmp", id="bmp"), pytest.param("jpeg", id="jpeg")])
def test_second_run_skips_and_redoes_a_truncated_output(tree, tmp_path, to):
    destination = tmp_path / "dst"
    first = convert.convert_tree(tree, destination, to=to, workers=1, time_sample=0)
    second = convert.convert_tree(tree, destination, to=to, workers=1, time_sample=0)
    assert (first.converted, first.skipped) == (5, 0)
    assert (second.converted, second.skipped) == (0, 5)
    assert second.bytes_after == first.bytes_after  # skipped outputs still count in the totals

    truncated = destination / f"cat/a{output.OUTPUT_SUFFIXES[to]}"
    truncated.write_bytes(truncated.read_bytes()[:-10])
    third = convert.convert_tree(tree, destination, to=to, workers=1, time_sample=0)
    assert (third.converted, third.skipped) == (1, 4)
    assert output.is_complete(truncated, to)


def no_partial_files(destination: Path) -> bool:
    return not any(path.name.endswith(output.PARTIAL_SUFFIX) for path in destination.rglob("*"))


def test_interrupt_leaves_only_complete_outputs(tree, tmp_path, capsys, monkeypatch):
    destination = tmp_path / "dst"
    calls = []

    def interrupted_on_third_image(file, pixels, options):
        calls.append(file.name)
        if len(calls) == 3:
            file.write(b"BM half an image")
            raise KeyboardInterrupt
        output.write_bmp(file, pixels, options)

    monkeypatch.setitem(output.WRITERS, "bmp", interrupted_on_third_image)
    code, _, err = run_main(capsys, "convert", tree, destination, "--to", "bmp", "--workers", "1")
    assert code == 130 and "run the same command again" in err
    assert no_partial_files(destination)
    assert len(outputs(destination)) == 2
    assert all(output.is_complete(path, "bmp") for path in destination.rglob("*.bmp"))

    monkeypatch.undo()
    resumed = convert.convert_tree(tree, destination, to="bmp", workers=1, time_sample=0)
    assert (resumed.converted, resumed.skipped) == (3, 2)
    assert outputs(destination) == CONVERTED


@pytest.mark.parametrize("strict, expected_code", [pytest.param(False, 0, id="default-exit-0"),
                                                   pytest.param(True, 1, id="strict-exit-1")])
def test_failures_are_listed_not_fatal(tree, tmp_path, capsys, strict, expected_code):
    code, out, _ = run_main(capsys, "convert", tree, tmp_path / "dst", "--to", "bmp",
                            "--workers", "1", *(["--strict"] if strict else []))
    assert code == expected_code
    listed = out.split("failed inputs:\n", 1)[1]
    assert str(tree / BROKEN) in listed and "DecodeError" in listed
    assert len(outputs(tmp_path / "dst")) == 5


def failing_writer(code: int):
    def write(file, pixels, options):
        file.write(b"BM")
        raise OSError(code, os.strerror(code))
    return write


def test_write_error_is_listed_and_leaves_no_partial_file(tree, tmp_path, monkeypatch):
    monkeypatch.setitem(output.WRITERS, "bmp", failing_writer(errno.EIO))
    summary = convert.convert_tree(tree, tmp_path / "dst", to="bmp", workers=1)
    assert (summary.converted, summary.failed) == (0, 6)
    assert all("Input/output error" in failure["error"] for failure in summary.failures
               if not failure["path"].endswith("broken.jpg"))
    assert no_partial_files(tmp_path / "dst") and outputs(tmp_path / "dst") == []


@pytest.mark.parametrize("code", [pytest.param(errno.ENOSPC, id="ENOSPC"),
                                  pytest.param(errno.EDQUOT, id="EDQUOT"),
                                  pytest.param(errno.EROFS, id="EROFS")])
def test_destination_error_stops_the_run_naming_the_file(tree, tmp_path, monkeypatch, code):
    monkeypatch.setitem(output.WRITERS, "bmp", failing_writer(code))
    first = tmp_path / "dst" / "cat" / "a.bmp"  # the first file in ImageFolder's order
    with pytest.raises(convert.ConvertError, match=f"cannot write {first}: {os.strerror(code)}"):
        convert.convert_tree(tree, tmp_path / "dst", to="bmp", workers=1)
    assert no_partial_files(tmp_path / "dst") and outputs(tmp_path / "dst") == []


def test_two_sources_with_one_output_name(tree, tmp_path):
    smooth_image(8, 8, "RGB", 0).save(tree / "cat" / "a.png")  # next to cat/a.jpg
    summary = convert.convert_tree(tree, tmp_path / "dst", to="bmp", workers=1, time_sample=0)
    clash = [f for f in summary.failures if f["path"] == str(tree / "cat" / "a.png")]
    assert clash and "same output name as" in clash[0]["error"]


def test_json_summary(tree, tmp_path, capsys):
    report = tmp_path / "summary.json"
    code, _, _ = run_main(capsys, "convert", tree, tmp_path / "dst", "--to", "jpeg",
                          "--workers", "1", "--json", report)
    assert code == 0
    summary = json.loads(report.read_text())
    assert set(summary) == {
        "source", "destination", "to", "converted", "skipped", "failed", "failures",
        "bytes_before", "bytes_after", "seconds", "timed_images", "decode_ms_before",
        "decode_ms_after", "decode_speedup", "timing_error", "classes", "empty_classes",
    }
    assert (summary["converted"], summary["skipped"], summary["failed"]) == (5, 0, 1)
    assert summary["failures"][0]["path"] == str(tree / BROKEN)
    assert summary["bytes_before"] > 0 and summary["bytes_after"] > 0
    assert summary["timed_images"] == 5 and summary["decode_speedup"] > 0


def test_python_m_fastdecode_in_a_subprocess(tree, tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="error",
               PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                        os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-m", "fastdecode", "convert", str(tree), str(tmp_path / "dst"),
         "--to", "bmp", "--workers", "2", "--time-sample", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "converted 5 images" in result.stdout and "broken.jpg" in result.stdout
    assert "Warning" not in result.stderr
    assert outputs(tmp_path / "dst") == CONVERTED


# --- checks ------------------------------------------------------------------


@pytest.mark.parametrize("to", [pytest.param("bmp", id="bmp"), pytest.param("jpeg", id="jpeg")])
def test_completeness_check(tmp_path, to):
    path = tmp_path / f"image{output.OUTPUT_SUFFIXES[to]}"
    pixels = np.asarray(smooth_image(5, 7, "RGB", 0))
    write = output.WRITERS[to]
    output.write_atomically(path, lambda file: write(file, pixels, output.EncodeOptions(to)))
    data = path.read_bytes()
    assert output.is_complete(path, to)
    for damaged in (data[:-1], data[:20], b""):
        path.write_bytes(damaged)
        assert not output.is_complete(path, to)
    path.unlink()
    assert not output.is_complete(path, to)


@pytest.mark.parametrize("height, width, max_side, expected", [
    pytest.param(100, 50, 40, (40, 20), id="portrait"),
    pytest.param(375, 500, 256, (192, 256), id="landscape"),
    pytest.param(10, 10, None, (10, 10), id="no-limit"),
    pytest.param(10, 10, 64, (10, 10), id="never-enlarges"),
    pytest.param(3, 1000, 10, (1, 10), id="at-least-one-pixel"),
])
def test_fit_within(height, width, max_side, expected):
    assert jobs.fit_within(height, width, max_side) == expected


@pytest.mark.parametrize("arguments, message", [
    pytest.param({"source": "missing"}, "is not a folder", id="missing-source"),
    pytest.param({"destination": "src/cat/out"}, "is inside the source", id="destination-inside"),
    pytest.param({"destination": "src"}, "is inside the source", id="destination-is-source"),
    pytest.param({"to": "png"}, "--to must be one of bmp, jpeg", id="format"),
    pytest.param({"quality": 0}, r"--quality must be in 1\.\.100", id="quality"),
    pytest.param({"subsampling": "4:1:1"}, "--subsampling must be one of", id="subsampling"),
    pytest.param({"max_side": 0}, "--max-side must be at least 1", id="max-side"),
    pytest.param({"workers": 0}, "--workers must be at least 1", id="workers"),
    pytest.param({"time_sample": -1}, "--time-sample must be 0 or more", id="time-sample"),
])
def test_bad_arguments_raise_value_error(tree, tmp_path, arguments, message):
    arguments = {"source": tree, "destination": tmp_path / "dst", "to": "bmp", **arguments}
    for key in ("source", "destination"):
        arguments[key] = tmp_path / arguments[key]
    with pytest.raises(ValueError, match=message):
        convert.convert_tree(**arguments)


def test_root_without_class_folders_raises(tmp_path):
    (tmp_path / "flat").mkdir()
    smooth_image(4, 4, "RGB", 0).save(tmp_path / "flat" / "a.png")
    with pytest.raises(ValueError, match="no class folders in"):
        convert.convert_tree(tmp_path / "flat", tmp_path / "dst", to="bmp")


def test_jpeg_output_without_pillow_raises_import_error(tree, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `import PIL` fail
    with pytest.raises(ImportError, match="need Pillow: pip install Pillow"):
        convert.convert_tree(tree, tmp_path / "dst", to="jpeg")


@pytest.mark.parametrize("args, message", [
    pytest.param(["--quality", "80"], "apply to --to jpeg only", id="quality-with-bmp"),
    pytest.param(["--max-side", "-3"], "--max-side must be at least 1", id="negative-max-side"),
])
def test_bad_arguments_exit_2(tree, tmp_path, capsys, args, message):
    code, _, err = run_main(capsys, "convert", tree, tmp_path / "dst", "--to", "bmp", *args)
    assert code == 2 and message in err
    assert not (tmp_path / "dst").exists()


# --- the command line --------------------------------------------------------


@pytest.mark.parametrize("command", [pytest.param([], id="fastdecode"),
                                     pytest.param(["convert"], id="convert"),
                                     pytest.param(["info"], id="info")])
def test_help_shows_examples(capsys, command):
    code, out, _ = run_main(capsys, *command, "--help")
    assert code == 0 and "examples:" in out


def test_missing_command_is_a_usage_error(capsys):
    code, _, err = run_main(capsys)
    assert code == 2 and "usage: fastdecode" in err


def test_info(capsys):
    from fastdecode.cli.info import versions

    code, out, _ = run_main(capsys, "info")
    assert code == 0 and f"libjpeg_turbo  {fastdecode.info()['libjpeg_turbo']}" in out
    code, out, _ = run_main(capsys, "info", "--json")
    assert code == 0 and json.loads(out) == {**fastdecode.info(), **versions()}


# --- class folders (ImageFolder's class indices) -------------------------------


@pytest.fixture
def uneven_tree(tree: Path) -> Path:
    """Adds a class whose only image is broken and a class with no image at
    all, sorted between the others: without their folders every later class
    index would shift."""
    (tree / "bird").mkdir()
    (tree / "bird" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")
    (tree / "cow").mkdir()
    (tree / "cow" / "notes.txt").write_text("no image here")
    smooth_image(12, 10, "RGB", 9).save(tree / "eel.png")  # not in a class folder: skipped
    (tree / "eel").mkdir()
    smooth_image(12, 10, "RGB", 9).save(tree / "eel" / "e.png")
    return tree


def class_indices(root: Path) -> tuple[dict[str, int], list[tuple[str, int]]]:
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(str(root), allow_empty=True)
    return ds.class_to_idx, [(str(Path(p).relative_to(root).with_suffix("")), t)
                             for p, t in ds.samples]


def test_every_class_folder_is_mirrored_and_the_indices_hold(uneven_tree, tmp_path):
    pytest.importorskip("torchvision")
    destination = tmp_path / "dst"
    summary = convert.convert_tree(uneven_tree, destination, to="bmp", workers=1, time_sample=0)
    source_classes, source_samples = class_indices(uneven_tree)
    converted_classes, converted_samples = class_indices(destination)
    assert converted_classes == source_classes == {"bird": 0, "cat": 1, "cow": 2, "dog": 3,
                                                   "eel": 4}
    assert set(converted_samples) <= set(source_samples)  # same (file, class index) pairs
    assert (summary.classes, summary.empty_classes) == (5, ["bird", "cow"])


def test_empty_classes_are_reported(uneven_tree, tmp_path, capsys):
    code, out, _ = run_main(capsys, "convert", uneven_tree, tmp_path / "dst", "--to", "bmp",
                            "--workers", "1", "--time-sample", "0")
    assert code == 0
    assert "empty classes: 2 of 5 class folders hold no converted image" in out
    assert out.rstrip().count("bird, cow") == 1


@pytest.mark.parametrize("broken", [pytest.param(False, id="only-an-empty-class"),
                                    pytest.param(True, id="empty-class-and-failed-file")])
def test_strict_fails_on_empty_classes(tree, tmp_path, capsys, broken):
    if not broken:
        (tree / BROKEN).unlink()
    (tree / "cow").mkdir()
    code, out, _ = run_main(capsys, "convert", tree, tmp_path / "dst", "--to", "bmp",
                            "--workers", "1", "--time-sample", "0", "--strict")
    assert code == 1 and "empty classes: 1 of 3 class folders" in out and ": cow" in out


def test_a_class_emptied_by_failures_keeps_its_folder_on_resume(uneven_tree, tmp_path):
    destination = tmp_path / "dst"
    convert.convert_tree(uneven_tree, destination, to="bmp", workers=1, time_sample=0)
    again = convert.convert_tree(uneven_tree, destination, to="bmp", workers=1, time_sample=0)
    assert again.converted == 0 and again.empty_classes == ["bird", "cow"]
    assert sorted(p.name for p in destination.iterdir()) == ["bird", "cat", "cow", "dog", "eel"]
