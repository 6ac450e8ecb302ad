"""Mounting latencyfs (benchmarks/latencyfs.c): a FUSE passthrough with a
delay per open, built on first use, mounted bounded in time and always
unmounted.

``LatencyFS(source, delay_ms=5)`` is a context manager: on entry it builds
the binary if needed (gcc and ``pkg-config fuse3``: Debian's fuse3 and
libfuse3-dev), starts the daemon in the foreground as this process's child
and waits (at most ``MOUNT_TIMEOUT_S``) until the mount answers; on exit, on
an exception in the body, and at interpreter exit if neither ran, it
unmounts with ``fusermount3 -u``, lazily (``-u -z``) when the mount is
busy, and ends the daemon. ``unavailable()`` says why FUSE cannot be used
here (None when it can), for a skip line.

Standard library only: tests/storage imports this module too.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

__all__ = ["BINARY", "SOURCE", "LatencyFS", "LatencyFSUnavailable", "build", "unavailable"]

SOURCE = Path(__file__).with_name("latencyfs.c")
BINARY = Path(__file__).with_name("latencyfs")
MOUNT_TIMEOUT_S = 10.0
UNMOUNT_TIMEOUT_S = 10.0
# requests the daemon serves at once (libfuse's default is 10)
MAX_THREADS = 64


class LatencyFSUnavailable(RuntimeError):
    """FUSE cannot be used here: no /dev/fuse, no fusermount3, no compiler or
    fuse3 headers, or the mount did not come up in time."""


def unavailable() -> Optional[str]:
    """Why latencyfs cannot be mounted here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the fuse kernel module, or a container without the device)"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (apt-get install fuse3)"
    if BINARY.exists() and (not SOURCE.exists()
                            or BINARY.stat().st_mtime >= SOURCE.stat().st_mtime):
        return None
    if not SOURCE.exists():
        return f"{SOURCE} is not here (a checkout has it; the wheel does not)"
    if shutil.which("gcc") is None or shutil.which("pkg-config") is None:
        return "no gcc or pkg-config to build benchmarks/latencyfs"
    if subprocess.run(["pkg-config", "--exists", "fuse3"], check=False).returncode != 0:
        return "no fuse3 headers (apt-get install libfuse3-dev)"
    return None


def build() -> Path:
    """The latencyfs binary, compiled from latencyfs.c when missing or older
    (into a temporary name first, so concurrent builds never see half a file)."""
    reason = unavailable()
    if reason is not None:
        raise LatencyFSUnavailable(reason)
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True,
                           capture_output=True, text=True).stdout.split()
    partial = BINARY.with_name(f".latencyfs.{os.getpid()}")
    done = subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(partial),
                           str(SOURCE), *flags], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise LatencyFSUnavailable(f"building latencyfs failed: {done.stderr.strip()}")
    partial.replace(BINARY)
    return BINARY


