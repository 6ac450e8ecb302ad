"""Slow-storage benchmark: the loaders on a FUSE mount that adds a round trip
to every open (latencyfs), at 0, 2, 5 and 20 ms, and on the local disk, in
steady state.

    python -m benchmarks.bench_storage [--data PATH] [--quick | --full] [--json PATH]

The data is served through benchmarks/latencyfs (built here on first use:
gcc, fuse3 and libfuse3-dev), mounted once for the whole run; its delay per
open is changed at run time between rounds, so every row keeps its workers
alive (persistent_workers) and the rows at every delay share one mount.
Rows: ImageFolder+PIL, DataLoader(FastImageFolder) and FastLoader, at
num_workers = the usable CPUs and 4x that (--full; --quick: the CPUs only),
train chain RandomResizedCrop(224) + flip -> uint8 (PILToTensor), batch 64;
and, when the datasets take ``cache=``, FastLoader with the RAM cache sized
to the dataset (filled once before the rounds), whose rounds must reach the
filesystem with no open at all.

"Today" against read-ahead: at num_workers = the CPUs, DataLoader(FastImageFolder)
and FastLoader run twice more, with ``readahead=0`` (read-ahead off: each
file read by the decoding thread, as before issue 28), on latencyfs at 0 ms
and on the local disk (the data folder itself, not through FUSE), where the
read-ahead rows also run; each such row reports its rate against its
read-ahead-off twin (``vs_readahead_off``).

Rounds are bench_loader's (``run_round``: timed after the batches made
ahead and the ramp wave, to the wave before the last, CPU of the main
process and its workers per image) and interleaved: per round every place
(the local disk, then every delay; in the reverse order every other round),
and at each place every row (in the reverse order every other round). A row
reports per place the median images/s of its rounds and its ratio to its
own rate at 0 ms, to ImageFolder's at the same place and to its
read-ahead-off twin, each as the median of per-round ratios (the rounds
paired ran a few seconds apart), the CPU ms per image and its ratio to the
same row on the local disk, the daemon's own CPU per file it opened (from
/proc/<pid>/stat of latencyfs, over the round and the idle wait after it)
with the opens it counted, and the peaks of its read-ahead windows (bytes
and reads in flight, over every process, each worker's
``readahead_stats()``, recorded by the dataset after each batch) against
the byte cap.

Where FUSE cannot be used (no /dev/fuse, no fusermount3, no compiler or
headers) it prints one skip line and writes ``{"skipped": reason}``.
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import statistics
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

import fastdecode as fd
from fastdecode import _system

from . import _common as common
from . import _latencyfs
from . import _procs as procs
from . import bench_loader as bl

LOADERS = ("ImageFolder+PIL", "FastImageFolder", "FastLoader")
CACHED = "FastLoader+cache"
OFF = ", read-ahead off"  # the suffix of a row with readahead=0 ("today")
PAIRED = ("FastImageFolder", "FastLoader")  # the loaders run with read-ahead off too
LOCAL = "local"  # the place of the rows on the local disk (else a delay in ms)
ORDER = (*LOADERS, CACHED, *(kind + OFF for kind in PAIRED))
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(delays=[0, 5, 20], workers_x=[1], batch=64, batches=4, rounds=3,
                  round_cap_s=0.0),
    "default": dict(delays=[0, 2, 5, 20], workers_x=[1], batch=64, batches=6, rounds=5,
                    round_cap_s=4.0),
    "full": dict(delays=[0, 2, 5, 20], workers_x=[1, 4], batch=64, batches=6, rounds=5,
                 round_cap_s=4.0),
}
# issue 28's acceptance, at num_workers = the usable CPUs: summary key and
# the range it must be in (low, high; None: unbounded)
TARGETS: dict[str, tuple[str, Optional[float], Optional[float]]] = {
    "FastImageFolder 5 ms >= 0.9x of 0 ms": ("FastImageFolder_5ms_vs_0ms", 0.9, None),
    "FastImageFolder 20 ms >= 0.8x of 0 ms": ("FastImageFolder_20ms_vs_0ms", 0.8, None),
    "FastLoader 5 ms >= 0.9x of 0 ms": ("FastLoader_5ms_vs_0ms", 0.9, None),
    "FastLoader 20 ms >= 0.8x of 0 ms": ("FastLoader_20ms_vs_0ms", 0.8, None),
    "FastImageFolder 5 ms >= 2.5x ImageFolder": ("FastImageFolder_vs_imagefolder_5ms", 2.5, None),
    "FastLoader 5 ms >= 2.5x ImageFolder": ("FastLoader_vs_imagefolder_5ms", 2.5, None),
    "FastImageFolder 0 ms, read-ahead on >= 0.98x off": ("FastImageFolder_0ms_vs_off", 0.98, None),
    "FastImageFolder local disk, read-ahead on >= 0.98x off":
        ("FastImageFolder_local_vs_off", 0.98, None),
    "FastLoader 0 ms, read-ahead on >= 0.98x off": ("FastLoader_0ms_vs_off", 0.98, None),
    "FastLoader local disk, read-ahead on >= 0.98x off": ("FastLoader_local_vs_off", 0.98, None),
    "FastImageFolder CPU/image within 10 % of local, every delay":
        ("FastImageFolder_cpu_vs_local_worst", 0.9, 1.1),
    "FastLoader CPU/image within 10 % of local, every delay":
        ("FastLoader_cpu_vs_local_worst", 0.9, 1.1),
    "peak read-ahead bytes <= the cap, every row": ("readahead_peak_vs_cap", None, 1.0),
    "cache epoch 2 at 5 ms >= 0.95x of 0 ms": ("cache_5ms_vs_0ms", 0.95, None),
}
CACHE_SLACK = 1.25  # the cache's budget: the dataset's bytes times this, plus a MiB

Place = Union[float, str]  # a delay in ms on latencyfs, or LOCAL


def dataset_takes(name: str) -> bool:
    """Whether FastImageFolder has the keyword ``name`` (``readahead``, ``cache``)."""
    return name in inspect.signature(fd.FastImageFolder.__init__).parameters


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def base_kind(name: str) -> str:
    """The loader of row ``name`` (its read-ahead-off suffix removed)."""
    return name[:-len(OFF)] if name.endswith(OFF) else name


class RecordingFolder(fd.FastImageFolder):
    """FastImageFolder that, after each batch, records the peaks of the
    calling process's read-ahead window (``readahead_stats()``) in
    ``stats_dir``/<pid>.json when they rose: the workers' peaks reach the
    benchmark without a channel of their own (a write per new peak, none in
    steady state)."""

    stats_dir: Optional[str] = None

    def __getitems__(self, indices):
        samples = super().__getitems__(indices)
        if self.stats_dir is not None:
            self.record_peaks()
        return samples

    def record_peaks(self) -> None:
        stats = self.readahead_stats()
        peaks = (os.getpid(), stats["peak_bytes"], stats["peak_in_flight"],
                 stats.get("peak_depth", 0))
        if self.__dict__.get("_recorded") == peaks:
            return
        self.__dict__["_recorded"] = peaks
        options = self._reads_here().options
        record = {"pid": peaks[0], "peak_bytes": peaks[1], "peak_in_flight": peaks[2],
                  "peak_depth": peaks[3], "max_bytes": options.max_bytes,
                  "depth": options.depth, "max_depth": getattr(options, "max_depth", None)}
        path = Path(self.stats_dir) / f"{peaks[0]}.json"
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(record))
        partial.replace(path)


def read_peaks(stats_dir: Path) -> dict[str, Any]:
    """The peaks the processes of one row recorded (RecordingFolder): the
    highest of each over them, and the byte cap (the lowest any had)."""
    records = [json.loads(p.read_text()) for p in sorted(stats_dir.glob("*.json"))]
    if not records:
        return {"readahead_peak_bytes": None, "readahead_cap_bytes": None,
                "readahead_peak_in_flight": None, "readahead_peak_depth": None,
                "readahead_processes": 0}
    return {"readahead_peak_bytes": max(r["peak_bytes"] for r in records),
            "readahead_cap_bytes": min(r["max_bytes"] for r in records),
            "readahead_peak_in_flight": max(r["peak_in_flight"] for r in records),
            "readahead_peak_depth": max(r["peak_depth"] for r in records),
            "readahead_processes": len(records)}


def stats_tag(name: str, workers: int, where: str) -> str:
    """The folder name of one row's recorded peaks."""
    return f"{name}-{workers}-{where}".replace(OFF, "-off").replace(" ", "_")


