"""The generated ImageNet-like set (fastdecode/cli/datagen.py) at its edges:
sizes refused, an empty folder taken over, a concurrent run that finished
first (kept) or left something else (raised), and the pool over many
images with its progress on a terminal (write_image and the process pool
stood in for: the spreading and the shutdown are what is tested).
test_bench_decode.py generates real sets."""

from __future__ import annotations

import io
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fastdecode.cli import datagen


@pytest.mark.parametrize("n_images, n_classes", [(0, 1), (1, 0), (-3, 5)],
                         ids=["no-images", "no-classes", "negative"])
def test_sizes_below_one_are_refused(tmp_path, n_images, n_classes):
    with pytest.raises(ValueError, match=f"need n_images >= 1 and n_classes >= 1, got "
                                         f"{n_images}, {n_classes}"):
        datagen.generate_imagenet_like(tmp_path / "set", n_images=n_images, n_classes=n_classes)
    assert not (tmp_path / "set").exists()


def test_an_empty_folder_is_taken_over(tmp_path):
    root = tmp_path / "set"
    root.mkdir()
    assert datagen.generate_imagenet_like(root, n_images=2, n_classes=1, progress=False) == root
    assert json.loads((root / datagen.MARKER_NAME).read_text())["n_images"] == 2
    assert len([p for p in root.rglob("*") if p.is_file() and p.name != datagen.MARKER_NAME]) == 2


def _finishing_first(root, params):
    """_render_all, then another run's folder appears at ``root``."""
    real = datagen._render_all

    def render_all(specs, progress):
        real(specs, progress)
        root.mkdir()
        (root / "other.txt").write_text("x")
        (root / datagen.MARKER_NAME).write_text(json.dumps(params))
    return render_all


def test_a_concurrent_run_that_finished_first_is_kept(tmp_path, monkeypatch):
    root = tmp_path / "set"
    params = {"generator_version": datagen.GENERATOR_VERSION, "n_images": 2, "n_classes": 1,
              "seed": 0}
    monkeypatch.setattr(datagen, "_render_all", _finishing_first(root, params))
    assert datagen.generate_imagenet_like(root, n_images=2, n_classes=1, progress=False) == root
    assert (root / "other.txt").exists()  # theirs, left as it is
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]  # our temporary folder gone


def test_a_folder_appearing_with_other_parameters_is_an_error(tmp_path, monkeypatch):
    root = tmp_path / "set"
    params = {"generator_version": datagen.GENERATOR_VERSION, "n_images": 99, "n_classes": 1,
              "seed": 0}
    monkeypatch.setattr(datagen, "_render_all", _finishing_first(root, params))
    with pytest.raises(OSError):
        datagen.generate_imagenet_like(root, n_images=2, n_classes=1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


class FakePool(ThreadPoolExecutor):
    """The process pool, as threads (spawned processes would cost seconds)."""

    made: list = []

    def __init__(self, workers, mp_context=None):
        super().__init__(workers)
        self.workers, self.context, self.closed = workers, mp_context, None
        FakePool.made.append(self)

    def shutdown(self, wait=True, *, cancel_futures=False):
        self.closed = cancel_futures
        super().shutdown(wait, cancel_futures=cancel_futures)


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def pooled(monkeypatch):
    FakePool.made = []
    written = []
    lock = threading.Lock()

    def write_image(spec):
        with lock:
            written.append(spec.path)
    monkeypatch.setattr(datagen, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(datagen, "write_image", write_image)
    monkeypatch.setattr(datagen, "usable_cpus", lambda: 4)
    return written


def test_many_images_are_spread_over_a_pool_with_progress_on_a_terminal(tmp_path, pooled,
                                                                       monkeypatch):
    specs = datagen.plan_dataset(tmp_path, 120, 3, 0)
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    datagen._render_all(specs, progress=True)
    assert sorted(pooled) == sorted(s.path for s in specs)  # each once
    (pool,) = FakePool.made
    assert pool.workers == 2 and pool.context.get_start_method() == "spawn"
    assert pool.closed is True
    assert err.getvalue() == ("generating 120 ImageNet-like images with 2 process(es)\n"
                              "\r50/120\r100/120\r120/120\n")


def test_a_failing_image_shuts_the_pool_down(tmp_path, pooled, monkeypatch):
    def broken(spec):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(datagen, "write_image", broken)
    with pytest.raises(OSError, match="No space left on device"):
        datagen._render_all(datagen.plan_dataset(tmp_path, 100, 2, 0), progress=False)
    assert FakePool.made[0].closed is True


def test_progress_to_a_log_file_has_no_carriage_returns(tmp_path, pooled, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    datagen._render_all(datagen.plan_dataset(tmp_path, 10, 2, 0), progress=True)
    assert err.getvalue() == "generating 10 ImageNet-like images with 1 process(es)\n"
    assert FakePool.made == []  # one process below 50 images a worker
