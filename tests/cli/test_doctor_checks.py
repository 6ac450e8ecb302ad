"""The doctor's checks on given facts (fastdecode/cli/doctor.py): the
verdicts test_doctor.py's real machine does not reach (num_workers=0,
/dev/shm unreadable, thread variables above 1, OpenCV installed,
libjpeg-turbo without SIMD or with it turned off) and the doctor without
torch."""

from __future__ import annotations

import sys

import pytest

from fastdecode import _system
from fastdecode.cli import doctor


def _facts(**changes):
    facts = {"usable_cpus": 4, "affinity_cpus": 4, "cpu_count": 4, "cgroup_cpu_quota": None,
             "time_slice_ns": None, "thread_env": {}, "thread_runtimes": [],
             "opencv": "not installed", "libjpeg_turbo": "3.0.2", "simd": True,
             "jsimd_forcenone": None}
    facts.update(changes)
    return facts


def test_no_workers_decode_between_steps():
    check = doctor.check_num_workers(_facts(), doctor.JobOptions(num_workers=0), 3)
    assert (check.status, check.finding) == (
        "warn", "num_workers=0 decodes in the training process, between steps")
    assert check.recommendation == ("use num_workers=3: the 4 usable CPU(s) minus one for the "
                                    "main process, or FastLoader(threads=N)")


def test_an_unreadable_dev_shm_is_a_warning(monkeypatch):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda: None)
    facts = _facts()
    check = doctor.check_shm(facts, doctor.JobOptions(batch_size=8, image_size=32), workers=2)
    assert check.status == "warn"
    assert check.finding == ("/dev/shm cannot be read; workers need 2 worker(s) x "
                             "prefetch_factor=2 x 0 MiB per batch (8x3x32x32 uint8) = 0 MiB")
    assert check.recommendation.startswith("mount a tmpfs on /dev/shm of at least ")
    assert facts["shm_needed_bytes"] == 2 * 2 * 8 * 3 * 32 * 32


@pytest.mark.parametrize("workers, status", [(4, "warn"), (1, "ok")],
                         ids=["several-workers", "one-worker"])
def test_thread_variables_above_one_matter_with_several_workers(workers, status):
    facts = _facts(thread_env={"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "1"})
    check = doctor.check_threads(facts, workers)
    assert check.status == status
    assert check.finding == ("thread variables: OMP_NUM_THREADS=8, MKL_NUM_THREADS=1; "
                             "runtimes loaded with torch: none")
    if status == "warn":
        assert check.recommendation.startswith("OMP_NUM_THREADS > 1 gives each of the 4 workers "
                                               "its own pool")


def test_opencv_installed_is_said_with_what_to_do():
    check = doctor.check_opencv(_facts(opencv="installed (4.9.0)"))
    assert check.status == "ok"
    assert check.finding.startswith("OpenCV is installed (4.9.0); it starts a thread pool")
    assert "cv2.setNumThreads(0)" in check.recommendation


@pytest.mark.parametrize("simd, forced, status, says", [
    (False, None, "warn", "libjpeg-turbo 3.0.2, SIMD absent: decoding runs 2-4x slower"),
    (True, "1", "warn", "libjpeg-turbo 3.0.2, SIMD built in, but JSIMD_FORCENONE=1 turns it off"),
    (True, "0", "ok", "libjpeg-turbo 3.0.2, SIMD built in"),
    (True, "", "ok", "libjpeg-turbo 3.0.2, SIMD built in"),
], ids=["no-simd", "forced-off", "forcenone-0", "forcenone-empty"])
def test_libjpeg_turbo_simd(simd, forced, status, says):
    check = doctor.check_libjpeg(_facts(simd=simd, jsimd_forcenone=forced))
    assert (check.status, check.finding) == (status, says)


def test_without_torch_the_doctor_still_reports(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert doctor._import_torch() is None
    report = doctor.diagnose(doctor.JobOptions(num_workers=2, batch_size=4, image_size=16))
    by_name = {c.name: c for c in report.checks}
    assert (by_name["torch_cuda"].status, by_name["torch_cuda"].finding) == (
        "warn", "torch is not installed")
    assert report.facts["cuda_available"] is False and report.facts["cuda_devices"] == 0