def make_loader_for(cache_bytes: int, stats_root: Optional[Path] = None,
                    local: Optional[Path] = None):
    """bench_loader.make_loader for ImageFolder; the fastdecode rows on a
    RecordingFolder (its peaks in ``stats_root``/stats_tag(...)/, when
    given; a row is on the local disk when its root is ``local``),
    read-ahead off for a name ending in OFF, and the cached FastLoader
    (filled before it is returned)."""
    def make(name: str, root: Path, chain, workers: int, batch: int, samples: int):
        kind = base_kind(name)
        if kind == "ImageFolder+PIL":
            return bl.make_loader(kind, root, chain, workers, batch, samples)
        options: dict[str, Any] = {}
        if name.endswith(OFF):
            options["readahead"] = 0  # only built when it takes readahead=
        if kind == CACHED:
            options["cache"] = cache_bytes  # only built when it takes cache=
        ds = RecordingFolder(root, chain, **options)
        if stats_root is not None:
            where = LOCAL if local is not None and Path(root) == Path(local) else "fuse"
            stats_dir = stats_root / stats_tag(name, workers, where)
            stats_dir.mkdir(parents=True, exist_ok=True)
            ds.stats_dir = str(stats_dir)
        if kind == CACHED:
            ds.__getitems__(list(range(len(ds))))  # every file read once: the cache is full
        sampler = bl.Draws(ds, samples)
        kwargs: dict[str, Any] = dict(
            batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True,
            pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)
        if kind in ("FastLoader", CACHED):
            return fd.FastLoader(ds, **kwargs), sampler
        return torch.utils.data.DataLoader(ds, **kwargs), sampler
    return make


