"""`fastdecode convert` under faults: SIGKILL at random points then a rerun,
a destination that fills up, a read-only destination, a worker that dies.

Every run is a subprocess (or an in-process call) bounded in time; the
tmpfs mounts are made and removed by the fixtures, and skipped where the
test cannot mount (no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastdecode.cli import convert
from fastdecode.conversion import output

from helpers.trees import make_tree

CLASSES = ("ant", "bee", "cat", "dog")
PER_CLASS = 6
IMAGES = len(CLASSES) * PER_CLASS
KILL_TRIALS = 20  # issue 17's 20 points; one in five with two workers (spawning costs seconds)
TWO_WORKERS_EVERY = 5
# make test: the first 5 points and every two-worker one (the slow tier, all 20)
DEFAULT_TRIALS = 5


def workers_of(trial: int) -> int:
    """One worker, or two for one trial in TWO_WORKERS_EVERY."""
    return 2 if trial % TWO_WORKERS_EVERY == TWO_WORKERS_EVERY - 1 else 1


# Bounds generous for a loaded 2-core CI machine running everything else too:
RUN_TIMEOUT = 300  # seconds, for one conversion of the small tree
GONE_TIMEOUT = 120  # seconds for every process of a killed run to end (a worker still
# starting up when its parent dies ends after its imports: many seconds under load)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under root, by relative path."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def partials(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(output.PARTIAL_SUFFIX)]


def command(source: Path, destination: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "fastdecode", "convert", str(source), str(destination),
            "--to", "bmp", "--workers", str(workers), "--time-sample", "0"]


def run_to_completion(source: Path, destination: Path, workers: int = 1) -> None:
    result = subprocess.run(command(source, destination, workers), capture_output=True,
                            text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, (f"the rerun exited {result.returncode}:\n"
                                    f"{result.stdout[-1000:]}\n{result.stderr[-2000:]}")


def differences(actual: dict[str, bytes | None], expected: dict[str, bytes | None]) -> str:
    """What differs between two snapshots, for an assertion message."""
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    changed = sorted(p for p in set(actual) & set(expected) if actual[p] != expected[p])
    return f"missing {missing}, extra {extra}, different bytes {changed}"


def survivors(group: int) -> str:
    """The processes of a group that are still alive, as ps shows them."""
    ps = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "-g", str(group)],
                        capture_output=True, text=True, timeout=30)
    return ps.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = make_tree(tmp_path_factory.mktemp("faults") / "src", PER_CLASS, CLASSES)
    (root / "empty").mkdir()  # a class with no image: mirrored, reported empty
    return root


@pytest.fixture(scope="module")
def expected(source, tmp_path_factory) -> dict[str, bytes | None]:
    """The tree an uninterrupted run writes."""
    destination = tmp_path_factory.mktemp("baseline") / "dst"
    run_to_completion(source, destination)
    tree = snapshot(destination)
    assert sum(v is not None for v in tree.values()) == IMAGES and "empty" in tree
    return tree


def wait_for_outputs(destination: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        if count == 0 or sum(1 for _ in destination.rglob("*.bmp")) >= count:
            return
        time.sleep(0.001)


def wait_until_gone(group: int) -> str:
    """"" when every process of the group ended within GONE_TIMEOUT, else
    what was still alive (then killed)."""
    deadline = time.monotonic() + GONE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return ""
        time.sleep(0.02)
    alive = survivors(group)
    os.killpg(group, signal.SIGKILL)
    return alive


@pytest.mark.parametrize("trial", [
    pytest.param(t, id=f"kill-{t:02d}",
                 marks=pytest.mark.slow if t >= DEFAULT_TRIALS and workers_of(t) == 1 else ())
    for t in range(KILL_TRIALS)])
def test_sigkill_then_rerun_gives_the_uninterrupted_tree(source, expected, tmp_path, trial):
    """SIGKILL of the convert process at a seeded random point (after k of the
    outputs exist, plus up to 20 ms; one or two workers), then a rerun."""
    rng = random.Random(trial)
    workers = workers_of(trial)
    destination = tmp_path / "dst"
    process = subprocess.Popen(command(source, destination, workers), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_outputs(destination, rng.randrange(IMAGES), process)
        time.sleep(rng.uniform(0, 0.02))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=RUN_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    # the workers follow their parent (SIGTERM on its death): none goes on writing
    alive = wait_until_gone(process.pid)
    assert not alive, f"{GONE_TIMEOUT} s after the kill these still ran:\n{alive}"
    run_to_completion(source, destination, workers)
    tree = snapshot(destination)
    assert tree == expected, differences(tree, expected)
    assert partials(destination) == []


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs mounted at tmp_path/mnt; yields a function (options) that remounts it."""
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")

    def remount(options: str) -> Path:
        subprocess.run(["mount", "-o", f"remount,{options}", str(mount_point)], check=True,
                       capture_output=True, timeout=30)
        return mount_point

    try:
        yield remount
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


