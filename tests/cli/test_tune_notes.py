"""`fastdecode tune`'s notes and command paths without measuring
(fastdecode/cli/tune.py): the busy-machine and /dev/shm notes, a
recommended count the loader measured under the target, skipped images and
loader warnings in the text, the generated set without --data, no
torchvision, the thread's schedstat. test_tune.py measures for real."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from fastdecode import _system  # noqa: E402
from fastdecode.cli import datagen, tune  # noqa: E402
from fastdecode.cli.__main__ import main  # noqa: E402


def _result(**changes) -> tune.Result:
    fields = dict(data="/data", images=100, classes=2, transform="eval", batch_size=32,
                  batches=4, usable_cpus=2, decode_s_per_batch=0.4, decode_s_per_batch_max=0.5,
                  io_wait_s_per_batch=0.0, worker_images_per_s=80.0, batch_bytes=32 * 3 * 224**2,
                  sweep=[tune.Row(1, 80.0, 0.5, 4, False), tune.Row(2, 150.0, 0.6, 4, False)],
                  max_images_per_s=150.0, max_at_num_workers=2, recommended_num_workers=2,
                  recommended_prefetch_factor=2)
    fields.update(changes)
    return tune.Result(**fields)


@pytest.fixture
def roomy_shm(monkeypatch):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda: 1 << 40)


def test_a_busy_machine_is_said(roomy_shm, monkeypatch):
    monkeypatch.setattr(tune.os, "cpu_count", lambda: 4)
    r = _result(load_average=3.5)
    tune._recommend(r)
    assert r.notes[0] == ("the machine was busy (load average 3.5 on 4 CPUs when tune started): "
                          "the rates are lower than on an idle machine")


@pytest.mark.parametrize("load", [None, 1.0], ids=["unknown", "idle"])
def test_an_idle_or_unknown_load_is_not_said(roomy_shm, monkeypatch, load):
    monkeypatch.setattr(tune.os, "cpu_count", lambda: 4)
    r = _result(load_average=load)
    tune._recommend(r)
    assert not any("busy" in note for note in r.notes)


def test_a_short_dev_shm_is_said(monkeypatch):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda: 10 << 20)
    r = _result()
    tune._recommend(r)
    need = 2 * 2 * r.batch_bytes
    assert r.notes[-1] == (
        f"/dev/shm has 10 MiB free but 2 workers x prefetch_factor=2 x 5 MiB batches need "
        f"{need / 2**20:,.0f} MiB: enlarge it (docker run --shm-size=1g (Kubernetes: an emptyDir "
        "with medium: Memory on /dev/shm); see `fastdecode doctor`) or lower the batch size")


def test_a_recommendation_measured_under_the_target_is_said(roomy_shm):
    r = _result(step_time_s=0.2, target_images_per_s=160.0, input_bound=False,
                sweep=[tune.Row(1, 80.0, 0.5, 4, False, False),
                       tune.Row(2, 150.0, 0.6, 4, False, False)])
    tune._recommend(r)
    assert r.recommended_num_workers == 2
    assert r.notes[-1] == ("but the loader measured 150 images/s at num_workers=2, under the "
                           "target: the workers compete for memory bandwidth or the main "
                           "process; try one more worker")


def test_the_text_lists_skipped_images_and_loader_warnings(capsys):
    tune.print_text(_result(skipped_images=4, unreadable=["a: Empty input file", "b: x", "c: y",
                                                          "d: z"],
                            warnings=["a file could not be read"], notes=["a note"]))
    out = capsys.readouterr().out
    assert ("- a note\n- 4 unreadable image(s) of the 100 in the tree, each replaced by another "
            "while measuring (on_error='skip'): a: Empty input file; b: x; c: y; ...\n"
            "- loader warning: a file could not be read\n\nrecommended: num_workers=2, "
            "prefetch_factor=2\n") in out


def test_without_data_the_generated_set_is_measured(tmp_path, monkeypatch, capsys):
    generated = tmp_path / "imagenet-like"
    monkeypatch.setattr(datagen, "generate_imagenet_like", lambda: generated)
    seen = []

    def fake_tune(data, *args):
        seen.append(Path(data))
        return _result(data=str(data))
    monkeypatch.setattr(tune, "tune", fake_tune)
    assert main(["tune", "--json"]) == 0
    captured = capsys.readouterr()
    assert seen == [generated]
    assert f"no --data: using the generated ImageNet-like set in {generated}" in captured.err
    assert json.loads(captured.out)["data"] == str(generated)


def test_without_torchvision_tune_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    assert main(["tune"]) == 2
    assert "fastdecode tune: error: tune needs torch and torchvision (" in capsys.readouterr().err


def test_the_threads_schedstat_is_read():
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("this kernel keeps no schedstat")
    seconds = tune.thread_schedstat_s()
    assert seconds is not None and seconds > 0


@pytest.mark.parametrize("content", [OSError(2, "No such file"), "", "12\n"],
                         ids=["no-file", "empty", "one-field"])
def test_no_schedstat_is_none(monkeypatch, content):
    def fake_open(path, *args, **kwargs):
        assert path == "/proc/thread-self/schedstat"
        if isinstance(content, Exception):
            raise content
        return io.StringIO(content)
    monkeypatch.setattr(tune, "open", fake_open, raising=False)
    assert tune.thread_schedstat_s() is None
