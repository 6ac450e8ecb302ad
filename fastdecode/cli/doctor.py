"""``fastdecode doctor``: why data loading may stall, and what to set instead.

Each check reports a status (ok / warn / fail), what it found and one
concrete recommendation. ``fail`` is kept for what stops or stalls training
outright; everything that only costs speed is a ``warn``. Torch is optional:
without it the torch checks say so and the others still run. Given a dataset
folder (``fastdecode doctor ROOT``) it also names the storage under it and
measures it (``fastdecode.cli._storage``). Decision records:
docs/decisions/cli.md, docs/decisions/storage.md (Storage reports).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import multiprocessing
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastdecode import _system
from fastdecode.api import info
from fastdecode.cli import _storage
from fastdecode.cli._args import count, subcommand

__all__ = ["Check", "JobOptions", "Options", "diagnose", "recommended_num_workers", "register"]

STATUSES = ("ok", "warn", "fail")
# More workers than this many times the usable CPUs is a fail: each batch
# then waits on several others sharing its CPU, and memory grows with no gain.
OVERSUBSCRIPTION_FAIL = 2
PINNED_PROBE_BYTES = 1 << 20


@dataclass
class Check:
    """The result of one check of ``fastdecode doctor``.

    Attributes
    ----------
    name : str
        What was checked (``"cpus"``, ``"num_workers"``, ...).
    status : str
        One of ``STATUSES``: ``"ok"``, ``"warn"`` (it costs speed) or
        ``"fail"`` (it stops or stalls training).
    finding : str
        What the check found.
    recommendation : str
        The one concrete thing to set or do about it.
    """

    name: str
    status: str
    finding: str
    recommendation: str


@dataclass
class JobOptions:
    """What the training job will ask for (the doctor's command line)."""

    num_workers: Optional[int] = None
    batch_size: int = 256
    image_size: int = 224
    prefetch_factor: int = 2
    float32: bool = False
    root: Optional[Path] = None  # a dataset folder: its storage is probed too
    sample: int = 64  # files the storage probe reads

    @property
    def batch_bytes(self) -> int:
        """The bytes of one batch: ``batch_size`` RGB images of ``image_size``
        x ``image_size`` pixels, 4 bytes a value with ``float32``, else 1."""
        return self.batch_size * 3 * self.image_size ** 2 * (4 if self.float32 else 1)


Options = JobOptions  # the old name, kept for one release


@dataclass
class Report:
    checks: list[Check]
    recommended_num_workers: int
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return max((c.status for c in self.checks), key=STATUSES.index, default="ok")

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "fail" else 0


def recommended_num_workers(usable: int) -> int:
    """One CPU stays with the main process (it runs the training step and
    collates) once there are more than two; on 1-2 CPUs that would halve
    the decode rate."""
    return usable - 1 if usable > 2 else usable


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def start_method() -> str:
    """The start method DataLoader workers get, without fixing it the way
    multiprocessing.get_start_method() does (it would forbid a later
    set_start_method in the same process)."""
    return multiprocessing.get_start_method(allow_none=True) or \
        multiprocessing.get_all_start_methods()[0]  # the first one is the default


def _import_torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


# --------------------------------------------------------------------------
# the checks


def check_cpus(facts: dict) -> Check:
    affinity, quota = facts["affinity_cpus"], facts["cgroup_cpu_quota"]
    usable = facts["usable_cpus"]
    finding = (f"{usable} usable CPU(s): affinity allows {affinity} of the machine's "
               f"{facts['cpu_count']}, cgroup quota "
               + ("none" if quota is None else f"{quota:g} CPUs"))
    if usable < facts["cpu_count"]:
        return Check("cpus", "warn", finding,
                     f"size worker and thread pools by the {usable} usable CPUs, not by "
                     f"os.cpu_count()={facts['cpu_count']} (what torch, OpenMP and many scripts "
                     "use): fastdecode.FastLoader does; elsewhere pass the counts explicitly")
    return Check("cpus", "ok", finding, "nothing to change")


def check_num_workers(facts: dict, opts: JobOptions, recommended: int) -> Check:
    usable, asked = facts["usable_cpus"], opts.num_workers
    why = (f"num_workers={recommended}: the {usable} usable CPU(s)"
           + (" minus one for the main process" if usable > 2 else ""))
    if asked is None:
        return Check("num_workers", "ok", f"recommended num_workers={recommended}",
                     f"use {why}; `fastdecode tune` measures what your data and step time need")
    if asked > OVERSUBSCRIPTION_FAIL * usable:
        return Check("num_workers", "fail",
                     f"num_workers={asked} is more than {OVERSUBSCRIPTION_FAIL}x the {usable} "
                     "usable CPU(s): the workers time-slice, every batch arrives late and "
                     "memory grows with each worker" + _turns(facts), f"use {why}")
    if asked > usable:
        return Check("num_workers", "warn",
                     f"num_workers={asked} exceeds the {usable} usable CPU(s)" + _turns(facts),
                     f"use {why}")
    if asked == 0:
        return Check("num_workers", "warn",
                     "num_workers=0 decodes in the training process, between steps",
                     f"use {why}, or FastLoader(threads=N)")
    return Check("num_workers", "ok", f"num_workers={asked} fits the {usable} usable CPU(s)",
                 "nothing to change" if asked >= recommended else f"up to {why}")


def _turns(facts: dict) -> str:
    """How often workers sharing a CPU take turns (``_system.lengthen_time_slice``)."""
    if facts["time_slice_ns"] is None:
        return ("; this kernel reports no scheduler time slice (Linux < 6.12), so fastdecode's "
                "workers cannot ask for 20 ms turns and take turns every few ms, on caches the "
                "others filled")
    return (f"; fastdecode's workers take {_system.WORKER_SLICE_NS / 1e6:g} ms turns (this "
            f"process's slice: {facts['time_slice_ns'] / 1e6:g} ms), which keeps most of the "
            "cost of sharing a CPU away")


def check_shm(facts: dict, opts: JobOptions, workers: int) -> Check:
    shm = _system.shm_budget(workers, opts.prefetch_factor, opts.batch_bytes)
    free, need = shm.free, shm.need
    facts["shm_needed_bytes"] = need
    sizing = (f"{workers} worker(s) x prefetch_factor={opts.prefetch_factor} x "
              f"{_mib(opts.batch_bytes)} per batch ({opts.batch_size}x3x{opts.image_size}x"
              f"{opts.image_size} {'float32' if opts.float32 else 'uint8'}) = {_mib(need)}")
    if free is None:
        return Check("shm", "warn", f"/dev/shm cannot be read; workers need {sizing}",
                     f"mount a tmpfs on /dev/shm of at least {_mib(2 * need)}: {shm.advice}")
    if shm.status == "short":
        return Check("shm", "fail", f"/dev/shm has {_mib(free)} free, less than the {sizing}: "
                     "workers die with a bus error or 'No space left on device'",
                     f"enlarge it, {shm.advice}, or lower num_workers, prefetch_factor or "
                     "batch_size")
    if shm.status == "tight":
        return Check("shm", "warn", f"/dev/shm has {_mib(free)} free for {sizing}: under 2x "
                     "headroom (pinned copies, other ranks on the machine share it)",
                     f"enlarge it: {shm.advice}")
    return Check("shm", "ok", f"/dev/shm has {_mib(free)} free for {sizing}", "nothing to change")


def check_threads(facts: dict, workers: int) -> Check:
    env, pools = facts["thread_env"], facts["thread_runtimes"]
    loaded = [r for r in pools if r.startswith(_system.POOL_RUNTIMES)]
    finding = ("thread variables: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "none set")
               + "; runtimes loaded with torch: " + (", ".join(pools) or "none"))
    openmp = {r.split(".")[0] for r in pools if r.startswith(_system.OPENMP_RUNTIMES)}
    if len(openmp) > 1:
        return Check("threads", "warn", finding + f" (two OpenMP runtimes: {sorted(openmp)})",
                     "two OpenMP runtimes each start a pool per process and can conflict: "
                     "install torch, numpy and OpenCV from one channel (pip or conda, not both)")
    big = {k: v for k, v in env.items() if v.isdigit() and int(v) > 1}
    if big and workers > 1:
        return Check("threads", "warn", finding,
                     f"{', '.join(big)} > 1 gives each of the {workers} workers its own pool: "
                     "set them to 1 for data loading, or use fastdecode.worker_init_fn / "
                     "FastLoader, which pin every pool to one thread in the workers")
    if loaded and not any(k in env for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                             "OPENBLAS_NUM_THREADS")):
        return Check("threads", "warn", finding,
                     "thread pools sized by the CPU count run in every worker: use "
                     "fastdecode.FastLoader or DataLoader(worker_init_fn=fastdecode."
                     "worker_init_fn), or export OMP_NUM_THREADS=1 for the job and "
                     "torch.set_num_threads(N) in the training process")
    return Check("threads", "ok", finding, "nothing to change")


