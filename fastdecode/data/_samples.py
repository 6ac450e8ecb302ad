"""The dataset's file list: compact while nobody changes it, a list in every way.

A list of (str, int) tuples is millions of Python objects; every forked
DataLoader worker that touches one bumps its reference count and so copies its
page. :class:`SampleStore` keeps all paths in one uint8 array with an offsets
array and the targets in an int64 array: three objects, read-only, shared
copy-on-write for free.

``dataset.samples`` (and ``imgs``, the same object, as in torchvision) is a
:class:`SamplesView`: every list operation works on it (indexing, slices,
iteration, ``+``, ``==``, ``in``, ``append``, ``x[i] = ...``, ``del``,
``sort``...). Reads come from the store; the first operation that changes it
turns it into a real list it then owns (the memory torchvision's list costs:
about 150 bytes per sample plus the path's length), so code that mutates it
sees exactly what a list would do. It is not a ``list`` instance
(``isinstance(ds.samples, list)`` is False); ``list(ds.samples)`` is one.

``dataset.targets`` needs no store: it is a plain ``list`` whose entries are
the ints of ``class_to_idx`` (one object per class, as torchvision builds it),
so it costs 8 bytes per sample, what an int64 array costs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, MutableSequence
from typing import Any, Iterator, Optional, Union, overload

import numpy as np

__all__ = ["SampleStore", "SamplesView", "shared_int_list"]


class SampleStore:
    """(path, target) pairs packed into numpy arrays; immutable."""

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


def shared_int_list(values: np.ndarray) -> list[int]:
    """``values.tolist()`` with one int object per distinct value (8 bytes per
    entry, as torchvision's targets list, whose ints come from class_to_idx)."""
    if len(values) == 0:
        return []
    low = int(values.min())
    table = list(range(low, int(values.max()) + 1))
    return [table[v - low] for v in values.tolist()]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, SamplesView) else value


class SamplesView(MutableSequence):
    """``dataset.samples``: (path, class_index) tuples, as torchvision has them,
    read from a :class:`SampleStore` until the first change (see module doc)."""

    __slots__ = ("_store", "_list", "__weakref__")

    def __init__(self, store: SampleStore) -> None:
        self._store: Optional[SampleStore] = store
        self._list: Optional[list] = None

    @classmethod
    def _of_list(cls, items: list) -> SamplesView:
        view = cls.__new__(cls)
        view._store, view._list = None, items
        return view

    @property
    def compact(self) -> bool:
        """True while the view still reads from the compact store."""
        return self._list is None

    @property
    def store(self) -> Optional[SampleStore]:
        """The compact store, or None once the view became a list."""
        return self._store

    def _items(self) -> list:
        """The real list, made on the first change (the store is dropped)."""
        if self._list is None:
            store = self._store
            assert store is not None
            self._list = [(store.path(i), store.target(i)) for i in range(len(store))]
            self._store = None
        return self._list

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._list) if self._list is not None else len(self._store)  # type: ignore[arg-type]

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list: ...
    def __getitem__(self, index):
        if self._list is not None:
            return self._list[index]
        store = self._store
        assert store is not None
        n = len(store)
        if isinstance(index, slice):
            return [(store.path(i), store.target(i)) for i in range(*index.indices(n))]
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("list index out of range")
        return store.path(i), store.target(i)

    def __iter__(self) -> Iterator[Any]:
        if self._list is not None:
            return iter(self._list)
        store = self._store
        assert store is not None
        return ((store.path(i), store.target(i)) for i in range(len(store)))

    def __reversed__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self) - 1, -1, -1))

    def __contains__(self, value: object) -> bool:
        return any(item == value for item in self)

    def index(self, value: Any, start: int = 0, stop: Optional[int] = None) -> int:
        for i in range(*slice(start, stop).indices(len(self))):
            if self[i] == value:
                return i
        raise ValueError(f"{value!r} is not in list")

    def count(self, value: Any) -> int:
        return sum(1 for item in self if item == value)

    def copy(self) -> list:
        return list(self)

    def __add__(self, other: Any) -> list:
        if not isinstance(other, (list, SamplesView)):
            return NotImplemented
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list:
        if not isinstance(other, list):
            return NotImplemented
        return other + list(self)

    def __mul__(self, n: int) -> list:
        return list(self) * n

    __rmul__ = __mul__

    def _compare(self, other: Any, op: str) -> Any:
        if isinstance(other, (SamplesView, list)):
            return getattr(list(self), op)(list(other))
        if isinstance(other, tuple):  # a list never equals a tuple
            return op == "__ne__" if op in ("__eq__", "__ne__") else NotImplemented
        return NotImplemented

    def __eq__(self, other: object) -> Any:
        if isinstance(other, (SamplesView, list)) and len(other) != len(self):
            return False
        return self._compare(other, "__eq__")

    def __ne__(self, other: object) -> Any:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, "__lt__")

    def __le__(self, other: Any) -> Any:
        return self._compare(other, "__le__")

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, "__gt__")

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, "__ge__")

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list

    def __repr__(self) -> str:
        return repr(self._list) if self._list is not None else repr(list(self))

    # -- changing: the first change makes the real list ------------------------

    def __setitem__(self, index, value) -> None:
        self._items()[index] = _plain(value)

    def __delitem__(self, index) -> None:
        del self._items()[index]

    def insert(self, index: int, value: Any) -> None:
        self._items().insert(index, value)

    def append(self, value: Any) -> None:
        self._items().append(value)

    def extend(self, values: Iterable[Any]) -> None:
        self._items().extend(_plain(values))

    def __iadd__(self, values: Iterable[Any]) -> SamplesView:  # type: ignore[misc]
        self.extend(values)
        return self

    def __imul__(self, n: int) -> SamplesView:
        self._items().__imul__(n)
        return self

    def pop(self, index: int = -1) -> Any:
        return self._items().pop(index)

    def remove(self, value: Any) -> None:
        self._items().remove(value)

    def clear(self) -> None:
        self._list, self._store = [], None

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        self._items().sort(key=key, reverse=reverse)

    def reverse(self) -> None:
        self._items().reverse()

    # -- copies and pickling -----------------------------------------------------

    def __copy__(self) -> SamplesView:
        if self._list is None:  # the store is immutable: share it
            return type(self)(self._store)  # type: ignore[arg-type]
        return type(self)._of_list(list(self._list))

    def __deepcopy__(self, memo: dict) -> SamplesView:
        import copy

        if self._list is None:  # the store is immutable: share it
            return type(self)(self._store)  # type: ignore[arg-type]
        return type(self)._of_list(copy.deepcopy(self._list, memo))

    def __reduce__(self):
        if self._list is None:
            return (type(self), (self._store,))
        return (type(self)._of_list, (self._list,))
