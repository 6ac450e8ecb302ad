"""The local convert engine: one file's conversion (read, decode as
ImageFolder's loader does, shrink, write atomically: ``convert_one``) and the
worker processes that run a plan's files (``run_jobs``), each removing its
partial file when stopped. ``fastdecode convert`` runs it; the Ray engine
(``ray_jobs``) and the shard writer (``shards``) reuse its pieces. Decision
record: docs/decisions/cli.md.
"""

from __future__ import annotations

import ctypes
import errno
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from fastdecode import _formats, _native
from fastdecode.api import decode_image, read_header
from fastdecode.conversion.output import WRITERS, EncodeOptions, partial_path, write_atomically
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._reads import open_window

__all__ = ["DESTINATION_ERRNOS", "Outcome", "convert_one", "converted", "fit_within",
           "load_pixels", "run_jobs", "shrink_pixels"]

# Write errors that no other file can escape: the run stops at the first.
DESTINATION_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
PR_SET_PDEATHSIG = 1  # linux/prctl.h


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
    # A format with DCT scaling (JPEG) shrinks by up to 8x for free in the
    # decoder, which then decodes faster too; others are resampled from full size.
    min_size = (height, width) if _formats.dct_scaling(header.format) else None
    pixels = decode_image(data, mode="RGB", min_size=min_size)
    if pixels.shape[:2] != (height, width):
        pixels = shrink_pixels(pixels, height, width)
    return pixels


@dataclass(frozen=True)
class Outcome:
    """What converting one file gave.

    Attributes
    ----------
    source : str
        The source file.
    error : str or None
        Why it failed (``"ExceptionType: message"``); None when it was written.
    source_bytes : int
        The size of the source in bytes (0 when it failed).
    output_bytes : int
        The size of the written file in bytes (0 when it failed).
    destination_errno : int or None
        The errno of a write error in ``DESTINATION_ERRNOS`` (a full disk, a
        quota, a read-only filesystem), which stops the run; else None.
    """

    source: str
    error: str | None = None
    source_bytes: int = 0
    output_bytes: int = 0
    destination_errno: int | None = None  # a write error in DESTINATION_ERRNOS: stop the run


def convert_one(options: EncodeOptions, job: tuple[str, str],
                read: Callable[[str], bytes] | None = None) -> Outcome:
    """One job: its source read (by ``read``: a read-ahead window's take),
    decoded and written; any failure is the Outcome's error."""
    source, output = job
    try:
        data = _native.read_file(source) if read is None else read(source)
        pixels = load_pixels(data, options.max_side)
        writer = WRITERS[options.to]
        size = write_atomically(Path(output), lambda file: writer(file, pixels, options))
    except OSError as exc:
        fatal = exc.errno if exc.errno in DESTINATION_ERRNOS else None
        return Outcome(source, error=f"{type(exc).__name__}: {exc}", destination_errno=fatal)
    except Exception as exc:  # one bad file must not end a run over millions: it is listed
        return Outcome(source, error=f"{type(exc).__name__}: {exc}")
    return Outcome(source, source_bytes=len(data), output_bytes=size)


# --- the worker processes ------------------------------------------------------


_writing: Path | None = None  # the output this pool worker is writing now


