"""``fastdecode bench``: the bundled benchmark, on your data or a generated
ImageNet-like set.

The sections are the scripts in ``benchmarks/`` (shipped in the wheel as
``fastdecode.benchmarks``): decode-only per library (and BMP vs JPEG), fused
transforms per library, and the end-to-end loader sweep over num_workers.
Each shows a progress bar on stderr and prints its Markdown tables as it
finishes; this command runs them in turn on one dataset, then writes one JSON
report (every section's numbers, the machine, the library versions) and a PNG
plot of images/s against num_workers per loader.
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

from fastdecode.cli._args import add_command

SECTIONS = {
    "decode": "bench_decode",
    "transforms": "bench_transforms",
    "loader": "bench_loader",
}

EPILOG = """\
examples:
  fastdecode bench                         # generated ImageNet-like set (cached)
  fastdecode bench --quick                 # reduced run, under two minutes on 2 cores
  fastdecode bench --data ~/imagenet/val --json bench.json --plot bench.png
  fastdecode bench --sections loader --quick
"""


# Where the benchmarks/ package is importable: inside the wheel, or in a checkout.
PACKAGES = ("fastdecode.benchmarks", "benchmarks")


def benchmark_package() -> str:
    """The name the benchmarks/ package has here: from the wheel, else from a checkout."""
    for package in PACKAGES:
        if importlib.util.find_spec(package) is not None:
            return package
    raise ModuleNotFoundError("the benchmarks are not installed (neither "
                              f"{' nor '.join(PACKAGES)} imports)")


def benchmark_module(module: str):
    """A module of the benchmarks/ package."""
    return importlib.import_module(f"{benchmark_package()}.{module}")


def section_argv(name: str, data: Path, quick: bool, json_path: Path) -> list[str]:
    argv = ["--data", str(data), "--json", str(json_path)]
    if quick:
        argv.append("--quick")
        if name == "loader":  # the sweep dominates: keep --quick under two minutes
            argv += ["--workers", "0", "2", "--batch-size", "32", "--entries", "100000"]
        if name == "transforms":
            argv += ["--no-simd"]
    return argv


def plot_loader(loader_report: dict, path: Path) -> str:
    """images/s against num_workers, one line per loader, one panel per chain."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install matplotlib)"
    chains = loader_report.get("chains", {})
    fig, axes = plt.subplots(1, max(1, len(chains)), figsize=(5 * max(1, len(chains)), 3.6),
                             squeeze=False)
    for ax, (chain, result) in zip(axes[0], chains.items()):
        loaders = sorted({r["loader"] for r in result["rows"]})
        for loader in loaders:
            rows = sorted((r for r in result["rows"] if r["loader"] == loader),
                          key=lambda r: r["num_workers"])
            ax.plot([r["num_workers"] for r in rows], [r["images_per_s"] for r in rows],
                    marker="o", label=loader)
        ax.set_title(f"{chain} chain")
        ax.set_xlabel("num_workers")
        ax.set_ylabel("images/s")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def run(args: argparse.Namespace) -> int:
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
    sections = args.sections or list(SECTIONS)
    report: dict[str, Any] = {"data": str(data), "quick": args.quick,
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
            try:
                module = benchmark_module(SECTIONS[name])
            except ModuleNotFoundError as exc:
                report["skipped"][name] = str(exc)
                common.emit(f"\n## {name}: skipped ({exc})\n")
                continue
            common.emit(f"\n## {name}\n")
            rc = module.main(section_argv(name, Path(data), args.quick, json_path))
            if rc != 0 or not json_path.exists():
                failed = True
                report["skipped"][name] = f"failed with exit code {rc}"
                continue
            report["sections"][name] = json.loads(json_path.read_text())
            report["sections"][name]["seconds"] = time.perf_counter() - start
    if "loader" in report["sections"] and args.plot is not None:
        print(plot_loader(report["sections"]["loader"], args.plot))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"report written to {args.json}")
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "bench", description=__doc__, epilog=EPILOG)
    parser.add_argument("--data", type=Path,
                        help="an ImageFolder tree (default: a generated ImageNet-like set, "
                             "cached under ~/.cache/fastdecode)")
    parser.add_argument("--quick", action="store_true",
                        help="a reduced run (fewer images, rounds and worker counts)")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS),
                        help="run only these sections (default: all)")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--plot", type=Path, default=Path("fastdecode-bench.png"),
                        help="PNG of images/s against num_workers (default: %(default)s)")
    parser.set_defaults(run=run)
