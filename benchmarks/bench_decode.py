"""Single-thread decode throughput of fastdecode, its peers and a C floor.

    python -m benchmarks.bench_decode [--data DIR] [--limit N] [--rounds R] [--quick] [--json PATH]

Files are read into memory first, so the numbers measure decoding, not the
disk. Every library decodes the same files: a first untimed pass finds the
files each one cannot decode (CMYK, for the libraries that refuse it) and the
timed rounds use only the files that all of them decode. Inside each round
the libraries take turns on slices of 50 images (~0.1 s), so that the noise
of a shared machine hits all of them alike, and each slice counts at its
best round. Peers that are not installed are listed as skipped, never
dropped. Each row also reports the CPU time it used per image, its speedup
over the baseline (Pillow open + convert + np.asarray, what torchvision's
ImageFolder does; fastdecode on one thread in the threads section), and the
process's peak RSS over one more, untimed, pass.

Sections: full RGB decode, min_size=(256, 256), a centred crop of half the
area, 1 vs 2 threads, read_header, and BMP (24-bit files made from the same
images). The C floor is benchmarks/c_floor (built by `make
benchmarks/c_floor`), a plain C loop over libjpeg.
"""

# Over ~400 lines on purpose: one table, one row per peer; each peer's runner is
# short and they are compared in one interleaved loop, so they stay together.

from __future__ import annotations

import gc
import io
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

import fastdecode

from . import _common as common

ROOT = common.ROOT
C_FLOOR = Path(__file__).resolve().parent / "c_floor"
JPEG_SUFFIXES = {".jpg", ".jpeg", ".jpe", ".jfif"}
MIN_SIZE = 256
CROP_AREA = 0.5
HEADER_REPEAT = 20  # header reads are ~100x faster than decodes: more per turn
THREADS = 2  # the threads section: 1 vs this many
SLICE = 50  # images per turn: ~0.1 s of decoding, short against the machine's noise


# --------------------------------------------------------------------------
# The files.

@dataclass
class Sample:
    path: Path
    jpeg: bytes
    info: Any  # fastdecode.ImageInfo
    bmp: bytes | None = None

    @property
    def crop(self) -> tuple[int, int, int, int]:
        """The centred crop of CROP_AREA of the image, as (top, left, h, w);
        the same arithmetic as c_floor's --crop-area."""
        side = math.sqrt(CROP_AREA)
        h, w = int(self.info.height * side), int(self.info.width * side)
        return (self.info.height - h) // 2, (self.info.width - w) // 2, h, w


def find_jpegs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in JPEG_SUFFIXES and p.is_file())


def load_samples(root: Path, limit: int) -> tuple[list[Sample], int]:
    """A deterministic sample of at most `limit` files from all over the
    folder (not the first classes only); returns it and the unreadable count."""
    paths = find_jpegs(root)
    if len(paths) > limit:
        paths = sorted(random.Random(0).sample(paths, limit))
    samples, unreadable = [], 0
    for path in paths:
        data = path.read_bytes()
        try:
            samples.append(Sample(path, data, fastdecode.read_header(data)))
        except (fastdecode.FastDecodeError, ValueError):
            unreadable += 1
    return samples, unreadable


def describe_dataset(root: Path, samples: list[Sample], unreadable: int) -> dict:
    sizes = [len(s.jpeg) for s in samples]
    flavours: dict[str, int] = {}
    for s in samples:
        kind = s.info.subsampling if s.info.color_space in ("ycbcr", "rgb") else s.info.color_space
        flavours[str(kind)] = flavours.get(str(kind), 0) + 1
        if s.info.progressive:
            flavours["progressive"] = flavours.get("progressive", 0) + 1
    return {
        "path": str(root),
        "files": len(samples),
        "unreadable_files": unreadable,
        "total_mb": round(sum(sizes) / 1e6, 1),
        "mean_kb": round(statistics.mean(sizes) / 1024, 1) if sizes else None,
        "median_width": statistics.median(s.info.width for s in samples) if samples else None,
        "median_height": statistics.median(s.info.height for s in samples) if samples else None,
        "flavours": dict(sorted(flavours.items())),
    }


# --------------------------------------------------------------------------
# What is timed.

Call = Callable[[], Any]


def run_sequential(calls: Iterable[Call]) -> None:
    for call in calls:
        call()