def check_opencv(facts: dict) -> Check:
    state = facts["opencv"]
    if state == "not installed":
        return Check("opencv", "ok", "OpenCV is not installed", "nothing to change")
    return Check("opencv", "ok", f"OpenCV is {state}; it starts a thread pool of all CPUs "
                 "in each process that uses it",
                 "if your transforms use cv2, call cv2.setNumThreads(0) in the workers: "
                 "fastdecode.worker_init_fn and FastLoader do")


def check_start_method(facts: dict) -> Check:
    method, cuda_initialized = facts["start_method"], facts["cuda_initialized"]
    finding = f"start method '{method}'" + (", CUDA initialized in this process"
                                            if cuda_initialized else "")
    if method == "fork" and cuda_initialized:
        # A warning, not a failure: forked workers that never touch CUDA (as
        # fastdecode's do not) run fine, and model.cuda() before the loader
        # is the usual order.
        return Check("start_method", "warn", finding + ": a forked worker crashes as soon as "
                     "it touches CUDA (a CUDA tensor in the dataset, a GPU transform)",
                     "create the DataLoader with multiprocessing_context='forkserver' (or "
                     "'spawn'), or start its workers before the first CUDA call")
    if method == "fork":
        return Check("start_method", "ok", finding, "keep CUDA out of the workers; if the script "
                     "initializes CUDA before the loader starts its workers, pass "
                     "multiprocessing_context='forkserver'")
    return Check("start_method", "ok", finding, "the dataset and transforms must be picklable; "
                 "workers start slower than with 'fork': use persistent_workers=True")


