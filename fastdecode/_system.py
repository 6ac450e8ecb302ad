"""Facts about the machine the loader runs on, each computed in one place:
usable CPUs, the /dev/shm budget and its advice, the thread pools loaded into
this process, pinning those pools to one thread, and a worker's scheduler
time slice. Shared by the loader's guards and by the ``fastdecode`` tools
(doctor, tune, convert, datagen)."""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, Optional

__all__ = [
    "CGROUP_ROOT", "OPENCV_RUNTIMES", "OPENMP_RUNTIMES", "POOL_RUNTIMES", "THREAD_ENV_VARS",
    "THREAD_RUNTIMES", "WORKER_SLICE_NS", "CpuBudget", "ShmBudget", "cgroup_cpu_limit",
    "cpu_budget", "lengthen_time_slice", "limit_threads_to_one", "loaded_thread_runtimes",
    "one_thread_per_pool", "settle_in_worker", "shm_budget", "shm_free_bytes", "time_slice_ns",
    "usable_cpus",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
SHM_PATH = "/dev/shm"
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
# Shared-library name prefixes of the runtimes that start thread pools.
OPENMP_RUNTIMES = ("libgomp", "libiomp", "libomp")
# The pools that size themselves by the CPU count unless told otherwise.
POOL_RUNTIMES = OPENMP_RUNTIMES + ("libopenblas", "libscipy_openblas", "libmkl")
OPENCV_RUNTIMES = ("libcv2", "libopencv")
THREAD_RUNTIMES = POOL_RUNTIMES + OPENCV_RUNTIMES
# Free /dev/shm below this many times the need is "tight": pinned copies and
# other ranks on the machine share it.
SHM_HEADROOM = 2


# --------------------------------------------------------------------------
# CPUs


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs granted by the cgroup CPU quota (v2 cpu.max or v1 cfs), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        cfs_quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        cfs_period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return cfs_quota / cfs_period if cfs_quota > 0 and cfs_period > 0 else None
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CpuBudget:
    """The parts of the usable-CPU count, kept apart for reports."""

    cpu_count: int  # os.cpu_count(): the machine
    affinity: int  # CPUs the scheduler lets this process run on
    cgroup_quota: Optional[float]  # CPUs the cgroup quota grants, None without a quota
    usable: int  # what the process may really use: affinity capped by the quota


def cpu_budget(cgroup_root: Path = CGROUP_ROOT) -> CpuBudget:
    """The CPUs this process may use and where that number comes from."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        affinity = os.cpu_count() or 1
    quota = cgroup_cpu_limit(cgroup_root)
    usable = affinity if quota is None else min(affinity, math.floor(quota))
    return CpuBudget(os.cpu_count() or 1, affinity, quota, max(1, usable))


def usable_cpus() -> int:
    """CPUs this process may really use: affinity, capped by the cgroup quota
    (what os.cpu_count() ignores)."""
    return cpu_budget().usable


# --------------------------------------------------------------------------
# /dev/shm


def shm_free_bytes(path: str = SHM_PATH) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


ShmStatus = Literal["ok", "tight", "short", "unknown"]


@dataclass(frozen=True)
class ShmBudget:
    """What DataLoader workers need in /dev/shm against what it has free.

    ``status``: "short" (need > free: workers die with a bus error or "No
    space left on device"), "tight" (under 2x headroom), "ok", or "unknown"
    (/dev/shm cannot be read). ``advice`` says how to enlarge it.
    """

    need: int
    free: Optional[int]
    status: ShmStatus
    advice: str


def shm_budget(num_workers: int, prefetch_factor: int, batch_bytes: int) -> ShmBudget:
    """Workers x prefetch_factor batches of ``batch_bytes`` in /dev/shm."""
    need = num_workers * prefetch_factor * batch_bytes
    free = shm_free_bytes()
    gib = max(1, math.ceil(SHM_HEADROOM * need / 2**30))
    advice = (f"docker run --shm-size={gib}g (Kubernetes: an emptyDir with medium: Memory "
              "on /dev/shm)")
    status: ShmStatus
    if free is None:
        status = "unknown"
    elif need > free:
        status = "short"
    elif SHM_HEADROOM * need > free:
        status = "tight"
    else:
        status = "ok"
    return ShmBudget(need, free, status, advice)


# --------------------------------------------------------------------------
# thread pools


def loaded_thread_runtimes() -> list[str]:
    """OpenMP / BLAS / OpenCV runtimes mapped into this process."""
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                base = os.path.basename(line.split()[-1]) if "/" in line else ""
                if base.startswith(THREAD_RUNTIMES):
                    found.add(base)
    except OSError:
        pass
    if "cv2" in sys.modules:
        found.add("cv2 (python module)")
    return sorted(found)


def _pin_pools(stack: contextlib.ExitStack) -> None:
    """Every library thread pool in this process to one thread; ``stack``
    holds what undoes it."""
    for var in THREAD_ENV_VARS:  # for pools created later and for subprocesses
        stack.callback(_restore_env, var, os.environ.get(var))
        os.environ[var] = "1"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        pass
    else:
        stack.enter_context(threadpool_limits(1))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        stack.callback(cv2.setNumThreads, cv2.getNumThreads())
        cv2.setNumThreads(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        stack.callback(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(1)


def _restore_env(var: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value


@contextlib.contextmanager
def one_thread_per_pool() -> Iterator[None]:
    """What a worker runs under (one thread per pool), undone on exit: for
    measuring inside someone else's process."""
    with contextlib.ExitStack() as stack:
        _pin_pools(stack)
        yield


def limit_threads_to_one() -> None:
    """Every library thread pool in this process to one thread, for good: a
    worker process is one unit of parallelism, not N."""
    with contextlib.ExitStack() as stack:
        _pin_pools(stack)
        stack.pop_all()  # keep the limits: nothing is undone


# --------------------------------------------------------------------------
# a worker's time slice

# The scheduler time slice a worker process asks for. Linux >= 6.12 (EEVDF)
# takes sched_attr.sched_runtime of a SCHED_OTHER / SCHED_BATCH task as the
# slice it runs before the next runnable task of its CPU gets a turn; its
# default is 0.7 ms x (1 + log2 CPUs), 1.4 ms on 2 CPUs, about one decoded
# image: 8 workers on 2 cores took turns image by image, each turn on caches
# the others had filled, and paid ~6 % more CPU per image than 2 workers;
# with 20 ms, ~1 % (docs/decisions/loaders.md, "A worker's time slice: 20 ms"). A shorter slice still
# preempts a longer one on wake-up, so the trainer's process, which keeps the
# default, is not made to wait. Earlier kernels ignore the field.
WORKER_SLICE_NS = 20_000_000
_SCHED_SYSCALLS = {"x86_64": (314, 315), "amd64": (314, 315), "aarch64": (274, 275),
                   "arm64": (274, 275)}  # sched_setattr, sched_getattr
_FAIR_POLICIES = (0, 3)  # SCHED_OTHER, SCHED_BATCH: the fair class, which has slices


class _SchedAttr(ctypes.Structure):
    """struct sched_attr, its first version (48 bytes)."""

    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32),
                ("sched_flags", ctypes.c_uint64), ("sched_nice", ctypes.c_int32),
                ("sched_priority", ctypes.c_uint32), ("sched_runtime", ctypes.c_uint64),
                ("sched_deadline", ctypes.c_uint64), ("sched_period", ctypes.c_uint64)]


