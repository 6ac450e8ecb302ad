"""``fastdecode bench``: runs the bundled benchmark's sections in turn on one
ImageFolder tree (yours, or a generated ImageNet-like set), then prints its
summary and writes the JSON report and the figure.

It says what it will run and about how long before it starts
(:data:`ESTIMATE_S`, from the recorded runs); each section shows a progress
bar on stderr and prints its tables; the closing five lines are in a user's
terms (images/s, speedups, the machine's limit). The sections are the
modules of ``benchmarks/``, shipped in the wheel under that name. Decision
record: docs/decisions/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastdecode.cli._args import subcommand

SECTIONS = {
    "decode": "bench_decode",
    "transforms": "bench_transforms",
    "loader": "bench_loader",
    "recipes": "bench_recipes",
    "mixing": "bench_mixing",  # MixUp/CutMix end to end (2 workers) and alone
    "ray": "bench_ray",  # needs ray (fastdecode[ray]); skipped without it
    "storage": "bench_storage",  # needs FUSE (latencyfs); prints a skip line without it
    "remote": "bench_remote",  # http:// and s3:// (moto, s3fs) on 127.0.0.1; s3 left out without
    "tv-datasets": "bench_tv_datasets",  # torchvision's CIFAR10 / Food101 swapped one line
    "formats": "bench_formats",  # PNG and WebP (the set's photos re-encoded), one thread
    "detection": "bench_detection",  # the detection/segmentation presets, COCO masks, one thread
}
DEFAULT_SECTIONS = ("decode", "transforms", "loader")  # --full: all of SECTIONS
OPTIONAL = {"ray": "ray"}  # section -> the package it needs
# Each section's arguments per run mode. The default's sizes keep the whole
# run near four minutes on 2 quiet cores (ESTIMATE_S below): with decode 200 /
# transforms 100 images and the loader's train and eval chains, the sections
# took ~47 s, ~47 s and 183 s (284 s) on 1 December; the default's loader runs
# the train chain only (the summary's), eval in --full.
MODE_ARGS: dict[str, dict[str, list[str]]] = {
    "quick": {"decode": ["--quick"], "transforms": ["--quick", "--no-simd"],
              "loader": ["--quick"], "recipes": ["--quick"], "mixing": ["--quick"],
              "ray": ["--quick"],
              "storage": ["--quick"], "remote": ["--quick"], "tv-datasets": ["--quick"],
              "formats": ["--quick"], "detection": ["--quick"]},
    "default": {"decode": ["--limit", "200", "--rounds", "3"],
                "transforms": ["--limit", "100", "--rounds", "3"], "loader": ["--chains", "train"],
                "recipes": [], "mixing": [],
                "ray": [], "storage": [], "remote": [], "tv-datasets": [],
                "formats": ["--limit", "24", "--rounds", "3"],
                "detection": ["--limit", "24", "--rounds", "3"]},
    "full": {"decode": [], "transforms": [], "loader": ["--full"], "recipes": ["--full"],
             "mixing": ["--full"],
             "ray": [], "storage": ["--full"], "remote": [], "tv-datasets": [], "formats": [],
             "detection": []},
}

# About how long each section takes, in seconds on a quiet 2-core machine,
# from the recorded runs (docs/decisions/benchmarks.md, "fastdecode bench
# default"): the default's 185 s of 1 December (decode 41 s, transforms 39 s,
# loader 82 s) with the loader's rounds since lengthened (their cap 4 -> 8 s,
# about +35 s); quick from its runs under load (46, 33 and 16 s at load 4 on 2
# CPUs). None: no recorded duration. START_S: imports, the machine's facts,
# the figure; GENERATE_S: writing the generated set, once.
ESTIMATE_S: dict[str, dict[str, float]] = {
    "quick": {"decode": 30, "transforms": 25, "loader": 15},
    "default": {"decode": 45, "transforms": 45, "loader": 120},
}
FULL_MINUTES = 20  # the whole sweep, storage's FUSE section aside
START_S = 25
GENERATE_S = 30

DESCRIPTION = """\
Benchmarks fastdecode against the libraries it replaces, on your ImageFolder
tree or a generated ImageNet-like one (1,000 JPEGs, made once into
~/.cache/fastdecode). The sections, run in turn, by default:

  decode      JPEG and BMP decoding per library, one thread (baseline: Pillow)
  transforms  decode + torchvision's train and eval chains, one thread
              (baseline: torchvision + PIL)
  loader      ImageFolder, DataLoader(FastImageFolder) and FastLoader end to
              end in steady state, against the machine's limit (usable CPUs /
              the cost of one image)

