"""What the benchmark sections share: the command line, the default data,
machine facts and library versions, interleaved rounds and their ratios,
progress bars and peak RSS.

The benchmarks are one package with one import name, ``benchmarks``, in a
checkout (``python -m benchmarks.bench_decode``) and from the wheel
(``fastdecode bench``); the sections import this module relatively. Only
the standard library is imported up front: the pillow-simd helper of
bench_transforms imports this module in a venv of its own.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import shlex
import statistics
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

# The checkout (or, from the wheel, the fastdecode package folder): where
# .venv-simd and the Makefile are looked for.
ROOT = Path(__file__).resolve().parent.parent

# Distributions whose versions every report names: the peers of any section.
DISTRIBUTIONS = ("numpy", "pillow", "simplejpeg", "PyTurboJPEG", "opencv-python-headless",
                 "torch", "torchvision", "tqdm")
PEAK_RSS_NOTE = ("peak RSS: the whole process's high-water mark over one untimed pass of the "
                 "row, reset just before it; it includes what every row shares (Python, the "
                 "libraries, the files in memory), so compare rows by their differences")


T = TypeVar("T")


# --------------------------------------------------------------------------
# Interleaved rounds.


def round_order(items: Sequence[T], r: int) -> list[T]:
    """Round ``r``'s order of ``items``: as given in even rounds, reversed in
    odd ones (A B, then B A), so a machine drifting within a pair of rounds
    favours neither end. Every section interleaves its rows this way."""
    return list(items) if r % 2 == 0 else list(items)[::-1]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The median of a[i] / b[i] over the rounds both have (b[i] > 0); None
    when there is none."""
    ratios = [x / y for x, y in zip(a, b) if y > 0]
    return statistics.median(ratios) if ratios else None


# --------------------------------------------------------------------------
# The command line.

class BenchParser(argparse.ArgumentParser):
    """--data, --quick and --json, which every section takes; `sizes` adds
    integer options (--limit, --rounds) whose default --quick lowers."""

    def __init__(self, doc: str, data_help: str,
                 sizes: dict[str, tuple[str, int, int]] | None = None):
        super().__init__(description=doc.split("\n\n")[0])
        self.sizes = sizes or {}
        self.add_argument("--data", type=Path,
                          help=f"{data_help} (default: a generated ImageNet-like set, made "
                               "once and cached)")
        self.add_argument("--quick", action="store_true", help="a reduced run")
        self.add_argument("--json", type=Path, help="write every number to this file")
        for name, (what, full, quick) in self.sizes.items():
            self.add_argument(f"--{name}", type=int,
                              help=f"{what} (default {full}; quick {quick})")

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        for name, (_, full, quick) in self.sizes.items():
            if getattr(parsed, name) is None:
                setattr(parsed, name, quick if parsed.quick else full)
        if any(getattr(parsed, name) < 1 for name in self.sizes):
            self.error(" and ".join(f"--{name}" for name in self.sizes) + " must be >= 1")
        return parsed


def command_line(module: str, argv: list[str] | None) -> str:
    """How to run this section again (``module`` is its ``__name__``), for the
    report's first line."""
    given = sys.argv[1:] if argv is None else argv
    spec = getattr(sys.modules["__main__"], "__spec__", None) if module == "__main__" else None
    name = spec.name if spec is not None else module  # under python -m, __name__ is __main__
    return " ".join(shlex.quote(a) for a in ["python", "-m", name, *given])


def package_parent(module_file: str, package: str) -> Path:
    """The folder a subprocess needs on its path to import ``package`` (the
    one that holds the benchmarks, ``benchmarks``)."""
    return Path(module_file).resolve().parents[len(package.split("."))]


def default_data() -> Path:
    """The generated ImageNet-like set, made once into the user's cache."""
    from fastdecode.cli.datagen import generate_imagenet_like

    return generate_imagenet_like()


# --------------------------------------------------------------------------
# Machine facts and versions.

def machine_facts() -> dict[str, Any]:
    from fastdecode._system import time_slice_ns, usable_cpus

    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": load_average(),
        # this process's scheduler slice; fastdecode's workers ask for 20 ms
        # (None: a kernel before 6.12, which takes no such request)
        "time_slice_ns": time_slice_ns(),
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load: a busy machine explains a bad run."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def library_versions() -> dict[str, Any]:
    """fastdecode's build and every peer's distribution (None: not installed)."""
    import fastdecode

    info = fastdecode.info()
    versions = {"fastdecode": info["version"], "fastdecode libjpeg-turbo": info["libjpeg_turbo"],
                "fastdecode simd": info["simd"]}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    if versions["pillow"]:
        from PIL import features

        versions["pillow libjpeg-turbo"] = features.version("libjpeg_turbo")
    return versions


# --------------------------------------------------------------------------
# Progress and memory.

def progress(desc: str, total: int):
    """A bar on stderr (stdout carries only the Markdown); it clears itself
    when done, leaving the table it was waiting for."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False,
                dynamic_ncols=True)


def emit(markdown: str) -> None:
    """Prints to stdout; progress bars on stderr (this section's, and `fastdecode
    bench`'s around it) are cleared first and redrawn after, so that a
    terminal shows the tables unbroken."""
    from tqdm import tqdm

    tqdm.write(markdown, file=sys.stdout)
    sys.stdout.flush()


def collect() -> None:
    """gc.collect(); the first call then freezes what survives it (the
    imports: torch's, torchvision's and dynamo's objects), so that later
    collections do not scan them again (each took ~0.2 s on these 2 CPUs,
    ~4 s of a quick decode section's 11)."""
    gc.collect()
    if not gc.get_freeze_count():
        gc.freeze()


def thaw() -> None:
    """Gives what collect() froze back to the collector (a section run in
    a process that goes on, as a test runs it)."""
    gc.unfreeze()


def peak_rss_mib(run: Callable[[], Any]) -> float | None:
    """This process's peak RSS in MiB while `run` runs. Linux keeps one
    high-water mark per process; writing 5 to /proc/self/clear_refs resets it
    to the current RSS. None, and `run` not called, where that is refused."""
    collect()  # garbage of earlier rows is not this row's
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    run()
    with open("/proc/self/status") as f:
        match = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None
