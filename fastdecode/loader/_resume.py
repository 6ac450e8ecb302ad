"""FastLoader's exact mid-epoch resume: the state of the epoch in progress, the
pass of the sampler that continues it, and the samples' seeds.

A :class:`Tracker` follows each pass of the loader's batch sampler (through the
:class:`ResumeSampler` the loader iterates: in the main process, under the
CPU and CUDA rings and the thread pool alike) and the batches the training
loop receives. :meth:`Tracker.state_dict` describes the position after the
last batch received, in primitives (``torch.load(weights_only=True)``) and a
few KB whatever the dataset's size: the epoch, the batches and samples taken,
the random states the epoch's pass started from (the samplers' generators;
torch's global generator when a RandomSampler has none), a stateful user
sampler's own ``state_dict`` at that batch, the base seed, the sampler's
shape (types, batch size, replicas) and a fingerprint of the dataset (size,
class list, file list).

:meth:`Tracker.load_state_dict` applies to the next ``iter()``: its pass
starts from the saved random states, so the sampler draws the epoch's order
again (a generator's permutation, regenerated; a DistributedSampler's list,
rebuilt), and starts at the saved sample: the index list is sliced, nothing
is decoded, and the cost is that of an epoch's first batch wherever the
position is. A stateful user sampler is loaded with its saved state instead;
a user sampler with no state is replayed from its saved random states, its
indices only (said once: exact only if it draws from nothing else).

Samples' draws (``resumable=True``): each batch leaves as a
:class:`SeededBatch` carrying the epoch's seed, ``row_seed(base_seed,
epoch)``, and its samples' positions in the epoch's global order; sample
``k`` draws under ``row_seed(epoch_seed, position * SPAN + attempt)`` (the
plan of ``datasets/_planned.py``, in a worker, in-process or in a pool thread
alike). So a sample's augmentation depends on (base seed, epoch, position)
only, never on the worker, thread or rank that decodes it.

Another world size keeps the global batch (``batch_size x num_replicas``):
under a DistributedSampler the epoch's global order (as the saved world
padded it) is rebuilt, and each step's block of ``global batch`` positions
from the saved one on is cut into contiguous shares, one per new rank; the
union of a step's batches, sorted by position, is the uninterrupted step's.
The following epochs are the new world's DistributedSampler's.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import os
import warnings
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

__all__ = ["VERSION", "Counted", "ResumeSampler", "Tracker"]

VERSION = 1
KIND = "fastdecode.FastLoader"

# index samplers whose pass is a function of their attributes and the random
# states read at its start: regenerated and sliced at a resume
_KNOWN_INDEX = (SequentialSampler, RandomSampler, DistributedSampler, WeightedRandomSampler,
                SubsetRandomSampler)

# index samplers that draw from torch's global generator when given none
_DRAWING = (RandomSampler, WeightedRandomSampler, SubsetRandomSampler)

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------------------
# the samplers


def _is(sampler: Any, cls: Any) -> bool:
    return isinstance(sampler, cls) and getattr(type(sampler), "__iter__", None) is cls.__iter__


def _known_index(sampler: Any) -> bool:
    return any(_is(sampler, cls) for cls in _KNOWN_INDEX)


def _stateful(sampler: Any) -> bool:
    return callable(getattr(sampler, "state_dict", None)) and \
        callable(getattr(sampler, "load_state_dict", None))


def _chain(batch_sampler: Any) -> list[Any]:
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
        if any(_is(s, cls) for cls in _DRAWING) and getattr(s, "generator", None) is None:
            return True
        if not (_is(s, BatchSampler) or _known_index(s) or _stateful(s)):
            return True
    return False


def _distributed(samplers: list[Any]) -> Optional[DistributedSampler]:
    for s in samplers:
        if isinstance(s, DistributedSampler):
            return s
    return None


def _shape(batch_sampler: Any) -> dict:
    """What the pass's order depends on, besides random states and the data."""
    samplers = _chain(batch_sampler)
    dist = _distributed(samplers)
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


# ---------------------------------------------------------------------------
# passes, and the loop's position


class _Pass:
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


class Counted:
    """The loader's iterator, counting the batches the loop receives."""

    def __init__(self, it: Any, tracker: "Tracker", serial: int) -> None:
        self._it = it
        self._tracker = tracker
        self._serial = serial

    def __iter__(self) -> "Counted":
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._it)
        except StopIteration:
            if self._tracker.live == self._serial:
                self._tracker.live = None
            raise
        if self._tracker.serial == self._serial:
            self._tracker.taken += 1
        return batch

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_it"], name)


