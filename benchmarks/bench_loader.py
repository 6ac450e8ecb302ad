"""End-to-end loader benchmark: ImageFolder+PIL vs FastImageFolder (stock
DataLoader) vs FastLoader, against the machine's limit, in steady state.

    python -m benchmarks.bench_loader [--data PATH] [--quick | --full] [--json PATH]

Each row (chain x loader x num_workers) keeps its workers alive
(persistent_workers) and runs an untimed first epoch, which measures its
start-up (building the loader, worker start and the first batch) and its
rate. Then the rows take turns (every other round in the reverse order),
round after round (>= 3), each round one epoch of whole waves of batches, so
the noise of a shared machine hits every row alike; after each round the
benchmark waits until that row's workers are idle (a FastLoader's draw the
next epoch's batches ahead: they run then, not in the next row's round). A
round is timed in steady state: from the arrival of the first wave (one
batch per worker) after the batches its workers had made before it began
(FastLoader.made_ahead; none for DataLoader), to the arrival of the wave
before its last, counting the batches in between, as bench_ray leaves out
each epoch's first batches. The workers, idle at the round's start, start
the first wave together, so it is the round's ramp. In the last wave the
loaders part: a DataLoader's workers that are done go idle and hand their
CPU to those still working, which then finish sooner than in steady state,
while a FastLoader's start the next epoch's batches and keep it; timed to
the end, the same work looked 3-5 % slower on FastLoader at 8 workers (its
workers' CPU in that window 1.43-1.45 ms per image delivered against
1.38-1.39, the same 1.35-1.41 over the whole round). Timed from an arrival
to an arrival both ends are in the same phase of the waves. Rounds hold
enough timed waves that each excluded wave (about one wave's time) is under
5 % of the timed part, and that the start-up is (up to a cap of seconds per
round; a row still over is named). A row reports the median images/s of its
rounds, their spread ((max - min) / median; over 10 % the row is marked
noisy), the CPU ms per image of the main process and its own workers (over
the whole round and the wait after it: what its next round was given ahead
is balanced by what this one was), and its efficiency: the share of the
limit it reaches. The limit is usable CPUs / the single-thread cost per
image of FastImageFolder's fused __getitems__ (a worker's path, in batches
of the row's size), measured in the same rounds.
FastLoader against DataLoader(FastImageFolder) is also read round by round
(their rounds run back to back, in turns in the other order every other
round): the median of the per-round ratios, which the machine's slower
drifts cancel out of, with their range.

The default (``fastdecode bench`` and ``make bench``) is one worker count (the
usable CPUs); ``--full`` sweeps num_workers 0, 1, 2, 4, 8 (about 10 minutes
on 2 cores) with a 1,000,000-entry file list; ``--quick`` is a smoke run;
``--chains`` adds a uint8 chain.
"""

# Over ~400 lines on purpose: the rows, their rounds, the limit and the report
# share Row and the mode's settings; split, each part would import the others.

from __future__ import annotations

import gc
import json
import math
import random
import resource
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

import fastdecode as fd
from fastdecode import _system

from . import _common as common
from . import _procs as procs

LOADERS = ("ImageFolder+PIL", "FastImageFolder", "FastLoader")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
NOISY_SPREAD = 0.10  # (max - min) / median of a row's rounds above this: noisy
STARTUP_SHARE = 0.05  # start-up, and the excluded ramp wave, under this share of a round's timing
# mode -> settings; a round's timed batches (at least `batches`, more when the
# row's start-up or its excluded ramp wave needs it, at most what `round_cap_s`
# seconds hold at the row's rate) are rounded up to whole waves of workers; the
# batches made ahead and the ramp wave come on top.
# The default's arithmetic on a quiet 2-core machine: docs/decisions/benchmarks.md,
# "fastdecode bench default ~4 minutes on 2 cores".
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(workers=[0, 2], batch=16, batches=2, rounds=3, fused=8, entries=20_000,
                  round_cap_s=0.0),
    "default": dict(workers=None, batch=256, batches=6, rounds=3, fused=512, entries=200_000,
                    round_cap_s=8.0),
    "full": dict(workers=[0, 1, 2, 4, 8], batch=256, batches=6, rounds=3, fused=512,
                 entries=1_000_000, round_cap_s=8.0),
}


CHAINS = ("train", "eval", "train_uint8")