@dataclass
class Cell:
    """One row at one place: per round its images/s, CPU s per image, its
    (voluntary, involuntary) context switches per image over every thread,
    and the daemon's opens and CPU seconds over the round (none on the
    local disk)."""

    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    opens: list[int] = field(default_factory=list)
    daemon_cpu_s: list[float] = field(default_factory=list)
    switches: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Plan:
    """Which rows run where, at one worker count: ``fuse`` at every delay,
    ``zero_only`` on latencyfs at 0 ms only, ``local`` on the local disk."""

    fuse: list[str]
    zero_only: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)

    def rows_at(self, place: Place) -> list[str]:
        """The rows at ``place``, a read-ahead-off row right after its twin
        (the pair a ratio is taken of runs back to back)."""
        if place == LOCAL:
            return list(self.local)
        if place != 0:
            return list(self.fuse)
        out = []
        for name in self.fuse:
            out += [name] + [off for off in self.zero_only if base_kind(off) == name]
        return out + [off for off in self.zero_only if base_kind(off) not in self.fuse]


def plan_for(kinds: list[str], workers: int, usable: int, paired: bool) -> Plan:
    """The rows at ``workers``: the comparisons with read-ahead off and the
    local disk only at num_workers = the CPUs (the acceptance's), and only
    when the datasets take ``readahead=`` (``paired``)."""
    if workers != usable or not paired:
        return Plan(list(kinds))
    pairs = [kind for kind in PAIRED if kind in kinds]
    return Plan(list(kinds), [kind + OFF for kind in pairs],
                [name for kind in pairs for name in (kind, kind + OFF)])


