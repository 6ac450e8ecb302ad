"""The set-up FastLoader gives its workers, and the checks it says once.

:func:`worker_init_fn` runs first in every worker (one thread per library
pool, the worker's longer time slice), chained with the user's; the CUDA
ring's workers also map the ring. :func:`check_oversubscription` and
:func:`warn_if_shm_short` warn, once per process, when the workers ask for
more CPUs than this process may use or more /dev/shm than is free;
:func:`warn_once` is the loader's one-time warning.

Decision record: docs/decisions/loaders.md ("Oversubscription and /dev/shm",
"A worker's time slice: 20 ms").
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Optional, Sequence

import torch

from fastdecode._system import limit_threads_to_one, settle_in_worker, shm_budget, usable_cpus
from fastdecode.loader._cpu_ring import map_slot

__all__ = ["check_oversubscription", "ring_worker_init", "warn_if_shm_short", "warn_once",
           "with_pinning", "worker_init_fn"]


def worker_init_fn(worker_id: int) -> None:
    """One thread per library in a DataLoader worker (OpenMP, MKL, OpenBLAS,
    OpenCV, torch): workers are the parallelism, nested pools only fight; and
    the worker's longer time slice (``_system.settle_in_worker``, which the
    datasets also call, once per process: more workers than CPUs take turns
    every 20 ms, not every image).

    FastLoader runs it in each worker before the user's ``worker_init_fn``;
    with a plain DataLoader, pass it as ``worker_init_fn=``.

    Parameters
    ----------
    worker_id : int
        The worker's id, as DataLoader passes it (not used).
    """
    limit_threads_to_one()
    settle_in_worker()


def _chained_init(user_fn: Optional[Callable[[int], None]], worker_id: int) -> None:
    worker_init_fn(worker_id)
    if user_fn is not None:
        user_fn(worker_id)


def with_pinning(user_fn: Optional[Callable[[int], None]]) -> Callable[[int], None]:
    """worker_init_fn, then ``user_fn``; a function that already chains them
    (a FastLoader re-created from its own attributes) is kept as it is."""
    if isinstance(user_fn, functools.partial) and user_fn.func is _chained_init:
        return user_fn
    return functools.partial(_chained_init, user_fn)


def ring_worker_init(init: Callable[[int], None], slots: Sequence[torch.Tensor],
                      worker_id: int) -> None:
    """The CUDA ring's workers: the loader's init (pinning, the user's), then
    the ring (pinned, so touched already) mapped once (:func:`map_slot`)."""
    init(worker_id)
    for slot in slots:
        map_slot(slot)


_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning, once per process for each ``key`` (pointing at the
    caller's caller)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def check_oversubscription(num_workers: int, threads_per_worker: int = 1) -> None:
    """Warns once when ``num_workers x threads_per_worker`` exceeds the CPUs
    this process may use (``fastdecode._system.usable_cpus``)."""
    cpus = usable_cpus()
    if num_workers * threads_per_worker > cpus:
        warn_once(
            "cpus",
            f"num_workers={num_workers} x {threads_per_worker} thread(s) per worker exceeds the "
            f"{cpus} CPU(s) this process may use (affinity and cgroup quota); set "
            f"num_workers<={cpus} to avoid oversubscription",
        )


def warn_if_shm_short(num_workers: int, prefetch_factor: int, batch_bytes: int) -> None:
    """Warns once when /dev/shm cannot hold the batches the workers keep in
    flight (``fastdecode._system.shm_budget``), saying how to enlarge it."""
    budget = shm_budget(num_workers, prefetch_factor, batch_bytes)
    if num_workers > 0 and budget.status == "short":
        assert budget.free is not None
        warn_once(
            "shm",
            f"/dev/shm has {budget.free / 2**20:.0f} MiB free but num_workers={num_workers} x "
            f"prefetch_factor={prefetch_factor} batches need {budget.need / 2**20:.0f} MiB: "
            f"enlarge it ({budget.advice}) or lower num_workers, prefetch_factor or batch_size",
        )
