"""A file list that forked DataLoader workers can share without copying it.

A list of (str, int) tuples is millions of Python objects; every worker that
touches one bumps its reference count and so copies its page. Here all paths
live in one uint8 array with an offsets array and the targets in an int64
array: three objects, read-only after construction, shared copy-on-write
for free. `samples` and `targets` stay list-compatible through views.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Iterator, Union, overload

import numpy as np


class SampleStore:
    """(path, target) pairs packed into numpy arrays."""

    __slots__ = ("_blob", "_offsets", "_targets")

    def __init__(self, samples: Iterable[tuple[Union[str, os.PathLike], int]]) -> None:
        encoded = []
        targets = []
        for path, target in samples:
            encoded.append(os.fsencode(path))
            targets.append(int(target))
        lengths = np.fromiter((len(p) for p in encoded), dtype=np.int64, count=len(encoded))
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self._offsets[1:])
        self._blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self._targets = np.asarray(targets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._targets)

    def path(self, index: int) -> str:
        start, end = self._offsets[index], self._offsets[index + 1]
        return os.fsdecode(self._blob[start:end].tobytes())

    def target(self, index: int) -> int:
        return int(self._targets[index])

    @property
    def target_array(self) -> np.ndarray:
        return self._targets

    @property
    def nbytes(self) -> int:
        return self._blob.nbytes + self._offsets.nbytes + self._targets.nbytes


class _ListView(Sequence):
    """Read-only list-compatible view; compares equal to an equal list."""

    __slots__ = ("_store",)

    def __init__(self, store: SampleStore) -> None:
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def _item(self, index: int) -> Any:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        index = index.__index__()
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("index out of range")
        return self._item(index)

    def __iter__(self) -> Iterator[Any]:
        return (self._item(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, _ListView)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        head = ", ".join(repr(self._item(i)) for i in range(min(3, len(self))))
        more = ", ..." if len(self) > 3 else ""
        return f"[{head}{more}]"


class SamplesView(_ListView):
    """``dataset.samples``: (path, class_index) tuples, as torchvision has them."""

    __slots__ = ()

    def _item(self, index: int) -> tuple[str, int]:
        return self._store.path(index), self._store.target(index)


class TargetsView(_ListView):
    """``dataset.targets``: class indices."""

    __slots__ = ()

    def _item(self, index: int) -> int:
        return self._store.target(index)

    def __array__(self, dtype=None, copy=None):
        return self._store.target_array if dtype is None else self._store.target_array.astype(dtype)