def measure(fs: _latencyfs.LatencyFS, data: Path, chain, settings: dict, kinds: list[str], bar,
            cache_bytes: int, stats_root: Optional[Path] = None,
            paired: bool = True) -> tuple[dict[tuple[str, int, Place], Cell], dict]:
    """Every row's rounds (Cells by (row, workers, place)) and its
    read-ahead peaks (by (row, workers, "fuse" or LOCAL))."""
    cells: dict[tuple[str, int, Place], Cell] = {}
    peaks: dict[tuple[str, int, str], dict] = {}
    usable = settings["usable"]
    make = make_loader_for(cache_bytes, stats_root, data)
    for workers in [usable * x for x in settings["workers_x"]]:
        plan = plan_for(kinds, workers, usable, paired)
        fs.set_delay(0)
        wave = max(workers, 1)
        batches = -(-settings["batches"] // wave) * wave
        opened: dict[tuple[str, str], Any] = {}
        for name, where, root in ([(n, "fuse", fs.path) for n in plan.fuse + plan.zero_only]
                                  + [(n, LOCAL, data) for n in plan.local]):
            bar.set_postfix_str(f"{name} num_workers={workers} {where}: start-up")
            with warnings.catch_warnings():  # 4x the CPUs is the point of those rows
                warnings.filterwarnings("ignore", ".*(oversubscri|This DataLoader will create)")
                row = bl.open_row("train_uint8", name, root, chain, workers,
                                  settings["batch"], max(batches, 3 * wave) * settings["batch"],
                                  make)
            row.sampler.count = settings["batch"] * bl.round_batches(
                row, settings["batch"], batches, settings["round_cap_s"])
            opened[(name, where)] = row
            bar.update()
        places: list[Place] = [LOCAL, *settings["delays"]] if plan.local else list(
            settings["delays"])
        for r in range(settings["rounds"]):
            for place in common.round_order(places, r):
                where = LOCAL if place == LOCAL else "fuse"
                if place != LOCAL:
                    fs.set_delay(place)
                for name in common.round_order(plan.rows_at(place), r):
                    row = opened[(name, where)]
                    label = "local disk" if place == LOCAL else f"{place:g} ms"
                    bar.set_postfix_str(f"{name} num_workers={workers} {label}, round {r + 1}")
                    before, cpu0 = fs.stats()["opens"], fs.cpu_s()
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", "FastLoader dropped the next epoch",
                                                RuntimeWarning)
                        warnings.filterwarnings("ignore", ".*oversubscri")
                        bl.run_round(row)
                    # its workers' reads ahead, blocked in opens, look idle to
                    # run_round's wait: they are this row's, not the next one's
                    after = fs.settle()
                    cell = cells.setdefault((name, workers, place), Cell())
                    cell.rates.append(row.rates.pop())
                    cell.cpu.append(row.cpu.pop())
                    cell.switches.append(row.switches.pop())
                    if place != LOCAL:
                        cell.opens.append(after["opens"] - before)
                        cell.daemon_cpu_s.append(fs.cpu_s() - cpu0)
                    bar.update()
        for row in opened.values():
            row.source = None  # ends its persistent workers
        gc.collect()
        if stats_root is not None:
            for (name, where) in opened:
                peaks[(name, workers, where)] = read_peaks(
                    stats_root / stats_tag(name, workers, where))
    return cells, peaks


