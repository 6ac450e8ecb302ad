"""The Ray clusters of bench_ray: a driver run as the first process of a
loopback-only network + PID namespace, ``ray start`` nodes inside it, and
what a fresh cluster's first dataset cost (processes started, CPU seconds by
role).

Written again here on purpose, after tests/data/test_ray.py's cluster: the
benchmark ships in the wheel (``fastdecode.benchmarks``), the tests do not.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAMESPACE = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
PORT = "6392"


def namespace_prefix() -> list[str] | None:
    """The unshare command line that runs a driver as the first process of a
    network + PID namespace, or None where it cannot be made."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    probe = subprocess.run([*NAMESPACE, "ip", "link", "set", "lo", "up"], capture_output=True,
                           timeout=30)
    return NAMESPACE if probe.returncode == 0 else None


def run_in_namespace(prefix: list[str], module: str, package_parent: Path, args: list[str],
                     timeout: float) -> dict[str, Any]:
    """``python -m module --ray-driver OUT *args`` as the namespace's first
    process (a per-run auth token, nothing written to ~/.ray); returns the
    JSON it wrote to OUT. When it ends, the kernel ends every Ray process."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16),
               RAY_USAGE_STATS_ENABLED="0", PYTHONWARNINGS="ignore::DeprecationWarning",
               PYTHONPATH=os.pathsep.join(p for p in (str(package_parent),
                                                      os.environ.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ray.json"
        proc = subprocess.run([*prefix, sys.executable, "-m", module, "--ray-driver", str(out),
                               *args], env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the Ray driver failed ({proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def loopback_up() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def start_nodes(nodes: int, tmp: str) -> tuple[str, subprocess.Popen]:
    """``ray start`` a head and ``nodes - 1`` worker nodes, 1 CPU and a
    512 MiB object store each, on 127.0.0.1. Returns the address and the
    process group leader of the worker nodes (``ray start --block``)."""
    ray_start = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    node = ["--num-cpus", "1", "--object-store-memory", str(512 * 2**20),
            "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    head = subprocess.run([*ray_start, "--head", "--port", PORT, "--include-dashboard=false",
                           "--temp-dir", tmp, *node], stdout=subprocess.DEVNULL, timeout=180)
    if head.returncode != 0:
        raise RuntimeError("ray start --head failed")
    one = " ".join([*ray_start, "--address", f"127.0.0.1:{PORT}", "--block", *node])
    workers = subprocess.Popen(["sh", "-c", " & ".join([one] * (nodes - 1)) + " & wait"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    return f"127.0.0.1:{PORT}", workers


def wait_for_nodes(ray: Any, nodes: int, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while sum(n["Alive"] for n in ray.nodes()) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{nodes} Ray nodes did not come up in {seconds:.0f} s")
        time.sleep(0.2)


def stop_nodes(workers: subprocess.Popen) -> None:
    try:
        os.killpg(workers.pid, 9)
    except ProcessLookupError:
        pass
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


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


def startup_cost(up_at: float) -> dict[str, Any]:
    """This driver's descendants now (in the namespace: every Ray process):
    how many task workers and Ray Data actors run, when the task workers
    started (seconds after ``up_at``) and each role's CPU seconds so far."""
    import psutil

    cpu: dict[str, float] = {"driver": time.process_time()}
    started: dict[str, int] = {}
    workers_started = []
    for proc in psutil.Process().children(recursive=True):
        try:
            name = (proc.cmdline()[:1] or [proc.name()])[0].strip()
            times, created = proc.cpu_times(), proc.create_time()
        except psutil.Error:
            continue
        role = kind(name)
        cpu[role] = cpu.get(role, 0.0) + times.user + times.system
        if role != "Ray daemons":
            started[role] = started.get(role, 0) + 1
        if role == "task workers":
            workers_started.append(round(created - up_at, 2))
    return {"cpu_s": cpu, "processes": started, "task_workers_started_s": sorted(workers_started)}
