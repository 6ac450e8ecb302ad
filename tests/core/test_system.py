"""Machine facts (fastdecode/_system.py) where the machine does not say or
says little: no affinity call, a cgroup quota under one CPU, /dev/shm
unreadable and each /dev/shm verdict, /proc/self/maps unreadable or listing
pools, the pools pinned (threadpoolctl, OpenCV, torch, the environment) and
put back, and the scheduler calls failing (no C library, a refused
sched_getattr or sched_setattr). test_time_slice.py runs the real calls."""

from __future__ import annotations

import ctypes
import io
import os
import sys
import types

import pytest

from fastdecode import _system

# -- CPUs ------------------------------------------------------------------------


@pytest.mark.parametrize("quota, usable", [(None, 8), ("150000 100000", 1), ("50000 100000", 1),
                                           ("400000 100000", 4)],
                         ids=["no-quota", "1.5-cpus", "half-a-cpu", "4-cpus"])
def test_without_an_affinity_call_the_cpu_count_is_the_affinity(tmp_path, monkeypatch,
                                                                quota, usable):
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    if quota is not None:
        (tmp_path / "cpu.max").write_text(quota + "\n")
    budget = _system.cpu_budget(tmp_path)
    assert budget.cpu_count == budget.affinity == 8 and budget.usable == usable
    assert budget.cgroup_quota == (None if quota is None else
                                   int(quota.split()[0]) / int(quota.split()[1]))


