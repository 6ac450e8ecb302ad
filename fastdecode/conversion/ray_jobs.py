"""The Ray convert engine, ``fastdecode convert --engine ray``: the local
converter's per-file conversion (``jobs.converted``) over a Ray cluster, in
chunks of files per task, each file's Outcome yielded as its task finishes
(the contract of the local ``jobs.run_jobs``). Resumability and atomicity are
the local converter's. ``fastdecode.ray`` re-exports it (and imports Ray Data
first, naming the extra to install where Ray is missing). Decision record:
docs/decisions/ray.md.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional

import ray

from fastdecode.conversion.jobs import converted

__all__ = ["run_convert_jobs"]


def run_convert_jobs(jobs: list[tuple[str, str]], options: Any, workers: Optional[int],
                     chunk: int = 32, reader: Any = None) -> Iterator[Any]:
    """``fastdecode convert``'s per-file conversion (``convert_one``) over a
    Ray cluster, ``chunk`` files per task; yields each file's Outcome as its
    task finishes (the same contract as the local ``run_jobs``). Connects to
    the running cluster (``ray.init(address='auto')``) or starts a local one;
    the destination must be a filesystem every node writes to.

    Parameters
    ----------
    jobs : list of (str, str)
        (source, output) paths.
    options : EncodeOptions
        How each image is written (``fastdecode.conversion.output``).
    workers : int or None
        The bound on the tasks in flight (None: twice the cluster's CPUs).
    chunk : int, default 32
        Files per task.
    reader : Any, optional
        What reads the sources: None for local files, a remote root's
        ``Remote`` for fsspec URLs.

    Yields
    ------
    Outcome
        One per job, in the order the tasks finish; a file that cannot be
        converted is an Outcome with its error, not an exception.

    Raises
    ------
    ray.exceptions.RayError
        A task failed after Ray's retries (3), or Ray cannot start or reach
        the cluster.
    """
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    convert = ray.remote(num_cpus=1, max_retries=3)(_convert_chunk)
    limit = workers or max(1, int(2 * ray.cluster_resources().get("CPU", 1)))
    pending = [jobs[i:i + chunk] for i in range(0, len(jobs), chunk)][::-1]
    running: list[Any] = []
    while pending or running:
        while pending and len(running) < limit:
            running.append(convert.remote(converted, options, pending.pop(), reader))
        done, running = ray.wait(running, num_returns=1)
        yield from ray.get(done[0])


def _convert_chunk(converted: Any, options: Any, jobs: list[tuple[str, str]],
                   reader: Any = None) -> list[Any]:
    # read ahead, in order (conversion/jobs.py)
    return list(converted(options, jobs, reader=reader))
