"""Hugging Face Accelerate and a FastLoader: ``save_state`` / ``load_state``
carry the loader's position, and ``skip_first_batches`` reaches a batch in
O(1), decoding nothing before it.

Accelerate's ``prepare()`` re-creates a DataLoader as its own
``DataLoaderShard`` (a plain DataLoader inside): the FastLoader's state, its
samples' position-keyed seeds and its fast paths (threads, rings) are not
kept, and ``Accelerator.skip_first_batches`` then returns a plain DataLoader
too. :func:`prepare` keeps the FastLoader itself instead::

    from accelerate import Accelerator
    from torch.utils.data.distributed import DistributedSampler
    from fastdecode.integrations import accelerate as fd_accelerate

    accelerator = Accelerator()
    sampler = DistributedSampler(ds, num_replicas=accelerator.num_processes,
                                 rank=accelerator.process_index, shuffle=True, seed=0)
    loader = fd_accelerate.prepare(
        accelerator, FastLoader(ds, batch_size=64, sampler=sampler, resumable=1234,
                                device=accelerator.device))
    model, optimizer = accelerator.prepare(model, optimizer)

    accelerator.load_state("ckpt")                # the loader's position too
    batches = accelerator.skip_first_batches(loader, resume_step)   # O(1)

:func:`prepare` registers the loader with ``register_for_checkpointing``
(rank 0 writes its state, every rank loads it: the state is the same on every
rank) and routes this accelerator's ``skip_first_batches`` through
:func:`skip_first_batches` for FastLoaders (anything else still goes to
Accelerate's). Decision record: docs/decisions/loaders-resume.md.
"""

from __future__ import annotations

import functools
from typing import Any

from fastdecode.loader._loader import FastLoader

__all__ = ["prepare", "skip_first_batches"]


def _sharded_for(loader: FastLoader, replicas: int, rank: int) -> bool:
    for s in (loader.sampler, loader.batch_sampler, getattr(loader.batch_sampler, "sampler", None)):
        if getattr(s, "num_replicas", None) == replicas and getattr(s, "rank", None) == rank:
            return True
    return False


def prepare(accelerator: Any, loader: FastLoader) -> FastLoader:
    """Readies ``loader`` for ``accelerator`` without re-creating it.

    The loader is registered for checkpointing (``save_state`` saves its
    :meth:`~fastdecode.FastLoader.state_dict`, ``load_state`` loads it) and
    this accelerator's ``skip_first_batches`` goes through
    :func:`skip_first_batches` for FastLoaders. Nothing else about the
    loader changes: batches stay where its ``device=`` puts them (pass
    ``device=accelerator.device``).

    Parameters
    ----------
    accelerator : accelerate.Accelerator
        The run's accelerator.
    loader : FastLoader
        The training loader. With more than one process, its sampler must
        shard the data for this process (``DistributedSampler(ds,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index)``), as ``prepare()`` would have.

    Returns
    -------
    FastLoader
        ``loader`` itself.

    Raises
    ------
    TypeError
        ``loader`` is not a FastLoader.
    ValueError
        More than one process and ``loader``'s sampler does not shard the
        data for this process.
    """
    if not isinstance(loader, FastLoader):
        raise TypeError(f"prepare() takes a FastLoader, not {type(loader).__name__} "
                        f"(accelerator.prepare() handles other loaders)")
    replicas, rank = int(accelerator.num_processes), int(accelerator.process_index)
    if replicas > 1 and not _sharded_for(loader, replicas, rank):
        raise ValueError(
            f"{replicas} processes, but this FastLoader's sampler "
            f"({type(loader.sampler).__name__}) does not shard the data for process {rank}: "
            f"pass sampler=DistributedSampler(dataset, num_replicas={replicas}, rank={rank})")
    accelerator.register_for_checkpointing(loader)
    skip = accelerator.skip_first_batches
    if not isinstance(skip, functools.partial) or skip.func is not _skip_routed:
        accelerator.skip_first_batches = functools.partial(_skip_routed, skip)
    return loader


def _skip_routed(accelerates: Any, dataloader: Any, num_batches: int = 0) -> Any:
    if isinstance(dataloader, FastLoader):
        return skip_first_batches(dataloader, num_batches)
    return accelerates(dataloader, num_batches=num_batches)


def skip_first_batches(loader: FastLoader, num_batches: int = 0) -> FastLoader:
    """``loader``, whose next ``iter()`` starts its epoch after
    ``num_batches`` batches, with nothing before them read or decoded.

    After ``load_state`` (or ``load_state_dict``) with a state saved
    mid-epoch, the loader already starts there: ``num_batches`` must be that
    state's batch count, and nothing more is done. Otherwise the next
    epoch's order is drawn as it would be and cut at ``num_batches``
    (the index list sliced), so its batches are those an epoch read whole
    would give from there on, augmentations included under
    ``resumable=``. Later ``iter()`` calls run whole epochs, as after
    Accelerate's own ``skip_first_batches``, with the same loader.

    Parameters
    ----------
    loader : FastLoader
        A loader of batches (``batch_size`` or a ``BatchSampler``).
    num_batches : int, default 0
        Batches of the epoch to pass over.

    Returns
    -------
    FastLoader
        ``loader`` itself, its next epoch starting after ``num_batches``
        batches.

    Raises
    ------
    ValueError
        ``num_batches`` is negative or not an int.
    fastdecode.errors.ResumeError
        The loader has no position (an iterable dataset, or no batches); its
        batch sampler is not a BatchSampler, or draws from a sampler with a
        state of its own (save and load the loader's state instead); or a
        loaded state starts at another batch.
    """
    loader._resume_tracker().skip(num_batches)
    return loader
