"""Loopback Ray clusters for bench_ray and tests/data/test_ray.py: a driver run
as the first process of a loopback-only network + PID namespace, ``ray
start`` nodes inside it, always stopped; and, for the benchmark, what a fresh
cluster's first dataset cost (processes started, CPU seconds by role) and the
CPU time of this process tree by role for the steady rows.

The one copy of this code: the benchmark ships in the wheel and the tests
import it, both as ``benchmarks._ray_cluster`` (the checkout's root is on the
path, as for ``benchmarks.presets``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

NAMESPACE = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
PORT = "6391"  # each namespace has its own loopback: no clash between runs
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def namespace_prefix() -> list[str] | None:
    """The unshare command line that runs a driver as the first process of a
    network + PID namespace, or None where it cannot be made."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    probe = subprocess.run([*NAMESPACE, "ip", "link", "set", "lo", "up"], capture_output=True,
                           timeout=30)
    return NAMESPACE if probe.returncode == 0 else None


def driver_env(package_parent: Optional[Path], **extra: str) -> dict[str, str]:
    """The environment of a namespace driver: a per-run auth token (every node
    of the cluster needs it; nothing written to ~/.ray), no usage stats,
    ``package_parent`` first on PYTHONPATH, and ``extra`` (RAY_* settings)."""
    path = [str(package_parent)] if package_parent is not None else []
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16),
               RAY_USAGE_STATS_ENABLED="0", PYTHONWARNINGS="ignore::DeprecationWarning",
               **extra)
    env["PYTHONPATH"] = os.pathsep.join([*path, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_driver(prefix: list[str], argv: list[str], env: dict[str, str],
               timeout: float) -> subprocess.CompletedProcess:
    """``argv`` as the namespace's first process, stderr kept; when it ends
    the kernel ends every Ray process it started."""
    return subprocess.run([*prefix, *argv], env=env, timeout=timeout,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def run_in_namespace(prefix: list[str], module: str, package_parent: Path, args: list[str],
                     timeout: float) -> dict[str, Any]:
    """``python -m module --ray-driver OUT *args`` as the namespace's first
    process; returns the JSON it wrote to OUT."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ray.json"
        proc = run_driver(prefix, [sys.executable, "-m", module, "--ray-driver", str(out), *args],
                          driver_env(package_parent), timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the Ray driver failed ({proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def loopback_up() -> None:
    """In the namespace: bring up its only interface."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


@dataclass
class Nodes:
    """A ``ray start`` cluster on 127.0.0.1: its address and the worker nodes,
    each ``ray start --block`` leading its own process group (what
    :func:`kill_node` kills)."""

    address: str
    workers: list[subprocess.Popen]


def start_nodes(nodes: int, tmp: str, *, object_store_bytes: int, cpus: int = 1) -> Nodes:
    """``ray start`` a head and ``nodes - 1`` worker nodes of ``cpus`` CPUs
    and an object store of ``object_store_bytes`` each, on 127.0.0.1."""
    node = ["--num-cpus", str(cpus), "--object-store-memory", str(object_store_bytes),
            "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    head = subprocess.run([*RAY, "start", "--head", "--port", PORT, "--include-dashboard=false",
                           "--temp-dir", tmp, *node], stdout=subprocess.DEVNULL, timeout=180)
    if head.returncode != 0:
        raise RuntimeError("ray start --head failed")
    address = f"127.0.0.1:{PORT}"
    workers = [subprocess.Popen([*RAY, "start", "--address", address, "--block", *node],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True) for _ in range(nodes - 1)]
    return Nodes(address, workers)


def wait_for_nodes(ray: Any, nodes: int, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while sum(n["Alive"] for n in ray.nodes()) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{nodes} Ray nodes did not come up in {seconds:.0f} s")
        time.sleep(0.2)


def kill_node(worker: subprocess.Popen) -> None:
    """SIGKILL a worker node: its ``ray start --block``, raylet and agents."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, 9)


def stop_nodes(cluster: Nodes) -> None:
    for worker in cluster.workers:
        kill_node(worker)
    subprocess.run([*RAY, "stop", "--force"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)


@contextlib.contextmanager
def ray_start_cluster(nodes: int, *, object_store_bytes: int,
                      cpus: int = 1) -> Iterator[Nodes]:
    """:func:`start_nodes` in a fresh temp dir, always stopped and removed
    (call ``ray.shutdown()`` inside, before it ends)."""
    tmp = tempfile.mkdtemp(prefix="fdray", dir="/tmp")
    cluster = None
    try:
        cluster = start_nodes(nodes, tmp, object_store_bytes=object_store_bytes, cpus=cpus)
        yield cluster
    finally:
        if cluster is not None:
            stop_nodes(cluster)
        else:  # a head that failed half-way
            subprocess.run([*RAY, "stop", "--force"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# What a fresh cluster's first dataset cost


def kind(name: str) -> str:
    """A Ray process by its title: Ray Data's actors (``ray::_StatsActor``,
    ``ray::_AutoscalingCoordinatorActor``), task workers (``ray::IDLE``,
    ``ray::ReadFastdecodeImages``...) or daemons (raylet, GCS, agents)."""
    if name.startswith("ray::_"):
        return "Ray Data actors"
    if name.startswith("ray::") and not name.endswith("Agent"):
        return "task workers"
    return "Ray daemons"


def snapshot() -> dict[int, dict[str, Any]]:
    """This driver's descendants now (in the namespace: every Ray process)
    by pid: title, start time, CPU seconds so far."""
    import psutil

    out = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            name = (proc.cmdline()[:1] or [proc.name()])[0].strip()
            times, created = proc.cpu_times(), proc.create_time()
        except psutil.Error:
            continue
        out[proc.pid] = {"name": name, "started": created, "cpu_s": times.user + times.system}
    return out


def startup_cost(then: dict[int, dict[str, Any]], later: dict[int, dict[str, Any]],
                 driver_cpu_s: float, up_at: float) -> dict[str, Any]:
    """What ran at the moment of ``then`` (a :func:`snapshot`): how many task
    workers and Ray Data actors, when the task workers started (seconds
    after ``up_at``) and each role's CPU seconds. Roles come from the titles
    in ``later`` where the process still runs: an actor's process is titled
    ``ray::IDLE`` while it starts."""
    cpu: dict[str, float] = {"driver": driver_cpu_s}
    started: dict[str, int] = {}
    workers_started = []
    for pid, proc in then.items():
        role = kind(later.get(pid, proc)["name"])
        cpu[role] = cpu.get(role, 0.0) + proc["cpu_s"]
        if role != "Ray daemons":
            started[role] = started.get(role, 0) + 1
        if role == "task workers":
            workers_started.append(round(proc["started"] - up_at, 2))
    return {"cpu_s": cpu, "processes": started, "task_workers_started_s": sorted(workers_started)}


# ---------------------------------------------------------------------------
# CPU time of this process tree, by role


def _role(proc) -> str:
    if proc.pid == os.getpid():
        return "driver"
    name = " ".join(proc.cmdline()[:1]) or proc.name()
    if name.startswith("ray::_") or name.endswith("Agent"):
        return "ray daemons"  # Ray Data's actors (_StatsActor...), the node's agents
    if name.startswith("ray::") or "default_worker.py" in " ".join(proc.cmdline()):
        return "ray workers"
    if "torch" in name or proc.name().startswith("pt_"):
        return "loader workers"
    return "ray daemons" if any(k in name for k in ("raylet", "gcs_server", "ray", "dashboard",
                                                    "log_monitor", "monitor")) else "other"


def cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of this process, its live descendants by role, and
    its reaped children (DataLoader workers that have exited: RUSAGE_CHILDREN)."""
    import resource

    import psutil

    me = psutil.Process()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    totals: dict[str, float] = {"loader workers": reaped.ru_utime + reaped.ru_stime}
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            role = _role(proc)
            if role == "other" and proc.ppid() == me.pid:
                role = "loader workers"  # DataLoader / WebLoader workers
            totals[role] = totals.get(role, 0.0) + times.user + times.system
        except psutil.Error:
            continue
    return totals