@pytest.mark.parametrize("workers", [pytest.param(1, id="1-worker"),
                                     pytest.param(2, id="2-workers")])
def test_full_destination_names_the_file_and_a_rerun_completes(source, expected, tmpfs,
                                                               workers):
    destination = tmpfs("size=512k") / "dst"  # about a third of the BMPs fit
    with pytest.raises(convert.ConvertError,
                       match=rf"cannot write {destination}/\S+\.bmp: No space left on device"):
        convert.convert_tree(source, destination, to="bmp", workers=workers, time_sample=0)
    assert partials(destination) == []
    written = [p for p in destination.rglob("*.bmp")]
    assert written and all(output.is_complete(p, "bmp") for p in written)
    tmpfs("size=16m")  # space freed
    summary = convert.convert_tree(source, destination, to="bmp", workers=workers,
                                   time_sample=0)
    assert summary.skipped == len(written) and summary.converted == IMAGES - len(written)
    assert snapshot(destination) == expected


def test_full_destination_exits_1_with_the_error(source, tmpfs, capsys):
    destination = tmpfs("size=512k") / "dst"
    code = convert.run(convert_args(source, destination))
    err = capsys.readouterr().err
    assert code == 1 and "No space left on device" in err and str(destination) in err


def convert_args(source: Path, destination: Path):
    from fastdecode.cli.__main__ import build_parser

    return build_parser("convert").parse_args(
        ["convert", str(source), str(destination), "--to", "bmp", "--workers", "1",
         "--time-sample", "0"])


@pytest.mark.parametrize("where", [pytest.param("root", id="destination-itself"),
                                   pytest.param("parent", id="inside-a-read-only-folder")])
def test_read_only_destination_fails_before_any_work(source, tmpfs, monkeypatch, where):
    mount = tmpfs("size=16m")
    destination = mount if where == "root" else mount / "dst"
    tmpfs("ro")
    read = []
    monkeypatch.setattr(convert, "plan_conversion", lambda *a: read.append(a))
    with pytest.raises(convert.ConvertError,
                       match=rf"destination {destination} is not writable \(Read-only file "
                             r"system\): nothing was converted"):
        convert.convert_tree(source, destination, to="bmp", workers=1, time_sample=0)
    assert read == []  # stopped before planning: no source was read


def test_read_only_destination_exits_1(source, tmpfs, capsys):
    mount = tmpfs("size=16m")
    tmpfs("ro")
    code = convert.run(convert_args(source, mount / "dst"))
    assert code == 1 and "is not writable (Read-only file system)" in capsys.readouterr().err


def pool_workers(pid: int) -> list[int]:
    """The spawned pool workers among the children of ``pid`` (not the
    multiprocessing resource tracker)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    workers = []
    for child in map(int, text.split()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            workers.append(child)
    return workers


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_a_killed_worker_is_an_error_not_a_hang(source, expected, tmp_path):
    """A pool worker killed while work is left: the run exits 1 naming the
    dead worker, and a rerun completes the tree. The kill lands at a known
    point: both workers started and the parent stopped (SIGSTOP), so that it
    queues no more work: the workers can finish at most the few jobs already
    queued (the executor queues workers + 1) of the 24, one job each."""
    destination = tmp_path / "dst"
    process = subprocess.Popen(command(source, destination, 2), start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and process.poll() is None:
            workers = pool_workers(process.pid)
            time.sleep(0.005)
        assert len(workers) == 2, f"the run exited {process.poll()} before its workers started"
        process.send_signal(signal.SIGSTOP)
        os.kill(workers[0], signal.SIGKILL)
        written = sum(1 for _ in destination.rglob("*.bmp"))
        process.send_signal(signal.SIGCONT)
        _, err = process.communicate(timeout=RUN_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    alive = wait_until_gone(process.pid)
    assert not alive, f"{GONE_TIMEOUT} s after the run these still ran:\n{alive}"
    assert written < IMAGES
    assert process.returncode == 1, err
    assert re.search(r"error: a worker process died \(.*\); every finished file is kept: run "
                     "the same command again to resume", err), err
    run_to_completion(source, destination, 2)
    tree = snapshot(destination)
    assert tree == expected, differences(tree, expected)
    assert partials(destination) == []
