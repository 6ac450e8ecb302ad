"""fastdecode.save_state / load_state: a training state written atomically
(issue 30, "crash-safe"): a process SIGKILLed at any point of a save leaves
the previous state whole and loadable under the final name, never a part of
one; what was saved loads with ``weights_only=True``."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import fastdecode as fd

from helpers.kill_save import POINTS, STEP

TESTS = Path(__file__).resolve().parents[1]


def leftovers(directory: Path, name: str) -> list[str]:
    """Files in ``directory`` besides ``name``."""
    return sorted(p.name for p in directory.iterdir() if p.name != name)


@pytest.mark.parametrize("point", POINTS)
def test_a_save_killed_at_any_point_leaves_a_whole_state(tmp_path, point):
    """Killed before the rename: the previous state, whole (the new one's
    partial temporary file, hidden beside it, is the only other file).
    Killed after it: the new state, whole."""
    path = tmp_path / "ckpt.pt"
    fd.save_state({"step": 1, "weights": torch.zeros(8)}, path)
    marker = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])}
    child = subprocess.Popen([sys.executable, "-W", "error", "-m", "helpers.kill_save",
                              str(path), point, str(marker)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, f"the save ended before its stop: {child.stderr.read()}"
            assert time.monotonic() < deadline, "the save never reached its stop"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=60)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    marker.unlink()
    state = fd.load_state(path)
    if point == "after-rename":
        assert state["step"] == STEP and torch.equal(state["weights"],
                                                     torch.full((4 << 20,), 7.0))
        assert leftovers(tmp_path, path.name) == []
    else:
        assert state["step"] == 1 and torch.equal(state["weights"], torch.zeros(8))
        tmp = leftovers(tmp_path, path.name)
        assert len(tmp) == 1 and tmp[0].startswith(".ckpt.pt.") and tmp[0].endswith(".tmp")
        if point == "mid-write":
            assert (tmp_path / tmp[0]).stat().st_size == 1 << 20  # a part of the new state
    fd.save_state({"step": 3}, path)  # a later save goes through
    assert fd.load_state(path) == {"step": 3}


def test_saved_state_loads_back_with_weights_only(tmp_path):
    state = {"loader": {"epoch": 2, "random": [b"\x01\x02"], "shape": {"batch_size": 4},
                        "sampler_state": None, "base_seed": 123},
             "rng": torch.get_rng_state(), "step": 7}
    path = tmp_path / "ckpt.pt"
    fd.save_state(state, str(path))  # a str or a path
    got = fd.load_state(path)
    assert got["loader"] == state["loader"] and got["step"] == 7
    assert torch.equal(got["rng"], state["rng"])
    assert leftovers(tmp_path, path.name) == []


class _Arbitrary:
    """An object weights_only loading refuses."""


def test_load_state_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "ckpt.pt"
    fd.save_state({"obj": _Arbitrary()}, path)
    with pytest.raises(pickle.UnpicklingError):
        fd.load_state(path)


def test_a_failed_save_leaves_the_previous_state_and_no_temporary_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    fd.save_state({"step": 1}, path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        fd.save_state({"step": 2, "fn": lambda: None}, path)  # a lambda cannot be pickled
    assert fd.load_state(path) == {"step": 1}
    assert leftovers(tmp_path, path.name) == []


def test_a_missing_state_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        fd.load_state(tmp_path / "none.pt")


def test_the_saved_file_has_a_new_files_mode(tmp_path):
    """Created as any file is (the umask applies), not the 0600 of a mkstemp file."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    fd.save_state({"step": 1}, tmp_path / "ckpt.pt")
    assert (tmp_path / "ckpt.pt").stat().st_mode == plain.stat().st_mode