def results(cells: dict[tuple[str, int, Place], Cell],
            peaks: Optional[dict[tuple[str, int, str], dict]] = None) -> list[dict]:
    peaks = peaks or {}
    out = []
    for (name, workers, place), cell in cells.items():
        kind = base_kind(name)
        local = place == LOCAL
        zero = None if local else cells.get((name, workers, 0))
        base = cells.get(("ImageFolder+PIL", workers, place))
        off = cells.get((name + OFF, workers, place)) if not name.endswith(OFF) else None
        # the CPU's reference: the same row on the local disk (the cache's: FastLoader's)
        here = cells.get(("FastLoader" if name == CACHED else name, workers, LOCAL))
        opens = sum(cell.opens)
        row_peaks = peaks.get((name, workers, LOCAL if local else "fuse"), {})
        peak, cap = row_peaks.get("readahead_peak_bytes"), row_peaks.get("readahead_cap_bytes")
        out.append({
            "loader": kind, "readahead": ("off" if name.endswith(OFF) else
                                          None if kind == "ImageFolder+PIL" else "on"),
            "num_workers": workers, "storage": LOCAL if local else "latencyfs",
            "delay_ms": None if local else place,
            "images_per_s": statistics.median(cell.rates), "round_images_per_s": cell.rates,
            "min_images_per_s": min(cell.rates), "max_images_per_s": max(cell.rates),
            "cpu_ms_per_image": statistics.median(cell.cpu) * 1000,
            # a thread woken on a busy CPU preempting the decode there is an
            # involuntary switch (the read threads' SCHED_BATCH holds them back)
            **procs.switch_medians(cell.switches),
            "vs_0ms": common.paired_ratio(cell.rates, zero.rates) if zero is not None else None,
            "vs_imagefolder": (common.paired_ratio(cell.rates, base.rates)
                               if base is not None and kind != "ImageFolder+PIL" else None),
            "vs_readahead_off": common.paired_ratio(cell.rates, off.rates) if off is not None else None,
            "cpu_vs_local": (common.paired_ratio(cell.cpu, here.cpu)
                             if here is not None and not local else None),
            # the CPU the delay itself costs (latencyfs at 0 ms: the same FUSE
            # reads) and the CPU read-ahead costs (against its readahead=0 twin)
            "cpu_vs_0ms": common.paired_ratio(cell.cpu, zero.cpu) if zero is not None else None,
            "cpu_vs_readahead_off": common.paired_ratio(cell.cpu, off.cpu) if off is not None else None,
            "opens_per_round": None if local else cell.opens,
            "daemon_cpu_us_per_file": (sum(cell.daemon_cpu_s) / opens * 1e6) if opens else None,
            **row_peaks,
            "readahead_peak_within_cap": None if peak is None or cap is None else peak <= cap,
        })
    return sorted(out, key=row_order)


def row_order(row: dict) -> tuple:
    """Worker count, then the local disk before latencyfs by delay, then the loader."""
    name = row["loader"] + (OFF if row["readahead"] == "off" else "")
    return (row["num_workers"], row["storage"] != LOCAL, row["delay_ms"] or 0,
            ORDER.index(name))


def in_range(value: Optional[float], low: Optional[float], high: Optional[float]) -> Optional[bool]:
    if value is None:
        return None
    return (low is None or value >= low) and (high is None or value <= high)


