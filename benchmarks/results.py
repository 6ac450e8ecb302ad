"""Renders a ``fastdecode bench --json`` report as the published results.

    python -m benchmarks.results bench.json

writes, from that one file and nothing else:

* ``docs/benchmarks/results.md``: the Benchmarks > Results page of the docs:
  the machine, the date, the exact command, the library versions, the
  summary table, the figure and every section's table;
* ``docs/benchmarks/results.png``: the figure: one panel per section
  (decode, fused, loader, storage), a bar per library with its ratio to the
  section's baseline written on it, and the loaders' limit as a line;
* the README's results table, between ``<!-- results:start -->`` and
  ``<!-- results:end -->`` (``--readme``; the block equals the one on the
  results page, which ``tests/api/test_docs.py`` checks);
* the page's GPU section, between ``<!-- gpu:start -->`` and
  ``<!-- gpu:end -->``, from the JSON of ``benchmarks/gpu_check.sh``
  (``--gpu``, default ``docs/benchmarks/gpu_check.json``, the last GPU run,
  committed: the machines that run ``make bench`` have no GPU).

    python -m benchmarks.results --gpu docs/benchmarks/gpu_check.json

(no bench report) rewrites only that section of the existing page, after a
session lent a GPU ran the check and copied its JSON there.

No figure is typed by hand: rerun ``make bench`` then this, and commit what
changed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

START = "<!-- results:start -->"
END = "<!-- results:end -->"
PAGE = Path("docs/benchmarks/results.md")
FIGURE = Path("docs/benchmarks/results.png")
README = Path("README.md")
GPU = Path("docs/benchmarks/gpu_check.json")
GPU_START = "<!-- gpu:start -->"
GPU_END = "<!-- gpu:end -->"

# The rows the summary table and the figure show, per section: the report's
# key, the baseline's row name and the peers, in the order drawn.
DECODE_ROWS = ("Pillow", "torchvision", "OpenCV", "PyTurboJPEG", "simplejpeg", "fastdecode",
               "C floor")
FUSED_ROWS = ("torchvision + PIL", "torchvision + pillow-simd", "simplejpeg + OpenCV",
              "full decode + OpenCV AREA", "fastdecode fuse", "fastdecode fuse exact")
# The transforms section's fastdecode rows by the mode they ran in: fuse's
# default (DCT-scaled where the box allows, a bounded difference) or exact=True.
MODE_NAMES = {"fastdecode fuse": "fastdecode fuse (default mode)",
              "fastdecode decode_into": "fastdecode decode_into (default mode)",
              "fastdecode fuse exact": "fastdecode fuse (exact=True)"}
# What a section's row reports of its rounds, by the ``statistic`` its JSON's
# settings name (loader and storage name none: their rows are medians).
STATISTICS = {"sum over slices of each slice's best round":
              "each {slice}-image slice's best of {rounds} rounds, summed",
              "best round": "best of {rounds} rounds",
              "median": "median of {rounds} rounds"}
SECTION_STATISTIC = {"decode": "sum over slices of each slice's best round",
                     "transforms": "best round", "loader": "median", "storage": "median",
                     "recipes": "median"}
# The modern recipe the summary shows (issue 50): torchvision's IMAGENET1K_V2
# weights were trained with it (--auto-augment ta_wide --random-erase 0.1
# --train-crop-size 176); bench_recipes names it so.
MODERN_RECIPE = "reference train v1 ta_wide + random erase, 176"
# The same recipe written with v2: bench_recipes times the peers there (benchmarks/_peers.py)
PEER_RECIPE = "reference train v2 ta_wide + random erase, 176"
LOADERS = ("ImageFolder+PIL", "FastImageFolder", "FastLoader")
LOADER_NAMES = {"ImageFolder+PIL": "ImageFolder", "FastImageFolder": "DataLoader(FastImageFolder)",
                "FastLoader": "FastLoader"}


def _num(value: Optional[float], digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _x(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _part(report: dict, section: str, key: str) -> dict:
    for part in report.get("sections", {}).get(section, {}).get("sections", []):
        if part.get("key") == key:
            return part
    return {}


def _row(part: dict, name: str) -> dict:
    return next((r for r in part.get("rows", []) if r.get("name") == name and r.get("status", "ok") == "ok"),
                {})


def _loader_chain(report: dict, chain: str = "train") -> dict:
    return report.get("sections", {}).get("loader", {}).get("chains", {}).get(chain, {})


def _loader_rows(chain: dict) -> dict[str, dict]:
    workers = chain.get("summary", {}).get("num_workers")
    return {r["loader"]: r for r in chain.get("rows", []) if r.get("num_workers") == workers}


def _noisy(row: dict) -> str:
    return " (noisy)" if row.get("noisy") else ""


def estimator(report: dict, section: str) -> str:
    """What ``section``'s rows report of their rounds, in words: the
    statistic its settings name (its default when they name none) over the
    rounds it ran; a statistic this page cannot name raises ValueError."""
    settings = report.get("sections", {}).get(section, {}).get("settings", {})
    statistic = settings.get("statistic", SECTION_STATISTIC[section])
    if statistic not in STATISTICS:
        raise ValueError(f"the {section} section's rows are the {statistic!r} of their rounds, "
                         "which benchmarks.results does not name: add it to STATISTICS")
    return STATISTICS[statistic].format(rounds=settings.get("rounds", "?"),
                                        slice=settings.get("slice", "?"))


def summary_rows(report: dict) -> list[tuple[str, str, str, str, str]]:
    """(what, estimator, baseline, fastdecode, ratio) for the summary table;
    each fused row names its mode, the exact=True row beside the default's."""
    rows = []
    full = _part(report, "decode", "jpeg_full")
    if full:
        base, ours = _row(full, "Pillow"), _row(full, "fastdecode")
        if base and ours:
            rows.append(("JPEG decode, one thread (images/s)", estimator(report, "decode"),
                         f"Pillow {_num(base['images_per_s'])}", _num(ours["images_per_s"]),
                         _x(ours.get("speedup"))))
    for key, label in (("train_float", "train chain"), ("eval_float", "eval chain")):
        part = _part(report, "transforms", key)
        base = _row(part, "torchvision + PIL")
        for name, mode in (("fastdecode fuse", "default mode"), ("fastdecode fuse exact", "exact=True")):
            ours = _row(part, name)
            if base and ours:
                rows.append((f"decode + {label} to float, one thread, {mode} (ms/image)",
                             estimator(report, "transforms"),
                             f"torchvision + PIL {_num(base['ms_per_image'], 2)}",
                             _num(ours["ms_per_image"], 2), _x(ours.get("speedup"))))
    chain = _loader_chain(report)
    if chain and _loader_rows(chain):
        by_loader = _loader_rows(chain)
        workers = chain.get("summary", {}).get("num_workers")
        base = by_loader.get("ImageFolder+PIL", {})
        for loader in ("FastImageFolder", "FastLoader"):
            ours = by_loader.get(loader)
            if base and ours:
                rows.append((f"{LOADER_NAMES[loader]}, train chain, {workers} workers (images/s)",
                             estimator(report, "loader"),
                             f"ImageFolder {_num(base['images_per_s'])}{_noisy(base)}",
                             f"{_num(ours['images_per_s'])}{_noisy(ours)}", _x(ours.get("speedup"))))
        limit = chain.get("limit", {})
        if limit:
            rows.append(("limit: usable CPUs / fused cost per image (images/s)",
                         estimator(report, "loader"),
                         f"{limit['usable_cpus']} CPUs / {limit['fused_ms_per_image']:.2f} ms",
                         f"{_num(limit['images_per_s'])}{_noisy(limit)}", ""))
    rows += _recipe_rows(report)
    storage = report.get("sections", {}).get("storage", {})
    workers = storage.get("summary", {}).get("num_workers")
    for row in _storage_rows(storage):
        if row.get("delay_ms") == 5 and row.get("loader") in ("FastImageFolder", "FastLoader") \
                and row.get("num_workers") == workers:
            rows.append((f"{LOADER_NAMES[row['loader']]}, 5 ms per open, "
                         f"{row['num_workers']} workers (images/s)",
                         f"{estimator(report, 'storage')}; the ratio the median of per-round ratios",
                         "ImageFolder at 5 ms", _num(row["images_per_s"]),
                         _x(row.get("vs_imagefolder"))))
    return rows


