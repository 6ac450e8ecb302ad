"""`fastdecode tune` on a tiny generated ImageFolder: the JSON, the
recommendations computed from what it measured, and the exit codes.

Only relations between the reported numbers are checked, never speeds: the
machine is shared and noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

from fastdecode import _system  # noqa: E402
from fastdecode.cli import tune  # noqa: E402
from fastdecode.cli.__main__ import main  # noqa: E402

# Small chains for --transform test_tune:...: pytest imports this file as
# `test_tune` (tests/ is on sys.path), so the CLI finds them by name.
SMALL = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


def small_chain():
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])


def broken(image):
    raise ValueError("this transform always fails")


class NeedsArguments:
    def __init__(self, size):
        self.size = size


NOT_A_TRANSFORM = 42
RESULT_KEYS = {
    "data", "images", "classes", "transform", "batch_size", "batches", "usable_cpus",
    "decode_s_per_batch", "decode_s_per_batch_max", "worker_images_per_s", "batch_bytes",
    "sweep", "max_images_per_s", "max_at_num_workers", "recommended_num_workers",
    "recommended_prefetch_factor", "step_time_s", "target_images_per_s", "needed_num_workers",
    "input_bound", "skipped_images", "load_average", "notes", "warnings",
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """Two classes of three small JPEGs."""
    root = tmp_path_factory.mktemp("tune")
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (root / name).mkdir()
        for i in range(3):
            pixels = rng.integers(0, 255, (48 + 8 * i, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.jpg", quality=85)
    return root


def run_tune(capsys, *args) -> tuple[int, dict]:
    code = main(["tune", "--json", "--batch-size", "4", "--batches", "2", *map(str, args)])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def test_step_time_sets_workers_from_the_decode_time(tree, capsys):
    code, r = run_tune(capsys, "--data", tree, "--transform", "test_tune:SMALL",
                       "--workers", "0", "1", "--step-time", "0.5")
    assert code == 0
    assert set(r) == RESULT_KEYS
    assert (r["images"], r["classes"], r["batch_size"]) == (6, 2, 4)
    assert [row["num_workers"] for row in r["sweep"]] == [0, 1]
    for row in r["sweep"]:
        assert row["images_per_s"] > 0 and row["batches"] == max(1, row["num_workers"]) + 2
        assert row["meets_step_time"] == (row["images_per_s"] >= r["target_images_per_s"])
    assert r["decode_s_per_batch"] <= r["decode_s_per_batch_max"]
    assert r["batch_bytes"] == 4 * 3 * 32 * 32 * 4  # float32 from ToTensor
    assert r["target_images_per_s"] == pytest.approx(4 / 0.5)
    assert r["needed_num_workers"] == math.ceil(r["decode_s_per_batch"] / 0.5)
    assert r["recommended_num_workers"] == min(r["needed_num_workers"], r["usable_cpus"])
    assert r["input_bound"] == (r["needed_num_workers"] > r["usable_cpus"])
    assert r["recommended_prefetch_factor"] >= 2
    assert r["max_images_per_s"] == max(row["images_per_s"] for row in r["sweep"])


def test_without_step_time_reports_the_best_rate(tree, capsys):
    code, r = run_tune(capsys, "--data", tree, "--transform", "test_tune:small_chain",
                       "--workers", "0", "1")
    assert code == 0
    assert r["step_time_s"] is None and r["needed_num_workers"] is None
    assert r["batch_bytes"] == 4 * 3 * 32 * 32  # uint8 from PILToTensor
    assert r["max_at_num_workers"] in (0, 1)
    assert r["recommended_num_workers"] == 1  # 0 decodes in the training loop
    assert r["recommended_prefetch_factor"] == 2
    assert any("at most" in note for note in r["notes"])


def test_input_bound_caps_workers_at_the_usable_cpus(tree, capsys, monkeypatch):
    monkeypatch.setattr(_system, "usable_cpus", lambda: 1)
    code, r = run_tune(capsys, "--data", tree, "--transform", "test_tune:SMALL",
                       "--workers", "0", "--step-time", "1e-9")
    assert code == 0
    assert r["usable_cpus"] == 1 and r["needed_num_workers"] > 1
    assert (r["recommended_num_workers"], r["input_bound"]) == (1, True)
    assert r["recommended_prefetch_factor"] == 2
    assert any(note.startswith("input-bound") for note in r["notes"])


def test_standard_chain_and_text_output(tree, capsys):
    assert main(["tune", "--data", str(tree), "--batch-size", "2", "--batches", "1",
                 "--workers", "0", "--step-time", "10"]) == 0
    captured = capsys.readouterr()
    assert "standard ImageNet train chain" in captured.out
    assert "num_workers  images/s" in captured.out
    assert "recommended: num_workers=1, prefetch_factor=2" in captured.out
    assert "measuring one worker" in captured.err  # progress goes to stderr


@pytest.mark.parametrize(
    "slowest, workers, step, expected",
    [
        pytest.param(0.1, 1, 0.2, 2, id="fast-batches-keep-the-default"),
        pytest.param(0.9, 2, 0.15, 3, id="slow-batch-needs-more-lead"),
        pytest.param(100.0, 1, 0.01, tune.MAX_PREFETCH, id="capped"),
    ],
)
def test_recommend_prefetch(slowest, workers, step, expected):
    assert tune.recommend_prefetch(slowest, workers, step) == expected


@pytest.mark.parametrize(
    "usable, expected",
    [pytest.param(1, [1], id="one"), pytest.param(2, [1, 2], id="two"),
     pytest.param(6, [1, 2, 4, 6], id="six")],
)
def test_default_worker_counts(usable, expected):
    assert tune.default_worker_counts(usable) == expected


def test_load_transform_calls_factories_not_transforms():
    transform, description = tune.load_transform("test_tune:small_chain")
    assert isinstance(transform, T.Compose) and description == "test_tune:small_chain"
    assert tune.load_transform("test_tune:SMALL")[0] is SMALL
    assert tune.load_transform("test_tune:broken")[0] is broken  # takes an argument


@pytest.mark.parametrize(
    "reference, match",
    [
        pytest.param("no_colon", "expected module:attribute", id="no-colon"),
        pytest.param("no_such_module_xyz:t", "cannot import 'no_such_module_xyz'", id="no-module"),
        pytest.param("test_tune:NOPE", "has no attribute 'NOPE'", id="no-attribute"),
        pytest.param("test_tune:NeedsArguments", "class that needs arguments", id="class"),
        pytest.param("test_tune:NOT_A_TRANSFORM", "is not a transform: got int 42",
                     id="not-callable"),
    ],
)
def test_bad_transform_references(reference, match):
    with pytest.raises(tune.UsageError, match=match):
        tune.load_transform(reference)


@pytest.mark.parametrize(
    "args, code, message",
    [
        pytest.param(["--data", "{tmp}/missing"], 2, "no such directory", id="missing-data"),
        pytest.param(["--data", "{tmp}"], 2, "not an ImageFolder tree", id="no-classes"),
        pytest.param(["--data", "{tree}", "--transform", "no_such_module_xyz:t"], 2,
                     "cannot import", id="bad-module"),
        pytest.param(["--data", "{tree}", "--step-time", "0"], 2, "must be > 0", id="zero-step"),
        pytest.param(["--data", "{tree}", "--workers", "-1"], 2, "must be >= 0", id="bad-workers"),
        pytest.param(["--data", "{tree}", "--transform", "test_tune:broken", "--workers", "0"], 1,
                     "measuring failed: ValueError: this transform always fails",
                     id="transform-raises",
                     # the chain cannot fuse, and FastImageFolder says so (issue 14)
                     marks=pytest.mark.filterwarnings("ignore:.*stopped fusion:RuntimeWarning")),
    ],
)
def test_errors_exit_with_a_message(tree, tmp_path, capsys, args, code, message):
    args = [a.format(tmp=tmp_path, tree=tree) for a in args]
    assert main(["tune", "--batch-size", "2", "--batches", "1", *args]) == code
    assert message in capsys.readouterr().err


def test_help_explains_the_rules(capsys):
    assert main(["tune", "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "prefetch_factor" in out and "ceil(D / S)" in out
