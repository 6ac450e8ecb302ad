"""Per-sample seeding: a sample's random draws depend on (seed, its key)
only, never on the process, worker, thread or rank that decodes it.

``row_seed`` / ``row_seeds`` turn (seed, key) into a torch seed (splitmix64);
a :class:`SeededBatch` is a batch of indices carrying its epoch's seed and its
samples' positions in the epoch's global order, kept through every copy the
loader makes (:func:`carry`); :func:`with_later` pairs each batch with the
one its worker decodes next, so that worker can start that one's reads early.
Datasets, the loader and the integrations all read these; the decision record
is docs/decisions/loaders-resume.md ("Exact resume").
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Iterator, Optional

import numpy as np

__all__ = ["SeededBatch", "carry", "later_carried", "random_seeds", "row_seed", "row_seeds",
           "seeding_of", "with_later"]

_MASK = (1 << 64) - 1


def row_seeds(seed: int, keys: Any) -> np.ndarray:
    """The torch seed of each row: splitmix64 of (seed, key), in [0, 2**63).

    ``keys`` are non-negative integers (an ImageFolder index, a row id). To
    get row ``i``'s augmentations outside Ray, ``torch.manual_seed(row_seed(
    seed, i))`` before transforming it.

    Parameters
    ----------
    seed : int
        The dataset's seed (only its low 64 bits count).
    keys : array-like of int
        The rows' keys, non-negative integers below 2**64.

    Returns
    -------
    numpy.ndarray
        One int64 seed per key, in [0, 2**63), in the order of ``keys``.

    Raises
    ------
    OverflowError
        A key is negative or not below 2**64.
    """
    k = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = k * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed & _MASK)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


def row_seed(seed: int, key: int) -> int:
    """One row's seed: ``row_seeds(seed, [key])[0]`` as a Python int.

    Parameters
    ----------
    seed : int
        The dataset's seed (only its low 64 bits count).
    key : int
        The row's key, a non-negative integer below 2**64.

    Returns
    -------
    int
        The row's torch seed, in [0, 2**63).

    Raises
    ------
    OverflowError
        ``key`` is negative or not below 2**64.
    """
    return int(row_seeds(seed, [key])[0])


def random_seeds(n: int) -> np.ndarray:
    """``n`` row seeds from the OS's entropy: fresh draws for unseeded rows
    (the Ray paths always seed each row, so no process's RNG state matters)."""
    return np.random.default_rng().integers(0, 2**63, size=n, dtype=np.int64)


class SeededBatch(list):
    """A batch of indices whose sample ``k`` is at position ``start + k *
    step`` of the epoch's global order and draws under ``seed``."""

    def __init__(self, indices: Any, seed: int, start: int, step: int) -> None:
        super().__init__(indices)
        self.seed = seed
        self.start = start
        self.step = step


def seeding_of(batch: Any) -> Optional[tuple[int, list[int]]]:
    """(epoch seed, positions) of a seeded batch, None for any other."""
    seed = getattr(batch, "seed", None)
    if seed is None:
        return None
    return seed, [batch.start + k * batch.step for k in range(len(batch))]


def carry(src: Any, dst: Any) -> Any:
    """``dst`` (a list made from batch ``src``) with ``src``'s seeds: a
    :class:`SeededBatch` for a plain list, a list subclass given them."""
    if getattr(src, "seed", None) is None:
        return dst
    if type(dst) is list:
        return SeededBatch(dst, src.seed, src.start, src.step)
    dst.seed, dst.start, dst.step = src.seed, src.start, src.step
    return dst


def later_carried(batches: Iterable[Any], gap: int) -> Iterator[tuple[list, Optional[list]]]:
    """:func:`with_later`, each batch keeping its seeds
    (:func:`carry`): with_later yields list copies, in the order drawn."""
    drawn: deque[Any] = deque()
    try:  # with_later never pulls past it (noted() has no len)
        length: Optional[int] = len(batches)  # type: ignore[arg-type]
    except TypeError:
        length = None

    def noted() -> Iterator[Any]:
        for batch in batches:
            drawn.append(batch)
            yield batch

    for indices, later in with_later(noted(), gap, length=length):
        yield carry(drawn.popleft(), indices), later


_END: Any = object()  # with_later: the end of a pass


def with_later(batches: Iterable[Any], gap: int,
               length: Optional[int] = None) -> Iterator[tuple[list, Optional[list]]]:
    """Each batch of ``batches`` (as a list) with the one ``gap`` places
    after it, None for the last ``gap``: under DataLoader's round-robin
    dispatch to ``gap`` workers, the batch the same worker gets next, whose
    reads it can start before it decodes this one. The sampler is drawn
    ``gap`` batches early (its draws are the same, in the same order), but
    never past its length: the pull that ends a pass may draw (a
    RandomSampler with a generator draws its next permutation there), and a
    pass left early must leave the generators as DataLoader leaves them. A
    sampler longer than its ``len`` goes on, one batch per pull, unpaired.
    ``length``: that ``len`` when ``batches`` is a wrapper without one (a
    generator over the sampler)."""
    it: Iterator[Any] = iter(batches)
    if gap <= 0:
        for batch in it:
            yield list(batch), None
        return
    known: Optional[int] = length
    if known is None:
        try:
            known = len(batches)  # type: ignore[arg-type]
        except TypeError:
            known = None
    pending: deque[list] = deque()
    pulled = 0
    while known is None or pulled < known:
        batch = next(it, _END)
        if batch is _END:
            break
        pulled += 1
        pending.append(list(batch))
        if len(pending) > gap:
            yield pending.popleft(), pending[-1]
    while pending:
        yield pending.popleft(), None
    if known is not None and pulled == known:
        for batch in it:  # longer than its len: as DataLoader, pulled when asked
            yield list(batch), None