def chains(names: list[str]) -> dict[str, Any]:
    from torchvision import transforms as T

    out = {
        "train": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                            T.Normalize(MEAN, STD)]),
        "eval": T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                           T.Normalize(MEAN, STD)]),
    }
    out["train_uint8"] = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                    T.PILToTensor()])
    return {name: out[name] for name in names}


# ---------------------------------------------------------------------------
# rows

clock = time.perf_counter  # the rows' and rounds' clock (tests give a fake one)


@dataclass
class Row:
    chain: str
    loader: str
    num_workers: int
    source: Any  # the loader; its workers stay alive between rounds
    sampler: Any = None  # its Draws: the rounds' length is set on it
    pids: list[int] = field(default_factory=list)  # its worker processes
    build_s: float = 0.0  # building the loader (and its dataset's listing)
    cold_first_batch_s: float = 0.0
    first_epoch_rate: float = 0.0  # images/s of the untimed epoch after its first wave
    rates: list[float] = field(default_factory=list)  # images/s per round
    cpu: list[float] = field(default_factory=list)  # CPU s per image per round
    walls: list[float] = field(default_factory=list)
    first_batch: list[float] = field(default_factory=list)  # warm rounds
    batch_images: float = 0.0  # images per batch, as the rounds delivered them
    excluded: list[float] = field(default_factory=list)  # s of each round outside its timing
    ahead: int = 0  # batches its workers make ahead of each round (FastLoader's next epoch)
    faults: list[float] = field(default_factory=list)  # workers' minor faults per batch per round
    # (voluntary, involuntary) context switches per image per round, every thread
    switches: list[tuple[float, float]] = field(default_factory=list)
    peak_pss_mib: float = 0.0


class Draws(RandomSampler):
    """Indices drawn with replacement, ``count`` per epoch; ``count`` may
    change between epochs (the sampler is read in the main process, also
    with persistent workers)."""

    def __init__(self, dataset, count: int) -> None:
        self.count = count  # before RandomSampler's checks, which read num_samples
        super().__init__(dataset, replacement=True, num_samples=count,
                         generator=torch.Generator().manual_seed(0))

    @property
    def num_samples(self) -> int:
        return self.count


def make_loader(kind: str, root: Path, chain, workers: int, batch: int, samples: int):
    from torchvision.datasets import ImageFolder

    if kind == "ImageFolder+PIL":
        ds = ImageFolder(root, chain)
    else:
        ds = fd.FastImageFolder(root, chain)
    sampler = Draws(ds, samples)
    kwargs: dict[str, Any] = dict(
        batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True,
        pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)
    if kind == "FastLoader":
        return fd.FastLoader(ds, **kwargs), sampler
    return DataLoader(ds, **kwargs), sampler


def open_row(chain: str, kind: str, root: Path, transform, workers: int, batch: int,
             samples: int, make=None) -> Row:
    """The row's loader (``make(kind, root, transform, workers, batch,
    samples)``, by default make_loader: the loader and its sampler), after
    its untimed first epoch (start-up, warm caches).

    Its rate is taken after the first wave (one batch per worker): the
    workers start together, so that wave's batches arrive almost at once and
    a rate counted from the first batch would be several times too high (with
    8 workers it sized rounds of minutes)."""
    before = set(procs.children())
    start = clock()
    loader, sampler = (make or make_loader)(kind, root, transform, workers, batch, samples)
    row = Row(chain, kind, workers, loader, sampler, build_s=clock() - start)
    if hasattr(loader, "made_ahead") and workers:  # FastLoader: a round starts with these made
        row.ahead = workers * (getattr(loader, "prefetch_factor", None) or 0)
    wave = max(workers, 1)
    images, wave_end = 0, 0.0
    # the peak memory is taken here, in the untimed epoch (see procs.PeakMemory)
    with procs.PeakMemory(exclude=frozenset(before)) as peak:
        start = clock()
        for i, (x, _) in enumerate(row.source):
            if i == 0:
                row.cold_first_batch_s = clock() - start
            if i == wave - 1:
                wave_end = clock()
            elif i >= wave:
                images += x.shape[0]
        rest = clock() - wave_end
    row.peak_pss_mib = peak.peak
    row.first_epoch_rate = (images / rest if images and rest > 0
                            else batch * wave / (clock() - start))
    row.pids = sorted(set(procs.children()) - before)
    wait_idle(row.pids)  # what it made ahead for its next epoch, before the next row starts
    return row


