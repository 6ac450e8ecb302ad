"""Facts about the machine the loader runs on: usable CPUs, /dev/shm, the
thread pools loaded into this process. Shared by the loader's guards and by
``fastdecode doctor``."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs granted by the cgroup CPU quota (v2 cpu.max or v1 cfs), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """CPUs this process may really use: affinity, capped by the cgroup quota
    (what os.cpu_count() ignores)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.floor(limit)))
    return max(1, cpus)


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def loaded_thread_runtimes() -> list[str]:
    """OpenMP / BLAS / OpenCV runtimes mapped into this process."""
    names = ("libgomp", "libiomp", "libomp", "libopenblas", "libscipy_openblas", "libmkl",
             "libcv2", "libopencv")
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                base = os.path.basename(line.split()[-1]) if "/" in line else ""
                for name in names:
                    if base.startswith(name):
                        found.add(base)
    except OSError:
        pass
    if "cv2" in sys.modules:
        found.add("cv2 (python module)")
    return sorted(found)


def limit_threads_to_one() -> None:
    """Every library thread pool in this process to one thread: a worker
    process is one unit of parallelism, not N."""
    for var in THREAD_ENV_VARS:
        os.environ[var] = "1"  # for pools created later and for subprocesses
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        cv2.setNumThreads(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
