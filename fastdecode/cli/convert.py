"""``fastdecode convert``: re-encodes an ImageFolder tree as BMP or JPEG.

A BMP decodes several times faster than a JPEG at several times the size, so
a decode-bound training job can convert its dataset once and trade disk for
CPU every epoch; the summary measures that trade on a sample of the files.
The engines are ``fastdecode.conversion``'s; this module plans the tree and
reports. Decision record: docs/decisions/cli.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tqdm import tqdm

from fastdecode import _native, _system
from fastdecode.api import decode_image
from fastdecode.cli._args import subcommand
from fastdecode.conversion.jobs import run_jobs
from fastdecode.conversion.output import (
    OUTPUT_SUFFIXES,
    SUBSAMPLINGS,
    WRITERS,
    EncodeOptions,
    is_complete,
    is_partial,
)
from fastdecode.conversion.shards import write_shards
from fastdecode.conversion.summary import TIMING_REPEATS, Summary, format_summary, summary_json
from fastdecode.errors import FastDecodeError
from fastdecode.storage import _remote
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset
from fastdecode.storage._readers import is_remote

__all__ = ["ConvertError", "Summary", "convert_tree", "register"]

PROBE_NAME = ".fastdecode-convert-probe"


class ConvertError(Exception):
    """The run cannot go on: the destination is not writable or is full, or a
    worker process died. What was finished stays; a rerun resumes."""


# --- the tree ----------------------------------------------------------------


def source_classes(root: Path | str) -> dict[str, int]:
    """The class folders of ``root`` (a folder, or an fsspec URL opened with
    ``_remote.open_root``) and their indices, as ImageFolder finds them."""
    try:
        return find_classes(root)[1]
    except FileNotFoundError:
        raise ValueError(f"no class folders in {root} (an ImageFolder root holds one per "
                         "class)") from None


@dataclass
class Plan:
    classes: list[str] = field(default_factory=list)  # the class folders, sorted
    todo: list[tuple[str, str]] = field(default_factory=list)  # (source, output)
    done: list[tuple[str, str]] = field(default_factory=list)  # output already complete
    failures: dict[str, str] = field(default_factory=dict)  # source -> why


def prepare_destination(destination: Path, classes: list[str]) -> None:
    """Every class folder of the source, made in the destination before any
    work (a class none of whose files converts keeps its folder, so the
    class indices of ImageFolder(destination) stay the source's); and a
    probe write, so that a read-only destination fails here, not per file."""
    try:
        destination.mkdir(parents=True, exist_ok=True)
        for name in classes:
            (destination / name).mkdir(exist_ok=True)
        probe = destination / PROBE_NAME
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConvertError(f"destination {destination} is not writable "
                           f"({exc.strerror or exc}): nothing was converted") from exc


def remove_partials(destination: Path) -> None:
    """Temporary files of an earlier run that was killed mid-write (a SIGKILL
    leaves them): outputs redone by this run would overwrite them, the
    others would stay forever."""
    for folder, _, names in os.walk(destination):
        for name in names:
            if is_partial(name):
                Path(folder, name).unlink(missing_ok=True)


def _is_image(path: str) -> bool:
    return path.lower().endswith(IMG_EXTENSIONS)


def plan_conversion(source: Path | str, destination: Path, to: str,
                    classes: dict[str, int]) -> Plan:
    """What to convert: the files ImageFolder loads (its walk, ``fastdecode.data``;
    of a URL: its listing, in the same order), in order."""
    plan = Plan(classes=sorted(classes))
    claimed: dict[Path, Any] = {}
    if isinstance(source, str) and is_remote(source):
        base = len(_remote.scrub_url(source).rstrip("/")) + 1
        walk = _remote.folder_samples(source, classes, _is_image)[0]
        relative = [Path(path[base:]) for path, _ in walk]
    else:
        walk = make_dataset(source, classes, extensions=IMG_EXTENSIONS, allow_empty=True)
        relative = [Path(path).relative_to(source) for path, _ in walk]
    for (path, _), rel in zip(walk, relative):
        image = path
        output = (destination / rel).with_suffix(OUTPUT_SUFFIXES[to])
        if output in claimed:  # e.g. cat.jpg and cat.png: both would become cat.bmp
            plan.failures[path] = f"same output name as {claimed[output]}"
            continue
        claimed[output] = image
        (plan.done if is_complete(output, to) else plan.todo).append((path, str(output)))
    return plan


# --- measuring the trade -----------------------------------------------------


def decode_ms(paths: list[str], read: Optional[Callable[[str], bytes]] = None) -> float:
    """Milliseconds per image for decode_image on in-memory files (read by
    ``read``; None: local files), best of a few runs each."""
    total = 0.0
    for path in paths:
        data = _native.read_file(path) if read is None else read(path)
        best = float("inf")
        for _ in range(TIMING_REPEATS):
            start = time.perf_counter()
            decode_image(data, mode="RGB")
            best = min(best, time.perf_counter() - start)
        total += best
    return total / len(paths) * 1000


def measure_decode_trade(summary: Summary, pairs: list[tuple[str, str]], sample: int,
                         read: Optional[Callable[[str], bytes]] = None) -> None:
    if not pairs or sample == 0:
        return
    count = min(sample, len(pairs))
    picked = [pairs[i * len(pairs) // count] for i in range(count)]  # spread over the classes
    try:
        before = decode_ms([source for source, _ in picked], read)
        after = decode_ms([output for _, output in picked])
    except FastDecodeError as exc:
        summary.timing_error = str(exc)
        return
    summary.timed_images = count
    summary.decode_ms_before, summary.decode_ms_after = before, after
    summary.decode_speedup = before / after


# --- the whole conversion ----------------------------------------------------


def check_arguments(
    source: Path | str, destination: Path, options: EncodeOptions, workers: int | None,
    time_sample: int
) -> None:
    if isinstance(source, Path):
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
    engine: str = "local",
    storage_options: dict | None = None,
    refresh_index: bool = False,
) -> Summary:
    """Converts the ImageFolder tree at ``source`` into ``destination``; see ``--help``.

    ``source`` may be any fsspec URL (``s3://bucket/train``, ``https://...``),
    opened with ``storage_options`` as ``FastImageFolder(url,
    storage_options=...)`` opens it: its listing kept as a local index file
    (``refresh_index=True`` lists it again), each file read with retries within
    ``$FASTDECODE_RETRY_SECONDS``, the filesystem client made in each worker,
    secrets kept out of messages and of what the workers are sent; the
    destination is a local folder.

    Raises ValueError for bad arguments, ImportError when Pillow is needed
    but missing, and ConvertError when the destination cannot be written
    (checked before any work; or full) or a worker dies; a file that cannot
    be converted is listed, not raised.
    """
    remote = None
    if is_remote(os.fspath(destination)):  # before Path() makes memory://x the folder memory:/x
        raise ValueError(f"destination {_remote.scrub_url(os.fspath(destination))} is a URL: "
                         "convert writes to a local folder (the source may be a URL)")
    if is_remote(os.fspath(source)):
        if not isinstance(source, str):
            source = os.fspath(source)
        destination = Path(destination)
        options = EncodeOptions(to, quality, subsampling, max_side)
        check_arguments(source, destination, options, workers, time_sample)
        try:
            remote, _ = _remote.open_root(source, storage_options, refresh=refresh_index)
        except FileNotFoundError as exc:
            raise ValueError(f"source {exc}") from None
        source = _remote.scrub_url(source).rstrip("/")
    else:
        if storage_options is not None:
            raise ValueError("storage_options go with a URL source")
        source, destination = Path(source), Path(destination)
        options = EncodeOptions(to, quality, subsampling, max_side)
        check_arguments(source, destination, options, workers, time_sample)
    started = time.perf_counter()
    classes = source_classes(source)
    prepare_destination(destination, sorted(classes))
    remove_partials(destination)
    plan = plan_conversion(source, destination, to, classes)
    summary = Summary(str(source), str(destination), to, skipped=len(plan.done),
                      classes=len(plan.classes))
    failures = dict(plan.failures)
    sizes = (remote.fs.sizes([image for image, _ in plan.done]) if remote is not None and plan.done
             else [os.path.getsize(image) for image, _ in plan.done])
    for (_, output), size in zip(plan.done, sizes):
        summary.bytes_before += size or 0
        summary.bytes_after += os.path.getsize(output)
    workers = min(workers or _system.usable_cpus(), max(1, len(plan.todo)))
    finished = list(plan.done) + convert_files(plan.todo, options, workers, summary, failures,
                                               engine, remote)
    summary.seconds = time.perf_counter() - started
    summary.failed = len(failures)
    summary.failures = [{"path": path, "error": error} for path, error in sorted(failures.items())]
    filled = {Path(output).relative_to(destination).parts[0] for _, output in finished}
    summary.empty_classes = [name for name in plan.classes if name not in filled]
    measure_decode_trade(summary, sorted(finished), time_sample,
                         None if remote is None else remote.read)
    return summary


def convert_files(todo: list[tuple[str, str]], options: EncodeOptions, workers: int,
                  summary: Summary, failures: dict[str, str],
                  engine: str = "local", reader: Any = None) -> list[tuple[str, str]]:
    """Converts ``todo`` and counts it into ``summary`` and ``failures``;
    returns the (source, output) pairs written. ``reader`` reads the sources
    (None: local files; a remote root's ``Remote``). Raises ConvertError when
    the destination fails (full, read-only) or a worker dies."""
    outputs = dict(todo)
    finished = []
    bar = tqdm(total=len(todo), unit="img", desc=f"convert to {options.to}", disable=None)
    extra = {} if reader is None else {"reader": reader}
    try:
        with bar:
            for outcome in ENGINES[engine]()(todo, options, workers, **extra):
                if outcome.destination_errno is not None:
                    raise ConvertError(
                        f"cannot write {outputs[outcome.source]}: "
                        f"{os.strerror(outcome.destination_errno)}; nothing half-written is "
                        "left: make room (or make the destination writable) and run the same "
                        "command again to resume")
                if outcome.error is None:
                    summary.converted += 1
                    summary.bytes_before += outcome.source_bytes
                    summary.bytes_after += outcome.output_bytes
                    finished.append((outcome.source, outputs[outcome.source]))
                else:
                    failures[outcome.source] = outcome.error
                    bar.set_postfix(failed=len(failures))
                bar.update()
    except BrokenProcessPool as exc:
        raise ConvertError(f"a worker process died ({exc}); every finished file is kept: run "
                           "the same command again to resume") from exc
    return finished


def _ray_jobs():
    # the face imports Ray Data first, naming fastdecode[ray] where it is missing
    from fastdecode.ray import run_convert_jobs  # cluster: RAY_ADDRESS

    return run_convert_jobs


ENGINES = {"local": lambda: run_jobs, "ray": _ray_jobs}


# --- the command line --------------------------------------------------------

DESCRIPTION = """\
Re-encodes an ImageFolder tree (SRC/<class>/.../<name>.<ext>) into DST with
the same class folders and file names and the new extension (.bmp or .jpg).
Every class folder of SRC is made in DST, also one none of whose files
converts (the summary lists those empty classes), so that ImageFolder(DST)
gives every class the index it has in ImageFolder(SRC).
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

Files that cannot be read are listed at the end and do not stop the run. A
destination that cannot be written stops it: read-only before any work, full
at the file that did not fit (nothing half-written stays; rerun once there is
room). Exit status: 0 when done (even with failed files or empty classes,
unless --strict), 1 with --strict when some file failed or some class is
empty, 1 when the destination cannot be written or a worker died, 2 for bad
arguments, 130 when interrupted.
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


def _reporting(work: Callable[[], Any], usage_errors: tuple[type[Exception], ...],
               run_errors: tuple[type[Exception], ...] = ()) -> tuple[Any, Optional[int]]:
    """Runs ``work()`` for a subcommand: (its result, None), or (None, the exit
    status) after printing why: 2 for a usage error, 1 for a failed run, 130
    for Ctrl-C (with how to resume)."""
    try:
        return work(), None
    except usage_errors + run_errors as exc:
        print(f"fastdecode convert: error: {exc}", file=sys.stderr)
        return None, 2 if isinstance(exc, usage_errors) else 1
    except KeyboardInterrupt:
        print("\nfastdecode convert: interrupted; run the same command again to resume",
              file=sys.stderr)
        return None, 130


def storage_options(pairs: Optional[list[str]]) -> Optional[dict]:
    """``--storage-option KEY=VALUE`` pairs as a dict (None when none): a value
    that parses as JSON (``true``, ``3``, ``{...}``) is that value, else the
    string. Raises ValueError for a pair without '='."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--storage-option takes KEY=VALUE, got {name or pair!r}")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    if is_remote(args.source) and (args.to == "wds" or args.shard_size is not None
                                   or args.shard_count is not None):
        print("fastdecode convert: error: --to wds takes a local SRC (a URL SRC converts "
              "with --to bmp or jpeg)", file=sys.stderr)
        return 2
    if args.to == "wds" or args.shard_size is not None or args.shard_count is not None:
        return run_shards(args)
    if args.to == "bmp" and (args.quality is not None or args.subsampling is not None):
        print("fastdecode convert: error: --quality and --subsampling apply to --to jpeg only",
              file=sys.stderr)
        return 2
    summary, status = _reporting(lambda: convert_tree(
        args.source, args.destination, to=args.to,
        quality=90 if args.quality is None else args.quality,
        subsampling=args.subsampling or "4:2:0", max_side=args.max_side,
        workers=args.workers, time_sample=args.time_sample, engine=args.engine,
        storage_options=storage_options(args.storage_option),
        refresh_index=args.refresh_index,
    ), (ValueError, ImportError), (ConvertError,))
    if status is not None:
        return status
    print(format_summary(summary))
    if args.json is not None:
        args.json.write_text(summary_json(summary))
    return 1 if args.strict and (summary.failed or summary.empty_classes) else 0


def run_shards(args: argparse.Namespace) -> int:
    """--to wds: fastdecode.webdataset.write_shards."""
    if args.to != "wds" or args.engine != "local" or args.subsampling is not None:
        print("fastdecode convert: error: --shard-size/--shard-count go with --to wds, which "
              "takes neither --engine ray nor --subsampling", file=sys.stderr)
        return 2
    summary, status = _reporting(lambda: write_shards(
        args.source, args.destination, shard_size=args.shard_size,
        shard_count=args.shard_count, max_side=args.max_side,
        quality=90 if args.quality is None else args.quality, workers=args.workers,
    ), (ValueError, FileNotFoundError))
    if status is not None:
        return status
    print(format_summary(summary))
    if args.json is not None:
        args.json.write_text(summary_json(summary))
    return 1 if args.strict and summary.failed else 0


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode convert``."""
    parser.add_argument("source", metavar="SRC",
                        help="ImageFolder root: a folder or an fsspec URL (s3://bucket/train, "
                             "https://host/train; see --storage-option)")
    parser.add_argument("destination", metavar="DST",
                        help="output root, a local folder (created; must not be inside SRC)")
    parser.add_argument("--to", required=True, choices=(*WRITERS, "wds"),
                        help="output format (wds: WebDataset tar shards, see "
                             "fastdecode.webdataset)")
    parser.add_argument("--engine", choices=tuple(ENGINES), default="local",
                        help="local processes, or ray: a Ray cluster (RAY_ADDRESS, else a "
                             "local one; DST on a filesystem every node writes; fastdecode[ray])")
    parser.add_argument("--shard-size", type=int, metavar="BYTES",
                        help="--to wds: source bytes per shard (default 256 MiB)")
    parser.add_argument("--shard-count", type=int, metavar="N",
                        help="--to wds: this many shards instead")
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
    parser.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                        help="an option of a URL SRC's filesystem (fsspec storage_options; "
                             "repeatable; VALUE read as JSON when it parses: anon=true, "
                             "endpoint_url=http://...); give credentials through the "
                             "environment (AWS_ACCESS_KEY_ID...), not here, where ps shows them")
    parser.add_argument("--refresh-index", action="store_true",
                        help="list a URL SRC again instead of reading its listing's index file")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the summary here")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when some input could not be converted or "
                        "some class folder holds no converted image")


register = subcommand("convert", run, _options, description=DESCRIPTION, epilog=EPILOG)
