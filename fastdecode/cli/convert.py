"""``fastdecode convert``: re-encodes an ImageFolder tree as BMP or JPEG.

A BMP decodes several times faster than a JPEG at several times the size, so
a decode-bound training job can convert its dataset once and trade disk for
CPU every epoch; the summary measures that trade on a sample of the files.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import signal
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np
from tqdm import tqdm

from fastdecode import _system
from fastdecode.api import decode_image, read_header
from fastdecode.cli._args import add_command
from fastdecode.data._folder import IMG_EXTENSIONS, find_classes, make_dataset
from fastdecode.errors import FastDecodeError

__all__ = ["Summary", "convert_tree", "register"]

OUTPUT_SUFFIXES = {"bmp": ".bmp", "jpeg": ".jpg"}
SUBSAMPLINGS = ("4:4:4", "4:2:2", "4:2:0")
# The temporary name is fixed per output, so a file left by a killed run is
# overwritten and renamed by the rerun that redoes that output. ImageFolder
# skips it: ".partial" is not an image extension.
PARTIAL_SUFFIX = ".partial"
# BITMAPFILEHEADER (14 bytes) + BITMAPINFOHEADER (40 bytes).
BMP_HEADER = struct.Struct("<2sIHHIIiiHHIIiiII")
BMP_PIXELS_PER_METRE = 2835  # 72 dpi, what most writers put there
TIMING_REPEATS = 3


@dataclass(frozen=True)
class EncodeOptions:
    """How each image is converted; sent to every worker process."""

    to: str
    quality: int = 90
    subsampling: str = "4:2:0"
    max_side: int | None = None


@dataclass
class Summary:
    """What a conversion did; ``asdict`` of it is the ``--json`` file."""

    source: str
    destination: str
    to: str
    converted: int = 0
    skipped: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    bytes_before: int = 0  # sources that have an output (converted or skipped)
    bytes_after: int = 0
    seconds: float = 0.0
    timed_images: int = 0
    decode_ms_before: float | None = None
    decode_ms_after: float | None = None
    decode_speedup: float | None = None
    timing_error: str | None = None


# --- writing -----------------------------------------------------------------


def bmp_row_stride(width: int) -> int:
    return (width * 3 + 3) & ~3


def write_bmp(file: BinaryIO, pixels: np.ndarray, options: EncodeOptions) -> None:
    """24-bit bottom-up BI_RGB: the BMP variant fastdecode reads fastest."""
    height, width, _ = pixels.shape
    stride = bmp_row_stride(width)
    image_size = stride * height
    file.write(BMP_HEADER.pack(
        b"BM", BMP_HEADER.size + image_size, 0, 0, BMP_HEADER.size,
        40, width, height, 1, 24, 0, image_size,
        BMP_PIXELS_PER_METRE, BMP_PIXELS_PER_METRE, 0, 0,
    ))
    rows = np.zeros((height, stride), np.uint8)  # the zeros are the row padding
    rows[:, : width * 3].reshape(height, width, 3)[...] = pixels[::-1, :, ::-1]
    file.write(rows.data)


def write_jpeg(file: BinaryIO, pixels: np.ndarray, options: EncodeOptions) -> None:
    from PIL import Image

    Image.fromarray(pixels).save(
        file, format="JPEG", quality=options.quality, subsampling=options.subsampling,
        optimize=False,
    )


WRITERS: dict[str, Callable[[BinaryIO, np.ndarray, EncodeOptions], None]] = {
    "bmp": write_bmp,
    "jpeg": write_jpeg,
}


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> int:
    """Writes through a temporary file renamed into place; returns the size.

    No fsync: after a crash a file may be short, and the completeness check
    of the next run catches that at a fraction of the cost of a sync per file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}{PARTIAL_SUFFIX}")
    try:
        with open(partial, "wb") as file:
            write(file)
            size = file.tell()
        os.replace(partial, path)
    except BaseException:  # interrupts too: never leave a half-written file
        partial.unlink(missing_ok=True)
        raise
    return size


def is_complete_bmp(file: BinaryIO, size: int) -> bool:
    header = file.read(BMP_HEADER.size)
    if len(header) < BMP_HEADER.size:
        return False
    magic, file_size, _, _, offset, _, width, height, _, bits, *_ = BMP_HEADER.unpack(header)
    expected = offset + bmp_row_stride(width) * abs(height)
    return magic == b"BM" and bits == 24 and file_size == size == expected


def is_complete_jpeg(file: BinaryIO, size: int) -> bool:
    if size < 4:
        return False
    head = file.read(2)
    file.seek(-2, os.SEEK_END)
    return head == b"\xff\xd8" and file.read(2) == b"\xff\xd9"  # SOI ... EOI