def startup_s(row: Row, batch: float, rate: float) -> float:
    """``row``'s start-up: building it and its cold first batch, less one
    wave's work (a batch per worker) at ``rate``. Not less a warm round's
    first batch: FastLoader's were made ahead (~0 s), so its start-up kept a
    whole wave that a stock row's had taken off."""
    return max(0.0, row.build_s + row.cold_first_batch_s - max(row.num_workers, 1) * batch / rate)


def round_batches(row: Row, batch: int, least: int, cap_s: float) -> int:
    """Batches per round for ``row``: what its workers make ahead and its
    ramp wave, then a timed part long enough that its start-up and the ramp
    wave are each under STARTUP_SHARE of it, at least ``least``, at most what
    ``cap_s`` seconds hold at its first epoch's rate, in whole waves of
    workers, then the final wave (left out of the timing, as the first two)."""
    rate = row.first_epoch_rate
    wave = max(row.num_workers, 1)
    startup = startup_s(row, batch, rate)
    need = max(math.ceil(startup / STARTUP_SHARE * rate / batch),
               math.ceil(wave / STARTUP_SHARE))  # the ramp wave takes about one wave's time
    most = math.floor(cap_s * rate / batch)
    timed = math.ceil(max(least, min(need, most)) / wave) * wave
    return row.ahead + wave + timed + wave


def run_round(row: Row) -> None:
    """One epoch of ``row``, timed after the batches made before it began and
    its ramp wave, and before its final wave (see the module doc), its CPU
    counted until its workers are idle again."""
    switches0 = procs.context_switches(row.pids)  # read outside the CPU counted
    cpu0 = procs.cpu_seconds(row.pids)
    faults0 = minor_faults(row.pids)
    wave = max(row.num_workers, 1)
    arrivals: list[tuple[float, int]] = []  # (time, images) of each batch
    start = clock()
    given = 0
    for k, (x, _) in enumerate(row.source):
        arrivals.append((clock(), x.shape[0]))
        if k == 0:
            row.first_batch.append(arrivals[0][0] - start)
            given = getattr(row.source, "made_ahead", 0)  # made before the round began
    end = clock()
    first, last = given + wave - 1, len(arrivals) - 1 - wave  # made ahead + the ramp; the final wave
    if last <= first:
        raise ValueError(f"{row.loader}: a round needs more than {given + 2 * wave} batches")
    counted = sum(images for _, images in arrivals[first + 1:last + 1])
    row.rates.append(counted / (arrivals[last][0] - arrivals[first][0]))
    row.walls.append(end - start)
    row.excluded.append(arrivals[first][0] - start + end - arrivals[last][0])
    batches, images = len(arrivals), sum(images for _, images in arrivals)
    row.batch_images = images / batches
    wait_idle(row.pids)
    # the work of the round and the wait after it: its batches, less those it
    # was given, plus those its workers made for the next round (row.ahead; a
    # first round is given none: its prediction was dropped when the round's
    # length was set, so counted over its own batches it looked 1.4x as costly
    # at 8 workers)
    made = max(batches + row.ahead - given, 1)
    work = made * images / batches  # images
    row.cpu.append((procs.cpu_seconds(row.pids) - cpu0) / work)
    row.faults.append((minor_faults(row.pids) - faults0) / made)
    voluntary, involuntary = procs.context_switches(row.pids)
    row.switches.append(((voluntary - switches0[0]) / work, (involuntary - switches0[1]) / work))


def _run_ns(pids: list[int]) -> tuple[int, bool]:
    """Nanoseconds ``pids`` have run, and whether one is runnable now."""
    total, runnable = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0])
            with open(f"/proc/{pid}/stat") as f:
                runnable |= f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, ValueError, IndexError):
            pass
    return total, runnable


