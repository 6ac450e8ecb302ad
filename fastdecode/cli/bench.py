"""``fastdecode bench``: the bundled benchmark, on your data or a generated
ImageNet-like set.

The sections are the modules of ``benchmarks/`` (shipped in the wheel under
the same name, ``benchmarks``): decode-only per library (and BMP vs JPEG), fused
transforms per library, the end-to-end loaders against the machine's limit
(steady state, median of interleaved rounds) and, with --full or --sections,
the transforms of real training recipes and the loaders on slow storage
(a FUSE mount adding 0-20 ms per open; a skip line without FUSE). Each
shows a progress bar on stderr and prints its Markdown tables as it finishes; this command runs them in turn
on one dataset, ends with a five-line summary, and writes one JSON report
(every section's numbers, the machine, the library versions, the date and
the command) and a PNG figure: a bar per library and section with its ratio
to the baseline, the loaders' limit as a line (``benchmarks/results.py``,
which also renders the report as the docs' results page).

The default run takes about four minutes on 2 cores (once the generated set
exists); --full is the whole sweep (num_workers 0-8, every size, the
recipes, slow storage, and Ray Data when ray is installed; about 20 minutes
plus storage's), --quick a smoke run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
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
    "ray": "bench_ray",  # needs ray (fastdecode[ray]); skipped without it
    "storage": "bench_storage",  # needs FUSE (latencyfs); prints a skip line without it
    "remote": "bench_remote",  # http:// and s3:// (moto, s3fs) on 127.0.0.1; s3 left out without
}
DEFAULT_SECTIONS = ("decode", "transforms", "loader")  # --full: all of SECTIONS
OPTIONAL = {"ray": "ray"}  # section -> the package it needs
# Each section's arguments per run mode. The default's sizes keep the whole
# run under four minutes on 2 cores (DESIGN.md, "CLI and benchmarks"): measured
# on 1 December with decode 200 / transforms 100 images and the loader's train
# and eval chains, the sections took ~47 s, ~47 s and 183 s (284 s); the
# default's loader runs the train chain only (the summary's), eval in --full.
MODE_ARGS: dict[str, dict[str, list[str]]] = {
    "quick": {"decode": ["--quick"], "transforms": ["--quick", "--no-simd"],
              "loader": ["--quick"], "recipes": ["--quick"], "ray": ["--quick"],
              "storage": ["--quick"], "remote": ["--quick"]},
    "default": {"decode": ["--limit", "200", "--rounds", "3"],
                "transforms": ["--limit", "100", "--rounds", "3"], "loader": ["--chains", "train"],
                "recipes": [],
                "ray": [], "storage": [], "remote": []},
    "full": {"decode": [], "transforms": [], "loader": ["--full"], "recipes": ["--full"],
             "ray": [], "storage": ["--full"], "remote": []},
}

EPILOG = """\
examples:
  fastdecode bench                         # generated ImageNet-like set (cached)
  fastdecode bench --quick                 # smoke run, under two minutes on 2 cores
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


def _ratio(value: float | None, text: str) -> str:
    return "not measured" if value is None else text.format(value)


def summary_lines(sections: dict[str, Any]) -> list[str]:
    """Five lines: decode, fused, the two loaders' speedups, efficiency vs the limit."""
    def row(section: str, key: str, name: str) -> dict:
        for part in sections.get(section, {}).get("sections", []):
            if part.get("key") == key:
                return next((r for r in part["rows"] if r["name"] == name), {})
        return {}

    decode = row("decode", "jpeg_full", "fastdecode").get("speedup")
    fused = row("transforms", "train_float", "fastdecode fuse").get("speedup")
    train = sections.get("loader", {}).get("chains", {}).get("train", {})
    loader = train.get("summary", {})
    limit = train.get("limit", {})
    workers = f"train chain, {loader['num_workers']} workers, steady state" if loader else ""
    return [
        "decode:     " + _ratio(decode, "fastdecode {:.2f}x Pillow (full JPEG decode, one "
                                "thread)"),
        "fused:      " + _ratio(fused, "fuse {:.2f}x torchvision + PIL (train chain, float, one "
                               "thread)"),
        "loader:     " + _ratio(loader.get("speedup_fastimagefolder"),
                                "DataLoader(FastImageFolder) {:.2f}x ImageFolder ("
                                + workers + ")"),
        "FastLoader: " + _ratio(loader.get("speedup_fastloader"),
                                "{:.2f}x ImageFolder (" + workers + ")"),
        "efficiency: " + (_ratio(loader.get("efficiency_fastimagefolder"),
                                 "FastImageFolder {:.0%}")
                          + (f", FastLoader {loader['efficiency_fastloader']:.0%} of the limit "
                             f"({limit['usable_cpus']} CPUs / {limit['fused_ms_per_image']:.2f} "
                             "ms per fused image = "
                             f"{limit['images_per_s']:,.0f} images/s)" if loader else "")),
    ]


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
    data = args.data or common.default_data()
    if not Path(data).is_dir():
        print(f"fastdecode bench: --data {data} is not a folder", file=sys.stderr)
        return 2
    mode = "quick" if args.quick else "full" if args.full else "default"
    sections = args.sections or list(SECTIONS if args.full else DEFAULT_SECTIONS)
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


register = subcommand("bench", run, _options, description=__doc__, epilog=EPILOG)