def summary(rows: list[dict], usable: int) -> dict[str, Any]:
    """The issue's ratios at num_workers = the usable CPUs."""
    mine = [r for r in rows if r["num_workers"] == usable]

    def get(kind: str, place: Place, key: str, readahead: Optional[str] = "on"):
        if kind in ("ImageFolder+PIL",):
            readahead = None
        row = next((r for r in mine if r["loader"] == kind and r["readahead"] == readahead
                    and (r["storage"] == LOCAL if place == LOCAL
                         else r["storage"] != LOCAL and r["delay_ms"] == place)), None)
        return None if row is None else row[key]

    out: dict[str, Any] = {"num_workers": usable}
    for kind in ("FastImageFolder", "FastLoader"):
        out[f"{kind}_5ms_vs_0ms"] = get(kind, 5, "vs_0ms")
        out[f"{kind}_20ms_vs_0ms"] = get(kind, 20, "vs_0ms")
        out[f"{kind}_vs_imagefolder_5ms"] = get(kind, 5, "vs_imagefolder")
        out[f"{kind}_0ms_vs_off"] = get(kind, 0, "vs_readahead_off")
        out[f"{kind}_local_vs_off"] = get(kind, LOCAL, "vs_readahead_off")
        ratios = {f"{r['delay_ms']:g} ms": r["cpu_vs_local"] for r in mine
                  if r["loader"] == kind and r["readahead"] == "on"
                  and r["cpu_vs_local"] is not None}
        out[f"{kind}_cpu_vs_local"] = ratios
        out[f"{kind}_cpu_vs_0ms"] = {f"{r['delay_ms']:g} ms": r["cpu_vs_0ms"] for r in mine
                                     if r["loader"] == kind and r["readahead"] == "on"
                                     and r["delay_ms"] and r["cpu_vs_0ms"] is not None}
        out[f"{kind}_cpu_local_vs_off"] = get(kind, LOCAL, "cpu_vs_readahead_off")
        out[f"{kind}_cpu_0ms_vs_off"] = get(kind, 0, "cpu_vs_readahead_off")
        out[f"{kind}_cpu_vs_local_worst"] = (max(ratios.values(), key=lambda x: abs(x - 1))
                                             if ratios else None)
    out["cache_5ms_vs_0ms"] = get(CACHED, 5, "vs_0ms")
    out["cache_opens_at_5ms"] = get(CACHED, 5, "opens_per_round")
    measured = [r for r in rows if r.get("readahead_peak_bytes") is not None
                and r.get("readahead_cap_bytes")]
    out["readahead_peak_bytes"] = max((r["readahead_peak_bytes"] for r in measured), default=None)
    out["readahead_cap_bytes"] = min((r["readahead_cap_bytes"] for r in measured), default=None)
    out["readahead_peak_vs_cap"] = max((r["readahead_peak_bytes"] / r["readahead_cap_bytes"]
                                        for r in measured), default=None)
    out["targets_met"] = {name: in_range(out.get(key), low, high)
                          for name, (key, low, high) in TARGETS.items()}
    return out


def place_label(row: dict) -> str:
    return "local disk" if row["storage"] == LOCAL else f"{row['delay_ms']:g} ms"


def mib(value: Optional[int]) -> str:
    return "" if value is None else f"{value / 2**20:.1f}"