def check_libjpeg(facts: dict) -> Check:
    version, simd = facts["libjpeg_turbo"], facts["simd"]
    finding = f"libjpeg-turbo {version}, SIMD {'built in' if simd else 'absent'}"
    if not simd:
        return Check("libjpeg_turbo", "warn", finding + ": decoding runs 2-4x slower",
                     "install a libjpeg-turbo built with SIMD (NASM at build time) or use the "
                     "fastdecode wheel, which bundles one")
    forced = facts["jsimd_forcenone"]
    if forced not in (None, "", "0"):
        return Check("libjpeg_turbo", "warn", finding + f", but JSIMD_FORCENONE={forced} "
                     "turns it off", "unset JSIMD_FORCENONE")
    return Check("libjpeg_turbo", "ok", finding, "nothing to change")


def check_torch(facts: dict) -> Check:
    if facts["torch"] is None:
        return Check("torch_cuda", "warn", "torch is not installed",
                     "pip install 'fastdecode[torch]' for FastImageFolder and FastLoader")
    cuda, pinned = facts["cuda_available"], facts["pinned_memory"]
    finding = f"torch {facts['torch']}, CUDA " + ("available" if cuda else "not available")
    if not cuda:
        return Check("torch_cuda", "ok", finding + ": CPU training, no pinned memory",
                     "nothing to change (FastLoader turns pin_memory off without CUDA)")
    finding += f" ({facts['cuda_devices']} device(s)), pinned memory: {pinned}"
    if pinned != "ok":
        return Check("torch_cuda", "fail", finding,
                     "pin_memory=True will fail: raise the locked-memory limit (ulimit -l, "
                     "docker --ulimit memlock=-1) or pass pin_memory=False")
    return Check("torch_cuda", "ok", finding, "use pin_memory=True, or FastLoader(device='cuda')")