class LatencyFS:
    """``source`` served read-only at ``self.path`` with ``delay_ms`` per open
    and at most ``bw_mbps`` MB/s of reads (0: no cap). The knobs change at
    run time (``set_delay``, ``set_bandwidth``, ``fail``); ``stats()`` is the
    daemon's counters, ``cpu_s()`` its CPU from /proc."""

    def __init__(self, source: os.PathLike | str, delay_ms: float = 0.0,
                 bw_mbps: float = 0.0, mountpoint: Optional[os.PathLike | str] = None):
        self.source = Path(source).resolve()
        self.delay_ms, self.bw_mbps = delay_ms, bw_mbps
        self._own_dir = mountpoint is None
        self.path = Path(mountpoint) if mountpoint is not None else Path(
            tempfile.mkdtemp(prefix="latencyfs-"))
        self.process: Optional[subprocess.Popen] = None

    # -- mounting --------------------------------------------------------

    def mount(self) -> "LatencyFS":
        """Starts the daemon and waits for the mount; on any failure nothing
        is left mounted or running (and a mount point made here is removed)."""
        try:
            return self._mount()
        except BaseException:
            self.unmount()
            raise

    def _mount(self) -> "LatencyFS":
        binary = build()
        self.path.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(binary), "--delay-ms", str(self.delay_ms), "--bw-mbps", str(self.bw_mbps),
             str(self.source), str(self.path), "-f", "-o", f"max_threads={MAX_THREADS}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        atexit.register(self.unmount)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not self.mounted():
            if self.process.poll() is not None or time.monotonic() > deadline:
                error = self._stop_process()  # (mount() then unmounts)
                raise LatencyFSUnavailable(f"latencyfs did not mount {self.path} within "
                                           f"{MOUNT_TIMEOUT_S:g} s: {error or 'no message'}")
            time.sleep(0.02)
        return self

    def mounted(self) -> bool:
        """Whether the daemon answers at the mount point."""
        try:
            return (self.path / ".stats").exists() and os.path.ismount(self.path)
        except OSError:
            return False

    def unmount(self) -> None:
        """Unmounts (lazily when busy) and ends the daemon; safe to call twice."""
        atexit.unregister(self.unmount)
        if self._in_mount_table():
            for command in (["fusermount3", "-u", str(self.path)],
                            ["fusermount3", "-u", "-z", str(self.path)]):
                try:
                    if subprocess.run(command, capture_output=True, timeout=UNMOUNT_TIMEOUT_S,
                                      check=False).returncode == 0:
                        break
                except subprocess.TimeoutExpired:
                    continue
        self._stop_process()
        if self._own_dir and not self._in_mount_table():
            try:
                self.path.rmdir()
            except OSError:
                pass

    def _in_mount_table(self) -> bool:
        target = os.fsencode(os.path.realpath(self.path))
        with open("/proc/self/mountinfo", "rb") as f:
            # field 5 is the mount point, with spaces etc. escaped as \040
            return any(line.split()[4].replace(b"\\040", b" ") == target for line in f)

    def _stop_process(self) -> str:
        """Ends the daemon (it leaves by itself once unmounted); its stderr."""
        process, self.process = self.process, None
        if process is None:
            return ""
        try:
            _, err = process.communicate(timeout=UNMOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        return err.decode(errors="replace").strip()

    def __enter__(self) -> "LatencyFS":
        return self.mount()

    def __exit__(self, *exc: Any) -> None:
        self.unmount()

    # -- the daemon's counters and knobs ---------------------------------

    def stats(self) -> dict[str, Any]:
        """The daemon's counters: opens, reads, bytes, open_errors, getattrs
        (the attribute requests that reached it), in_flight (opens and reads
        being served now), max_in_flight, delay_ms, bw_mbps, cpu_user_s,
        cpu_system_s, pid."""
        return json.loads((self.path / ".stats").read_text())

    def settle(self, quiet_s: float = 0.1, timeout_s: float = 10.0) -> dict[str, Any]:
        """Waits until nothing is in flight and no open arrived for
        ``quiet_s`` (read threads blocked in an open look idle to the
        scheduler, so a loader's idle workers may still be reading); the
        counters then, or after ``timeout_s`` whatever they are."""
        deadline = time.monotonic() + timeout_s
        last = self.stats()
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = self.stats()
            if now["in_flight"] == 0 and now["opens"] == last["opens"]:
                return now
            last = now
        return last

    def control(self, *commands: str) -> None:
        with open(self.path / ".control", "w") as f:
            f.write("".join(c + "\n" for c in commands))

    def set_delay(self, ms: float) -> None:
        """The delay every later open() takes, in milliseconds."""
        self.control(f"delay_ms {ms:g}")
        self.delay_ms = ms

    def set_bandwidth(self, mbps: float) -> None:
        """The read bandwidth cap in MB/s (0: none)."""
        self.control(f"bw_mbps {mbps:g}")
        self.bw_mbps = mbps

    def fail(self, relative: str) -> None:
        """Opens of ``relative`` (a path under the mount) fail with EIO from now on."""
        self.control(f"fail /{relative.lstrip('/')}")

    def clear_failures(self) -> None:
        self.control("clear")

    def reset(self) -> None:
        """Zeroes the counters (max_in_flight restarts from those in flight now)."""
        self.control("reset")

    def cpu_s(self) -> float:
        """The daemon's user + system CPU seconds, from /proc/<pid>/stat."""
        if self.process is None:
            raise LatencyFSUnavailable("latencyfs is not mounted")
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