def table(rows: list[dict]) -> str:
    def x(value) -> str:
        return "" if value is None else f"{value:.2f}x"

    lines = ["| loader | read-ahead | workers | storage | images/s (median) | min-max | "
             "vs own 0 ms | vs ImageFolder | vs read-ahead off | CPU ms/image | CPU vs local | "
             "CPU vs own 0 ms | CPU vs read-ahead off | involuntary switches/image | "
             "opens per round | latencyfs CPU us/file | peak read-ahead MiB (cap) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        daemon = r["daemon_cpu_us_per_file"]
        switches = r.get("involuntary_switches_per_image")
        opens = r["opens_per_round"]
        peak, cap = r.get("readahead_peak_bytes"), r.get("readahead_cap_bytes")
        lines.append(
            f"| {r['loader']} | {r['readahead'] or ''} | {r['num_workers']} | {place_label(r)} | "
            f"{r['images_per_s']:,.0f} | {r['min_images_per_s']:,.0f}-"
            f"{r['max_images_per_s']:,.0f} | {x(r['vs_0ms'])} | {x(r['vs_imagefolder'])} | "
            f"{x(r.get('vs_readahead_off'))} | {r['cpu_ms_per_image']:.2f} | "
            f"{x(r.get('cpu_vs_local'))} | {x(r.get('cpu_vs_0ms'))} | "
            f"{x(r.get('cpu_vs_readahead_off'))} | "
            f"{'' if switches is None else f'{switches:.1f}'} | "
            f"{'' if opens is None else f'{statistics.median(opens):,.0f}'} | "
            f"{'' if daemon is None else f'{daemon:,.0f}'} | "
            f"{'' if peak is None else f'{mib(peak)} ({mib(cap)})'} |")
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder (served through latencyfs)")
    parser.add_argument("--full", action="store_true",
                        help="num_workers = the usable CPUs and 4x that (default: the CPUs)")
    parser.add_argument("--delays", type=float, nargs="+",
                        help="ms per open (default 0 2 5 20; quick 0 5 20); 0 is always added")
    parser.add_argument("--rounds", type=int,
                        help="timed rounds per row (default 5; quick 3; at least 3)")
    args = parser.parse_args(argv)
    if args.quick and args.full:
        parser.error("--quick and --full exclude each other")
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be >= 3 (a median needs three)")
    return args


def notes(report: dict, kinds: list[str]) -> list[str]:
    """The closing lines: each summary figure, as measured (the project's
    targets stay in the JSON's ``targets_met``, never printed to a user)."""
    out = []
    for key, value in report["summary"].items():
        if key == "targets_met":
            continue
        if isinstance(value, float):
            out.append(f"{key}: {value:.2f}x" if "bytes" not in key else f"{key}: {value:,.0f}")
        elif isinstance(value, dict):
            out.append(f"{key}: " + (", ".join(f"{k} {v:.2f}x" for k, v in value.items())
                                     or "not measured"))
        else:
            out.append(f"{key}: {value:,}" if isinstance(value, int) else f"{key}: {value}")
    if CACHED not in kinds:
        out.append("no cache= in this build: the cached row is left out")
    if not dataset_takes("readahead"):
        out.append("no readahead= in this build: the read-ahead-off and local rows are left out")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    settings = dict(MODES[mode])
    settings["usable"] = _system.usable_cpus()
    if args.delays:
        settings["delays"] = sorted({0.0, *args.delays})
    settings["rounds"] = args.rounds or settings["rounds"]
    report: dict[str, Any] = {"command": common.command_line(__name__, argv), "mode": mode,
                              "settings": settings}
    reason = _latencyfs.unavailable()
    if reason is None:
        try:
            _latencyfs.build()
        except _latencyfs.LatencyFSUnavailable as exc:
            reason = str(exc)
    if reason is not None:
        common.emit(f"storage: skipped, FUSE is unavailable here ({reason})")
        report["skipped"] = f"FUSE is unavailable: {reason}"
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0
    data = Path(args.data or common.default_data()).resolve()
    kinds = list(LOADERS) + ([CACHED] if dataset_takes("cache") else [])
    paired = dataset_takes("readahead")
    cache_bytes = int(tree_bytes(data) * CACHE_SLACK) + (1 << 20)
    report.update(data=str(data), batch_size=settings["batch"],
                  machine=common.machine_facts(), versions=common.library_versions(),
                  readahead=(repr(_readahead_defaults()) if paired else "not in this build"),
                  cache_bytes=cache_bytes if CACHED in kinds else None)
    chain = bl.chains(["train_uint8"])["train_uint8"]
    ticks = 0
    for x in settings["workers_x"]:
        plan = plan_for(kinds, settings["usable"] * x, settings["usable"], paired)
        ticks += len(plan.fuse) + len(plan.zero_only) + len(plan.local) + settings["rounds"] * (
            len(plan.fuse) * len(settings["delays"]) + len(plan.zero_only) + len(plan.local))
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as stats_root, \
            _latencyfs.LatencyFS(data) as fs, common.progress("storage", ticks) as bar:
        cells, peaks = measure(fs, data, chain, settings, kinds, bar, cache_bytes,
                               Path(stats_root), paired)
        report["latencyfs"] = fs.stats()
    rows = results(cells, peaks)
    report["rows"] = rows
    report["summary"] = summary(rows, settings["usable"])
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(f"\n### slow storage (latencyfs) and the local disk, train chain -> uint8, batch "
                f"{settings['batch']}, median of {settings['rounds']} interleaved rounds; "
                f"read-ahead: {report['readahead']}\n\n" + table(rows) + "\n\n"
                + "\n".join(f"- {n}" for n in notes(report, kinds)))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _readahead_defaults():
    from fastdecode.datasets import ReadAheadOptions

    return ReadAheadOptions.resolve(None)


if __name__ == "__main__":
    sys.exit(main())