def _sched_attr() -> Optional[tuple[_SchedAttr, ctypes.CDLL, int]]:
    """This thread's sched_attr, the C library and sched_setattr's number;
    None off Linux, on an architecture without the numbers here, or when
    the call fails (a seccomp filter, say)."""
    numbers = _SCHED_SYSCALLS.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or numbers is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    attr = _SchedAttr()
    if libc.syscall(numbers[1], 0, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr, libc, numbers[0]


def time_slice_ns() -> Optional[int]:
    """The calling thread's time slice in ns, as the kernel reports it; None
    when it reports none (a kernel before 6.12, another scheduling class,
    not Linux)."""
    got = _sched_attr()
    if got is None or got[0].sched_policy not in _FAIR_POLICIES:
        return None
    return int(got[0].sched_runtime) or None


def lengthen_time_slice(ns: int = WORKER_SLICE_NS) -> bool:
    """Asks for a time slice of at least ``ns`` for the calling thread (and
    the threads it starts later), keeping its policy and nice value; True when
    the kernel now reports one that long. For worker processes only: never
    called in the trainer's own process."""
    got = _sched_attr()
    if got is None or got[0].sched_policy not in _FAIR_POLICIES:
        return False
    attr, libc, setattr_nr = got
    if attr.sched_runtime >= ns:
        return True
    if attr.sched_runtime == 0:  # the kernel reports no slice: it would ignore ours
        return False
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags &= 0x01  # SCHED_FLAG_RESET_ON_FORK kept; nothing else asked
    attr.sched_runtime = ns
    if libc.syscall(setattr_nr, 0, ctypes.byref(attr), 0) != 0:
        return False
    return (time_slice_ns() or 0) >= ns


_settled_pid = -1


def settle_in_worker() -> None:
    """Once per process: in a DataLoader worker, the longer time slice that
    ``fastdecode.worker_init_fn`` asks for, called by what decodes there
    (FastDatasetFolder, the WebDataset handler and collation), since the
    stock DataLoader runs no init of ours. Never in the trainer's process;
    torch is looked up, not imported (a process without it runs no workers)."""
    global _settled_pid
    pid = os.getpid()
    if pid != _settled_pid:
        _settled_pid = pid
        data = sys.modules.get("torch.utils.data")
        if data is not None and data.get_worker_info() is not None:
            lengthen_time_slice()