_RECIPE_LABEL = "ta_wide + random erase 0.1, crop 176 (IMAGENET1K_V2's recipe)"


def _recipe_rows(report: dict) -> list[tuple[str, str, str, str, str]]:
    """The modern recipe's rows (MODERN_RECIPE): per core (one thread's CPU
    time per image, the median of the rounds' ratios) and with workers; then
    the peers' rows of its v2 form (PEER_RECIPE), where they ran."""
    recipes = report.get("sections", {}).get("recipes", {}).get("recipes", {})
    recipe = recipes.get(MODERN_RECIPE)
    if not recipe:
        return []
    label = _RECIPE_LABEL
    rows = []
    for s in recipe.get("settings", []):
        if "cpu_speedup" in s:
            rows.append((f"{label}, one thread, default mode (CPU ms/image)",
                         f"{estimator(report, 'recipes')}; the ratio the median of per-round "
                         "ratios", f"ImageFolder {_num(s['imagefolder_cpu_ms_per_image'], 2)}",
                         _num(s["fastimagefolder_cpu_ms_per_image"], 2), _x(s["cpu_speedup"])))
        elif s.get("num_workers"):
            noisy = " (noisy)" if s.get("noisy") else ""
            rows.append((f"{label}, DataLoader(FastImageFolder), {s['num_workers']} workers "
                         "(images/s)", estimator(report, "recipes"),
                         f"ImageFolder {_num(s['imagefolder_images_per_s'])}{noisy}",
                         f"{_num(s['fastimagefolder_images_per_s'])}{noisy}", _x(s["speedup"])))
            if "fastloader_speedup" in s:
                rows.append((f"{label}, FastLoader, {s['num_workers']} workers (images/s)",
                             estimator(report, "recipes"),
                             f"ImageFolder {_num(s['imagefolder_images_per_s'])}{noisy}",
                             f"{_num(s['fastloader_images_per_s'])}{noisy}",
                             _x(s["fastloader_speedup"])))
    return rows + _peer_rows(report, recipes.get(PEER_RECIPE))