def minor_faults(pids: list[int]) -> int:
    """Minor page faults of this process and of the live processes ``pids``."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += int(f.read().rsplit(")", 1)[1].split()[7])  # field 10: minflt
        except (OSError, ValueError, IndexError):
            pass
    return total


def wait_idle(pids: list[int], poll_s: float = 0.02, timeout_s: float = 20.0) -> None:
    """Until the processes ``pids`` sleep and ran under 1 ms in the last
    ``poll_s`` (a FastLoader's workers making the next epoch's batches ahead:
    on a shared machine a runnable process may not run for a while)."""
    deadline = time.monotonic() + timeout_s
    last, _ = _run_ns(pids)
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        now, runnable = _run_ns(pids)
        if now - last < 1_000_000 and not runnable:
            return
        last = now


def fused_cost(root: Path, transform, count: int, batch: int) -> float:
    """Seconds per image of FastImageFolder's ``__getitems__`` (read, fused
    decode, the tensor tail over the batch) in batches of ``batch`` in this
    process with one thread per pool: what one worker can do at best, by
    the worker's own path (``ds[i]`` one image at a time read 2-9 % dearer,
    so loaders came out at 100-104 % of that limit: 2 December).

    Every round decodes the same ``count`` images (the whole dataset when it
    has fewer): photos differ in size, so rounds of other random picks
    measured their picks, not the machine (1 December: 128 picks with
    replacement from 250 photos, a new draw per round, spread 26-46 %).
    Divided by the images decoded, not by ``count`` (until 2 December a
    dataset under ``count`` images read as 2x the limit: 252 photos, 512).
    Once untimed first, so that the plan and the batch buffers are made."""
    ds = fd.FastImageFolder(root, transform)
    picks = random.Random(0).sample(range(len(ds)), k=min(count, len(ds)))
    batches = [picks[k:k + batch] for k in range(0, len(picks), batch)]
    with _system.one_thread_per_pool():
        for indices in batches:
            ds.__getitems__(indices)
        start = clock()
        for indices in batches:
            ds.__getitems__(indices)
        return (clock() - start) / len(picks)


# ---------------------------------------------------------------------------
# the run


MAX_LIVE_WORKERS = 24  # worker processes alive at once (idle ones cost memory only)


def groups(chain_names: list[str], worker_counts: list[int]) -> list[list[tuple[str, int]]]:
    """Rows alive at the same time, their rounds interleaved: per worker
    count every chain together, or each chain alone when that would keep
    more than MAX_LIVE_WORKERS workers alive."""
    out = []
    for w in worker_counts:
        if len(LOADERS) * len(chain_names) * w <= MAX_LIVE_WORKERS:
            out.append([(c, w) for c in chain_names])
        else:
            out += [[(c, w)] for c in chain_names]
    return out


def measure(root: Path, all_chains: dict, settings: dict, bar) -> tuple[list, dict]:
    rows: list[Row] = []
    fused: dict[str, list[float]] = {name: [] for name in all_chains}
    for group in groups(list(all_chains), settings["workers"]):
        alive = []
        for chain, workers in group:
            wave = max(workers, 1)  # whole waves: no worker idles at the end of a round
            batches = math.ceil(settings["batches"] / wave) * wave
            # 3 waves: the rate is read after the first (a round's timing leaves out
            # what was made ahead and the ramp wave: round_batches adds them)
            first = max(batches, 3 * wave)
            for kind in settings.get("loaders", LOADERS):
                bar.set_postfix_str(f"{chain} {kind} num_workers={workers}: start-up")
                row = open_row(chain, kind, root, all_chains[chain], workers,
                               settings["batch"], first * settings["batch"])
                row.sampler.count = settings["batch"] * round_batches(
                    row, settings["batch"], batches, settings["round_cap_s"])
                alive.append(row)
                bar.update()
        chains_here = list(dict.fromkeys(chain for chain, _ in group))
        for r in range(settings["rounds"]):
            for chain in chains_here:
                bar.set_postfix_str(f"{chain} fused, 1 thread, round {r + 1}")
                fused[chain].append(fused_cost(root, all_chains[chain], settings["fused"],
                                               settings["batch"]))
                bar.update()
            for row in common.round_order(alive, r):
                bar.set_postfix_str(f"{row.chain} {row.loader} num_workers={row.num_workers}, "
                                    f"round {r + 1}")
                with warnings.catch_warnings():
                    # the rounds' length is set after the first epoch, on purpose: the
                    # first round's batches drawn ahead are dropped (run_round counts
                    # its CPU over the batches it made)
                    warnings.filterwarnings("ignore", "FastLoader dropped the next epoch",
                                            RuntimeWarning)
                    run_round(row)
                bar.update()
        for row in alive:
            row.source = None  # ends its persistent workers
        gc.collect()
        rows += alive
    return rows, fused


def row_result(row: Row, limit: float, baseline: dict[int, float]) -> dict:
    median = statistics.median(row.rates)
    spread = (max(row.rates) - min(row.rates)) / median
    startup = startup_s(row, row.batch_images, median)  # less one wave at the steady rate
    excluded = [e / w for e, w in zip(row.excluded, row.walls)]
    return {
        "loader": row.loader, "num_workers": row.num_workers,
        "images_per_s": median, "round_images_per_s": row.rates,
        "min_images_per_s": min(row.rates), "max_images_per_s": max(row.rates),
        "spread": spread, "noisy": spread > NOISY_SPREAD,
        "startup_s": startup, "build_s": row.build_s,
        "cold_first_batch_s": row.cold_first_batch_s,
        # a round's first batch (FastLoader: made ahead, so ~0)
        "warm_first_batch_s": statistics.median(row.first_batch) if row.first_batch else None,
        "round_s": statistics.median(row.walls),
        "round_images": row.sampler.count if row.sampler is not None else None,
        "startup_share_of_round": startup / statistics.median(row.walls),
        "excluded_share_of_round": statistics.median(excluded) if excluded else 0.0,
        "cpu_s_per_image": statistics.median(row.cpu),
        "round_cpu_s_per_image": row.cpu,
        "faults_per_batch": statistics.median(row.faults) if row.faults else None,
        "round_faults_per_batch": row.faults,
        **procs.switch_medians(row.switches),
        "efficiency": median / limit,
        "speedup": median / baseline[row.num_workers] if baseline.get(row.num_workers) else None,
        "peak_pss_mib": row.peak_pss_mib,
    }


def paired(rows: list[Row], kind: str, against: str) -> dict[int, dict]:
    """Per num_workers: ``kind``'s rate / ``against``'s, round by round (the
    two rows' rounds ran back to back), their median and range."""
    out = {}
    for row in rows:
        if row.loader != kind:
            continue
        other = next((r for r in rows if r.loader == against and r.chain == row.chain
                      and r.num_workers == row.num_workers), None)
        if other is None:
            continue
        ratios = [a / b for a, b in zip(row.rates, other.rates)]
        out[row.num_workers] = {"median": statistics.median(ratios), "min": min(ratios),
                                "max": max(ratios), "rounds": ratios}
    return out


def chain_result(rows: list[Row], fused: list[float], usable: int) -> dict:
    cost = statistics.median(fused)
    limit = usable / cost
    spread = (max(fused) - min(fused)) / cost  # the limit's rows: noisy like any row
    baseline = {r.num_workers: statistics.median(r.rates) for r in rows
                if r.loader == "ImageFolder+PIL"}
    results = [row_result(r, limit, baseline) for r in rows]
    counts = sorted({r["num_workers"] for r in results})
    at = usable if usable in counts else max(counts)  # the summary's num_workers

    def pick(kind: str) -> dict:  # empty when the run left that loader out (--loaders)
        return next((r for r in results if r["loader"] == kind and r["num_workers"] == at), {})

    summary = {
        "num_workers": at,
        "speedup_fastimagefolder": pick("FastImageFolder").get("speedup"),
        "speedup_fastloader": pick("FastLoader").get("speedup"),
        "efficiency_fastimagefolder": pick("FastImageFolder").get("efficiency"),
        "efficiency_fastloader": pick("FastLoader").get("efficiency"),
        "noisy_rows": sum(r["noisy"] for r in results) + (spread > NOISY_SPREAD),
        "fastloader_vs_fastimagefolder": paired(rows, "FastLoader", "FastImageFolder"),
    }
    return {"rows": results, "summary": summary,
            "limit": {"usable_cpus": usable, "fused_ms_per_image": cost * 1000,
                      "fused_round_ms": [c * 1000 for c in fused], "images_per_s": limit,
                      "spread": spread, "noisy": spread > NOISY_SPREAD}}


# ---------------------------------------------------------------------------
# the 1M-entry file list


class ListOnly(torch.utils.data.Dataset):
    """Touches samples[i] as __getitem__ does, without decoding anything."""

    def __init__(self, base) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base.samples)

    def __getitem__(self, i: int) -> int:
        path, target = self.base.samples[i]
        return target + len(path) * 0