@dataclass
class Contender:
    """One row of a table: a way to decode a Sample, or the C floor."""

    name: str
    bind: Callable[[Sample], Call] | None = None  # untimed: returns the timed call
    note: str = ""
    status: str = "ok"  # otherwise why it was not measured
    runner: Callable[[list[Call]], None] = run_sequential
    external: CFloor | None = None  # a C floor, which times itself
    failed: set[int] = field(default_factory=set)  # sample indices it cannot decode
    seconds: list[list[float]] = field(default_factory=list)  # [round][slice]
    cpu_seconds: float = 0.0  # CPU time (all threads) over all rounds
    peak_rss_mib: float | None = None  # the process's, over one untimed pass

    def check(self, samples: list[Sample]) -> None:
        """Decodes every sample once: finds failures and warms up."""
        first_error = "no file decoded"
        if self.external is not None:
            try:
                self.failed = self.external.check(samples)
            except (OSError, subprocess.CalledProcessError) as exc:
                self.failed, first_error = set(range(len(samples))), str(exc)
        else:
            for i, sample in enumerate(samples):
                try:
                    self.bind(sample)()
                except Exception as exc:  # each peer has its own error types
                    if not self.failed:
                        first_error = f"{type(exc).__name__}: {exc}"
                    self.failed.add(i)
        if samples and len(self.failed) == len(samples):
            self.status = f"failed: {first_error}"

    def time_slice(self, calls: list[Call], lo: int, hi: int, repeat: int) -> float:
        if self.external is not None:
            seconds, cpu = self.external.measure(lo, hi)
            self.cpu_seconds += cpu * repeat
            return seconds * repeat
        batch = calls[lo:hi]
        gc.disable()
        try:
            cpu, start = time.process_time(), time.perf_counter()
            for _ in range(repeat):
                self.runner(batch)
            elapsed = time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu
            return elapsed
        finally:
            gc.enable()

    def measure_peak_rss(self, calls: list[Call]) -> None:
        """After the timed rounds: the C floor's own peak (its VmHWM), or this
        process's over one more pass of every call."""
        if self.external is not None:
            self.peak_rss_mib = self.external.peak_rss_mib
        else:
            self.peak_rss_mib = common.peak_rss_mib(partial(self.runner, calls))

    def best_seconds(self) -> float:
        """Each slice at its best round, summed: a burst of noise in one
        round spoils only the slices it hit, for every library alike."""
        return sum(map(min, zip(*self.seconds)))