def test_an_unknown_cpu_count_is_one(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _system.cpu_budget(tmp_path) == _system.CpuBudget(1, 1, None, 1)


# -- /dev/shm ------------------------------------------------------------------------

def test_an_unreadable_shm_has_no_free_size(tmp_path):
    assert _system.shm_free_bytes(str(tmp_path / "no-such-mount")) is None
    assert _system.shm_free_bytes(str(tmp_path)) > 0


GiB = 1 << 30


@pytest.mark.parametrize("free, status", [(None, "unknown"), (GiB, "short"), (3 * GiB, "tight"),
                                          (4 * GiB, "ok")],
                         ids=["unknown", "short", "tight", "ok"])
def test_the_shm_verdict(monkeypatch, free, status):
    monkeypatch.setattr(_system, "shm_free_bytes", lambda: free)
    budget = _system.shm_budget(num_workers=4, prefetch_factor=2, batch_bytes=GiB // 4)  # 2 GiB
    assert budget == _system.ShmBudget(
        2 * GiB, free, status,
        "docker run --shm-size=4g (Kubernetes: an emptyDir with medium: Memory on /dev/shm)")


# -- thread pools --------------------------------------------------------------------

MAPS = """\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 1 /usr/bin/python3.11
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0
7f0000002000-7f0000003000 r-xp 00000000 08:01 3 /opt/venv/lib/libopenblas64_p-r0.3.so
7f0000003000-7f0000004000 r--p 00000000 08:01 3 /opt/venv/lib/libopenblas64_p-r0.3.so
7f0000004000-7f0000005000 r-xp 00000000 08:01 4 /usr/lib/libjpeg.so.8
7f0000005000-7f0000006000 rw-p 00000000 00:00 0
"""


def _maps(text):
    def fake_open(path, *args, **kwargs):
        assert path == "/proc/self/maps"
        if isinstance(text, Exception):
            raise text
        return io.StringIO(text)
    return fake_open


@pytest.fixture
def no_cv2(monkeypatch):
    monkeypatch.delitem(sys.modules, "cv2", raising=False)


def test_the_pools_mapped_in_are_named_once(monkeypatch, no_cv2):
    monkeypatch.setattr(_system, "open", _maps(MAPS), raising=False)
    assert _system.loaded_thread_runtimes() == ["libgomp.so.1.0.0", "libopenblas64_p-r0.3.so"]


def test_unreadable_maps_name_only_the_python_modules(monkeypatch):
    monkeypatch.setattr(_system, "open", _maps(PermissionError(13, "Permission denied")),
                        raising=False)
    monkeypatch.setitem(sys.modules, "cv2", types.ModuleType("cv2"))
    assert _system.loaded_thread_runtimes() == ["cv2 (python module)"]


class FakeCv2(types.ModuleType):
    def __init__(self, threads):
        super().__init__("cv2")
        self.threads, self.calls = threads, []

    def getNumThreads(self):  # noqa: N802 - OpenCV's names
        return self.threads

    def setNumThreads(self, n):  # noqa: N802
        self.calls.append(n)
        self.threads = n


class FakeLimits:
    """threadpoolctl.threadpool_limits: records the limit and its undoing."""

    log: list = []

    def __init__(self, limits):
        self.log.append(("limit", limits))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append(("restore",))
        return False


@pytest.fixture
def pools(monkeypatch):
    """OpenCV and threadpoolctl stand-ins; torch out of sys.modules (not
    imported: a process without torch); the thread variables set or not."""
    cv2 = FakeCv2(threads=6)
    monkeypatch.setitem(sys.modules, "cv2", cv2)
    FakeLimits.log = []
    monkeypatch.setitem(sys.modules, "threadpoolctl",
                        types.SimpleNamespace(threadpool_limits=FakeLimits))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    for var in _system.THREAD_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    return cv2


def test_one_thread_per_pool_pins_every_pool_and_puts_each_back(pools):
    with _system.one_thread_per_pool():
        assert {var: os.environ.get(var) for var in _system.THREAD_ENV_VARS} == \
            dict.fromkeys(_system.THREAD_ENV_VARS, "1")
        assert pools.threads == 0  # OpenCV: 0 is one thread, its own
        assert FakeLimits.log == [("limit", 1)]
    assert os.environ["OMP_NUM_THREADS"] == "4"  # a value set before is put back
    assert [var for var in _system.THREAD_ENV_VARS if var in os.environ] == ["OMP_NUM_THREADS"]
    assert pools.threads == 6 and pools.calls == [0, 6]
    assert FakeLimits.log == [("limit", 1), ("restore",)]
    assert "torch" not in sys.modules  # not imported to be pinned


def test_one_thread_per_pool_puts_them_back_after_an_error(pools):
    with pytest.raises(KeyError, match="mid-measure"):
        with _system.one_thread_per_pool():
            raise KeyError("mid-measure")
    assert os.environ["OMP_NUM_THREADS"] == "4" and pools.threads == 6


# -- the scheduler calls ---------------------------------------------------------------

class FakeLibc:
    """syscall() for sched_getattr / sched_setattr (x86-64 numbers), with a
    slice of ``runtime`` ns under ``policy``; ``refuse``: which calls fail."""

    def __init__(self, policy=0, runtime=2_800_000, refuse=(), ignore_set=False):
        self.policy, self.runtime, self.refuse, self.ignore_set = policy, runtime, refuse, ignore_set
        self.set_to = None

    def syscall(self, number, pid, attr_ref, *rest):
        attr = attr_ref._obj
        if number == 315:  # sched_getattr
            if "get" in self.refuse:
                return -1
            attr.sched_policy, attr.sched_runtime = self.policy, self.runtime
            attr.sched_flags = 0x01 | 0x40
            return 0
        assert number == 314
        if "set" in self.refuse:
            return -1
        self.set_to = (attr.sched_runtime, attr.sched_flags, attr.size)
        if not self.ignore_set:
            self.runtime = attr.sched_runtime
        return 0


@pytest.fixture
def libc(monkeypatch):
    monkeypatch.setattr(_system.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(_system.sys, "platform", "linux")

    def install(fake):
        monkeypatch.setattr(_system.ctypes, "CDLL", lambda name, use_errno=False: fake)
        return fake
    return install


def test_no_c_library_reports_no_slice_and_asks_nothing(libc, monkeypatch):
    def no_libc(name, use_errno=False):
        raise OSError("libc.so.6: cannot open shared object file")
    monkeypatch.setattr(_system.ctypes, "CDLL", no_libc)
    assert _system.time_slice_ns() is None
    assert _system.lengthen_time_slice() is False


def test_a_refused_sched_getattr_reports_no_slice(libc):
    libc(FakeLibc(refuse=("get",)))
    assert _system.time_slice_ns() is None
    assert _system.lengthen_time_slice() is False


def test_a_refused_sched_setattr_is_not_a_longer_slice(libc):
    libc(FakeLibc(refuse=("set",)))
    assert _system.time_slice_ns() == 2_800_000
    assert _system.lengthen_time_slice(20_000_000) is False
    assert _system.time_slice_ns() == 2_800_000


def test_a_slice_is_asked_for_keeping_reset_on_fork_only(libc):
    fake = libc(FakeLibc())
    assert _system.lengthen_time_slice(20_000_000) is True
    assert fake.set_to == (20_000_000, 0x01, ctypes.sizeof(_system._SchedAttr))
    assert _system.time_slice_ns() == 20_000_000


def test_a_slice_the_kernel_ignores_is_not_reported_as_taken(libc):
    libc(FakeLibc(ignore_set=True))
    assert _system.lengthen_time_slice(20_000_000) is False


@pytest.mark.parametrize("policy, runtime", [(1, 2_800_000), (0, 0)],
                         ids=["sched-fifo", "kernel-without-slices"])
def test_no_slice_to_lengthen_outside_the_fair_class_or_before_6_12(libc, policy, runtime):
    fake = libc(FakeLibc(policy=policy, runtime=runtime))
    assert _system.time_slice_ns() is None
    assert _system.lengthen_time_slice(20_000_000) is False
    assert fake.set_to is None  # nothing asked


def test_a_slice_long_enough_already_is_kept(libc):
    fake = libc(FakeLibc(runtime=30_000_000))
    assert _system.lengthen_time_slice(20_000_000) is True
    assert fake.set_to is None and _system.time_slice_ns() == 30_000_000  # never shortened