def file_list_memory(entries: int, workers: int) -> list[dict]:
    import tempfile

    from torchvision.datasets import ImageFolder

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "c").mkdir()
        (root / "c" / "x.jpg").write_bytes(b"")  # the walk needs one file; never opened
        fake = [(f"/data/imagenet/train/n{i % 1000:08d}/n{i % 1000:08d}_{i}.JPEG", i % 1000)
                for i in range(entries)]
        for name, cls in (("ImageFolder", ImageFolder), ("FastImageFolder", fd.FastImageFolder)):
            base = cls(root)
            base.samples = fake
            if name == "ImageFolder":
                base.targets = [t for _, t in fake]
            ds = ListOnly(base)
            with warnings.catch_warnings():  # 8 workers on fewer cores is the point here
                warnings.filterwarnings("ignore", "This DataLoader will create")
                loader = DataLoader(ds, batch_size=4096, num_workers=workers, shuffle=True,
                                    generator=torch.Generator().manual_seed(0))
                before = procs.pss_mib([*procs.children()])
                with procs.PeakMemory() as peak:
                    for _ in loader:
                        pass
            rows.append({"dataset": name, "entries": entries, "num_workers": workers,
                         "peak_pss_mib": peak.peak, "main_before_mib": before})
            del loader, ds, base
    return rows