class ResumeSampler:
    """The batch sampler a FastLoader iterates: ``batch_sampler``'s batches
    (seeded under ``resumable=True``), each pass followed by ``tracker``;
    the first after a ``load_state_dict`` starts where the state says."""

    next_epoch_link = "batch_sampler"  # loader/_next_epoch.py: a pass of its inner sampler

    def __init__(self, tracker: "Tracker", batch_sampler: Any) -> None:
        self.tracker = tracker
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[Any]:
        # a copy (loader/_next_epoch.py's prediction of the next epoch) draws ahead
        return self.tracker.run(self.batch_sampler, ahead=self is not self.tracker.sampler)

    def ahead(self, batch_sampler: Any) -> Iterator[Any]:
        """The next epoch's pass of ``batch_sampler`` (a predicted copy)."""
        return self.tracker.run(batch_sampler, ahead=True)

    def __len__(self) -> int:
        return len(self.batch_sampler)


class Tracker:
    """The epoch in progress, the passes of the sampler, the state (the
    module doc). ``base_seed`` is None unless the loader is resumable."""

    def __init__(self, dataset: Any, batch_sampler: Any, generator: Optional[torch.Generator],
                 base_seed: Optional[int]) -> None:
        self.dataset = dataset
        self.generator = generator  # the loader's (its base seeds), saved with the samplers'
        self.base_seed = base_seed
        self.sampler = ResumeSampler(self, batch_sampler)
        self.resumed_iter = False  # the current iter() continues a loaded state
        self.epoch = -1  # the epoch the loop reads; -1: none begun
        self.taken = 0  # its batches the loop received
        self.serial = 0  # iter() calls: an older iterator no longer counts
        self.live: Optional[int] = None  # the iter() whose iterator has not ended yet
        self.current: Optional[_Pass] = None
        self.pending: Optional[_Pass] = None  # the next epoch's, drawn ahead
        self.loaded: Optional[dict] = None  # applies at the next iter()
        self._resume: Optional[dict] = None  # applies at the next pass of the sampler
        self._skip: Optional[int] = None  # skip(): applies at the next iter()
        self._skip_now: Optional[int] = None  # ... and at that iter()'s pass
        self._skip_states: Optional[list[bytes]] = None  # a pass drawn ahead started from
        self._fingerprint: Optional[dict] = None

    # -- the loop's side ------------------------------------------------------

    def start_epoch(self) -> int:
        """At ``iter(loader)``: the next epoch (or the loaded one) begins."""
        self.serial += 1
        self.resumed_iter = self.loaded is not None
        if self.loaded is not None:
            state, self.loaded = self.loaded, None
            self.pending = self.current = None
            self.epoch = state["epoch"]
            self.taken = state["batches"]
            if state["finished"]:  # after an epoch's last batch: the next one, from its start
                self._advance_past(state)
                self.epoch += 1
                self.taken = 0
            elif state["started"]:
                self._resume = state
                self._skip = None  # skip() checked that it names this very batch
                return self.serial
            self._skipping()
            return self.serial
        self.epoch += 1
        self.taken = 0
        self.current, self.pending = self.pending, None  # kept if the iterator adopts it
        if self._skip is not None:
            # a pass drawn ahead (persistent workers) is not cut: drawn again, from the
            # random states it started from
            if self.current is not None:
                self._skip_states = list(self.current.states)
            self.current = None
            self._skipping()
        return self.serial

    @property
    def skipping(self) -> bool:
        """Whether a :meth:`skip` applies at the next iter()."""
        return self._skip is not None

    def _skipping(self) -> None:
        """At iter(): a pending :meth:`skip` starts this epoch at its batch."""
        if self._skip is not None:
            self.taken, self._skip_now, self._skip = self._skip, self._skip, None

    def skip(self, batches: int) -> None:
        """The next ``iter()`` starts its epoch at batch ``batches``: its pass
        is drawn as it would be and cut there (the index list sliced, nothing
        decoded), so the batches after it are the ones an epoch read whole
        from its start would give. After a :meth:`load_state_dict` whose
        state is mid-epoch, the state already says where: ``batches`` must be
        its batch, and nothing more is done."""
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
            raise ValueError(f"batches must be an int >= 0, not {batches!r}")
        loaded = self.loaded
        if loaded is not None and loaded["started"] and not loaded["finished"]:
            if loaded["batches"] != batches:
                raise ResumeError(
                    f"the loaded state resumes epoch {loaded['epoch']} after batch "
                    f"{loaded['batches']}, not {batches}: skip that many (or none: the "
                    f"loaded state already starts there)")
            self._skip = None
            return
        samplers = _chain(self.sampler.batch_sampler)
        if not _is(self.sampler.batch_sampler, BatchSampler) or any(
                _stateful(s) and not _known_index(s) for s in samplers):
            raise ResumeError(
                f"skipping batches without decoding them needs a BatchSampler over a sampler "
                f"FastLoader draws again ({' > '.join(type(s).__name__ for s in samplers)} "
                f"is not): save and load the loader's state_dict instead")
        self._skip = batches

    def counted(self, it: Any, serial: int) -> Counted:
        """``it``, the loader's iterator for iter() number ``serial``, counted."""
        self.live = serial
        return Counted(it, self, serial)

    # -- the sampler's side ---------------------------------------------------

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
        samplers = _chain(batch_sampler)
        gens = self._generators(samplers)
        uses_global = _uses_global(samplers)
        resume = None if ahead else self._resume
        self._resume = None
        skip = None if ahead else self._skip_now
        if not ahead:
            self._skip_now = None
        dist = _distributed(samplers)
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
        stateful = next((s for s in samplers if _stateful(s) and not _known_index(s)), None)
        epoch = self.epoch + 1 if ahead else self.epoch
        run = _Pass(epoch, states, order)
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
        dist = _distributed(samplers)
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
        dist = _distributed(samplers)
        replicas = 1 if dist is None else int(dist.num_replicas)
        if dist is not None and state["order_replicas"] != replicas:
            return iter(list(self._resplit(batch_sampler, dist, state)))
        inner = samplers[1] if len(samplers) > 1 else None
        stateful = next((s for s in samplers if _stateful(s) and not _known_index(s)), None)
        if stateful is not None:
            if k:  # at batch 0 its state is that of the pass before's end: a new pass
                stateful.load_state_dict(copy.deepcopy(state["sampler_state"]))
            return ((b, None) for b in iter(batch_sampler))
        if _is(batch_sampler, BatchSampler) and inner is not None:
            if _known_index(inner):
                order: Iterator[int] = iter(list(iter(inner))[local:])
            else:
                _warn_once(f"replay {type(inner).__name__}",
                           f"FastLoader resumes {type(inner).__name__}, which has no "
                           f"state_dict, by replaying its indices from the epoch's saved random "
                           f"states (nothing is decoded); exact only if it draws from nothing "
                           f"else; give it state_dict/load_state_dict. Said once.")
                order = iter(list(iter(inner))[local:])
            # the order is drawn already: batched as it is taken
            return ((b, None) for b in _rebatch(order, batch_sampler.batch_size,
                                                 batch_sampler.drop_last))
        _warn_once(f"replay {type(batch_sampler).__name__}",
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
        if not _is(batch_sampler, BatchSampler) or batch_sampler.sampler is not dist:
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
        samplers = _chain(self.sampler.batch_sampler)
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

    # -- the state --------------------------------------------------------------

    def fingerprint(self) -> dict:
        """size, class list and file list of the dataset (hashes)."""
        if self._fingerprint is None:
            ds = self.dataset
            classes = getattr(ds, "classes", None)
            samples = getattr(ds, "samples", None)
            print_: dict[str, Any] = {"size": len(ds), "classes": None, "files": None}
            if classes is not None:
                print_["classes"] = hashlib.blake2b(
                    "\0".join(map(str, classes)).encode(), digest_size=16).hexdigest()
            if samples is not None:
                h = hashlib.blake2b(digest_size=16)
                for path, target in samples:
                    h.update(os.fsencode(os.fspath(path)) + b"\0" + str(target).encode() + b"\n")
                print_["files"] = h.hexdigest()
            self._fingerprint = print_
        return self._fingerprint

    def state_dict(self) -> dict:
        """The position after the last batch the loop received (module doc)."""
        if self.loaded is not None:  # loaded, not iterated yet: still that position
            return copy.deepcopy(self.loaded)
        run = self.current
        started = run is not None and self.epoch >= 0
        shape = _shape(self.sampler.batch_sampler)
        local, glob, user = 0, 0, None
        if started:
            assert run is not None
            mark = run.marks.get(self.taken)
            if mark is None:
                raise ResumeError(f"the position after batch {self.taken} of epoch "
                                  f"{self.epoch} was not kept (batches taken out of order?)")
            local, glob, user = mark
        try:
            length: Optional[int] = len(self.sampler)
        except TypeError:
            length = None
        finished = started and length is not None and self.taken >= length
        dist = _distributed(_chain(self.sampler.batch_sampler))
        return {
            "kind": KIND,
            "version": VERSION,
            "epoch": max(self.epoch, 0),
            "started": bool(started),
            "batches": self.taken if started else 0,
            "samples": local,
            "samples_global": glob,
            "finished": bool(finished),
            "order_replicas": run.order_replicas if started and run else shape["num_replicas"],
            "random": list(run.states) if started and run else [],
            "sampler_state": user,
            "sampler_epoch": None if dist is None else int(dist.epoch),
            "base_seed": self.base_seed,
            "shape": shape,
            "dataset": dict(self.fingerprint()),
        }

    def load_state_dict(self, state: dict) -> None:
        """Checks ``state`` against this loader; it applies at the next iter()."""
        if not isinstance(state, dict) or state.get("kind") != KIND:
            raise ResumeError(f"not a FastLoader state: {type(state).__name__} "
                              f"(kind {state.get('kind') if isinstance(state, dict) else None!r})")
        if state.get("version") != VERSION:
            raise ResumeError(f"FastLoader state version {state.get('version')!r}; this "
                              f"fastdecode reads version {VERSION}")
        mine = self.fingerprint()
        for key, what in (("size", "size"), ("classes", "class list"), ("files", "file list")):
            if state["dataset"].get(key) != mine[key]:
                raise ResumeError(f"another dataset: its {what} differs (saved "
                                  f"{state['dataset'].get(key)!r}, now {mine[key]!r})")
        if state["base_seed"] != self.base_seed:
            raise ResumeError(
                f"another seed: the state's base seed is {state['base_seed']!r}, this loader's "
                f"{self.base_seed!r} (resumable=True takes the generator's initial_seed(), "
                f"torch.initial_seed() without one: seed them as the saved run did, on every "
                f"rank, or give the seed: resumable=<int>)")
        saved, now = state["shape"], _shape(self.sampler.batch_sampler)
        if saved["samplers"] != now["samplers"]:
            raise ResumeError(f"another sampler: saved {' > '.join(saved['samplers'])}, now "
                              f"{' > '.join(now['samplers'])}")
        for key in ("drop_last", "shuffle", "dist_seed", "dist_drop_last"):
            if saved.get(key) != now.get(key):
                raise ResumeError(f"another sampler: its {key} was {saved.get(key)!r}, now "
                                  f"{now.get(key)!r}")
        if saved["num_replicas"] == now["num_replicas"]:
            if saved["batch_size"] != now["batch_size"]:
                raise ResumeError(f"another batch size: saved {saved['batch_size']}, now "
                                  f"{now['batch_size']}")
        else:
            self._check_world(state, saved, now)
        if self.live is not None and self.live == self.serial:
            _warn_once("loaded mid-pass",
                       "FastLoader.load_state_dict after iter(): the iterator already made "
                       "goes on from where it is; the state applies to the next iter()")
        dist = _distributed(_chain(self.sampler.batch_sampler))
        if (dist is not None and state["sampler_epoch"] is not None and state["started"]
                and not state["finished"] and int(dist.epoch) == 0):
            # a fresh sampler (a new process) resumes the saved epoch: the epoch is
            # part of the state, as a stateful loader's is (Lightning calls set_epoch
            # only after iter(), and a worker iterator draws the pass at iter());
            # a sampler set to another epoch before the load is still an error
            dist.set_epoch(state["sampler_epoch"])
        self.loaded = dict(state)
        self.pending = None
        self._skip = None  # the loaded state says where the next iter() starts

    def _check_world(self, state: dict, saved: dict, now: dict) -> None:
        glob = saved["batch_size"] * saved["num_replicas"]
        if saved["batch_size"] is None or now["batch_size"] is None:
            raise ResumeError("resuming in another world size needs a batch_size")
        if glob % now["num_replicas"]:
            raise ResumeError(f"the global batch {glob} ({saved['batch_size']} x "
                              f"{saved['num_replicas']} ranks) is not divisible by the new "
                              f"world size {now['num_replicas']}")
        if now["batch_size"] * now["num_replicas"] != glob:
            new = now["batch_size"] * now["num_replicas"]
            raise ResumeError(f"another global batch: saved {glob} ({saved['batch_size']} x "
                              f"{saved['num_replicas']} ranks), now {new} ({now['batch_size']} x "
                              f"{now['num_replicas']}); use batch_size={glob // now['num_replicas']}")
