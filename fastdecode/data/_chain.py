"""A dataset's transform, fused, and kept in step with the chain it came from.

:class:`LiveFused` holds the :class:`~fastdecode.transforms.FusedTransform`
of a dataset's ``transform`` and a fingerprint of the chain's parameters; at
every item the fingerprint is taken again and a change (an attribute such as
``rrc.size = 160``, ``Compose.transforms.append(...)``, a reassignment) re-fuses
before that item, in whichever process runs it. When the plan fuses less than
the chain's leading geometric run, or nothing, it warns once (RuntimeWarning
with fuse's fusion report: the transform that stopped fusion and why).

A FusedTransform given as the transform is used as such; when its source chain
changes it is rebuilt with its own options (exact, region, dct_margin).
"""

from __future__ import annotations

import enum
import warnings
from typing import Any, Optional

from fastdecode.data._base import HAVE_TORCHVISION

__all__ = ["LiveFused", "fingerprint"]

# Values compared by value in a fingerprint (exact types: one set lookup each, the common case);
# enums and lists/tuples of them too; transform objects found in attributes are walked in
# turn (Compose.transforms, a preset's self.transforms = Compose(...)), other objects compared
# by identity. This runs at every item, so it is plain loops over each object's __dict__.
_ATOMS = frozenset({int, float, str, bytes, bool, type(None)})
_DEPTH = 4  # Compose in a wrapper in a Compose...: deeper objects count by identity


def _walk(obj: Any, out: list, depth: int) -> None:
    out.append(id(obj))
    state = getattr(obj, "__dict__", None)
    if not state or depth >= _DEPTH:
        return
    atoms = _ATOMS
    for key, value in state.items():
        if key[0] == "_":
            continue
        out.append(key)
        cls = type(value)
        if cls in atoms:
            out.append(value)
        elif cls is list or cls is tuple:
            out.append(len(value))
            for item in value:
                if type(item) in atoms:
                    out.append(item)
                else:
                    _value(item, out, depth)
        else:
            _value(value, out, depth)


def _value(value: Any, out: list, depth: int) -> None:
    if isinstance(value, enum.Enum):
        out.append(value)
    elif callable(value) and hasattr(value, "__dict__") and not isinstance(value, type):
        _walk(value, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        out.append(tuple(_freeze(v) for v in value))
    else:
        version = getattr(value, "_version", None)  # a tensor: identity and in-place edits
        out.append((id(value), version) if isinstance(version, int) else id(value))


def _freeze(value: Any) -> Any:
    if type(value) in _ATOMS or isinstance(value, enum.Enum):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return id(value)


def fingerprint(transform: Any) -> list:
    """What a chain's plan depends on: the identity and public attributes of
    the transform and of every transform object reachable through them
    (lists and tuples by value, other objects by identity). Equal
    fingerprints mean an unchanged chain."""
    out: list = []
    _walk(transform, out, 0)
    return out


def _fused_type() -> Optional[type]:
    if not HAVE_TORCHVISION:
        return None
    from fastdecode.transforms import FusedTransform

    return FusedTransform


class LiveFused:
    """The fused plan of one dataset's transform (rebuilt per process: it is
    not pickled, only the set of warnings already given is)."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.warned: set = set()
        self._key: Optional[list] = None
        self._fused: Any = None
        self._source: Any = None

    def __getstate__(self) -> dict:
        return {"exact": self.exact, "warned": set(self.warned)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["exact"])  # type: ignore[misc]
        self.warned = state["warned"]

    def get(self, transform: Any) -> Any:
        """The FusedTransform for ``transform`` as it is now (None without a
        transform or without torchvision: the chain then runs on the PIL image)."""
        if transform is None:
            return None
        if not HAVE_TORCHVISION:
            self._warn("no torchvision", "torchvision is not importable, so nothing is fused: "
                       "each file is decoded in full to a PIL image and the transform runs on it")
            return None
        fused_type: Any = _fused_type()
        source = transform.source if isinstance(transform, fused_type) else transform
        key = fingerprint(source)
        if self._fused is None or key != self._key or self._source is not transform:
            self._fused = self._build(transform, fused_type)
            self._key, self._source = key, transform
            self._report(self._fused)
        return self._fused

    def _build(self, transform: Any, fused_type: Any) -> Any:
        if isinstance(transform, fused_type):
            if self.exact and not transform.exact:
                raise ValueError("exact=True, but the FusedTransform given as the transform was "
                                 "built with exact=False: pass the chain itself, or "
                                 "fuse(chain, exact=True)")
            if transform is self._source:  # its source changed: rebuild with its options
                rebuild, args = transform.__reduce__()
                return rebuild(*args)
            return transform
        from fastdecode.transforms import fuse

        return fuse(transform, exact=self.exact)

    def _report(self, fused: Any) -> None:
        """Warns once per stopping step and reason (fuse's own fusion report)."""
        report = fused.fusion_report()
        if report is not None:
            self._warn((type(report.step), report.reason), str(report))

    def _warn(self, key: Any, text: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(f"fastdecode stopped fusion: {text}. See the plan with dataset.explain().",
                      RuntimeWarning, stacklevel=5)

    def explain(self, transform: Any) -> str:
        """The plan for ``transform``, as text."""
        if transform is None:
            return "no transform: fastdecode decodes each file to the PIL image ImageFolder gives"
        if not HAVE_TORCHVISION:
            return ("torchvision is not importable: each file is decoded to a PIL image and the "
                    "transform runs on it unfused")
        fused = self.get(transform)
        explain = getattr(fused, "explain", None)
        return explain() if callable(explain) else repr(fused)