def quit_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM in a pool worker: remove the partial file of the output being
    written, then exit at once. Raising SystemExit instead is not safe: the
    handler can run while the executor's code holds a lock of its result
    queue (between the lock's acquire and its `with` block), the unwinding
    leaves it taken, and the executor catches every exception and writes to
    that queue again: the worker, and every other one, then waits on that
    lock forever (seen under load, after a SIGKILL of the parent)."""
    if _writing is not None:
        partial_path(_writing).unlink(missing_ok=True)
    os._exit(1)


def convert_in_worker(options: EncodeOptions, job: tuple[str, str],
                      read: Callable[[str], bytes] | None = None) -> Outcome:
    """convert_one in a pool worker, telling a SIGTERM which partial file to remove."""
    global _writing
    _writing = Path(job[1])
    try:
        return convert_one(options, job, read)
    finally:
        _writing = None


def init_worker(parent: int) -> None:
    # Ctrl-C reaches every process of the terminal; only the parent acts on it
    # and sends the SIGTERM that ends a worker cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, quit_on_sigterm)
    # Linux: the same SIGTERM when the parent dies, even by SIGKILL, so that
    # no orphan goes on writing while a rerun starts.
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: orphans finish their chunk and exit
        pass
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM to every worker of ``pool`` (each removes its partial file)."""
    if hasattr(pool, "terminate_workers"):  # Python 3.14+
        pool.terminate_workers()
        return
    # Before 3.14 the executor has no public way; _processes maps pid -> Process.
    for process in list(getattr(pool, "_processes", {}).values()):
        process.terminate()


def run_jobs(
    jobs: list[tuple[str, str]], options: EncodeOptions, workers: int, reader: Any = None
) -> Iterator[Outcome]:
    """Converts ``jobs`` in ``workers`` spawned processes (in this one when
    1), yielding their outcomes in the order of ``jobs``. When the caller
    stops (an exception, Ctrl-C, closing the generator) the workers get a
    SIGTERM and remove their partial files.

    Parameters
    ----------
    jobs : list of (str, str)
        (source, output) paths.
    options : EncodeOptions
        How each image is written.
    workers : int
        The number of worker processes; 1 converts in this process.
    reader : Any
        What reads the sources (the read-ahead reader protocol of
        ``storage/_readers.py``; picklable): None for local files, a remote
        root's ``Remote`` for fsspec URLs.

    Yields
    ------
    Outcome
        One per job; a file that cannot be converted is an Outcome with its
        error, not an exception.

    Raises
    ------
    concurrent.futures.process.BrokenProcessPool
        A worker process died.
    """
    if workers == 1:
        yield from converted(options, jobs, reader=reader)
        return
    # spawn, not fork: forking a parent that runs threads (tqdm's monitor, a
    # notebook's) is unsafe, and Python 3.12+ warns about it. An executor, not
    # a multiprocessing.Pool: a worker that dies breaks it (BrokenProcessPool)
    # where a Pool would wait forever for the lost chunk.
    context = multiprocessing.get_context("spawn")
    chunksize = max(1, min(16, len(jobs) // (workers * 8)))
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker,
                               initargs=(os.getpid(),))
    # Chunks submitted here, not pool.map: map's iterator cancels its futures
    # from this thread when it stops, and when the workers stopped below
    # break the pool, the executor's own thread marks the same futures
    # failed: on Python < 3.12 that raised InvalidStateError in its thread (a
    # full disk at 2 workers, seen once in CI-like runs). Only that thread
    # cancels now (shutdown's cancel_futures).
    futures = [pool.submit(convert_chunk, options, jobs[k:k + chunksize], reader)
               for k in range(0, len(jobs), chunksize)]
    try:
        for future in futures:
            yield from future.result()
    except BaseException:  # Ctrl-C, a full disk: stop the workers now, not after the queue
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def convert_chunk(options: EncodeOptions, jobs: list[tuple[str, str]],
                  reader: Any = None) -> list[Outcome]:
    """A pool worker's chunk of jobs, in order."""
    return list(converted(options, jobs, convert_in_worker, reader))


def converted(options: EncodeOptions, jobs: list[tuple[str, str]],
              convert: Callable[..., Outcome] = convert_one, reader: Any = None
              ) -> Iterator[Outcome]:
    """``convert(options, job, read)`` for each job in order, the sources
    read ahead (``storage/_window.py``: many reads in flight on slow storage)
    through ``reader`` (None: local files)."""
    window = open_window(ReadAheadOptions.resolve(None), reader)
    try:
        for job in window.ahead_of(jobs, _source):
            yield convert(options, job, window.take)
    finally:
        window.close()


def _source(job: tuple[str, str]) -> str:
    return job[0]
