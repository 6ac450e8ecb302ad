"""The default test tier: a seeded subset of each long parameter matrix.

`make test` (plain `pytest`) runs, of every parametrized test function with
more than MIN_CASES cases, a deterministic subset; `make test-full`
(`pytest --full`, or FASTDECODE_TEST_FULL=1) runs every case.

A matrix's axes are its parametrize calls (one per decorator or fixture;
"crop,size" in one call is one axis). An axis of at most OPTION_VALUES
values is an option axis (modes, layouts, interpolations, flags), a longer
one a list of inputs (photos, edge files, samples). The subset holds

  * every value of every axis at least once, when the matrix has more than
    one axis (a one-axis list of inputs is sampled, not covered);
  * every pair of values of two option axes at least once (2-way,
    "pairwise" coverage of the options);
  * seeded random cases up to FRACTION of the matrix.

The cover is greedy (the cases in a seeded shuffle; passes with a falling
threshold keep a case that covers at least that many values or pairs not
yet covered). The subset depends only on the seed (`--sample-seed`,
default SEED) and the cases' ids, never on the order of collection or on
the process, so parallel workers agree. A case named on the command line
(`pytest 'tests/core/test_bmp.py::test_flip_and_chw[pal1-L]'`) always runs.

Axis values are read from the case's parametrize ids (pytest's
``callspec._idlist``: since pytest 8 ``callspec.indices`` of a direct
parametrization is the case's position in the whole matrix, not the
value's in its axis); a pytest without it falls back to the parameter
values' reprs.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from itertools import combinations
from typing import Any, Hashable, Iterable, Sequence

SEED = 27
MIN_CASES = 24  # matrices up to this size run whole
FRACTION = 0.125  # of a larger matrix, at least this much is kept
OPTION_VALUES = 8  # an axis of at most this many values is an option axis

Axes = Sequence[Hashable]  # one case's value on each axis, in axis order


def axes(item: Any) -> tuple[Hashable, ...]:
    """One case's value on each of its matrix's axes (see the module doc)."""
    spec = item.callspec
    ids = getattr(spec, "_idlist", None)
    if ids is not None:
        return tuple(ids)
    return tuple(f"{name}={value!r}" for name, value in sorted(spec.params.items()))


def group_key(item: Any) -> str:
    """The matrix a case belongs to: its test function (module, class, name)."""
    return item.nodeid.split("[", 1)[0]


def requirements(cases: Sequence[Axes]) -> list[set[Hashable]]:
    """What each case covers of what the subset must hold: (axis, value) of
    every axis when there are several, ((a, x), (b, y)) of every two option
    axes a < b."""
    if not cases:
        return []
    width = max(len(c) for c in cases)
    sizes = [len({c[k] for c in cases if k < len(c)}) for k in range(width)]
    options = [k for k in range(width) if sizes[k] <= OPTION_VALUES]
    out = []
    for case in cases:
        need: set[Hashable] = set()
        if width > 1:
            need.update((k, case[k]) for k in range(len(case)))
        for a, b in combinations([k for k in options if k < len(case)], 2):
            need.add(((a, case[a]), (b, case[b])))
        out.append(need)
    return out


def choose(ids: Sequence[str], cases: Sequence[Axes], key: str, seed: int = SEED,
           fraction: float = FRACTION) -> list[int]:
    """Indices (into ids) of the cases kept of one matrix, in their order.

    ids: the cases' node ids (they fix the order the shuffle starts from);
    cases: each case's axis values; key: the matrix's name (seeds its shuffle).
    """
    n = len(ids)
    rng = random.Random(hashlib.sha256(f"{seed}:{key}".encode()).digest())
    order = sorted(range(n), key=lambda i: ids[i])  # independent of collection order
    rng.shuffle(order)
    need = requirements(cases)
    uncovered: set[Hashable] = set().union(*need) if need else set()
    kept: set[int] = set()
    threshold = max((len(r) for r in need), default=0)
    while uncovered and threshold > 0:
        for i in order:
            if i in kept:
                continue
            new = need[i] & uncovered
            if new and len(new) >= threshold:
                kept.add(i)
                uncovered -= new
        threshold //= 2
    target = min(n, math.ceil(n * fraction))
    for i in order:
        if len(kept) >= target:
            break
        kept.add(i)
    return sorted(kept)


def sample(items: Iterable[Any], seed: int = SEED, *, keep_ids: frozenset = frozenset(),
           min_cases: int = MIN_CASES, fraction: float = FRACTION
           ) -> tuple[list[Any], list[Any], dict[str, tuple[int, int]]]:
    """(kept, deselected, {matrix: (kept, of)}) for a collected item list,
    each list in the items' order.

    Items that are not parametrized, matrices of at most `min_cases` cases and
    node ids in `keep_ids` (named on the command line) are always kept; a
    named case does not count in its matrix's size.
    """
    items = list(items)
    groups: dict[str, list[int]] = defaultdict(list)
    for pos, item in enumerate(items):
        if hasattr(item, "callspec") and item.nodeid not in keep_ids:
            groups[group_key(item)].append(pos)
    drop: set[int] = set()
    report: dict[str, tuple[int, int]] = {}
    for key, members in groups.items():
        if len(members) <= min_cases:
            continue
        ids = [items[p].nodeid for p in members]
        chosen = set(choose(ids, [axes(items[p]) for p in members], key, seed, fraction))
        drop.update(p for k, p in enumerate(members) if k not in chosen)
        report[key] = (len(chosen), len(members))
    kept = [it for p, it in enumerate(items) if p not in drop]
    deselected = [it for p, it in enumerate(items) if p in drop]
    return kept, deselected, report
