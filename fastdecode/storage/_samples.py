"""The dataset's file list: compact while nobody changes it, a list in every way.

:class:`SampleStore` packs (path, target) pairs into a few read-only numpy
arrays (each folder's prefix once, the names in one uint8 array with
offsets, the targets in a small int array), which forked workers share
copy-on-write, where a list of tuples is millions of objects whose reference
counts copy their pages. ``dataset.samples`` (and ``imgs``, the same object)
is a :class:`SamplesView`: every list operation works on it; reads come from
the store and the first change turns it into a real list it then owns. It
is not a ``list`` instance; ``list(ds.samples)`` is one. ``dataset.targets``
is a plain list of ``class_to_idx``'s int objects (:func:`shared_int_list`).
Decision record: docs/decisions/listing.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, MutableSequence
from typing import Any, Iterator, Optional, Sequence, Union, overload

import numpy as np

__all__ = ["SampleStore", "SamplesView", "shared_int_list"]


class SampleStore:
    """(path, target) pairs packed into numpy arrays; immutable.

    A path is a folder prefix (one per folder, kept once) followed by the
    file's name: ``folders[folder_index[i]] + names[offsets[i]:offsets[i + 1]]``
    as bytes (``os.fsencode``). A store built from pairs keeps whole paths
    under one empty prefix; :meth:`from_folders` (the folder walk and its
    index) keeps each folder once, so a path costs its name's bytes, 4 for
    its offset, 1-2 for its folder and 2 for its target (int16 while the
    targets fit): about 30 bytes a sample on ImageNet's names."""

    __slots__ = ("_folders", "_folder_offsets", "_folder_index", "_prefix", "_names",
                 "_offsets", "_targets")

    def __init__(self, samples: Iterable[tuple[Union[str, os.PathLike], int]]) -> None:
        encoded = []
        targets = []
        for path, target in samples:
            encoded.append(os.fsencode(path))
            targets.append(int(target))
        self._set(np.zeros(1, np.uint8)[:0], np.zeros(2, np.int64), None, b"".join(encoded),
                  _offsets_of(encoded), np.asarray(targets, dtype=np.int64))

    @classmethod
    def from_folders(cls, folders: Sequence[bytes], folder_index: np.ndarray,
                     names: Sequence[bytes], targets: np.ndarray) -> SampleStore:
        """A store of ``folders[folder_index[i]] + names[i]`` with ``targets[i]``
        (``folders``: bytes prefixes, each with its trailing separator)."""
        store = cls.__new__(cls)
        store._set(np.frombuffer(b"".join(folders), np.uint8), _offsets_of(folders),
                   folder_index, b"".join(names), _offsets_of(names), targets)
        return store

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SampleStore:
        """The store whose :meth:`arrays` are ``arrays`` (a listing index)."""
        store = cls.__new__(cls)
        index = arrays.get("folder_index")
        store._set(arrays["folders"], arrays["folder_offsets"],
                   None if index is None or index.size == 0 else index,
                   arrays["names"], arrays["offsets"], arrays["targets"])
        return store

    def _set(self, folders: np.ndarray, folder_offsets: np.ndarray,
             folder_index: Optional[np.ndarray], names: Any, offsets: np.ndarray,
             targets: np.ndarray) -> None:
        self._folders = folders
        self._folder_offsets = np.asarray(folder_offsets, np.int64)
        n_folders = len(self._folder_offsets) - 1
        self._folder_index: Optional[np.ndarray] = (None if folder_index is None or n_folders <= 1
                              else np.asarray(folder_index, _uint_for(n_folders)))
        self._prefix = self._folders.tobytes() if n_folders == 1 else b""
        self._names = names if isinstance(names, np.ndarray) else np.frombuffer(names, np.uint8)
        self._offsets: np.ndarray = np.asarray(offsets, _uint_for(len(self._names) + 1))
        self._targets: np.ndarray = np.asarray(targets, _int_for(targets))
        for array in (self._folders, self._folder_offsets, self._folder_index, self._names,
                      self._offsets, self._targets):
            if array is not None and array.flags.writeable:
                array.flags.writeable = False

    def arrays(self) -> dict[str, np.ndarray]:
        """The store's arrays, by name (what a listing index saves)."""
        return {"folders": self._folders, "folder_offsets": self._folder_offsets,
                "folder_index": (np.zeros(0, np.uint8) if self._folder_index is None
                                 else self._folder_index),
                "names": self._names, "offsets": self._offsets, "targets": self._targets}

    def __len__(self) -> int:
        return len(self._targets)

    def path(self, index: int) -> str:
        names, offsets = self._names, self._offsets
        name = names[offsets[index]:offsets[index + 1]].tobytes()
        if self._folder_index is None:
            return os.fsdecode(self._prefix + name)
        folder = self._folder_index[index]
        bounds = self._folder_offsets
        return os.fsdecode(self._folders[bounds[folder]:bounds[folder + 1]].tobytes() + name)

    def target(self, index: int) -> int:
        return int(self._targets[index])

    @property
    def target_array(self) -> np.ndarray:
        return self._targets

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    def __reduce__(self) -> tuple[Any, tuple[dict[str, np.ndarray]]]:
        return _store_of, (self.arrays(),)


def _store_of(arrays: dict[str, np.ndarray]) -> SampleStore:
    return SampleStore.from_arrays(arrays)


def _offsets_of(parts: Sequence[bytes]) -> np.ndarray:
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=offsets[1:])
    return offsets


def _uint_for(bound: int) -> type:
    """The smallest unsigned dtype that holds 0..bound."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bound <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def _int_for(values: Any) -> type:
    """The smallest signed dtype that holds ``values`` (int64 when empty)."""
    values = np.asarray(values)
    if values.size == 0 or values.dtype.kind not in "iu":
        return np.int64
    low, high = int(values.min()), int(values.max())
    for dtype in (np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return np.int64


def shared_int_list(values: np.ndarray) -> list[int]:
    """``values.tolist()`` with one int object per distinct value (8 bytes per
    entry, as torchvision's targets list, whose ints come from class_to_idx).
    Runs of one value (a folder listing's targets: one run per class) are
    repeated whole."""
    if len(values) == 0:
        return []
    low = int(values.min())
    table = list(range(low, int(values.max()) + 1))
    starts = np.flatnonzero(np.diff(values)) + 1
    if len(starts) < len(values) // 16:  # few runs: one list repeat per run
        out: list[int] = []
        bounds = [0, *starts.tolist(), len(values)]
        for start, end in zip(bounds, bounds[1:]):
            out += [table[int(values[start]) - low]] * (end - start)
        return out
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
