"""The WebDataset shard writer behind ``fastdecode convert --to wds``: an
ImageFolder tree as tar shards (:func:`write_shards`), cut by a plan
(:func:`plan_shards`) that ``wds.json`` records. Each sample is
``<key>.<ext>`` (the file's bytes, or a JPEG re-encoded to ``max_side`` by
the converter's own functions) and ``<key>.cls``, its key the ImageFolder
index; each shard is written atomically, so a rerun with the same plan skips
the shards that exist and a different plan is refused. Standard library
only (no webdataset). The user's guide is ``fastdecode.webdataset``'s
docstring; decision record: docs/decisions/webdataset.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from fastdecode import _native
from fastdecode._system import usable_cpus
from fastdecode.api import read_header
from fastdecode.conversion import jobs
from fastdecode.conversion.output import WRITERS, EncodeOptions, write_atomically
from fastdecode.conversion.summary import ShardSummary
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset

__all__ = ["DEFAULT_SHARD_BYTES", "PATTERN", "PLAN_FILE", "plan_shards", "write_shards"]

PLAN_FILE = "wds.json"
PATTERN = "shard-{:06d}.tar"
DEFAULT_SHARD_BYTES = 256 * 2**20


def _member_ext(path: str, max_side: Optional[int]) -> str:
    if max_side is not None:
        return "jpg"
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    return "jpg" if ext == "jpeg" else ext


def plan_shards(source: Union[str, os.PathLike], *, shard_size: Optional[int] = None,
                shard_count: Optional[int] = None, shuffle_seed: Optional[int] = 0,
                max_side: Optional[int] = None, quality: int = 90) -> dict[str, Any]:
    """The shards of ``source`` as a plan (what ``wds.json`` records): which
    ImageFolder indices go into which shard. Shards are cut by the source
    bytes (``shard_size``, default 256 MiB) or into ``shard_count`` equal
    parts; ``shuffle_seed`` (None: ImageFolder order) permutes the samples
    first.

    Parameters
    ----------
    source : str or os.PathLike
        The ImageFolder root.
    shard_size : int, optional
        Source bytes per shard (default 256 MiB); not with ``shard_count``.
    shard_count : int, optional
        This many shards of equal sample counts instead.
    shuffle_seed : int or None, default 0
        The seed of the permutation of the samples; None keeps ImageFolder's
        order.
    max_side : int, optional
        Recorded in the plan: the longer side of re-encoded JPEGs.
    quality : int, default 90
        Recorded in the plan: the JPEG quality of re-encoded samples.

    Returns
    -------
    dict
        ``classes``, ``samples``, ``listing_sha256`` (of the files and their
        targets), ``options`` (the arguments above) and ``shards`` (each
        ``{"name", "indices"}``).

    Raises
    ------
    ValueError
        Both ``shard_size`` and ``shard_count``, or either under 1.
    """
    if shard_size is not None and shard_count is not None:
        raise ValueError("give shard_size or shard_count, not both")
    if shard_size is not None and shard_size < 1:
        raise ValueError(f"shard_size must be at least 1 byte, got {shard_size}")
    if shard_count is not None and shard_count < 1:
        raise ValueError(f"shard_count must be at least 1, got {shard_count}")
    root = os.fspath(source)
    classes, class_to_idx = find_classes(root)
    samples = make_dataset(root, class_to_idx, extensions=IMG_EXTENSIONS)
    order = np.arange(len(samples))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(samples))
    sizes = np.array([os.path.getsize(samples[i][0]) for i in order], np.int64)
    if shard_count is not None:
        bounds = [round(k * len(order) / shard_count) for k in range(shard_count + 1)]
    else:
        limit = shard_size or DEFAULT_SHARD_BYTES
        bounds, total = [0], 0
        for j, size in enumerate(sizes):
            if total and total + size > limit:
                bounds.append(j)
                total = 0
            total += int(size)
        bounds.append(len(order))
    shards = [order[a:b].tolist() for a, b in zip(bounds, bounds[1:]) if b > a]
    listing = hashlib.sha256("\n".join(f"{p}\t{t}" for p, t in samples).encode()).hexdigest()
    return {"classes": classes, "samples": len(samples), "listing_sha256": listing,
            "options": {"shard_size": shard_size, "shard_count": shard_count,
                        "shuffle_seed": shuffle_seed, "max_side": max_side, "quality": quality},
            "shards": [{"name": PATTERN.format(k), "indices": idx} for k, idx in enumerate(shards)]}


def _write_shard(path: str, members: list[tuple[int, str, int]], max_side: Optional[int],
                 quality: int) -> tuple[int, list[tuple[str, str]]]:
    """One tar shard, atomically; returns its size and the inputs it left out."""
    failures: list[tuple[str, str]] = []
    options = EncodeOptions("jpeg", quality=quality, max_side=max_side)

    def add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(payload), 0, 0o444
        tar.addfile(info, io.BytesIO(payload))

    def write(file: Any) -> None:
        with tarfile.open(fileobj=file, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for index, source, label in members:
                key = f"{index:08d}"
                try:
                    data = _native.read_file(source)
                    read_header(data)  # a file that is no image is listed, not shipped
                    if max_side is not None:
                        out = io.BytesIO()
                        WRITERS["jpeg"](out, jobs.load_pixels(data, max_side), options)
                        data = out.getvalue()
                except Exception as exc:  # noqa: BLE001 - listed, as convert lists them
                    failures.append((source, f"{type(exc).__name__}: {exc}"))
                    continue
                add(tar, f"{key}.{_member_ext(source, max_side)}", data)
                add(tar, f"{key}.cls", str(label).encode())

    return write_atomically(Path(path), write), failures


def write_shards(source: Union[str, os.PathLike], destination: Union[str, os.PathLike], *,
                 shard_size: Optional[int] = None, shard_count: Optional[int] = None,
                 shuffle_seed: Optional[int] = 0, max_side: Optional[int] = None,
                 quality: int = 90, workers: Optional[int] = None) -> ShardSummary:
    """Writes the ImageFolder tree ``source`` as WebDataset tar shards in
    ``destination`` (see ``fastdecode.webdataset`` and :func:`plan_shards`);
    resumable. An unreadable input is listed, not raised.

    Parameters
    ----------
    source : str or os.PathLike
        The ImageFolder root.
    destination : str or os.PathLike
        The folder of the shards and ``wds.json`` (created; not inside
        ``source``).
    shard_size, shard_count, shuffle_seed : optional
        How the samples are cut into shards, as :func:`plan_shards` takes them.
    max_side : int, optional
        Re-encode each image as a JPEG whose longer side is at most this;
        None stores the files' bytes as they are.
    quality : int, default 90
        The JPEG quality of re-encoded images.
    workers : int, optional
        Processes writing shards (default: the usable CPUs, at most one per
        shard to write); 1 writes in this process.

    Returns
    -------
    ShardSummary
        What was written, skipped and left out.

    Raises
    ------
    ValueError
        Bad arguments, or a destination holding shards of another plan.
    """
    from tqdm import tqdm

    started = time.perf_counter()
    src, dst = Path(source), Path(destination)
    if not src.is_dir():
        raise ValueError(f"source {src} is not a folder")
    if dst.resolve() == src.resolve() or src.resolve() in dst.resolve().parents:
        raise ValueError(f"destination {dst} is inside the source {src}")
    plan = plan_shards(src, shard_size=shard_size, shard_count=shard_count,
                       shuffle_seed=shuffle_seed, max_side=max_side, quality=quality)
    plan_path = dst / PLAN_FILE
    if plan_path.exists():
        previous = json.loads(plan_path.read_text())
        if {k: previous.get(k) for k in plan} != plan:
            raise ValueError(f"{dst} holds shards of another plan (other files or options); "
                             "delete it or choose another destination")
    dst.mkdir(parents=True, exist_ok=True)
    def write_plan(file: Any) -> None:
        file.write(json.dumps(plan).encode())

    write_atomically(plan_path, write_plan)
    samples = make_dataset(os.fspath(src), find_classes(os.fspath(src))[1],
                           extensions=IMG_EXTENSIONS)
    summary = ShardSummary(str(src), str(dst), shards=len(plan["shards"]),
                           samples=plan["samples"])
    todo = []
    for shard in plan["shards"]:
        path = dst / shard["name"]
        if path.exists():
            summary.skipped += 1
            summary.bytes_after += path.stat().st_size
        else:
            todo.append((str(path), [(i, *samples[i]) for i in shard["indices"]]))
    workers = max(1, min(workers or usable_cpus(), len(todo) or 1))
    failures: list[tuple[str, str]] = []
    with tqdm(total=len(todo), unit="shard", desc="write shards", disable=None) as bar:
        if workers == 1:
            results = (_write_shard(p, m, max_side, quality) for p, m in todo)
            _collect(results, summary, failures, bar)
        else:
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                     initializer=jobs.init_worker, initargs=(os.getpid(),)) as pool:
                futures = [pool.submit(_write_shard, p, m, max_side, quality) for p, m in todo]
                _collect((f.result() for f in futures), summary, failures, bar)
    summary.failed = len(failures)
    summary.failures = [{"path": p, "error": e} for p, e in sorted(failures)]
    summary.seconds = time.perf_counter() - started
    return summary


def _collect(results: Any, summary: ShardSummary, failures: list, bar: Any) -> None:
    for size, failed in results:
        summary.written += 1
        summary.bytes_after += size
        failures += failed
        bar.update()