def check_storage(facts: dict, opts: JobOptions, workers: int) -> Check:
    """The storage under ``opts.root``: kind, open + first-byte latency,
    throughput, and the read-ahead depth, cache or shards it calls for."""
    from fastdecode.storage._cache import available_ram
    from fastdecode.storage._readahead import ReadAheadOptions

    assert opts.root is not None
    try:
        found = _storage.probe(opts.root, opts.sample)
    except OSError as exc:  # its message names the path
        return Check("storage", "fail", str(exc),
                     "pass the dataset's root folder (an ImageFolder tree)")
    facts["storage"] = {**asdict(found), "latency_s": found.latency_s,
                        "latency_p90_s": found.latency_p90_s,
                        "throughput_bytes_per_s": found.throughput_bps,
                        "estimated_bytes": found.estimated_bytes}
    status, finding, advice = _storage.storage_advice(
        found, facts["usable_cpus"], workers, available_ram(), facts["shm_free_bytes"],
        ReadAheadOptions.resolve(None).limit)  # adaptive: the most it grows to
    return Check("storage", status, finding, advice)


# --------------------------------------------------------------------------
# gathering the facts


def gather(torch) -> dict[str, Any]:
    cpus = _system.cpu_budget(_system.CGROUP_ROOT)
    library = info()
    cv2 = "loaded" if "cv2" in sys.modules else (
        "installed, not loaded" if importlib.util.find_spec("cv2") else "not installed")
    return {
        "cpu_count": cpus.cpu_count,
        "affinity_cpus": cpus.affinity,
        "cgroup_cpu_quota": cpus.cgroup_quota,
        "usable_cpus": cpus.usable,
        "shm_free_bytes": _system.shm_free_bytes(),
        "thread_env": {k: os.environ[k] for k in _system.THREAD_ENV_VARS if k in os.environ},
        "thread_runtimes": _system.loaded_thread_runtimes(),
        "time_slice_ns": _system.time_slice_ns(),
        "opencv": cv2,
        "start_method": start_method(),
        "libjpeg_turbo": library["libjpeg_turbo"],
        "simd": library["simd"],
        "jsimd_forcenone": os.environ.get("JSIMD_FORCENONE"),
        "torch": None if torch is None else torch.__version__,
        "cuda_initialized": torch is not None and torch.cuda.is_initialized(),
    }