def _peer_rows(report: dict, recipe: Optional[dict]) -> list[tuple[str, str, str, str, str]]:
    """The modern recipe in v2, one thread, against each peer that ran
    (CPU ms per image each side; the ratio the median of per-round ratios)."""
    rows = []
    for s in (recipe or {}).get("settings", []):
        for peer, p in s.get("peers", {}).items():
            rows.append((f"{_RECIPE_LABEL}, v2, one thread, vs {peer} (CPU ms/image)",
                         f"{estimator(report, 'recipes')}; the ratio the median of per-round "
                         "ratios", f"{peer} {_num(p['cpu_ms_per_image'], 2)}",
                         _num(s["fastimagefolder_cpu_ms_per_image"], 2),
                         _x(p["fastimagefolder_cpu_speedup"])))
    return rows


def machine_line(report: dict) -> str:
    m = report.get("machine", {})
    return (f"{m.get('cpu_model', 'unknown CPU')}, {m.get('usable_cpus', '?')} usable CPUs "
            f"of {m.get('cpu_count', '?')}, Python {m.get('python', '?')}")


def summary_block(report: dict) -> str:
    """The table the README and the results page share, markers included."""
    lines = [START, "",
             f"From `{run_command(report)}` on {machine_line(report)}; "
             "speedups are within one run, libraries interleaved in each round; a row's estimator "
             "says which of its rounds it reports (the best or the median); the fused rows name "
             "their mode: the default (DCT-scaled where the crop allows, a bounded difference) "
             "or exact=True (bit for bit with torchvision + PIL).", "",
             "| measured | estimator | baseline | fastdecode | speedup |", "|---|---|---:|---:|---:|"]
    lines += [f"| {' | '.join(row)} |" for row in summary_rows(report)]
    if any(r.get("noisy") for r in _loader_rows(_loader_chain(report)).values()):
        lines += ["", "*(noisy)*: the rounds of that row spread over 10 %; rerun on a quieter "
                      "machine before trusting it."]
    lines += ["", END]
    return "\n".join(lines)


