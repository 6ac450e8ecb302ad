"""FastLoader's exact mid-epoch resume: the position of the epoch in progress,
saved and loaded as a state of primitives.

A :class:`Tracker` follows each pass of the loader's batch sampler (through the
:class:`ResumeSampler` the loader iterates: in the main process, under the
CPU and CUDA rings and the thread pool alike; the pass itself is
``loader/_replay.py``'s) and the batches the training loop receives.
:meth:`Tracker.state_dict` describes the position after the last batch
received, in primitives (``torch.load(weights_only=True)``) and a few KB
whatever the dataset's size: the epoch, the batches and samples taken, the
random states the epoch's pass started from, a stateful user sampler's own
``state_dict`` at that batch, the base seed, the sampler's shape (types,
batch size, replicas) and a fingerprint of the dataset (size, class list,
file list). :meth:`Tracker.load_state_dict` checks a state against the
loader and applies it to the next ``iter()``, whose pass draws the epoch's
order again and starts at the saved sample. ``KIND`` and ``VERSION`` name
the format; states saved by earlier versions of the same ``VERSION`` load.

Decision record: docs/decisions/loaders-resume.md ("Exact resume"); the
user's guide: docs/guides/resuming.md.
"""

from __future__ import annotations

import copy
import hashlib
import os
from typing import Any, Iterator, Optional

import torch
from torch.utils.data import BatchSampler

from fastdecode.errors import ResumeError
from fastdecode.loader._protocol import LoaderDataset
from fastdecode.loader._replay import (
    SamplerPass,
    SamplerReplay,
    distributed_of,
    is_plain,
    is_stateful,
    known_index,
    sampler_chain,
    sampler_shape,
)
from fastdecode.loader._setup import warn_once

__all__ = ["KIND", "VERSION", "Counted", "ResumeSampler", "Tracker"]

VERSION = 1
KIND = "fastdecode.FastLoader"


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


class Tracker(SamplerReplay):
    """The epoch in progress, the passes of the sampler, the state (the
    module doc). ``base_seed`` is None unless the loader is resumable."""

    def __init__(self, dataset: LoaderDataset, batch_sampler: Any,
                 generator: Optional[torch.Generator], base_seed: Optional[int]) -> None:
        self.dataset = dataset
        self.generator = generator  # the loader's (its base seeds), saved with the samplers'
        self.base_seed = base_seed
        self.sampler = ResumeSampler(self, batch_sampler)
        self.resumed_iter = False  # the current iter() continues a loaded state
        self.epoch = -1  # the epoch the loop reads; -1: none begun
        self.taken = 0  # its batches the loop received
        self.serial = 0  # iter() calls: an older iterator no longer counts
        self.live: Optional[int] = None  # the iter() whose iterator has not ended yet
        self.current: Optional[SamplerPass] = None
        self.pending: Optional[SamplerPass] = None  # the next epoch's, drawn ahead
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
        samplers = sampler_chain(self.sampler.batch_sampler)
        if not is_plain(self.sampler.batch_sampler, BatchSampler) or any(
                is_stateful(s) and not known_index(s) for s in samplers):
            raise ResumeError(
                f"skipping batches without decoding them needs a BatchSampler over a sampler "
                f"FastLoader draws again ({' > '.join(type(s).__name__ for s in samplers)} "
                f"is not): save and load the loader's state_dict instead")
        self._skip = batches

    def counted(self, it: Any, serial: int) -> Counted:
        """``it``, the loader's iterator for iter() number ``serial``, counted."""
        self.live = serial
        return Counted(it, self, serial)

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
        shape = sampler_shape(self.sampler.batch_sampler)
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
        dist = distributed_of(sampler_chain(self.sampler.batch_sampler))
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
        saved, now = state["shape"], sampler_shape(self.sampler.batch_sampler)
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
            warn_once("loaded mid-pass",
                       "FastLoader.load_state_dict after iter(): the iterator already made "
                       "goes on from where it is; the state applies to the next iter()")
        dist = distributed_of(sampler_chain(self.sampler.batch_sampler))
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