COMPLETENESS_CHECKS: dict[str, Callable[[BinaryIO, int], bool]] = {
    "bmp": is_complete_bmp,
    "jpeg": is_complete_jpeg,
}


def is_complete(path: Path, to: str) -> bool:
    """Whether an earlier run finished this output (a cheap check, no decode)."""
    try:
        with open(path, "rb") as file:
            return COMPLETENESS_CHECKS[to](file, os.fstat(file.fileno()).st_size)
    except OSError:  # missing or unreadable: (re)convert, and report it if that fails
        return False


# --- converting one image ----------------------------------------------------


def fit_within(height: int, width: int, max_side: int | None) -> tuple[int, int]:
    """The size with the longer side at most ``max_side``, aspect kept."""
    longer = max(height, width)
    if max_side is None or longer <= max_side:
        return height, width
    return max(1, round(height * max_side / longer)), max(1, round(width * max_side / longer))


def shrink_pixels(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resamples HWC uint8 RGB pixels; the one place to swap in fastdecode's own resampler."""
    from PIL import Image

    resized = Image.fromarray(pixels).resize((width, height), Image.Resampling.LANCZOS)
    return np.asarray(resized)


def load_pixels(data: bytes, max_side: int | None) -> np.ndarray:
    """RGB pixels as ImageFolder's loader sees them (no EXIF rotation), shrunk to ``max_side``."""
    if max_side is None:
        return decode_image(data, mode="RGB")
    header = read_header(data)
    height, width = fit_within(header.height, header.width, max_side)
    if (height, width) == (header.height, header.width):
        return decode_image(data, mode="RGB")
    # A JPEG shrinks by up to 8x for free in the decoder (DCT scaling), which
    # then decodes faster too; other formats are resampled from full size.
    min_size = (height, width) if header.format == "jpeg" else None
    pixels = decode_image(data, mode="RGB", min_size=min_size)
    if pixels.shape[:2] != (height, width):
        pixels = shrink_pixels(pixels, height, width)
    return pixels


@dataclass(frozen=True)
class Outcome:
    source: str
    error: str | None = None
    source_bytes: int = 0
    output_bytes: int = 0


def convert_one(options: EncodeOptions, job: tuple[str, str]) -> Outcome:
    source, output = job
    try:
        data = Path(source).read_bytes()
        pixels = load_pixels(data, options.max_side)
        writer = WRITERS[options.to]
        size = write_atomically(Path(output), lambda file: writer(file, pixels, options))
    except Exception as exc:  # one bad file must not end a run over millions: it is listed
        return Outcome(source, error=f"{type(exc).__name__}: {exc}")
    return Outcome(source, source_bytes=len(data), output_bytes=size)


# --- the tree ----------------------------------------------------------------


def source_classes(root: Path) -> dict[str, int]:
    """The class folders of ``root`` and their indices, as ImageFolder finds them."""
    try:
        return find_classes(root)[1]
    except FileNotFoundError:
        raise ValueError(f"no class folders in {root} (an ImageFolder root holds one per "
                         "class)") from None


@dataclass
class Plan:
    todo: list[tuple[str, str]] = field(default_factory=list)  # (source, output)
    done: list[tuple[str, str]] = field(default_factory=list)  # output already complete
    failures: dict[str, str] = field(default_factory=dict)  # source -> why


def plan_conversion(source: Path, destination: Path, to: str) -> Plan:
    """What to convert: the files ImageFolder loads (its walk, ``fastdecode.data``), in order."""
    plan = Plan()
    claimed: dict[Path, Path] = {}
    walk = make_dataset(source, source_classes(source), extensions=IMG_EXTENSIONS,
                        allow_empty=True)
    for path, _ in walk:
        image = Path(path)
        output = (destination / image.relative_to(source)).with_suffix(OUTPUT_SUFFIXES[to])
        if output in claimed:  # e.g. cat.jpg and cat.png: both would become cat.bmp
            plan.failures[path] = f"same output name as {claimed[output]}"
            continue
        claimed[output] = image
        (plan.done if is_complete(output, to) else plan.todo).append((path, str(output)))
    return plan


def quit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(1)  # unwinds through write_atomically, which removes its partial file


def init_worker() -> None:
    # Ctrl-C reaches every process of the terminal; only the parent acts on it,
    # and its Pool.terminate() sends the SIGTERM that ends a worker cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, quit_on_sigterm)


def run_jobs(
    jobs: list[tuple[str, str]], options: EncodeOptions, workers: int
) -> Iterator[Outcome]:
    convert = functools.partial(convert_one, options)
    if workers == 1:
        yield from map(convert, jobs)
        return
    # spawn, not fork: forking a parent that runs threads (tqdm's monitor, a
    # notebook's) is unsafe, and Python 3.12+ warns about it.
    context = multiprocessing.get_context("spawn")
    chunksize = max(1, min(16, len(jobs) // (workers * 8)))
    with context.Pool(workers, initializer=init_worker) as pool:
        yield from pool.imap_unordered(convert, jobs, chunksize=chunksize)
        pool.close()
        pool.join()


# --- measuring the trade -----------------------------------------------------


def decode_ms(paths: list[str]) -> float:
    """Milliseconds per image for decode_image on in-memory files, best of a few runs each."""
    total = 0.0
    for path in paths:
        data = Path(path).read_bytes()
        best = float("inf")
        for _ in range(TIMING_REPEATS):
            start = time.perf_counter()
            decode_image(data, mode="RGB")
            best = min(best, time.perf_counter() - start)
        total += best
    return total / len(paths) * 1000


def measure_decode_trade(summary: Summary, pairs: list[tuple[str, str]], sample: int) -> None:
    if not pairs or sample == 0:
        return
    count = min(sample, len(pairs))
    picked = [pairs[i * len(pairs) // count] for i in range(count)]  # spread over the classes
    try:
        before = decode_ms([source for source, _ in picked])
        after = decode_ms([output for _, output in picked])
    except FastDecodeError as exc:
        summary.timing_error = str(exc)
        return
    summary.timed_images = count
    summary.decode_ms_before, summary.decode_ms_after = before, after
    summary.decode_speedup = before / after


# --- the whole conversion ----------------------------------------------------


def check_arguments(
    source: Path, destination: Path, options: EncodeOptions, workers: int | None, time_sample: int
) -> None:
    if not source.is_dir():
        raise ValueError(f"source {source} is not a folder")
    source_dir, destination_dir = source.resolve(), destination.resolve()
    if destination_dir == source_dir or source_dir in destination_dir.parents:
        raise ValueError(f"destination {destination} is inside the source {source}")
    if options.to not in WRITERS:
        raise ValueError(f"--to must be one of {', '.join(WRITERS)}, got {options.to!r}")
    if not 1 <= options.quality <= 100:
        raise ValueError(f"--quality must be in 1..100, got {options.quality}")
    if options.subsampling not in SUBSAMPLINGS:
        raise ValueError(f"--subsampling must be one of {', '.join(SUBSAMPLINGS)}")
    if options.max_side is not None and options.max_side < 1:
        raise ValueError(f"--max-side must be at least 1, got {options.max_side}")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if time_sample < 0:
        raise ValueError(f"--time-sample must be 0 or more, got {time_sample}")
    if options.to == "jpeg" or options.max_side is not None:
        try:
            import PIL  # noqa: F401
        except ImportError as exc:
            raise ImportError("JPEG output and --max-side need Pillow: pip install Pillow") from exc


def convert_tree(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    to: str = "bmp",
    quality: int = 90,
    subsampling: str = "4:2:0",
    max_side: int | None = None,
    workers: int | None = None,
    time_sample: int = 50,
) -> Summary:
    """Converts the ImageFolder tree at ``source`` into ``destination``; see ``--help``.

    Raises ValueError for bad arguments and ImportError when Pillow is needed
    but missing; a file that cannot be converted is listed, not raised.
    """
    source, destination = Path(source), Path(destination)
    options = EncodeOptions(to, quality, subsampling, max_side)
    check_arguments(source, destination, options, workers, time_sample)
    started = time.perf_counter()
    plan = plan_conversion(source, destination, to)
    summary = Summary(str(source), str(destination), to, skipped=len(plan.done))
    failures = dict(plan.failures)
    for image, output in plan.done:
        summary.bytes_before += os.path.getsize(image)
        summary.bytes_after += os.path.getsize(output)
    workers = min(workers or _system.usable_cpus(), max(1, len(plan.todo)))
    outputs = dict(plan.todo)
    finished = list(plan.done)
    with tqdm(total=len(plan.todo), unit="img", desc=f"convert to {to}", disable=None) as bar:
        for outcome in run_jobs(plan.todo, options, workers):
            if outcome.error is None:
                summary.converted += 1
                summary.bytes_before += outcome.source_bytes
                summary.bytes_after += outcome.output_bytes
                finished.append((outcome.source, outputs[outcome.source]))
            else:
                failures[outcome.source] = outcome.error
                bar.set_postfix(failed=len(failures))
            bar.update()
    summary.seconds = time.perf_counter() - started
    summary.failed = len(failures)
    summary.failures = [{"path": path, "error": error} for path, error in sorted(failures.items())]
    measure_decode_trade(summary, sorted(finished), time_sample)
    return summary


def format_bytes(size: float) -> str:
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def format_summary(summary: Summary) -> str:
    rate = f" ({summary.converted / summary.seconds:.0f} images/s)" if summary.converted else ""
    lines = [
        f"converted {summary.converted} images in {summary.seconds:.1f} s{rate}, "
        f"skipped {summary.skipped} already done, failed {summary.failed}",
    ]
    if summary.bytes_before:
        lines.append(f"size:   {format_bytes(summary.bytes_before)} -> "
                     f"{format_bytes(summary.bytes_after)} "
                     f"({summary.bytes_after / summary.bytes_before:.2f}x)")
    if summary.decode_speedup is not None:
        lines.append(f"decode: {summary.decode_ms_before:.2f} ms/image -> "
                     f"{summary.decode_ms_after:.2f} ms/image ({summary.decode_speedup:.1f}x "
                     f"faster; {summary.timed_images} images, best of {TIMING_REPEATS})")
    elif summary.timing_error:
        lines.append(f"decode: not measured ({summary.timing_error})")
    if summary.failures:
        lines.append("failed inputs:")
        lines += [f"  {failure['path']}: {failure['error']}" for failure in summary.failures]
    return "\n".join(lines)


# --- the command line --------------------------------------------------------

DESCRIPTION = """\
Re-encodes an ImageFolder tree (SRC/<class>/.../<name>.<ext>) into DST with
the same class folders and file names and the new extension (.bmp or .jpg).
A 24-bit BMP decodes several times faster than a JPEG and takes several times
the disk; the summary measures both on a sample of the files.

Inputs are the files ImageFolder loads (.jpg .jpeg .png .ppm .bmp .pgm .tif
.tiff .webp; JPEG and BMP decoded natively, others through Pillow). Images are
written as RGB, as ImageFolder's loader converts them (grayscale becomes three
equal channels) and without EXIF rotation, which that loader ignores too.

Resumable: an output that is already complete (a BMP whose size matches its
header, a JPEG from SOI to EOI) is skipped, whatever options made it; delete
DST to redo everything. Each output is written to a temporary file next to it
and renamed into place, so an interrupted run never leaves a half image.

Files that cannot be read are listed at the end and do not stop the run.
Exit status: 0 when done (even with failed files, unless --strict), 1 with
--strict when some file failed, 2 for bad arguments, 130 when interrupted.
"""

EPILOG = """\
examples:
  # fastest decode: BMP, longer side at most 512
  fastdecode convert ~/data/imagenet/train /fast/train-bmp --to bmp --max-side 512
  # smaller JPEGs for a network file system, summary kept as JSON
  fastdecode convert train train-jpeg --to jpeg --quality 85 --max-side 320 --json summary.json
  # run again after an interruption: finished files are skipped
  fastdecode convert train train-bmp --to bmp --workers 8
"""


def run(args: argparse.Namespace) -> int:
    if args.to == "bmp" and (args.quality is not None or args.subsampling is not None):
        print("fastdecode convert: error: --quality and --subsampling apply to --to jpeg only",
              file=sys.stderr)
        return 2
    try:
        summary = convert_tree(
            args.source, args.destination, to=args.to,
            quality=90 if args.quality is None else args.quality,
            subsampling=args.subsampling or "4:2:0", max_side=args.max_side,
            workers=args.workers, time_sample=args.time_sample,
        )
    except (ValueError, ImportError) as exc:
        print(f"fastdecode convert: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nfastdecode convert: interrupted; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(format_summary(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return 1 if args.strict and summary.failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "convert", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("source", metavar="SRC", type=Path, help="ImageFolder root")
    parser.add_argument("destination", metavar="DST", type=Path,
                        help="output root (created; must not be inside SRC)")
    parser.add_argument("--to", required=True, choices=tuple(WRITERS), help="output format")
    parser.add_argument("--quality", type=int, metavar="Q",
                        help="JPEG quality 1-100 (default 90; --to jpeg only)")
    parser.add_argument("--subsampling", choices=SUBSAMPLINGS,
                        help="JPEG chroma subsampling (default 4:2:0; --to jpeg only)")
    parser.add_argument("--max-side", type=int, metavar="N",
                        help="shrink so the longer side is at most N pixels (never enlarges)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help=f"processes (default: the usable CPUs, {_system.usable_cpus()} here)")
    parser.add_argument("--time-sample", type=int, default=50, metavar="N",
                        help="files whose decode time is measured before/after (default 50, "
                             "0 skips)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the summary here")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when some input could not be converted")
    parser.set_defaults(run=run)