and with --full or --sections:

  recipes     real training recipes' transforms
  mixing      MixUp/CutMix on the batches, 2 workers (baseline: torchvision's
              reference collate_fn over ImageFolder)
  storage     the loaders on a mount that delays each open (needs FUSE)
  remote      http:// and s3:// roots served on 127.0.0.1
  ray         Ray Data (needs fastdecode[ray])
  tv-datasets torchvision's CIFAR10 (the seed's example, CIFAR's crop
              recipe) and a Food101 layout, swapped for fastdecode.datasets'
  formats     PNG and WebP (the set's photos re-encoded): decode and the fused
              train / eval chains, one thread (baseline: Pillow / torchvision)
  detection   torchvision's detection presets over generated COCO masks and
              boxes, and the segmentation preset on label PNGs, one thread
              (baseline: torchvision's CocoDetection + v2, needs pycocotools)

It first says what it will run and about how long; each section shows a
progress bar and prints its tables; a five-line summary ends the run (images/s
and speedups, and how close the loaders come to the limit). A row marked
"noisy" had rounds that differed by more than 10% (other work was running):
rerun on a quiet machine before trusting it.

The default run takes about 4 minutes on a quiet 2-core machine (more on a
busy one); --quick about 2 (a smoke test: its numbers are not comparable);
--full about 20 plus the storage section's. --json writes every number with the
machine, the library versions and the command; --plot draws a bar per library
and section with its ratio to the baseline."""

EPILOG = """\
examples:
  fastdecode bench                         # generated ImageNet-like set (cached)
  fastdecode bench --quick                 # smoke run, about two minutes on 2 cores
  fastdecode bench --full                  # the whole sweep, every section
  fastdecode bench --data ~/imagenet/val --json bench.json --plot bench.png
  fastdecode bench --sections loader --quick
"""


# The benchmarks/ package's one import name, in the wheel and in a checkout.
PACKAGE = "benchmarks"


def benchmark_module(module: str):
    """A module of the benchmarks/ package."""
    if importlib.util.find_spec(PACKAGE) is None:
        raise ModuleNotFoundError(f"the benchmarks are not installed ({PACKAGE} does not import)")
    return importlib.import_module(f"{PACKAGE}.{module}")


def section_argv(name: str, data: Path, mode: str, json_path: Path) -> list[str]:
    """The command line of benchmark section ``name`` in this run.

    Parameters
    ----------
    name : str
        The section, a key of ``SECTIONS``.
    data : Path
        The ImageFolder tree it measures.
    mode : str
        The run mode, ``"quick"``, ``"default"`` or ``"full"`` (a key of
        ``MODE_ARGS``).
    json_path : Path
        Where the section writes its numbers.

    Returns
    -------
    list of str
        The arguments for the section module's ``main``.
    """
    return ["--data", str(data), "--json", str(json_path), *MODE_ARGS[mode][name]]


def plot(report: dict, path: Path) -> str:
    """The figure of the published results (``benchmarks/results.py``): one
    panel per section, a bar per library with its ratio to the section's
    baseline written on it, the loaders' limit as a line."""
    return benchmark_module("results").figure(report, path)


def command_line(args: argparse.Namespace) -> str:
    """The ``fastdecode bench`` command that gives this run, for the report."""
    words = ["fastdecode", "bench"]
    if args.data is not None:
        words += ["--data", str(args.data)]
    words += ["--quick"] if args.quick else ["--full"] if args.full else []
    if args.sections:
        words += ["--sections", *args.sections]
    if args.json is not None:
        words += ["--json", str(args.json)]
    if args.plot is not None:
        words += ["--plot", str(args.plot)]
    return " ".join(words)


def _rate(value: float | None) -> str:
    return f"{value:,.0f} images/s" if value is not None else ""


def _noisy(row: dict) -> str:
    """A row whose rounds spread over NOISY_SPREAD, said in words."""
    if not row.get("noisy"):
        return ""
    return f"; noisy: its rounds differed by {row.get('spread', 0):.0%}, rerun on a quiet machine"


def _versus(ours: dict, base: dict, base_name: str, speedup: float | None) -> str:
    """'847 images/s, 1.56x Pillow's 542', or as much of it as was measured."""
    if speedup is None:
        return "not measured"
    rate, base_rate = ours.get("images_per_s"), base.get("images_per_s")
    if rate is None or base_rate is None:
        return f"{speedup:.2f}x {base_name}"
    return f"{_rate(rate)}, {speedup:.2f}x {base_name}'s {base_rate:,.0f}"


def summary_lines(sections: dict[str, Any]) -> list[str]:
    """The run's closing five lines, in what a user measures: images/s and
    the speedup over the library each replaces (decode, fused decode +
    transforms, the two loaders), then the machine's limit and how close
    the loaders come to it; an unsteady row says so."""
    def row(section: str, key: str, name: str) -> dict:
        for part in sections.get(section, {}).get("sections", []):
            if part.get("key") == key:
                return next((r for r in part["rows"] if r["name"] == name), {})
        return {}

    decode = row("decode", "jpeg_full", "fastdecode")
    pillow = row("decode", "jpeg_full", "Pillow")
    fused = row("transforms", "train_float", "fastdecode fuse")
    torchvision = row("transforms", "train_float", "torchvision + PIL")
    train = sections.get("loader", {}).get("chains", {}).get("train", {})
    loader = train.get("summary", {})
    limit = train.get("limit", {})
    rows = {r.get("loader"): r for r in train.get("rows", [])
            if r.get("num_workers") == loader.get("num_workers")}
    base = rows.get("ImageFolder+PIL", {})

    def loader_line(name: str, key: str, shown: str) -> str:
        text = _versus(rows.get(name, {}), base, "ImageFolder", loader.get(key))
        if text == "not measured":
            return text
        return (f"{shown}{text} (train chain, {loader['num_workers']} workers, steady state"
                f"{_noisy(rows.get(name, {})) or _noisy(base)})")

    if limit and loader:
        reach = [f"{name} {loader[key]:.0%}" for name, key in (
            ("DataLoader(FastImageFolder)", "efficiency_fastimagefolder"),
            ("FastLoader", "efficiency_fastloader")) if loader.get(key) is not None]
        ceiling = (f"this machine decodes at most {_rate(limit['images_per_s'])} "
                   f"({limit['usable_cpus']} CPUs / {limit['fused_ms_per_image']:.2f} ms per "
                   f"fused image{_noisy(limit)})"
                   + (f"; reached: {', '.join(reach)}" if reach else ""))
    else:
        ceiling = "not measured"
    return [
        "decode:     " + ("not measured" if not decode else "fastdecode " + _versus(
            decode, pillow, "Pillow", decode.get("speedup")) + " (full JPEG decode, one thread)"),
        "fused:      " + ("not measured" if not fused else "fastdecode fuse " + _versus(
            fused, torchvision, "torchvision + PIL", fused.get("speedup"))
            + " (decode + train chain to float, one thread)"),
        "loader:     " + loader_line("FastImageFolder", "speedup_fastimagefolder",
                                    "DataLoader(FastImageFolder) "),
        "FastLoader: " + loader_line("FastLoader", "speedup_fastloader", ""),
        "limit:      " + ceiling,
    ]


def plan(sections: list[str], mode: str, data: Path | None) -> str:
    """What a run will do and about how long it takes, said before it starts.

    Parameters
    ----------
    sections : list of str
        The sections it runs, in order (keys of ``SECTIONS``).
    mode : str
        ``"quick"``, ``"default"`` or ``"full"``.
    data : Path or None
        The ``--data`` tree; None: the generated set (made first when it is
        not in the cache yet).

    Returns
    -------
    str
        One paragraph: the sections, the data, the estimate on a quiet
        2-core machine (:data:`ESTIMATE_S`; sections without a recorded
        duration named as such) and what the run prints.
    """
    seconds = float(START_S)
    if data is None:  # datagen needs Pillow: only when the set is generated
        from fastdecode.cli.datagen import MARKER_NAME, default_dataset_dir

        cached = default_dataset_dir()
        generate = not (cached / MARKER_NAME).is_file()
        seconds += GENERATE_S if generate else 0
        where = (f"a generated ImageNet-like set (1,000 JPEGs in {cached}"
                 + (", written first" if generate else "") + ")")
    else:
        where = str(data)
    known = ESTIMATE_S.get(mode, {})
    unknown = [name for name in sections if name not in known]
    if mode == "full" and set(sections) == set(SECTIONS):
        took = (f"It takes about {FULL_MINUTES} minutes on a quiet 2-core machine, plus the "
                "storage section's, more on a busy one.")
    elif len(unknown) == len(sections):
        took = "No duration is recorded for this run."
    else:
        seconds += sum(known[name] for name in sections if name in known)
        minutes = max(1, math.ceil(seconds / 60))
        took = (f"It takes about {minutes} minute{'s' if minutes > 1 else ''} on a quiet "
                "2-core machine, more on a busy one"
                + (f"; the {_and(unknown)} section{'s have' if len(unknown) > 1 else ' has'} no "
                   "recorded duration." if unknown else "."))
    return (f"fastdecode bench runs the {_and(sections)} section"
            + (f"s, in turn, on {where}. " if len(sections) > 1 else f" on {where}. ")
            + took + " Each section shows a progress bar, then its tables; a five-line summary "
            "ends the run.")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def run(args: argparse.Namespace) -> int:
    """Runs ``fastdecode bench``: each section in turn on one dataset, then the
    summary, the JSON report (with ``--json``) and the figure.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line (``--data``, ``--quick`` or ``--full``,
        ``--sections``, ``--json``, ``--plot``).

    Returns
    -------
    int
        The exit status: 0 when every section ran or was skipped (a missing
        optional package or benchmark module), 1 when a section failed, 2
        when the benchmarks cannot be imported or ``--data`` is not a folder.
    """
    from tqdm import tqdm

    try:
        common = benchmark_module("_common")
    except ModuleNotFoundError as exc:
        print(f"fastdecode bench: {exc}", file=sys.stderr)
        return 2
    if args.data is not None and not Path(args.data).is_dir():
        print(f"fastdecode bench: --data {args.data} is not a folder", file=sys.stderr)
        return 2
    mode = "quick" if args.quick else "full" if args.full else "default"
    sections = args.sections or list(SECTIONS if args.full else DEFAULT_SECTIONS)
    print(plan(sections, mode, args.data), file=sys.stderr, flush=True)
    data = args.data or common.default_data()
    report: dict[str, Any] = {"data": str(data), "quick": args.quick, "mode": mode,
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "command": command_line(args),
                              "machine": common.machine_facts(),
                              "versions": common.library_versions(), "sections": {},
                              "skipped": {}}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        bar = tqdm(sections, desc="fastdecode bench", unit="section", file=sys.stderr)
        for name in bar:
            bar.set_postfix_str(name)
            json_path = Path(tmp) / f"{name}.json"
            start = time.perf_counter()
            needs = OPTIONAL.get(name)
            if needs is not None and importlib.util.find_spec(needs) is None:
                report["skipped"][name] = f"needs {needs} (pip install fastdecode[{needs}])"
                common.emit(f"\n## {name}: skipped ({report['skipped'][name]})\n")
                continue
            try:
                module = benchmark_module(SECTIONS[name])
            except ModuleNotFoundError as exc:
                report["skipped"][name] = str(exc)
                common.emit(f"\n## {name}: skipped ({exc})\n")
                continue
            common.emit(f"\n## {name}\n")
            rc = module.main(section_argv(name, Path(data), mode, json_path))
            if rc != 0 or not json_path.exists():
                failed = True
                report["skipped"][name] = f"failed with exit code {rc}"
                continue
            report["sections"][name] = json.loads(json_path.read_text())
            if "skipped" in report["sections"][name]:  # e.g. storage without FUSE
                report["skipped"][name] = report["sections"][name]["skipped"]
            report["sections"][name]["seconds"] = time.perf_counter() - start
    report["summary"] = summary_lines(report["sections"])
    if report["sections"] and args.plot is not None:
        print(plot(report, args.plot))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"report written to {args.json}")
    common.emit("\n## summary\n\n" + "\n".join(report["summary"]))  # the last five lines
    return 1 if failed else 0


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode bench``."""
    parser.add_argument("--data", type=Path,
                        help="an ImageFolder tree (default: a generated ImageNet-like set, "
                             "cached under ~/.cache/fastdecode)")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true",
                       help="a smoke run (few images; the numbers are not comparable)")
    modes.add_argument("--full", action="store_true",
                       help="every section at full size, num_workers 0 1 2 4 8 (about 20 "
                            "minutes on 2 cores)")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS),
                        help=f"run only these sections (default: {' '.join(DEFAULT_SECTIONS)}; "
                             "--full: all)")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--plot", type=Path, default=Path("fastdecode-bench.png"),
                        help="PNG of the results: a panel per section, a bar per library with "
                             "its ratio to the baseline, the loaders' limit as a line "
                             "(default: %(default)s)")


register = subcommand("bench", run, _options, description=DESCRIPTION, epilog=EPILOG)
