"""Loopback-only network namespaces for the tests that start a server.

A test marked ``loopback`` starts a server (HTTP on 127.0.0.1) that its
client reaches in the same process, so the whole test runs inside a new
network namespace whose only interface is ``lo``: nothing it starts can
reach, or be reached from, another address. :func:`run_marked` runs a test
module's ``loopback`` tests that way, as one pytest process under
``unshare --user --map-root-user --net`` (the lead test of the module);
outside it those tests skip, naming the test that runs them. Where the
machine refuses namespaces they run in the test process itself (still only
on 127.0.0.1) and the lead test skips, saying so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

ENV = "FASTDECODE_LOOPBACK_NETNS"
_PREFIX = ["unshare", "--user", "--map-root-user", "--net", "--fork", "--kill-child"]


def inside() -> bool:
    """True in the namespace :func:`run_marked` made (only ``lo`` up)."""
    return os.environ.get(ENV) == "1" and [n for _, n in socket.if_nameindex()] == ["lo"]


@lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why no loopback-only namespace can be made here (None: it can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare(1) and ip(8)"
    try:
        done = subprocess.run([*_PREFIX, "ip", "link", "set", "lo", "up"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "unshare did not answer within 30 s"
    if done.returncode != 0:
        return f"network namespaces are not permitted here ({done.stderr.strip()[:200]})"
    return None


def skip_reason(lead: str) -> Optional[str]:
    """Why a ``loopback`` test skips in this process: it runs inside the
    namespace, by ``lead``; None where it runs here."""
    if inside() or unavailable() is not None:
        return None
    return f"runs inside a loopback-only network namespace, by {lead}"


def run_marked(module: Path, pytest_args: list[str], timeout: float
               ) -> subprocess.CompletedProcess:
    """``module``'s ``loopback`` tests, run by pytest inside a fresh
    loopback-only network namespace (lo brought up first), within ``timeout``
    seconds; the namespace and everything in it end with the process. A
    ``-m`` in ``pytest_args`` replaces the ``-m loopback`` (the last wins)."""
    script = 'ip link set lo up && exec "$@"'
    cmd = [*_PREFIX, "sh", "-c", script, "sh", sys.executable, "-m", "pytest", "-q",
           "-p", "no:cacheprovider", "-m", "loopback", *pytest_args, str(module)]
    env = {**os.environ, ENV: "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=Path(__file__).resolve().parents[2])