def run_date(report: dict, source: Path) -> str:
    if report.get("date"):
        return str(report["date"])
    stamp = datetime.fromtimestamp(source.stat().st_mtime, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def run_command(report: dict) -> str:
    if report.get("command"):
        return str(report["command"])
    flag = {"quick": " --quick", "full": " --full"}.get(report.get("mode", "default"), "")
    return f"fastdecode bench{flag} --json bench.json"


def _decode_tables(report: dict) -> list[str]:
    lines: list[str] = []
    for part in report.get("sections", {}).get("decode", {}).get("sections", []):
        lines += ["", f"### {part['title']}", "",
                  f"{part.get('images', '?')} images; baseline {part.get('baseline')}"
                  + (f", floor {part['floor']}" if part.get("floor") else "")
                  + f"; each row {estimator(report, 'decode')}.", "",
                  "| library | images/s | ms/image | CPU ms/image | vs baseline | vs floor |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in part["rows"]:
            if r.get("status", "ok") != "ok":
                lines.append(f"| {r['name']} | {r.get('status')} | | | | |")
                continue
            lines.append(f"| {r['name']} | {_num(r['images_per_s'])} | {_num(r['ms_per_image'], 3)} | "
                         f"{_num(r.get('cpu_ms_per_image'), 3)} | {_x(r.get('speedup'))} | "
                         f"{_x(r.get('vs_floor'))} |")
    return lines


def _transform_tables(report: dict) -> list[str]:
    lines: list[str] = []
    for part in report.get("sections", {}).get("transforms", {}).get("sections", []):
        lines += ["", f"### {part['title']}", "", f"Each row {estimator(report, 'transforms')}.", "",
                  "| method | ms/image | images/s | CPU ms/image | vs torchvision + PIL |",
                  "|---|---:|---:|---:|---:|"]
        for r in part["rows"]:
            name = MODE_NAMES.get(r["name"], r["name"])
            if r.get("status", "ok") != "ok":
                lines.append(f"| {name} | {r.get('status')} | | | |")
                continue
            lines.append(f"| {name} | {_num(r['ms_per_image'], 2)} | {_num(r['images_per_s'])} | "
                         f"{_num(r.get('cpu_ms_per_image'), 2)} | {_x(r.get('speedup'))} |")
    return lines


def _loader_tables(report: dict) -> list[str]:
    loader = report.get("sections", {}).get("loader", {})
    lines: list[str] = []
    for name, chain in loader.get("chains", {}).items():
        lines += ["", f"### Loaders, {name} chain, batch {loader.get('batch_size', '?')}", "",
                  "| loader | workers | images/s (median) | min-max | spread | CPU ms/image | "
                  "% of limit | vs ImageFolder |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in chain.get("rows", []):
            lines.append(f"| {LOADER_NAMES.get(r['loader'], r['loader'])} | {r['num_workers']} | "
                         f"{_num(r['images_per_s'])}{_noisy(r)} | {_num(r['min_images_per_s'])}-"
                         f"{_num(r['max_images_per_s'])} | {r['spread']:.0%} | "
                         f"{r['cpu_s_per_image'] * 1000:.2f} | {r['efficiency']:.0%} | "
                         f"{_x(r.get('speedup'))} |")
        limit = chain.get("limit", {})
        if limit:
            lines += ["", f"Limit: {limit['usable_cpus']} CPUs / {limit['fused_ms_per_image']:.2f} ms "
                          f"per fused image (one thread) = {_num(limit['images_per_s'])} images/s"
                          f"{_noisy(limit)}."]
    return lines


def _storage_rows(storage: dict) -> list[dict]:
    """The storage section's rows, on latencyfs or (newer reports) the local disk."""
    return [r for r in storage.get("rows", []) if r.get("images_per_s") is not None]


def _storage_row(storage: dict, loader: str, where: Any, readahead: str = "on") -> dict:
    """The row of ``loader`` at num_workers = the CPUs: on the local disk
    (``where="local"``) or at ``where`` ms on latencyfs."""
    workers = storage.get("summary", {}).get("num_workers")
    for r in _storage_rows(storage):
        place = "local" if r.get("storage") == "local" else r.get("delay_ms")
        if r["loader"] == loader and r.get("num_workers") == workers and place == where \
                and r.get("readahead", "on") == readahead:
            return r
    return {}


def _mib(value: Optional[float]) -> str:
    return "" if value is None else f"{value / 2**20:.1f}"


def _storage_tables(report: dict) -> list[str]:
    storage = report.get("sections", {}).get("storage", {})
    rows = _storage_rows(storage)
    if not rows:
        return []
    settings = storage.get("settings", {})
    lines = ["", "### Slow storage (latencyfs, a delay per open) and the local disk", "",
             f"Train chain to uint8, batch {storage.get('batch_size', '?')}; each cell the median "
             f"of {settings.get('rounds', '?')} interleaved rounds, each ratio the median of "
             "per-round ratios; read-ahead off is `readahead=0` (each file read by the decoding "
             "thread, as before issue 28); CPU vs local, vs own 0 ms and vs read-ahead off: the "
             "row's CPU per image (its processes, all threads) against the same row's on the "
             "local disk, at 0 ms, and with read-ahead off; read-ahead "
             f"{storage.get('readahead', '?')}.", "",
             "| loader | read-ahead | workers | storage | images/s | vs own 0 ms | "
             "vs ImageFolder | vs read-ahead off | CPU ms/image | CPU vs local | "
             "CPU vs own 0 ms | CPU vs read-ahead off | peak read-ahead MiB (cap) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        where = "local disk" if r.get("storage") == "local" else f"{r['delay_ms']:g} ms"
        peak = r.get("readahead_peak_bytes")
        cpu = r.get("cpu_ms_per_image")
        lines.append(f"| {LOADER_NAMES.get(r['loader'], r['loader'])} | "
                     f"{r.get('readahead') or ''} | {r['num_workers']} | {where} | "
                     f"{_num(r['images_per_s'])} | {_x(r.get('vs_0ms'))} | "
                     f"{_x(r.get('vs_imagefolder'))} | {_x(r.get('vs_readahead_off'))} | "
                     f"{_num(cpu, 2)} | {_x(r.get('cpu_vs_local'))} | "
                     f"{_x(r.get('cpu_vs_0ms'))} | {_x(r.get('cpu_vs_readahead_off'))} | "
                     f"{'' if peak is None else f'{_mib(peak)} ({_mib(r.get(CAP))})'} |")
    # summary.targets_met (issue 28's thresholds) stays in the JSON: a project's goal
    # read as "not met" is a failure of the reader's run (docs/decisions/benchmarks.md)
    load = storage.get("machine", {})
    if load.get("load_average_start") or load.get("load_average_end"):
        lines += ["", "Load average (1, 5, 15 min) at the section's start "
                      f"{_loads(load.get('load_average_start'))} and end "
                      f"{_loads(load.get('load_average_end'))}."]
    spreads = [max(r["round_images_per_s"]) / min(r["round_images_per_s"]) for r in rows
               if r.get("round_images_per_s") and min(r["round_images_per_s"]) > 0]
    if spreads:
        lines += ["", f"The rounds of one row spread up to {max(spreads):.1f}x (fastest over "
                      "slowest round); a ratio is only as good as that spread allows."]
    return lines


CAP = "readahead_cap_bytes"


def _loads(values: Optional[list]) -> str:
    return "n/a" if not values else ", ".join(f"{x:.2f}" for x in values)


def gpu_block(gpu: Optional[dict]) -> str:
    """The page's GPU section, markers included, from a gpu_check JSON (None:
    no GPU run recorded)."""
    lines = [GPU_START, "", "## The GPU path", ""]
    if not gpu or not gpu.get("steps"):
        status = (gpu or {}).get("status", "no GPU run recorded")
        lines += [f"No GPU run is recorded ({status}): `benchmarks/gpu_check.sh` on a machine "
                  "with CUDA measures this section.", "", GPU_END]
        return "\n".join(lines)
    args = gpu.get("args", {})
    lines += [f"`{gpu.get('command', 'bash benchmarks/gpu_check.sh')}` on {gpu.get('device', '?')}, "
              f"{gpu.get('usable_cpus', '?')} usable CPUs, torch {gpu.get('torch', '?')} "
              f"(CUDA {gpu.get('cuda', '?')}), {gpu.get('date', 'date not recorded')}: "
              f"**{gpu.get('status', '?')}**. A generated set of {args.get('images', '?')} "
              f"JPEGs, batches of {args.get('batch', '?')} at {args.get('size', '?')} px, "
              f"{args.get('workers', '?')} workers.", "",
              "| step | result | summary |", "|---|---|---|"]
    lines += [f"| {name} | {'ok' if step.get('ok') else 'FAILED'} | "
              f"{step.get('summary', step.get('error', ''))} |"
              for name, step in gpu["steps"].items()]
    rows = gpu["steps"].get("throughput", {}).get("rows", [])
    if rows:
        lines += ["", "Steady state of the eval chain (Resize + CenterCrop, ToTensor, Normalize), "
                  f"persistent workers, the median of {len(rows[0].get('rates', []))} rounds "
                  "taken in turns:", "",
                  "| loader | images/s | min - max | spread | first batch (s) |",
                  "|---|---:|---:|---:|---:|"]
        names = {"cuda": "FastLoader(device='cuda')", "cpu": "FastLoader, batches on the host",
                 "cpu+to(cuda)": "FastLoader, then .to('cuda')"}
        for row in rows:
            r = row["images_per_s"]
            lines.append(f"| {names.get(row['name'], row['name'])} | {_num(r['median'])}"
                         f"{_noisy(r)} | {_num(r['min'])} - {_num(r['max'])} | "
                         f"{r['spread']:.1%} | {row['startup_s']:.2f} |")
    kinds = gpu["steps"].get("copies", {}).get("kinds", [])
    if kinds:
        nbytes = gpu["steps"]["copies"].get("bytes", 0)
        lines += ["", f"Host to device, one batch of uint8 ({nbytes / 1e6:.1f} MB), CUDA events:",
                  "", "| copy | GB/s | min - max |", "|---|---:|---:|"]
        lines += [f"| {k['name']} | {k['gb_per_s']['median']:.2f} | "
                  f"{k['gb_per_s']['min']:.2f} - {k['gb_per_s']['max']:.2f} |" for k in kinds]
    lines += ["", GPU_END]
    return "\n".join(lines)


def page(report: dict, source: Path, figure_name: str, gpu: Optional[dict] = None) -> str:
    versions = report.get("versions", {})
    lines = ["# Benchmark results", "",
             "Generated by `python -m benchmarks.results` from the JSON report of one run; "
             "see [Method and machine](index.md) for what each number means.", "",
             f"- **Date:** {run_date(report, source)}",
             f"- **Command:** `{run_command(report)}`",
             f"- **Machine:** {machine_line(report)}, {report.get('machine', {}).get('platform', '')}",
             "- **Versions:** " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    load = report.get("machine", {}).get("load_average_start")
    if load:
        lines.append(f"- **Load average at the start:** {', '.join(f'{x:.2f}' for x in load)} "
                     "(1, 5, 15 min): above zero, other work shared the CPUs with the run")
    lines.append("")
    skipped = report.get("skipped", {})
    if skipped:
        lines += ["- **Skipped:** " + "; ".join(f"{k}: {v}" for k, v in skipped.items()), ""]
    lines += ["## Summary", "", summary_block(report), "",
              f"![fastdecode bench: each section's libraries, ratio to its baseline]({figure_name})", "",
              "The run's own closing lines:", "", "```text", *report.get("summary", []), "```", "",
              "## Sections"]
    lines += _decode_tables(report) + _transform_tables(report) + _loader_tables(report)
    lines += _storage_tables(report)
    for name, section in report.get("sections", {}).items():
        if "command" in section:
            lines += ["", f"`{name}` ran `{_clean_command(section['command'])}`."]
    lines += ["", gpu_block(gpu)]
    return "\n".join(lines) + "\n"


def _clean_command(command: str) -> str:
    """A section's command without its run's temporary paths."""
    command = re.sub(r"--json \S+", "--json SECTION.json", command)
    return re.sub(r"--data \S+", "--data DATA", command)


# The figure's colours: the baseline each ratio is over, fastdecode's rows, the others.
BASELINE_COLOR, OURS_COLOR, PEER_COLOR = "#9e9e9e", "#d62728", "#1f77b4"
NOISY_HATCH = "///"


def _is_ours(name: str) -> bool:
    return name.startswith("fastdecode") or "FastImageFolder" in name or name == "FastLoader"


def _bars(ax: Any, names: list[str], values: list[float], ratios: list[Optional[float]],
          title: str, ylabel: str, base_index: int, noisy: Optional[list[bool]] = None) -> None:
    """One panel: a bar per row, its ratio to the baseline (bar ``base_index``,
    grey) written on it, a noisy row's bar hatched and its ratio marked."""
    noisy = noisy or [False] * len(names)
    colors = [BASELINE_COLOR if i == base_index else OURS_COLOR if _is_ours(n) else PEER_COLOR
              for i, n in enumerate(names)]
    bars = ax.bar(range(len(names)), values, color=colors,
                  hatch=[NOISY_HATCH if flag else "" for flag in noisy], edgecolor="white")
    for bar, ratio, flag in zip(bars, ratios, noisy):
        if ratio is not None:
            ax.annotate(f"{ratio:.2f}x" + (" (noisy)" if flag else ""),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_title(f"{title}\nbaseline: {names[base_index]}" if names else title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_ylim(0, max(values) * 1.18 if values else 1)
    ax.grid(axis="y", alpha=0.3)


def _legend(fig: Any, limit: bool, noisy: bool) -> None:
    """What the colours, the hatching and the dashed line mean, under the panels."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=BASELINE_COLOR, label="baseline: the ratios are over it (1.00x)"),
               Patch(color=OURS_COLOR, label="fastdecode"),
               Patch(color=PEER_COLOR, label="other libraries")]
    if noisy:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=NOISY_HATCH,
                             label="noisy: its rounds differed by more than 10%"))
    if limit:
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1,
                              label="limit: usable CPUs / fused cost per image"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)


def figure(report: dict, path: Path) -> str:
    """The results figure at ``path``: a panel per section (decode, fused,
    loader, storage), a bar per library with its ratio to the panel's
    baseline (named in its title), noisy rows hatched, the loaders' limit as
    a dashed line, and a legend that says so."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "figure skipped: matplotlib is not installed"
    panels = []
    full = _part(report, "decode", "jpeg_full")
    if full:
        rows = [_row(full, n) for n in DECODE_ROWS if _row(full, n)]
        base = _row(full, "Pillow").get("images_per_s")
        panels.append(("decode: JPEG, one thread", "images/s", [r["name"] for r in rows],
                       [r["images_per_s"] for r in rows],
                       [r["images_per_s"] / base if base else None for r in rows], None,
                       [bool(r.get("noisy")) for r in rows]))
    fused = _part(report, "transforms", "train_float")
    if fused:
        rows = [_row(fused, n) for n in FUSED_ROWS if _row(fused, n)]
        panels.append(("fused: train chain to float, one thread", "images/s",
                       [MODE_NAMES.get(r["name"], r["name"]).replace("torchvision + ", "tv + ")
                        for r in rows],
                       [r["images_per_s"] for r in rows], [r.get("speedup") for r in rows], None,
                       [bool(r.get("noisy")) for r in rows]))
    chain = _loader_chain(report)
    rows = [_loader_rows(chain)[n] for n in LOADERS if n in _loader_rows(chain)]
    if rows:
        panels.append((f"loader: train chain, {rows[0]['num_workers']} workers",
                       "images/s (median)", [LOADER_NAMES[r["loader"]].replace("DataLoader(", "DL(")
                                             for r in rows],
                       [r["images_per_s"] for r in rows], [r.get("speedup") for r in rows],
                       chain.get("limit", {}), [bool(r.get("noisy")) for r in rows]))
    storage = report.get("sections", {}).get("storage", {})
    workers = storage.get("summary", {}).get("num_workers")
    rows = [r for r in _storage_rows(storage) if r.get("delay_ms") == 5
            and r.get("num_workers") == workers and r.get("readahead") != "off"]
    if rows:
        panels.append((f"storage: 5 ms per open, {workers} workers", "images/s",
                       [LOADER_NAMES.get(r["loader"], r["loader"]) for r in rows],
                       [r["images_per_s"] for r in rows], [r.get("vs_imagefolder") for r in rows],
                       None, [bool(r.get("noisy")) for r in rows]))
    if not panels:
        return "figure skipped: the report has no section to draw"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.3), squeeze=False)
    for ax, (title, ylabel, names, values, ratios, limit, noisy) in zip(axes[0], panels):
        _bars(ax, names, values, ratios, title, ylabel, 0, noisy)
        if limit and limit.get("images_per_s"):
            ceiling = limit["images_per_s"]
            ax.axhline(ceiling, color="black", linestyle="--", linewidth=1)
            ax.annotate("limit" + (" (noisy)" if limit.get("noisy") else ""),
                        (len(names) - 0.5, ceiling), ha="right", va="bottom", fontsize=8)
            ax.set_ylim(0, max(max(values), ceiling) * 1.18)
    fig.suptitle("fastdecode bench: each bar's ratio to its panel's baseline", fontsize=10)
    _legend(fig, limit=any(p[5] for p in panels),
            noisy=any(any(p[6]) for p in panels) or any((p[5] or {}).get("noisy") for p in panels))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return f"figure written to {path}"


def replace_block(text: str, block: str, start_mark: str = START, end_mark: str = END) -> str:
    """``text`` with its block between the markers (included) replaced by ``block``."""
    start, end = text.find(start_mark), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"no {start_mark} ... {end_mark} block")
    return text[:start] + block + text[end + len(end_mark):]


def extract_block(text: str, start_mark: str = START, end_mark: str = END) -> str:
    """``text``'s block between the markers, markers included."""
    start, end = text.find(start_mark), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"no {start_mark} ... {end_mark} block")
    return text[start:end + len(end_mark)]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="?",
                        help="the JSON of fastdecode bench --json (none: only the GPU section "
                             "of the existing page is rewritten)")
    parser.add_argument("--gpu", type=Path, default=GPU,
                        help="the JSON of benchmarks/gpu_check.sh (default: %(default)s, "
                             "when it exists)")
    parser.add_argument("--page", type=Path, default=PAGE, help="default: %(default)s")
    parser.add_argument("--figure", type=Path, default=FIGURE, help="default: %(default)s")
    parser.add_argument("--readme", type=Path, default=README,
                        help="the file whose results block is replaced (default: %(default)s; "
                             "'' leaves it alone)")
    args = parser.parse_args(argv)
    gpu = json.loads(args.gpu.read_text()) if args.gpu.is_file() else None
    if args.report is None:
        if gpu is None:
            parser.error(f"no bench report given and no GPU report at {args.gpu}")
        text = args.page.read_text()
        if GPU_START not in text:  # a page generated before there was a GPU section
            text = text.rstrip("\n") + f"\n\n{GPU_START}\n{GPU_END}\n"
        args.page.write_text(replace_block(text, gpu_block(gpu), GPU_START, GPU_END))
        print(f"GPU section of {args.page} written from {args.gpu}")
        return 0
    report = json.loads(args.report.read_text())
    args.page.parent.mkdir(parents=True, exist_ok=True)
    print(figure(report, args.figure))
    args.page.write_text(page(report, args.report, args.figure.name, gpu))
    print(f"results page written to {args.page}")
    if args.readme != Path(""):  # --readme '' (Path('') is Path('.'), a truthy str)
        args.readme.write_text(replace_block(args.readme.read_text(), summary_block(report)))
        print(f"results block of {args.readme} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
