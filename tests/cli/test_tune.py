"""`fastdecode tune` on a tiny generated ImageFolder: the JSON, the
recommendations computed from what it measured, and the exit codes.

Only relations between the reported numbers are checked, never speeds: the
machine is shared and noisy."""

from __future__ import annotations

import inspect
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
    "input_bound", "skipped_images", "unreadable", "load_average", "notes", "warnings",
    "io_wait_s_per_batch", "stable", "passes",
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
        assert row["images_per_s"] > 0
        assert row["batches"] == max(1, row["num_workers"]) + r["batches"]
        assert row["meets_step_time"] == (row["images_per_s"] >= r["target_images_per_s"])
    assert r["decode_s_per_batch"] <= r["decode_s_per_batch_max"]
    assert r["batch_bytes"] == 4 * 3 * 32 * 32 * 4  # float32 from ToTensor
    assert r["target_images_per_s"] == pytest.approx(4 / 0.5)
    assert r["needed_num_workers"] == math.ceil(r["decode_s_per_batch"] / 0.5)
    waited = r["io_wait_s_per_batch"] >= tune.IO_WAIT_SHARE * r["decode_s_per_batch"]
    cpu_workers = max(1, math.ceil((r["decode_s_per_batch"] - waited * r["io_wait_s_per_batch"])
                                   / 0.5))
    assert r["recommended_num_workers"] == min(cpu_workers, r["usable_cpus"])
    assert r["input_bound"] == (cpu_workers > r["usable_cpus"])
    assert r["passes"][-1]["batches"] == r["batches"] and len(r["passes"]) >= 2
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


# --------------------------------------------------------------------------
# passes and the wait on storage, from injected measurements (deterministic)


class Script:
    """Fake measurements: pass k's one-worker batch times and storage waits,
    and its loader rate per num_workers."""

    def __init__(self, rates: list[dict[int, float]], batch_s: float = 0.4,
                 wait_s: float = 0.0) -> None:
        self.rates, self.batch_s, self.wait_s = rates, batch_s, wait_s
        self.passes: list[int] = []  # batches asked of each pass

    def worker(self, ds, batch_size, batches, torch, seed=0):
        self.passes.append(batches)
        return [self.batch_s] * batches, [self.wait_s] * batches, batch_size * 3 * 32 * 32

    def loader(self, ds, workers, batch_size, batches, timeout, caught, torch):
        return self.rates[len(self.passes) - 1][workers], 0.01, max(1, workers) + batches


def scripted(monkeypatch, script: Script, usable: int = 2) -> None:
    monkeypatch.setattr(tune, "measure_worker", script.worker)
    monkeypatch.setattr(tune, "measure_loader", script.loader)
    monkeypatch.setattr(_system, "usable_cpus", lambda: usable)


AGREE = {1: 100.0, 2: 190.0}  # recommends 2
ONE = {1: 100.0, 2: 97.0}  # recommends 1 (2 is within 5 % of the best)


@pytest.mark.parametrize("per_pass, picks, batches, stable", [
    pytest.param([AGREE, AGREE], [2, 2], [2, 2], True, id="two-agreeing-passes"),
    pytest.param([AGREE, ONE, ONE], [2, 1, 1], [2, 2, 4], True, id="widened-until-stable"),
    pytest.param([AGREE, ONE, AGREE, ONE], [2, 1, 2, 1], [2, 2, 4, 8], False,
                 id="never-settles"),
])
def test_passes_repeat_then_widen_until_stable(tree, capsys, monkeypatch, per_pass, picks,
                                               batches, stable):
    script = Script(per_pass)
    scripted(monkeypatch, script)
    code, r = run_tune(capsys, "--data", tree, "--transform", "test_tune:SMALL",
                       "--workers", "1", "2")
    assert code == 0
    assert [p["recommended_num_workers"] for p in r["passes"]] == picks
    assert [p["batches"] for p in r["passes"]] == batches == script.passes
    assert r["stable"] is stable
    assert r["recommended_num_workers"] == picks[-1]
    note = next(n for n in r["notes"] if n.startswith("recommendation per pass"))
    assert ("NOT stable" in note) is not stable


def test_unstable_text_output_says_so(tree, capsys, monkeypatch):
    scripted(monkeypatch, Script([AGREE, ONE, AGREE, ONE]))
    assert main(["tune", "--data", str(tree), "--transform", "test_tune:SMALL",
                 "--batch-size", "4", "--batches", "2", "--workers", "1", "2"]) == 0
    assert "recommended: num_workers=1, prefetch_factor=2 (not stable" in capsys.readouterr().out


@pytest.mark.parametrize("wait_s, recommended, input_bound, noted", [
    pytest.param(0.3, 1, False, True, id="75%-waiting-sized-by-cpu"),
    pytest.param(0.02, 2, True, False, id="5%-waiting-is-noise"),
])
def test_io_wait_is_left_out_of_the_workers(tree, capsys, monkeypatch, wait_s, recommended,
                                            input_bound, noted):
    # 0.4 s per batch against a 0.15 s step: 3 workers by wall time; with 0.3 s
    # of it waiting on storage, ceil(0.1 / 0.15) = 1 by CPU time
    scripted(monkeypatch, Script([{1: 100.0, 2: 100.0}] * 2, batch_s=0.4, wait_s=wait_s))
    code, r = run_tune(capsys, "--data", tree, "--transform", "test_tune:SMALL",
                       "--workers", "1", "2", "--step-time", "0.15")
    assert code == 0
    assert r["io_wait_s_per_batch"] == wait_s
    assert r["needed_num_workers"] == 3
    assert (r["recommended_num_workers"], r["input_bound"]) == (recommended, input_bound)
    assert any("waited on storage" in n for n in r["notes"]) is noted


@pytest.mark.parametrize("latency_tree", [20], indirect=True, ids=["20ms"])
def test_the_wait_on_a_slow_mount_is_measured(latency_tree):
    import torch

    from fastdecode.datasets import FastImageFolder

    options = {"readahead": 0} if "readahead" in inspect.signature(
        FastImageFolder.__init__).parameters else {}  # every open in the decoding thread
    ds = FastImageFolder(latency_tree.mount_path, small_chain(), **options)
    before = latency_tree.stats_reader()["opens"]
    times, waits, _ = tune.measure_worker(ds, 4, 2, torch)
    assert latency_tree.stats_reader()["opens"] - before == 3 * 4  # warm-up + 2 batches
    if tune.thread_schedstat_s() is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    assert all(0 < w <= t for w, t in zip(waits, times))
