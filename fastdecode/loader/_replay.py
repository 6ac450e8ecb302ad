"""The sampler's side of FastLoader's exact resume: each pass of the batch
sampler, followed batch by batch, and drawn again from a saved state.

A pass (:meth:`SamplerReplay.run`) records the random states it started
from (the samplers' generators; torch's global generator when a
RandomSampler has none) and, after each batch it dispatches, the samples
taken and a stateful user sampler's ``state_dict``. A pass that resumes a
loaded state starts from the saved random states, so the sampler draws the
epoch's order again (a generator's permutation, regenerated; a
DistributedSampler's list, rebuilt), and starts at the saved sample: the
index list is sliced, nothing is decoded, and the cost is that of an epoch's
first batch wherever the position is. A stateful user sampler is loaded with
its saved state instead; a user sampler with no state is replayed from its
saved random states, its indices only (said once: exact only if it draws
from nothing else).

Samples' draws (``resumable=True``): each batch leaves as a
:class:`~fastdecode.batching._seeding.SeededBatch` carrying the epoch's
seed, ``row_seed(base_seed, epoch)``, and its samples' positions in the
epoch's global order, so a sample's augmentation depends on (base seed,
epoch, position) only, never on the worker, thread or rank that decodes it.

Another world size keeps the global batch (``batch_size x num_replicas``):
under a DistributedSampler the epoch's global order (as the saved world
padded it) is rebuilt, and each step's block of ``global batch`` positions
from the saved one on is cut into contiguous shares, one per new rank; the
union of a step's batches, sorted by position, is the uninterrupted step's.
The following epochs are the new world's DistributedSampler's.

The state itself, and the loop's side, are ``loader/_resume.py``'s. Decision
record: docs/decisions/loaders-resume.md ("Exact resume", "Resume in the
frameworks, across world sizes, and its cost").
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any, Iterator, Optional

import torch
from torch.utils.data import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler

from fastdecode.batching._seeding import SeededBatch, row_seed
from fastdecode.errors import ResumeError
from fastdecode.loader._setup import warn_once

__all__ = ["SamplerPass", "SamplerReplay", "distributed_of", "is_plain", "is_stateful",
           "known_index", "sampler_chain", "sampler_shape"]

# index samplers whose pass is a function of their attributes and the random
# states read at its start: regenerated and sliced at a resume
_KNOWN_INDEX = (SequentialSampler, RandomSampler, DistributedSampler, WeightedRandomSampler,
                SubsetRandomSampler)

# index samplers that draw from torch's global generator when given none
_DRAWING = (RandomSampler, WeightedRandomSampler, SubsetRandomSampler)


def is_plain(sampler: Any, cls: Any) -> bool:
    return isinstance(sampler, cls) and getattr(type(sampler), "__iter__", None) is cls.__iter__


def known_index(sampler: Any) -> bool:
    return any(is_plain(sampler, cls) for cls in _KNOWN_INDEX)


def is_stateful(sampler: Any) -> bool:
    return callable(getattr(sampler, "state_dict", None)) and \
        callable(getattr(sampler, "load_state_dict", None))


def sampler_chain(batch_sampler: Any) -> list[Any]:
    """The samplers from ``batch_sampler`` down (``.sampler`` links)."""
    out: list[Any] = []
    s = batch_sampler
    while s is not None and len(out) < 8 and not any(s is t for t in out):
        out.append(s)
        s = getattr(s, "sampler", None)
    return out


def _generators(samplers: list[Any]) -> list[torch.Generator]:
    found: dict[int, torch.Generator] = {}
    for s in samplers:
        for value in vars(s).values() if hasattr(s, "__dict__") else ():
            if isinstance(value, torch.Generator) and value.device.type == "cpu":
                found[id(value)] = value
    return list(found.values())


def _uses_global(samplers: list[Any]) -> bool:
    """Whether a sampler of the chain may draw from torch's global generator:
    a random sampler without one, or a sampler this module does not know."""
    for s in samplers:
        if any(is_plain(s, cls) for cls in _DRAWING) and getattr(s, "generator", None) is None:
            return True
        if not (is_plain(s, BatchSampler) or known_index(s) or is_stateful(s)):
            return True
    return False


def distributed_of(samplers: list[Any]) -> Optional[DistributedSampler]:
    for s in samplers:
        if isinstance(s, DistributedSampler):
            return s
    return None


def sampler_shape(batch_sampler: Any) -> dict:
    """What the pass's order depends on, besides random states and the data."""
    samplers = sampler_chain(batch_sampler)
    dist = distributed_of(samplers)
    shape: dict[str, Any] = {
        "samplers": [type(s).__name__ for s in samplers],
        "batch_size": getattr(batch_sampler, "batch_size", None),
        "drop_last": getattr(batch_sampler, "drop_last", None),
        "num_replicas": 1 if dist is None else int(dist.num_replicas),
    }
    if dist is not None:
        shape.update(shuffle=bool(dist.shuffle), dist_seed=int(dist.seed),
                     dist_drop_last=bool(dist.drop_last))
    return shape


