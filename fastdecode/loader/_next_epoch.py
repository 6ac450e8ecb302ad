"""The next epoch's batches, drawn while the current one ends, and kept only
when they are what the next pass of the sampler really draws.

With persistent workers FastLoader's iterator (``loader/_workers.py``) asks
:meth:`NextEpoch.predict` for the next epoch's batches as soon as the sampler
runs out and dispatches them in the places the ending epoch frees; at the
next ``iter(loader)`` it keeps them only if :meth:`NextEpoch.holds` says the
real pass would draw exactly those batches now, and otherwise drops them and
starts the pass as DataLoader does. A prediction is made only where the next
pass is a function of state that can be read now and compared then (a
``BatchSampler`` over a ``SequentialSampler``, ``RandomSampler`` or
``DistributedSampler``, or a wrapper naming its inner sampler), drawn from
shallow copies under the random states the real pass would start from: so
DataLoader's semantics hold, and a dropped prediction costs only its batches.

Decision record: docs/decisions/loaders-workers.md ("Persistent workers never
wait between epochs").
"""

from __future__ import annotations

import copy
from typing import Any, Iterator, Optional

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

__all__ = ["NextEpoch"]

# sampler classes whose pass is a function of the state `_state` reads, with
# the attribute leading to the sampler they draw from
_KNOWN: tuple[tuple[Any, Optional[str]], ...] = (
    (BatchSampler, "sampler"), (SequentialSampler, None), (RandomSampler, None),
    (DistributedSampler, None))
_PLAIN = (bool, int, float, str, bytes, type(None))


def _link(sampler: Any) -> tuple[bool, Optional[str]]:
    through = getattr(type(sampler), "next_epoch_link", None)
    if through is not None:  # a wrapper whose pass is its inner sampler's (loader/_resume.py)
        return True, through
    for cls, link in _KNOWN:
        if isinstance(sampler, cls) and getattr(type(sampler), "__iter__", None) is cls.__iter__:
            return True, link
    return False, None


def _levels(batch_sampler: Any) -> Optional[list[tuple[Any, Optional[str]]]]:
    """The chain of samplers from ``batch_sampler`` down, or None when one of
    them is not known."""
    levels = []
    sampler: Any = batch_sampler
    while sampler is not None:
        known, link = _link(sampler)
        if not known:
            return None
        levels.append((sampler, link))
        sampler = getattr(sampler, link) if link else None
    return levels


def _state(sampler: Any, link: Optional[str]) -> tuple:
    """What the sampler's pass depends on, besides random states: its plain
    attributes, the identity of the others, its sizes."""
    items: list[tuple] = []
    for name, value in sorted(vars(sampler).items()):
        if name == link:
            continue
        items.append((name, value) if isinstance(value, _PLAIN) else (name, "id", id(value)))
    for name in ("data_source", "dataset"):
        source = getattr(sampler, name, None)
        if source is not None:
            items.append((name, "len", len(source)))
    if hasattr(sampler, "num_samples"):
        items.append(("num_samples", sampler.num_samples))
    return type(sampler), tuple(items)


class _Randoms:
    """The random states a chain of samplers draws from: their generators,
    and torch's global CPU generator when a RandomSampler has none."""

    def __init__(self, samplers: list[Any]) -> None:
        found: dict[int, torch.Generator] = {}
        for s in samplers:
            for value in vars(s).values():
                if isinstance(value, torch.Generator):
                    found[id(value)] = value
        self.generators = list(found.values())
        self.uses_global = any(isinstance(s, RandomSampler) and s.generator is None
                               for s in samplers)

    def read(self) -> list[torch.Tensor]:
        states = [g.get_state() for g in self.generators]
        return states + [torch.get_rng_state()] if self.uses_global else states

    def write(self, states: list[torch.Tensor]) -> None:
        for g, state in zip(self.generators, states):
            g.set_state(state)
        if self.uses_global:
            torch.set_rng_state(states[-1])


class NextEpoch:
    """The next pass of a batch sampler, drawn ahead (see the module doc)."""

    def __init__(self, wrapper: Any, levels: list[tuple[Any, Optional[str]]]) -> None:
        self.wrapper = wrapper
        self.samplers = [s for s, _ in levels]
        copies = [copy.copy(s) for s in self.samplers]
        for (outer, (_, link)), inner in zip(zip(copies, levels), copies[1:]):
            assert link is not None
            setattr(outer, link, inner)
        for c in copies:
            if isinstance(c, DistributedSampler):
                c.epoch += 1  # what set_epoch sets before the next pass
        self.expected = [_state(c, link) for c, (_, link) in zip(copies, levels)]
        self.randoms = _Randoms(self.samplers)
        self.start = self.randoms.read()
        self.states = self.start
        self.items: list[Any] = []
        self.failed = False  # a draw raised: dropped at the next iter()
        self._it: Iterator[Any] = (wrapper.ahead(copies[0]) if wrapper is not None
                                   else iter(copies[0]))

    @classmethod
    def predict(cls, index_sampler: Any) -> Optional[NextEpoch]:
        """The next pass of ``index_sampler``, or None when it cannot be
        predicted (a sampler this module does not know)."""
        wrapper = index_sampler if hasattr(index_sampler, "ahead") else None
        levels = _levels(index_sampler.batch_sampler if wrapper is not None else index_sampler)
        return None if levels is None else cls(wrapper, levels)

    def pull(self) -> Any:
        """The next batch of the predicted pass (StopIteration at its end),
        drawn under its own random states; the real ones are put back."""
        real = self.randoms.read()
        self.randoms.write(self.states)
        try:
            item = next(self._it)
        finally:
            self.states = self.randoms.read()
            self.randoms.write(real)
        self.items.append(item)
        return item

    def holds(self, index_sampler: Any) -> bool:
        """Whether a pass of ``index_sampler`` started now draws what this one
        drew: the same samplers, in the predicted state, and the random
        states this one started from."""
        wrapper = index_sampler if self.wrapper is not None else None
        if wrapper is not self.wrapper:
            return False
        levels = _levels(index_sampler.batch_sampler if wrapper is not None else index_sampler)
        if levels is None or len(levels) != len(self.samplers) or any(
                s is not t for (s, _), t in zip(levels, self.samplers)):
            return False
        if [_state(s, link) for s, link in levels] != self.expected:
            return False
        return all(torch.equal(a, b) for a, b in zip(self.randoms.read(), self.start))

    def adopt(self) -> Iterator[Any]:
        """The real pass, from here on: the random states move to where its
        draws so far leave them, and its later draws are the real ones."""
        self.randoms.write(self.states)
        return self._it