def probe_cuda(torch, facts: dict) -> None:
    """CUDA and a small pinned allocation; after the start-method facts,
    since this initializes CUDA in this process."""
    facts["cuda_available"] = torch is not None and torch.cuda.is_available()
    facts["cuda_devices"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    facts["pinned_memory"] = None
    if facts["cuda_available"]:
        try:
            torch.empty(PINNED_PROBE_BYTES, dtype=torch.uint8, pin_memory=True)
            facts["pinned_memory"] = "ok"
        except RuntimeError as exc:
            facts["pinned_memory"] = f"failed ({str(exc).splitlines()[0]})"


def diagnose(opts: Optional[JobOptions] = None) -> Report:
    """Runs every check for a job configured as ``opts`` (default: the
    defaults of JobOptions). Called from inside a training script it also sees
    what that script loaded and initialized."""
    opts = JobOptions() if opts is None else opts
    torch = _import_torch()
    facts = gather(torch)
    probe_cuda(torch, facts)
    recommended = recommended_num_workers(facts["usable_cpus"])
    workers = recommended if opts.num_workers is None else opts.num_workers
    checks = [
        check_cpus(facts),
        check_num_workers(facts, opts, recommended),
        check_shm(facts, opts, workers),
        check_threads(facts, workers),
        check_opencv(facts),
        check_start_method(facts),
        check_libjpeg(facts),
        check_torch(facts),
    ]
    if opts.root is not None:
        checks.append(check_storage(facts, opts, workers))
        from fastdecode.cli.doctor_formats import check_formats

        checks.append(Check("formats", *check_formats(facts, opts.root, opts.sample)))
    return Report(checks, recommended, facts)


# --------------------------------------------------------------------------
# the command


def print_text(report: Report) -> None:
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    for c in report.checks:
        print(f"[{marks[c.status]}] {c.name}: {c.finding}")
        if c.recommendation != "nothing to change":
            print(f"       -> {c.recommendation}")
    fails = sum(c.status == "fail" for c in report.checks)
    warns = sum(c.status == "warn" for c in report.checks)
    print(f"\nrecommended num_workers: {report.recommended_num_workers}")
    print(f"{fails} failure(s), {warns} warning(s)"
          + (": training will stall or crash as configured" if fails else ""))


def run(args: argparse.Namespace) -> int:
    opts = JobOptions(args.num_workers, args.batch_size, args.image_size, args.prefetch_factor,
                      args.float32, args.root, args.sample)
    report = diagnose(opts)
    if args.json:
        out = {"status": report.status, "exit_code": report.exit_code,
               "recommended_num_workers": report.recommended_num_workers,
               "options": {**asdict(opts), "root": None if opts.root is None else str(opts.root),
                           "batch_bytes": opts.batch_bytes},
               "checks": [asdict(c) for c in report.checks], "facts": report.facts}
        print(json.dumps(out, indent=2))
    else:
        print_text(report)
    return report.exit_code


DESCRIPTION = """\
Checks what makes a PyTorch data loader stall or crash on this machine
and says, for each finding, what to set instead."""

EPILOG = """\
checks: usable CPUs (affinity, cgroup quota) and the num_workers they allow;
/dev/shm against num_workers x prefetch_factor x batch bytes; thread
variables and the OpenMP/BLAS runtimes torch loads; OpenCV; the
multiprocessing start method with CUDA; libjpeg-turbo and its SIMD; torch,
CUDA and a pinned allocation. With ROOT, the storage under the dataset: its
kind (nfs, fuse, lustre, gpfs, overlay, tmpfs, network, local), the open +
first-byte latency and read throughput over a sample of its files, and the
read-ahead depth (Little's law: rate x latency), the RAM cache (when the
dataset fits) or shards it calls for; and the formats of a sample of its
files: the share per format that decodes natively and the share that takes
Pillow's (slower) path.

exit status: 0 when no check fails (warnings cost speed), 1 when one will
stall or crash training (too little /dev/shm, num_workers above 2x the
usable CPUs, 'fork' with CUDA already initialized, pinned memory failing),
2 for bad arguments.

examples:
  fastdecode doctor
  fastdecode doctor ~/data/imagenet/train --num-workers 8   # and the storage under it
  fastdecode doctor --num-workers 16 --batch-size 512
  fastdecode doctor --batch-size 128 --image-size 384 --float   # float32 batches from workers
  fastdecode doctor --json | jq '.checks[] | select(.status != "ok")'
"""


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode doctor``."""
    parser.add_argument("root", nargs="?", type=Path, metavar="ROOT",
                        help="a dataset folder: also name and measure the storage under it")
    parser.add_argument("--sample", type=count(1), default=64, metavar="N",
                        help="files the storage probe reads (default: 64)")
    parser.add_argument("--num-workers", type=count(0), metavar="N",
                        help="the num_workers the job uses (default: the recommended count)")
    parser.add_argument("--batch-size", type=count(1), default=256, metavar="B",
                        help="images per batch (default: 256)")
    parser.add_argument("--image-size", type=count(1), default=224, metavar="S",
                        help="side of the square images in a batch (default: 224)")
    parser.add_argument("--prefetch-factor", type=count(1), default=2, metavar="P",
                        help="batches in flight per worker (default: 2)")
    parser.add_argument("--float", dest="float32", action="store_true",
                        help="batches leave the workers as float32 (ToTensor/Normalize there), "
                        "not uint8")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


register = subcommand("doctor", run, _options, description=DESCRIPTION, epilog=EPILOG)