def _global_order(dist: DistributedSampler, replicas: int) -> list[int]:
    """The epoch's order before DistributedSampler's strided split, padded
    (or cut) as a world of ``replicas`` ranks pads it."""
    n = len(dist.dataset)  # type: ignore[arg-type]
    if dist.drop_last and n % replicas != 0:
        per = math.ceil((n - replicas) / replicas)
    else:
        per = math.ceil(n / replicas)
    total = per * replicas
    if dist.shuffle:
        g = torch.Generator()
        g.manual_seed(dist.seed + dist.epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    if not dist.drop_last:
        pad = total - len(order)
        if pad <= len(order):
            order += order[:pad]
        else:
            order += (order * math.ceil(pad / len(order)))[:pad]
    else:
        order = order[:total]
    return order


def _rebatch(indices: Iterator[int], batch_size: int, drop_last: bool) -> Iterator[list[int]]:
    """BatchSampler's batches of an index stream."""
    while True:
        batch = list(itertools.islice(indices, batch_size))
        if not batch or (drop_last and len(batch) < batch_size):
            return
        yield batch


class SamplerPass:
    """One pass of the batch sampler: its epoch, the random states it started
    from, and per batch dispatched: (local samples, global samples, a
    stateful sampler's state) after it."""

    def __init__(self, epoch: int, states: list[bytes], order_replicas: int) -> None:
        self.epoch = epoch
        self.states = states
        self.order_replicas = order_replicas  # the world whose padding made the order
        self.marks: dict[int, tuple[int, int, Any]] = {}
        self.exhausted = False


def _state_bytes(g: torch.Generator) -> bytes:
    return g.get_state().numpy().tobytes()


def _from_bytes(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class SamplerReplay:
    """The Tracker's side of each pass of the sampler (the module doc): its
    attributes are the Tracker's (``loader/_resume.py``)."""

    generator: Optional[torch.Generator]
    base_seed: Optional[int]
    sampler: Any  # the ResumeSampler the loader iterates
    epoch: int
    taken: int
    current: Optional[SamplerPass]
    pending: Optional[SamplerPass]
    _resume: Optional[dict]
    _skip_now: Optional[int]
    _skip_states: Optional[list[bytes]]

    def _generators(self, samplers: list[Any]) -> list[torch.Generator]:
        """The samplers' generators, then the loader's (DataLoader draws each
        epoch's base seed from it) when it is not one of them."""
        gens = _generators(samplers)
        g = self.generator
        if g is not None and g.device.type == "cpu" and not any(g is h for h in gens):
            gens.append(g)
        return gens

    def run(self, batch_sampler: Any, ahead: bool) -> Iterator[Any]:
        """A pass of ``batch_sampler`` (a generator: it begins at the first
        batch asked for, when the pass's draws begin)."""
        samplers = sampler_chain(batch_sampler)
        gens = self._generators(samplers)
        uses_global = _uses_global(samplers)
        resume = None if ahead else self._resume
        self._resume = None
        skip = None if ahead else self._skip_now
        if not ahead:
            self._skip_now = None
        dist = distributed_of(samplers)
        replicas = 1 if dist is None else int(dist.num_replicas)
        rank = 0 if dist is None else int(dist.rank)
        if resume is None and skip is not None:  # this pass, from its own start, cut at `skip`
            resume = self._skip_state(batch_sampler, gens, uses_global, skip, dist)
        if resume is not None:
            batches, local, done, states, order = self._resumed(
                batch_sampler, samplers, gens, uses_global, resume, keep_draws=skip is not None)
        else:
            states = [_state_bytes(g) for g in gens]
            if uses_global:
                states.append(_state_bytes(torch.default_generator))
            batches = ((b, None) for b in batch_sampler)
            local, done, order = 0, 0, replicas
        stateful = next((s for s in samplers if is_stateful(s) and not known_index(s)), None)
        epoch = self.epoch + 1 if ahead else self.epoch
        run = SamplerPass(epoch, states, order)
        run.marks[done] = (local, 0 if resume is None else resume["samples_global"],
                           None if resume is None or stateful is None
                           else copy.deepcopy(resume["sampler_state"]))
        if resume is None and stateful is not None:
            run.marks[done] = (0, 0, copy.deepcopy(stateful.state_dict()))
        if ahead:
            self.pending = run
        else:
            self.current = run
        seed = None if self.base_seed is None else row_seed(self.base_seed, max(epoch, 0))
        number, glob = done, run.marks[done][1]
        for batch, start in batches:
            indices = list(batch)
            if start is None:  # this rank's strided share of the order
                start, step = local * replicas + rank, replicas
                glob = (local + len(indices)) * replicas
            else:  # a contiguous share of a step's block (another world size)
                step = 1
                glob = start[1]
                start = start[0]
            local += len(indices)
            number += 1
            run.marks[number] = (local, glob, None if stateful is None
                                 else copy.deepcopy(stateful.state_dict()))
            if run is self.current:
                for n in [n for n in run.marks if n < self.taken]:
                    del run.marks[n]
            yield indices if seed is None else SeededBatch(indices, seed, start, step)
        run.exhausted = True

    def _skip_state(self, batch_sampler: Any, gens: list[torch.Generator], uses_global: bool,
                    skip: int, dist: Optional[DistributedSampler]) -> dict:
        """The state of a pass that starts now, after ``skip`` batches (a
        BatchSampler's: all full before the last)."""
        states, self._skip_states = self._skip_states, None
        if states is None:
            states = [_state_bytes(g) for g in gens]
            if uses_global:
                states.append(_state_bytes(torch.default_generator))
        replicas = 1 if dist is None else int(dist.num_replicas)
        local = skip * int(batch_sampler.batch_size)
        return {"random": states, "batches": skip, "samples": local,
                "samples_global": local * replicas, "order_replicas": replicas,
                "sampler_state": None,
                "sampler_epoch": None if dist is None else int(dist.epoch)}

    def _resumed(self, batch_sampler: Any, samplers: list[Any], gens: list[torch.Generator],
                 uses_global: bool, state: dict, keep_draws: bool = False) -> tuple:
        """The rest of the saved pass: (batches, local samples, batches done,
        start states, order replicas), its draws under the saved states
        (torch's global generator left as it was, unless ``keep_draws``: a
        pass cut by :meth:`skip` draws as an uncut one does)."""
        saved = state["random"]
        dist = distributed_of(samplers)
        if dist is not None and state["sampler_epoch"] is not None \
                and int(dist.epoch) != state["sampler_epoch"]:
            raise ResumeError(f"the state was saved in epoch {state['sampler_epoch']} of the "
                              f"DistributedSampler, which is at {dist.epoch} now: call "
                              f"set_epoch({state['sampler_epoch']}) before iter()")
        if len(saved) != len(gens) + (1 if uses_global else 0):
            raise ResumeError(f"the state holds {len(saved)} random state(s) but this "
                              f"loader's samplers draw from {len(gens)} generator(s)"
                              f"{' and the global one' if uses_global else ''}")
        for g, data in zip(gens, saved):
            g.set_state(_from_bytes(data))
        mine = torch.get_rng_state() if uses_global and not keep_draws else None
        if uses_global:
            torch.set_rng_state(_from_bytes(saved[-1]))
        # a DistributedSampler's pass resumes at a step: its share of the samples before
        local = state["samples"] if dist is None else \
            state["samples_global"] // int(dist.num_replicas)
        try:
            batches = self._rest(batch_sampler, samplers, state, local)
        finally:
            if mine is not None:
                torch.set_rng_state(mine)
        return batches, local, state["batches"], saved, state["order_replicas"]

    def _rest(self, batch_sampler: Any, samplers: list[Any], state: dict,
              local: int) -> Iterator[Any]:
        """The saved pass from sample ``local`` (batch ``state['batches']``)
        on, as (batch, None) for this rank's strided share or (batch, (global
        start, global samples after))."""
        k = state["batches"]
        dist = distributed_of(samplers)
        replicas = 1 if dist is None else int(dist.num_replicas)
        if dist is not None and state["order_replicas"] != replicas:
            return iter(list(self._resplit(batch_sampler, dist, state)))
        inner = samplers[1] if len(samplers) > 1 else None
        stateful = next((s for s in samplers if is_stateful(s) and not known_index(s)), None)
        if stateful is not None:
            if k:  # at batch 0 its state is that of the pass before's end: a new pass
                stateful.load_state_dict(copy.deepcopy(state["sampler_state"]))
            return ((b, None) for b in iter(batch_sampler))
        if is_plain(batch_sampler, BatchSampler) and inner is not None:
            if known_index(inner):
                order: Iterator[int] = iter(list(iter(inner))[local:])
            else:
                warn_once(f"replay {type(inner).__name__}",
                           f"FastLoader resumes {type(inner).__name__}, which has no "
                           f"state_dict, by replaying its indices from the epoch's saved random "
                           f"states (nothing is decoded); exact only if it draws from nothing "
                           f"else; give it state_dict/load_state_dict. Said once.")
                order = iter(list(iter(inner))[local:])
            # the order is drawn already: batched as it is taken
            return ((b, None) for b in _rebatch(order, batch_sampler.batch_size,
                                                 batch_sampler.drop_last))
        warn_once(f"replay {type(batch_sampler).__name__}",
                   f"FastLoader resumes {type(batch_sampler).__name__}, which has no "
                   f"state_dict, by replaying its batches from the epoch's saved random states "
                   f"(nothing is decoded); exact only if it draws from nothing else; give it "
                   f"state_dict/load_state_dict. Said once.")
        rest = list(itertools.islice(iter(batch_sampler), k, None))
        return ((b, None) for b in rest)

    def _resplit(self, batch_sampler: Any, dist: DistributedSampler,
                 state: dict) -> Iterator[Any]:
        """The rest of the epoch's global order in steps of the global batch,
        each cut into contiguous shares, this rank's share of each."""
        if not is_plain(batch_sampler, BatchSampler) or batch_sampler.sampler is not dist:
            raise ResumeError("resuming in another world size needs a BatchSampler over a "
                              "DistributedSampler (the global order is rebuilt from it)")
        replicas, rank = int(dist.num_replicas), int(dist.rank)
        share = batch_sampler.batch_size
        glob_batch = state["shape"]["batch_size"] * state["order_replicas"]
        order = _global_order(dist, state["order_replicas"])
        done = state["samples_global"]
        for begin in range(done, len(order), glob_batch):
            block = order[begin:begin + glob_batch]
            if len(block) == glob_batch:
                a, b = rank * share, (rank + 1) * share
            elif batch_sampler.drop_last:
                return
            else:
                a, b = rank * len(block) // replicas, (rank + 1) * len(block) // replicas
            if b > a:
                yield block[a:b], (begin + a, begin + len(block))

    def _advance_past(self, state: dict) -> None:
        """A state saved after an epoch's last batch: the generators move on
        to where that epoch's draws left them (its order drawn, not decoded)."""
        samplers = sampler_chain(self.sampler.batch_sampler)
        gens = self._generators(samplers)
        uses_global = _uses_global(samplers)
        if not state["started"]:
            return
        mine = torch.get_rng_state()
        try:
            for g, data in zip(gens, state["random"]):
                g.set_state(_from_bytes(data))
            if uses_global:
                torch.set_rng_state(_from_bytes(state["random"][-1]))
            for _ in self.sampler.batch_sampler:
                pass
        finally:
            torch.set_rng_state(mine)
