"""What a process and its children use, read from /proc: CPU seconds,
context switches and proportional set size (PSS counts pages shared across
the tree once), for the loader benchmark, whose workers stay alive between
rounds."""

from __future__ import annotations

import os
import resource
import statistics
import threading
from typing import Optional

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def children(pid: int | None = None) -> list[int]:
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_mib(pids: list[int]) -> float:
    return sum(_pss_kib(p) for p in pids) / 1024


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of this process (all its threads) and of the
    live processes ``pids`` (utime + stime from /proc/PID/stat)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14, 15 of stat
    return total


def context_switches(pids: list[int]) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every live thread of
    this process and of the live processes ``pids`` (/proc/PID/task/*/status;
    a thread that ended is no longer counted, so take the difference over a
    span in which the threads live on: a loader's persistent workers and
    their read threads). An involuntary switch is a thread preempted while
    it could run, most often by another thread's wake-up."""
    voluntary = involuntary = 0
    for pid in [os.getpid(), *pids]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            voluntary += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            involuntary += int(line.split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return voluntary, involuntary


def switch_medians(rounds: list[tuple[float, float]]) -> dict[str, Optional[float]]:
    """A row's result keys for its rounds' (voluntary, involuntary) context
    switches per image: the median of each, None without rounds."""
    return {f"{kind}_switches_per_image": (statistics.median(r[k] for r in rounds)
                                           if rounds else None)
            for k, kind in enumerate(("voluntary", "involuntary"))}


class PeakMemory:
    """The peak PSS of this process plus ``pids`` (or all its children when
    None, less ``exclude``), sampled every ``interval`` seconds while the block
    runs. Reading PSS walks each process's page tables and takes its memory
    lock: never inside a timed round (sampled every 50 ms it cost the loaders
    under test a third of their rate)."""

    def __init__(self, pids: list[int] | None = None, interval: float = 0.05,
                 exclude: frozenset[int] = frozenset()) -> None:
        self.pids, self.interval, self.peak, self.exclude = pids, interval, 0.0, exclude
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = [p for p in children() if p not in self.exclude] if self.pids is None \
                else self.pids
            self.peak = max(self.peak, pss_mib([os.getpid(), *pids]))
            self._stop.wait(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