class CFloor:
    """benchmarks/c_floor: a --check run, then a --serve process that times
    the slices it is asked for, between the other libraries' turns."""

    def __init__(self, binary: Path, options: list[str], workdir: Path):
        self.binary = binary
        self.options = options
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.peak_rss_mib: float | None = None  # as of the last slice

    def _listing(self, samples: list[Sample]) -> str:
        path = self.workdir / f"files-{id(self)}.txt"
        path.write_text("".join(f"{s.path}\n" for s in samples))
        return str(path)

    def check(self, samples: list[Sample]) -> set[int]:
        out = subprocess.run([str(self.binary), *self.options, "--check", self._listing(samples)],
                             capture_output=True, text=True, check=True).stdout
        return {int(line.split("=", 1)[1].split("\t")[0]) for line in out.splitlines()
                if line.startswith("failed=")}

    def start(self, samples: list[Sample]) -> None:
        self.process = subprocess.Popen(
            [str(self.binary), *self.options, "--serve", self._listing(samples)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = self.process.stdout.readline().strip()
        if first != "ready":  # it failed on a file every other row decoded
            raise RuntimeError(f"c_floor did not start: {first!r}")

    def measure(self, lo: int, hi: int) -> tuple[float, float]:
        """The wall and CPU seconds of decoding files [lo, hi)."""
        self.process.stdin.write(f"{lo} {hi}\n")
        self.process.stdin.flush()
        reply = dict(self.process.stdout.readline().strip().split("=", 1) for _ in range(4))
        if int(reply["images"]) != hi - lo:
            raise RuntimeError(f"c_floor decoded {reply['images']} of {hi - lo} files")
        kib = int(reply["peak_rss_kib"])
        self.peak_rss_mib = kib / 1024 if kib >= 0 else None
        return float(reply["seconds"]), float(reply["cpu_seconds"])

    def stop(self) -> None:
        if self.process is not None:
            self.process.communicate()  # EOF on its stdin ends it; closes both pipes
            self.process = None


def ensure_c_floor() -> str | None:
    """Builds the C floor through its Makefile rule; None when usable,
    else why not."""
    if (ROOT / "Makefile").exists() and shutil.which("make"):
        build = subprocess.run(["make", "-s", "-C", str(ROOT), "benchmarks/c_floor"],
                               capture_output=True, text=True)
        if build.returncode != 0 and not C_FLOOR.exists():
            why = (build.stderr.strip().splitlines() or ["make failed"])[-1]
            return f"skipped (not built: {why})"
    return None if os.access(C_FLOOR, os.X_OK) else "skipped (benchmarks/c_floor not built)"


# --------------------------------------------------------------------------
# The libraries. Each factory returns {section: (bind, note)}; a section a
# library has no way to do is absent from its dict.

def fastdecode_peer() -> dict:
    dj = fastdecode.decode_jpeg
    return {
        "full": (lambda s: partial(dj, s.jpeg), "decode_jpeg(data)"),
        "min_size": (lambda s: partial(dj, s.jpeg, min_size=(MIN_SIZE, MIN_SIZE)),
                     f"min_size=({MIN_SIZE}, {MIN_SIZE}): smallest M/8 that covers it"),
        "crop": (lambda s: partial(dj, s.jpeg, crop=s.crop), "crop=(top, left, h, w)"),
        "header": (lambda s: partial(fastdecode.read_header, s.jpeg), "read_header(data)"),
        "bmp": (lambda s: partial(fastdecode.decode_bmp, s.bmp), "decode_bmp(data)"),
    }


def pillow_peer() -> dict:
    from PIL import Image

    def full(s):
        return lambda: np.asarray(Image.open(io.BytesIO(s.jpeg)).convert("RGB"))

    def min_size(s):
        def call():
            image = Image.open(io.BytesIO(s.jpeg))
            image.draft("RGB", (MIN_SIZE, MIN_SIZE))
            return np.asarray(image.convert("RGB"))
        return call

    def crop(s):
        top, left, h, w = s.crop
        box = (left, top, left + w, top + h)
        return lambda: np.asarray(Image.open(io.BytesIO(s.jpeg)).crop(box).convert("RGB"))

    return {
        "full": (full, "open + convert('RGB') + np.asarray"),
        "min_size": (min_size, "draft('RGB', size): 1/2^k DCT scaling"),
        "crop": (crop, "full decode, then crop"),
        "header": (lambda s: lambda: Image.open(io.BytesIO(s.jpeg)).size, "open(...).size"),
        "bmp": (lambda s: lambda: np.asarray(Image.open(io.BytesIO(s.bmp)).convert("RGB")),
                "open + convert('RGB') + np.asarray"),
    }


def simplejpeg_peer() -> dict:
    import simplejpeg

    decode = partial(simplejpeg.decode_jpeg, colorspace="RGB", fastdct=False, fastupsample=False)

    def crop(s):
        top, left, h, w = s.crop
        return lambda: decode(s.jpeg)[top:top + h, left:left + w]

    return {
        "full": (lambda s: partial(decode, s.jpeg), "decode_jpeg(colorspace='RGB')"),
        "min_size": (lambda s: partial(decode, s.jpeg, min_height=MIN_SIZE, min_width=MIN_SIZE),
                     "min_height/min_width"),
        "crop": (crop, "full decode + slice"),
        "header": (lambda s: partial(simplejpeg.decode_jpeg_header, s.jpeg),
                   "decode_jpeg_header"),
    }


def turbojpeg_peer() -> dict:
    from turbojpeg import TJPF_RGB, TurboJPEG

    turbo = TurboJPEG()  # RuntimeError when libturbojpeg is missing
    factors = sorted((f for f in turbo.scaling_factors if f[0] <= f[1]),
                     key=lambda f: f[0] / f[1])
    decode = partial(turbo.decode, pixel_format=TJPF_RGB, flags=0)  # ISLOW, fancy upsampling

    def scaling(s) -> tuple[int, int]:
        """Smallest factor whose output covers MIN_SIZE, like fastdecode's."""
        for num, den in factors:
            if (min(-(-s.info.width * num // den), -(-s.info.height * num // den))
                    >= MIN_SIZE):
                return num, den
        return 1, 1

    def crop(s):
        top, left, h, w = s.crop
        return lambda: decode(s.jpeg)[top:top + h, left:left + w]

    return {
        "full": (lambda s: partial(decode, s.jpeg), "decode(pixel_format=TJPF_RGB)"),
        "min_size": (lambda s: partial(decode, s.jpeg, scaling_factor=scaling(s)),
                     "scaling_factor: smallest M/8 that covers it"),
        "crop": (crop, "full decode + slice"),
        "header": (lambda s: partial(turbo.decode_header, s.jpeg), "decode_header"),
    }


def opencv_peer() -> dict:
    import cv2

    cv2.setNumThreads(1)  # cvtColor would otherwise use both cores
    color = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION  # fastdecode ignores EXIF too
    reduced = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
               8: cv2.IMREAD_REDUCED_COLOR_8}

    def decode(buf, flags=color):
        return cv2.cvtColor(cv2.imdecode(buf, flags), cv2.COLOR_BGR2RGB)

    def min_size(s):
        flags = color
        for k in (8, 4, 2):
            if min(-(-s.info.width // k), -(-s.info.height // k)) >= MIN_SIZE:
                flags = reduced[k] | cv2.IMREAD_IGNORE_ORIENTATION
                break
        return partial(decode, np.frombuffer(s.jpeg, np.uint8), flags)

    def crop(s):
        top, left, h, w = s.crop
        buf = np.frombuffer(s.jpeg, np.uint8)
        return lambda: cv2.cvtColor(cv2.imdecode(buf, color)[top:top + h, left:left + w],
                                    cv2.COLOR_BGR2RGB)

    return {
        "full": (lambda s: partial(decode, np.frombuffer(s.jpeg, np.uint8)),
                 "imdecode(IMREAD_COLOR) + cvtColor(BGR2RGB)"),
        "min_size": (min_size, "IMREAD_REDUCED_COLOR_2/4/8 + cvtColor"),
        "crop": (crop, "full decode, slice + cvtColor"),
        "bmp": (lambda s: partial(decode, np.frombuffer(s.bmp, np.uint8)),
                "imdecode(IMREAD_COLOR) + cvtColor(BGR2RGB)"),
    }


def torchvision_peer() -> dict:
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    torch.set_num_threads(1)

    def tensor(s):
        return torch.frombuffer(bytearray(s.jpeg), dtype=torch.uint8)

    def crop(s):
        top, left, h, w = s.crop
        data = tensor(s)
        return lambda: decode_jpeg(data, mode=ImageReadMode.RGB)[:, top:top + h, left:left + w]

    def full(s):
        return partial(decode_jpeg, tensor(s), mode=ImageReadMode.RGB)

    return {
        "full": (full, "io.decode_jpeg(mode=RGB), CHW tensor"),
        "min_size": (full, "no DCT scaling: full decode"),
        "crop": (crop, "full decode + slice"),
    }


PEERS = {
    "Pillow": pillow_peer,
    "simplejpeg": simplejpeg_peer,
    "PyTurboJPEG": turbojpeg_peer,
    "OpenCV": opencv_peer,
    "torchvision": torchvision_peer,
}


def load_peers() -> dict[str, dict | str]:
    """name -> its section dict, or the reason it is skipped."""
    loaded: dict[str, dict | str] = {"fastdecode": fastdecode_peer()}
    for name, factory in PEERS.items():
        try:
            loaded[name] = factory()
        except ImportError:
            loaded[name] = "skipped (not installed)"
        except (OSError, RuntimeError):  # PyTurboJPEG without libturbojpeg
            loaded[name] = "skipped (not installed: its shared library)"
    return loaded


def contenders_for(section: str, peers: dict[str, dict | str]) -> list[Contender]:
    rows = []
    for name, peer in peers.items():
        if isinstance(peer, str):
            rows.append(Contender(name, status=peer))
        elif section in peer:
            bind, note = peer[section]
            rows.append(Contender(name, bind, note))
    return rows


# --------------------------------------------------------------------------
# Running a section.

@dataclass
class Section:
    key: str
    title: str
    contenders: list[Contender]
    reference: str  # the fastdecode row whose speedup over each row is shown
    baseline: str = "Pillow"  # the row each row's speedup is over
    floor: str | None = None  # the row the "vs floor" column is relative to
    repeat: int = 1
    samples: list[Sample] = field(default_factory=list)
    excluded: int = 0

    def images_per_s(self, name: str) -> float | None:
        row = next((c for c in self.contenders if c.name == name and c.seconds), None)
        return len(self.samples) * self.repeat / row.best_seconds() if row else None


def run_section(section: Section, samples: list[Sample], rounds: int) -> Section:
    """Checks every row, times them, then measures each row's peak RSS; a
    progress bar counts the steps."""
    active = [c for c in section.contenders if c.status == "ok"]
    with common.progress(section.title, total=len(active)) as bar:
        for contender in active:
            contender.check(samples)
            bar.update()
        active = [c for c in active if c.status == "ok"]
        failed = set().union(*(c.failed for c in active))
        section.samples = [s for i, s in enumerate(samples) if i not in failed]
        section.excluded = len(samples) - len(section.samples)
        if not section.samples or not active:
            return section
        calls = {c.name: [c.bind(s) for s in section.samples] for c in active if c.external is None}
        n = len(section.samples)
        slices = [(lo, min(lo + SLICE, n)) for lo in range(0, n, SLICE)]
        bar.total += (rounds * len(slices) + 1) * len(active)
        bar.refresh()
        time_rounds(section, active, calls, slices, rounds, bar)
        for contender in active:
            contender.measure_peak_rss(calls.get(contender.name, []))
            bar.update()
    return section


def time_rounds(section: Section, active: list[Contender], calls: dict[str, list[Call]],
                slices: list[tuple[int, int]], rounds: int, bar) -> None:
    """Times slices of SLICE images: in each round the rows take turns slice
    by slice, in an order that rotates so that no row always goes first."""
    floors = [c.external for c in active if c.external is not None]
    try:
        for floor in floors:
            floor.start(section.samples)
        for r in range(rounds):
            for contender in active:
                contender.seconds.append([0.0] * len(slices))
            for k, (lo, hi) in enumerate(slices):
                shift = (r + k) % len(active)
                for contender in active[shift:] + active[:shift]:
                    contender.seconds[r][k] = contender.time_slice(
                        calls.get(contender.name, []), lo, hi, section.repeat)
                    bar.update()
    finally:
        for floor in floors:
            floor.stop()


def section_result(section: Section) -> dict:
    ref = section.images_per_s(section.reference)
    base = section.images_per_s(section.baseline)
    floor = section.images_per_s(section.floor) if section.floor else None
    work = len(section.samples) * section.repeat
    rows = []
    for c in section.contenders:
        ips = section.images_per_s(c.name)
        rounds = [sum(r) for r in c.seconds]
        rows.append({
            "name": c.name,
            "status": c.status,
            "note": c.note,
            "files_failed": len(c.failed),
            "images_per_s": ips,
            "ms_per_image": 1000 / ips if ips else None,
            "cpu_ms_per_image": 1000 * c.cpu_seconds / (work * len(rounds)) if rounds else None,
            "speedup": ips / base if base and ips else None,  # this row's speed / baseline's
            "fastdecode_speedup": ref / ips if ref and ips else None,  # reference's / this row's
            "vs_floor": ips / floor if floor and ips else None,
            "peak_rss_mib": c.peak_rss_mib,
            "round_seconds": rounds,
            "median_images_per_s": work / statistics.median(rounds) if rounds else None,
        })
    return {
        "key": section.key,
        "title": section.title,
        "images": len(section.samples),
        "images_excluded": section.excluded,
        "repeat": section.repeat,
        "slice": SLICE,
        "baseline": section.baseline,
        "reference": section.reference,
        "floor": section.floor,
        "rows": rows,
    }


def markdown_table(result: dict) -> str:
    """One row per library; the floor column only where the section has one."""
    floor = result["floor"]
    header = ["library", "images/s", "ms/image", "CPU ms/image", f"speedup vs {result['baseline']}",
              f"speedup of {result['reference']}"]
    header += [f"vs {floor}"] * bool(floor) + ["peak RSS MiB", "notes"]
    lines = [
        f"### {result['title']}",
        "",
        f"{result['images']} images"
        + (f" ({result['images_excluded']} left out: not decoded by every row)"
           if result["images_excluded"] else ""),
        "",
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 2) + "---|",
    ]
    for row in result["rows"]:
        note = row["note"]
        if row["files_failed"] and row["images_per_s"] is not None:
            note += f"; could not decode {row['files_failed']} files"
        if row["images_per_s"] is None:
            cells = [row["status"]] + [""] * (len(header) - 3)
        else:
            cells = [f"{row['images_per_s']:,.0f}", f"{row['ms_per_image']:.3g}",
                     cell(row["cpu_ms_per_image"], "{:.3g}"), cell(row["speedup"], "{:.2f}x"),
                     cell(row["fastdecode_speedup"], "{:.2f}x")]
            cells += [cell(row["vs_floor"], "{:.2f}x")] * bool(floor)
            cells += [cell(row["peak_rss_mib"], "{:,.0f}", missing="n/a")]
        lines.append("| " + " | ".join([row["name"], *cells, note]) + " |")
    return "\n".join(lines)


def cell(value: float | None, spec: str, missing: str = "") -> str:
    return missing if value is None else spec.format(value)


# --------------------------------------------------------------------------
# The sections.

def c_floor_contender(name: str, options: list[str], note: str, status: str | None,
                      workdir: Path) -> Contender:
    """A C floor row, or a row saying why there is none."""
    if status:
        return Contender(name, note=note, status=status)
    return Contender(name, note=note, external=CFloor(C_FLOOR, options, workdir))


def reused_output(samples: list[Sample]) -> Callable[[Sample], np.ndarray]:
    """out= arrays for each sample's RGB image, all views of one buffer,
    as the C floor writes into one buffer: decoding without allocating."""
    scratch = np.zeros(max(s.info.height * s.info.width * 3 for s in samples), np.uint8)
    return lambda s: scratch[:s.info.height * s.info.width * 3].reshape(
        s.info.height, s.info.width, 3)


def jpeg_sections(peers: dict, samples: list[Sample], c_status: str | None, workdir: Path,
                  pool: ThreadPoolExecutor) -> list[Section]:
    floor = "C floor"
    decode = fastdecode.decode_jpeg
    out = reused_output(samples)
    return [
        Section("jpeg_full", "JPEG full decode to RGB, one thread",
                contenders_for("full", peers) + [
                    Contender("fastdecode, out=", lambda s: partial(decode, s.jpeg, out=out(s)),
                              "decode_jpeg(data, out=a reused array)"),
                    c_floor_contender(floor, [], "libjpeg, ISLOW, fancy upsampling, one reused "
                                      "object and output buffer", c_status, workdir)],
                reference="fastdecode", floor=floor),
        Section("jpeg_min_size", f"JPEG min_size=({MIN_SIZE}, {MIN_SIZE}), one thread",
                contenders_for("min_size", peers) + [
                    c_floor_contender(floor, ["--min-size", str(MIN_SIZE)],
                                      "libjpeg, smallest M/8 (fastdecode's rule)",
                                      c_status, workdir),
                    c_floor_contender("C floor, 1/2^k", ["--min-size-pow2", str(MIN_SIZE)],
                                      "libjpeg, smallest of 1, 1/2, 1/4, 1/8 (Pillow's rule)",
                                      c_status, workdir)],
                reference="fastdecode", floor=floor),
        Section("jpeg_crop", f"JPEG centred crop of {CROP_AREA:.0%} of the area, one thread",
                contenders_for("crop", peers) + [c_floor_contender(
                    floor, ["--crop-area", str(CROP_AREA)],
                    "libjpeg, jpeg_crop_scanline + jpeg_skip_scanlines", c_status, workdir)],
                reference="fastdecode", floor=floor),
        Section("threads", "fastdecode full decode, 1 vs 2 threads", [
            Contender("fastdecode, 1 thread", lambda s: partial(decode, s.jpeg), "plain loop"),
            Contender("fastdecode, 2 threads", lambda s: partial(decode, s.jpeg),
                      "two pool threads taking files from one shared iterator, as the C "
                      "floor's threads share a counter; the decode releases the GIL",
                      runner=partial(run_shared, pool)),
            c_floor_contender("C floor, 1 thread", [], "one pthread",
                              c_status, workdir),
            c_floor_contender("C floor, 2 threads", ["--threads", "2"],
                              "two pthreads sharing the files", c_status, workdir)],
                reference="fastdecode, 2 threads", baseline="fastdecode, 1 thread",
                floor="C floor, 2 threads"),
        Section("header", "read_header", contenders_for("header", peers),
                reference="fastdecode", repeat=HEADER_REPEAT),
    ]


def run_shared(pool: ThreadPoolExecutor, calls: list[Call]) -> None:
    """Every pool thread runs calls from one iterator until it is empty
    (next() on a list iterator is atomic under the GIL): one task per
    thread, not one future per image, whose hand-offs would be timed too."""
    shared = iter(calls)
    for done in [pool.submit(run_sequential, shared) for _ in range(THREADS)]:
        done.result()


def bmp_section(peers: dict, samples: list[Sample]) -> Section:
    """24-bit BMPs of the images (bottom-up BI_RGB, as Pillow, most tools and
    `fastdecode convert` write them; written here by convert's writer, so the
    section needs no Pillow), against fastdecode's own decode of the source
    JPEGs and the floor: a memcpy of the pixel bytes into a new array, the
    least that a decoder returning a new array can do. (Into one reused
    buffer it was slower on the VMs this was tuned on, so that is not the
    floor.)"""
    from fastdecode.conversion.output import EncodeOptions, write_bmp

    for s in samples:
        buf = io.BytesIO()
        write_bmp(buf, fastdecode.decode_image(s.jpeg, mode="RGB"), EncodeOptions("bmp"))
        s.bmp = buf.getvalue()
    out = reused_output(samples)

    def memcpy(s):
        pixels = np.frombuffer(s.bmp, np.uint8, offset=int.from_bytes(s.bmp[10:14], "little"))
        return lambda: np.copyto(np.empty(pixels.size, np.uint8), pixels)

    rows = contenders_for("bmp", peers)
    rows += [
        Contender("fastdecode, out=",
                  lambda s: partial(fastdecode.decode_bmp, s.bmp, out=out(s)),
                  "decode_bmp(data, out=a reused array)"),
        Contender("fastdecode JPEG", lambda s: partial(fastdecode.decode_jpeg, s.jpeg),
                  "decode_jpeg of the source JPEG"),
        Contender("memcpy", memcpy, "np.copyto of the pixel bytes (bfOffBits on) into np.empty"),
    ]
    return Section("bmp", "BMP 24-bit decode to RGB, one thread", rows,
                   reference="fastdecode", floor="memcpy")


# --------------------------------------------------------------------------
# Targets.

def targets(results: dict[str, dict]) -> list[dict]:
    def ips(section: str, name: str) -> float | None:
        for row in results.get(section, {}).get("rows", []):
            if row["name"] == name:
                return row["images_per_s"]
        return None

    def ratio(a, b):
        return a / b if a and b else None

    full = results.get("jpeg_full", {}).get("rows", [])
    fastest_peer = max((r["images_per_s"] for r in full if r["images_per_s"]
                        and not r["name"].startswith(("fastdecode", "C floor"))), default=None)
    checks = [
        ("full decode vs fastest peer", ">= 1.00x",
         ratio(ips("jpeg_full", "fastdecode"), fastest_peer), 1.0),
        ("full decode vs C floor", ">= 0.95x",
         ratio(ips("jpeg_full", "fastdecode"), ips("jpeg_full", "C floor")), 0.95),
        ("2 threads vs 1 thread", ">= 1.80x",
         ratio(ips("threads", "fastdecode, 2 threads"), ips("threads", "fastdecode, 1 thread")),
         1.8),
        ("(C floor 2 threads vs 1: the machine's own)", "",
         ratio(ips("threads", "C floor, 2 threads"), ips("threads", "C floor, 1 thread")), None),
        ("read_header per second", ">= 100,000", ips("header", "fastdecode"), 100_000),
        ("BMP vs Pillow", ">= 5.00x", ratio(ips("bmp", "fastdecode"), ips("bmp", "Pillow")), 5.0),
        ("BMP vs fastdecode JPEG", ">= 3.00x",
         ratio(ips("bmp", "fastdecode"), ips("bmp", "fastdecode JPEG")), 3.0),
        ("BMP vs memcpy (within 2x)", ">= 0.50x",
         ratio(ips("bmp", "fastdecode"), ips("bmp", "memcpy")), 0.5),
    ]
    return [{"name": name, "target": target, "measured": value,
             "met": None if value is None or threshold is None else value >= threshold}
            for name, target, value, threshold in checks]


# The comparisons of ``targets`` as a user reads them (the JSON keeps the
# project's thresholds; the printed table shows only what was measured).
IN_SHORT = {
    "full decode vs fastest peer": "full decode: fastdecode / the fastest other library",
    "full decode vs C floor": "full decode: fastdecode / libjpeg-turbo in a plain C loop",
    "2 threads vs 1 thread": "fastdecode on 2 threads / on 1",
    "(C floor 2 threads vs 1: the machine's own)":
        "the C loop on 2 threads / on 1 (what this machine's cores allow)",
    "read_header per second": "read_header, headers per second",
    "BMP vs Pillow": "24-bit BMP: fastdecode / Pillow",
    "BMP vs fastdecode JPEG": "24-bit BMP / the same image as JPEG, both fastdecode",
    "BMP vs memcpy (within 2x)": "24-bit BMP: fastdecode / copying its pixel bytes",
}


def in_short_table(rows: list[dict]) -> str:
    """The section's comparisons in a user's words: each measured ratio (or
    rate), never the project's threshold for it."""
    lines = ["### In short", "", "| comparison | measured |", "|---|---:|"]
    for t in rows:
        value = t["measured"]
        shown = "not measured" if value is None else (
            f"{value:,.0f}/s" if t["name"].startswith("read_header") else f"{value:.2f}x")
        lines.append(f"| {IN_SHORT.get(t['name'], t['name'])} | {shown} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None):
    return common.BenchParser(__doc__, "folder of JPEGs, searched recursively (an ImageFolder)", {
        "limit": ("at most N images", 1000, 200),
        "rounds": ("timed rounds per library", 3, 2),
    }).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.data is None:
        args.data = common.default_data()
    samples, unreadable = load_samples(args.data, args.limit)
    if not samples:
        sys.exit(f"no decodable JPEG files under {args.data}")
    peers = load_peers()
    c_status = ensure_c_floor()
    report = {
        "command": common.command_line(__name__, argv),
        "dataset": describe_dataset(args.data, samples, unreadable),
        "machine": common.machine_facts(),
        "versions": common.library_versions(),
        "settings": {"rounds": args.rounds, "slice": SLICE,
                     "statistic": "sum over slices of each slice's best round",
                     "min_size": MIN_SIZE, "crop_area": CROP_AREA},
        "sections": [],
    }
    common.emit(render_head(report) + "\n")
    # The pool is made once, so that starting its threads is never timed.
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(THREADS) as pool:
        sections = jpeg_sections(peers, samples, c_status, Path(tmp), pool)
        sections.append(bmp_section(peers, samples))
        for section in sections:  # each: its progress bar, then its table
            result = section_result(run_section(section, samples, args.rounds))
            report["sections"].append(result)
            common.emit(markdown_table(result) + "\n")
    report["targets"] = targets({s["key"]: s for s in report["sections"]})
    report["machine"]["load_average_end"] = common.load_average()

    common.emit(in_short_table(report["targets"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def render_head(report: dict) -> str:
    d, m = report["dataset"], report["machine"]
    flavours = ", ".join(f"{k} {v}" for k, v in d["flavours"].items())
    return "\n".join([
        f"`{report['command']}`",
        "",
        f"Data: {d['files']} JPEGs from {d['path']}, mean {d['mean_kb']} KB, median "
        f"{d['median_width']:.0f}x{d['median_height']:.0f} ({flavours}). "
        f"Machine: {m['cpu_model']}, {len(m['affinity'] or [])} of {m['cpu_count']} cores; "
        f"each {SLICE}-image slice at its best of {report['settings']['rounds']} rounds, "
        "libraries interleaved slice by slice.",
        "",
        "Columns: 'CPU ms/image' = CPU time (every thread of the process; for the C floor, "
        "its decoding threads) per image over the timed rounds. 'speedup vs B' = the row's "
        "images/s over B's, where B is Pillow (open + convert + np.asarray: the decode of "
        "torchvision's ImageFolder) or, in the threads section, fastdecode on 1 thread. "
        "'speedup of X' = X's images/s over the row's. 'peak RSS MiB' = the "
        f"{common.PEAK_RSS_NOTE}; the C floor's rows give that program's own peak "
        "(VmHWM), a small process holding only its files and buffers.",
    ])


if __name__ == "__main__":
    sys.exit(main())
