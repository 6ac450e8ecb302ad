"""`fastdecode doctor`: each check's verdict from monkeypatched facts, the
JSON and the exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastdecode
from fastdecode import _system
from fastdecode.cli import doctor
from fastdecode.cli.__main__ import main

PACKAGE_PARENT = Path(fastdecode.__file__).resolve().parent.parent
GiB = 2**30


@pytest.fixture(autouse=True)
def healthy(tmp_path, monkeypatch):
    """A machine with nothing wrong: plenty of /dev/shm, no cgroup quota (an
    empty cgroup folder), thread variables set, CUDA not initialized here
    (the CUDA tests may have initialized it in this process)."""
    monkeypatch.setattr(_system, "shm_free_bytes", lambda path="/dev/shm": 64 * GiB)
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    monkeypatch.setattr(_system, "CGROUP_ROOT", cgroup)
    for var in _system.THREAD_ENV_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.delenv("JSIMD_FORCENONE", raising=False)
    torch = doctor._import_torch()
    if torch is not None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return cgroup


def run_doctor(capsys, *args: str) -> tuple[int, dict]:
    code = main(["doctor", "--json", "--num-workers", "1", *args])
    return code, json.loads(capsys.readouterr().out)


def by_name(report: dict) -> dict[str, dict]:
    return {check["name"]: check for check in report["checks"]}


def test_healthy_machine_exits_0_with_every_check(capsys):
    code, report = run_doctor(capsys)
    assert code == 0 and report["exit_code"] == 0
    assert report["status"] in ("ok", "warn")
    assert set(by_name(report)) == {"cpus", "num_workers", "shm", "threads", "opencv",
                                    "start_method", "libjpeg_turbo", "torch_cuda"}
    for check in report["checks"]:
        assert set(check) == {"name", "status", "finding", "recommendation"}
        assert check["status"] in ("ok", "warn")
        assert check["finding"] and check["recommendation"]
    usable = report["facts"]["usable_cpus"]
    assert report["recommended_num_workers"] == (usable - 1 if usable > 2 else usable)
    assert report["facts"]["libjpeg_turbo"] == fastdecode.info()["libjpeg_turbo"]


def test_small_dev_shm_fails(capsys, monkeypatch):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda path="/dev/shm": 64 * 2**20)
    # 1 worker x 2 batches x 256x3x224x224 uint8 = 73.5 MiB > 64 MiB
    code, report = run_doctor(capsys)
    assert code == 1 and report["status"] == "fail"
    shm = by_name(report)["shm"]
    assert shm["status"] == "fail"
    assert "--shm-size=1g" in shm["recommendation"]
    assert report["facts"]["shm_needed_bytes"] == 2 * 256 * 3 * 224 * 224


@pytest.mark.parametrize(
    "args, status",
    [
        pytest.param(["--batch-size", "8"], "ok", id="fits"),
        pytest.param(["--batch-size", "100"], "warn", id="under-2x-headroom"),
        pytest.param(["--batch-size", "100", "--float"], "fail", id="float32-batches"),
    ],
)
def test_shm_against_batch_bytes(capsys, monkeypatch, args, status):
    # 100x3x224x224 uint8 x 2 batches = 28.7 MiB: under 2x of 40 MiB; x4 as float32
    monkeypatch.setattr(_system, "shm_free_bytes", lambda path="/dev/shm": 40 * 2**20)
    code, report = run_doctor(capsys, *args)
    assert by_name(report)["shm"]["status"] == status
    assert code == (1 if status == "fail" else 0)


@pytest.mark.parametrize(
    "num_workers, status",
    [
        pytest.param("1", "ok", id="within-quota"),
        pytest.param("2", "warn", id="above-quota"),
        pytest.param("3", "fail", id="above-2x-quota"),
    ],
)
def test_cgroup_quota_limits_workers(capsys, healthy, num_workers, status):
    (healthy / "cpu.max").write_text("50000 100000\n")  # half a CPU: one usable
    code, report = run_doctor(capsys, "--num-workers", num_workers)
    assert report["facts"]["cgroup_cpu_quota"] == 0.5
    assert report["facts"]["usable_cpus"] == 1
    assert report["recommended_num_workers"] == 1
    assert by_name(report)["num_workers"]["status"] == status
    assert code == (1 if status == "fail" else 0)


@pytest.mark.parametrize("slice_ns, says", [
    pytest.param(1_400_000, r"workers take 20 ms turns \(this process's slice: 1\.4 ms\)",
                 id="kernel-with-slices"),
    pytest.param(None, r"reports no scheduler time slice \(Linux < 6\.12\)", id="older-kernel"),
])
def test_oversubscribed_workers_say_how_they_take_turns(capsys, monkeypatch, slice_ns, says):
    monkeypatch.setattr(_system, "time_slice_ns", lambda: slice_ns)
    monkeypatch.setattr(_system, "cpu_budget", lambda root: _system.CpuBudget(2, 2, None, 2))
    code, report = run_doctor(capsys, "--num-workers", "3")
    check = by_name(report)["num_workers"]
    assert check["status"] == "warn"
    assert re.search(says, check["finding"])  # the slice's figure, as doctor words it


def test_unset_thread_variables_with_openmp_loaded_warn(capsys, monkeypatch):
    for var in _system.THREAD_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(_system, "loaded_thread_runtimes", lambda: ["libgomp.so.1"])
    code, report = run_doctor(capsys)
    threads = by_name(report)["threads"]
    assert code == 0 and threads["status"] == "warn"
    assert "worker_init_fn" in threads["recommendation"]


def test_two_openmp_runtimes_warn(capsys, monkeypatch):
    monkeypatch.setattr(_system, "loaded_thread_runtimes",
                        lambda: ["libgomp.so.1", "libiomp5.so"])
    code, report = run_doctor(capsys)
    assert code == 0 and by_name(report)["threads"]["status"] == "warn"


def test_fork_with_cuda_initialized_warns(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(doctor, "start_method", lambda: "fork")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    code, report = run_doctor(capsys)
    check = by_name(report)["start_method"]
    assert check["status"] == "warn"
    assert "forkserver" in check["recommendation"]


def test_forkserver_with_cuda_initialized_is_fine(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(doctor, "start_method", lambda: "forkserver")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    _, report = run_doctor(capsys)
    assert by_name(report)["start_method"]["status"] == "ok"


def test_without_torch_the_other_checks_still_run(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "_import_torch", lambda: None)
    code, report = run_doctor(capsys)
    check = by_name(report)["torch_cuda"]
    assert code == 0
    assert (check["status"], check["finding"]) == ("warn", "torch is not installed")
    assert report["facts"]["cuda_available"] is False


def fake_torch(pinned_error: str | None):
    """A torch with one CUDA device whose pinned allocation may fail: the
    CUDA branch without a GPU."""
    from types import SimpleNamespace

    def empty(*shape, dtype=None, pin_memory=False):
        if pin_memory and pinned_error:
            raise RuntimeError(pinned_error)
        return bytearray(1)

    cuda = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False,
                           device_count=lambda: 1)
    return SimpleNamespace(__version__="9.9", cuda=cuda, empty=empty, uint8="uint8")


@pytest.mark.parametrize(
    "pinned_error, status, code",
    [
        pytest.param(None, "ok", 0, id="pinned-ok"),
        pytest.param("CUDA error: out of memory\nmore", "fail", 1, id="pinned-fails"),
    ],
)
def test_pinned_memory_probe(capsys, monkeypatch, pinned_error, status, code):
    monkeypatch.setattr(doctor, "_import_torch", lambda: fake_torch(pinned_error))
    got, report = run_doctor(capsys)
    check = by_name(report)["torch_cuda"]
    assert (got, check["status"]) == (code, status)
    expected = "ok" if pinned_error is None else "failed (CUDA error: out of memory)"
    assert report["facts"]["pinned_memory"] == expected


def test_start_method_does_not_fix_the_context():
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    assert doctor.start_method() in multiprocessing.get_all_start_methods()
    assert multiprocessing.get_start_method(allow_none=True) == before


@pytest.mark.parametrize(
    "usable, expected",
    [pytest.param(1, 1, id="one"), pytest.param(2, 2, id="two"), pytest.param(3, 2, id="three"),
     pytest.param(16, 15, id="sixteen")],
)
def test_recommended_num_workers_leaves_one_cpu_above_two(usable, expected):
    assert doctor.recommended_num_workers(usable) == expected


def test_text_output_states_the_failure(capsys, monkeypatch):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda path="/dev/shm": 0)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] shm:" in out and "-> enlarge it" in out
    assert "recommended num_workers:" in out and "training will stall" in out


@pytest.mark.parametrize(
    "args, code, text",
    [
        pytest.param(["doctor", "--help"], 0, "examples:", id="help"),
        pytest.param(["doctor", "--batch-size", "0"], 2, "must be >= 1", id="bad-batch-size"),
        pytest.param(["doctor", "--num-workers", "-1"], 2, "must be >= 0", id="bad-workers"),
    ],
)
def test_arguments(capsys, args, code, text):
    assert main(args) == code
    captured = capsys.readouterr()
    assert text in captured.out + captured.err


def test_python_m_fastdecode_doctor_json():
    proc = subprocess.run([sys.executable, "-m", "fastdecode", "doctor", "--json"],
                          capture_output=True, text=True, cwd=PACKAGE_PARENT, timeout=120)
    report = json.loads(proc.stdout)
    # the real machine: whatever it finds, the exit status must agree with it
    assert proc.returncode == report["exit_code"] == (1 if report["status"] == "fail" else 0)
    assert len(report["checks"]) == 8