# ---------------------------------------------------------------------------
# report


def table(result: dict) -> str:
    limit = result["limit"]
    lines = ["| loader | workers | images/s (median) | min-max | spread | start-up s | "
             "round s | CPU ms/image | % of limit | speedup vs ImageFolder | peak PSS MiB | "
             "faults/batch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        speedup = "" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        faults = "" if r.get("faults_per_batch") is None else f"{r['faults_per_batch']:,.0f}"
        lines.append(
            f"| {r['loader']} | {r['num_workers']} | {r['images_per_s']:,.0f}"
            f"{' (noisy)' if r['noisy'] else ''} | {r['min_images_per_s']:,.0f}-"
            f"{r['max_images_per_s']:,.0f} | {r['spread']:.0%} | {r['startup_s']:.2f} | "
            f"{r['round_s']:.1f} | {r['cpu_s_per_image'] * 1000:.2f} | {r['efficiency']:.0%} | {speedup} | "
            f"{r['peak_pss_mib']:,.0f} | {faults} |")
    lines.append(f"| **limit** | {limit['usable_cpus']} CPUs | {limit['images_per_s']:,.0f}"
                 f"{' (noisy)' if limit['noisy'] else ''} | | "
                 f"{limit['spread']:.0%} | | | {limit['fused_ms_per_image']:.2f} (fused, 1 thread) "
                 "| 100% | | | |")
    return "\n".join(lines)


def chain_markdown(name: str, result: dict, settings: dict) -> str:
    s = result["summary"]
    slow = [r for r in result["rows"] if r["startup_share_of_round"] > STARTUP_SHARE]
    short = [r for r in result["rows"] if r["excluded_share_of_round"] > STARTUP_SHARE]
    def ratio(value, spec: str, unit: str = "") -> str:
        return "n/a" if value is None else format(value, spec) + unit

    notes = [f"at num_workers={s['num_workers']}: FastImageFolder "
             f"{ratio(s['speedup_fastimagefolder'], '.2f', 'x')}, FastLoader "
             f"{ratio(s['speedup_fastloader'], '.2f', 'x')} ImageFolder; "
             f"{ratio(s['efficiency_fastimagefolder'], '.0%')} and "
             f"{ratio(s['efficiency_fastloader'], '.0%')} of the limit"]
    if s["fastloader_vs_fastimagefolder"]:
        notes.append("FastLoader / DataLoader(FastImageFolder), round by round: " + ", ".join(
            f"num_workers={w} {p['median']:.2f}x ({p['min']:.2f}-{p['max']:.2f})"
            for w, p in sorted(s["fastloader_vs_fastimagefolder"].items())))
    if s["noisy_rows"]:
        notes.append(f"{s['noisy_rows']} row(s) marked (noisy): their fastest and slowest rounds "
                     f"differed by more than {NOISY_SPREAD:.0%} of the median, most often "
                     "because other work was running; rerun on a quiet machine before trusting "
                     "them")
    if slow:
        notes.append(f"{len(slow)} row(s) take more than {STARTUP_SHARE:.0%} of a round to start "
                     "up: their rate stands (a round is timed after its start-up), but an epoch "
                     f"that short would pay it ({lengthened(settings)})")
    if short:
        notes.append(f"{len(short)} row(s) spend more than {STARTUP_SHARE:.0%} of a round "
                     "outside its timing: the batches made ahead, the first and the last wave "
                     f"({lengthened(settings)})")
    return (f"\n### {name} chain, batch {settings['batch']}, rounds of {settings['batches']}+ "
            f"timed batches (whole waves of workers, {lengthened(settings)}), timed after the "
            f"batches made ahead and the first wave, to the last but one wave, median of "
            f"{settings['rounds']} interleaved "
            "rounds\n\n" + table(result) + "\n\n"
            + "\n".join(f"- {n}" for n in notes))


def lengthened(settings: dict) -> str:
    """What the round cap caps, in words: how far a round's timed part is
    lengthened so that start-up and each excluded wave are under
    STARTUP_SHARE of it (``round_batches``)."""
    if not settings["round_cap_s"]:
        return f"not lengthened to keep start-up under {STARTUP_SHARE:.0%} of them: --quick"
    return (f"lengthened until start-up and each excluded wave are under {STARTUP_SHARE:.0%} "
            f"of them, but only up to the batches {settings['round_cap_s']:g} s hold at the "
            "row's first-epoch rate: a slower round, and the waves left out, take longer")


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder")
    parser.add_argument("--full", action="store_true",
                        help="the num_workers sweep 0 1 2 4 8 and a 1M-entry file list")
    parser.add_argument("--chains", nargs="+", choices=CHAINS, default=["train", "eval"],
                        help="transform chains (default: train eval; train_uint8 ends in "
                             "PILToTensor)")
    parser.add_argument("--workers", type=int, nargs="+",
                        help="num_workers values (default: the usable CPUs; --full 0 1 2 4 8)")
    parser.add_argument("--loaders", nargs="+", choices=LOADERS, default=list(LOADERS),
                        help="loaders to measure (default: all three; speedups need "
                             "ImageFolder+PIL)")
    parser.add_argument("--batch-size", type=int, help="default 256 (quick: 32)")
    parser.add_argument("--rounds", type=int, help="timed rounds per row (default 3, at least 3)")
    parser.add_argument("--entries", type=int,
                        help="file-list entries (default 200,000; --full 1,000,000; 0 skips "
                             "the file list)")
    args = parser.parse_args(argv)
    if args.quick and args.full:
        parser.error("--quick and --full exclude each other")
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be >= 3 (a median and a spread need three)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    usable = _system.usable_cpus()
    settings = dict(MODES[mode])
    settings["workers"] = args.workers or settings["workers"] or [usable]
    settings["batch"] = args.batch_size or settings["batch"]
    settings["rounds"] = args.rounds or settings["rounds"]
    settings["entries"] = settings["entries"] if args.entries is None else args.entries
    settings["loaders"] = [kind for kind in LOADERS if kind in args.loaders]
    data = args.data or common.default_data()

    all_chains = chains(args.chains)
    report = {"command": common.command_line(__name__, argv), "data": str(data), "mode": mode,
              "batch_size": settings["batch"], "settings": settings,
              "machine": common.machine_facts(), "versions": common.library_versions(),
              "chains": {}}
    layout = groups(list(all_chains), settings["workers"])
    ticks = (sum(len(g) for g in layout) * len(settings["loaders"]) * (1 + settings["rounds"])
             + sum(len({c for c, _ in g}) for g in layout) * settings["rounds"] + 1)
    with common.progress("loader", ticks) as bar:
        rows, fused = measure(data, all_chains, settings, bar)
        for name in all_chains:
            result = chain_result([r for r in rows if r.chain == name], fused[name], usable)
            report["chains"][name] = result
            common.emit(chain_markdown(name, result, settings))
        if settings["entries"]:
            bar.set_postfix_str(f"file list of {settings['entries']:,} entries")
            report["file_list"] = file_list_memory(settings["entries"], 8)
        bar.update()
    report["machine"]["load_average_end"] = common.load_average()
    if settings["entries"]:
        common.emit("\n".join([f"\n### file list of {settings['entries']:,} entries, 8 workers\n",
                               "| dataset | peak PSS MiB (main + 8 workers) |", "|---|---:|"]
                              + [f"| {r['dataset']} | {r['peak_pss_mib']:,.0f} |"
                                 for r in report["file_list"]]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
