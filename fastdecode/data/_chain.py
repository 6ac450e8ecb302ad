"""A dataset's transform, fused, and kept in step with the chain it came from.

:class:`LiveFused` holds the :class:`~fastdecode.transforms.FusedTransform`
of a dataset's ``transform`` and a fingerprint of the chain's parameters; at
every item the fingerprint is taken again and a change (an attribute such as
``rrc.size = 160``, ``Compose.transforms.append(...)``, a reassignment) re-fuses
before that item, in whichever process runs it. When the plan fuses less than
the chain's leading geometric run, or nothing, it warns once (RuntimeWarning
naming the transform that stopped fusion and why).

A FusedTransform given as the transform is used as such; when its source chain
changes it is rebuilt with its own options (exact, region, dct_margin).
"""

from __future__ import annotations

import enum
import warnings
from typing import Any, Optional

from fastdecode.data._base import HAVE_TORCHVISION

__all__ = ["LiveFused", "fingerprint"]

# Values compared by value in a fingerprint; anything else by identity (a
# nested transform object is fingerprinted as a step of its own by flatten).
_ATOMS = (int, float, str, bytes, bool, type(None), enum.Enum)
_GEOMETRIC = {"RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip"}


def _freeze(value: Any) -> Any:
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    version = getattr(value, "_version", None)  # a tensor: identity and in-place edits
    return (id(value), version) if isinstance(version, int) else id(value)


def _steps(transform: Any) -> list:
    if not HAVE_TORCHVISION:
        return [transform]
    from fastdecode.transforms.kinds import flatten

    return flatten(transform)


def fingerprint(transform: Any) -> tuple:
    """What a chain's result depends on: each step's identity, type and public
    attributes (lists and tuples by value, other objects by identity)."""
    parts: list = [id(transform)]
    for step in _steps(transform):
        state = getattr(step, "__dict__", None) or {}
        parts.append((id(step), type(step),
                      tuple((k, _freeze(v)) for k, v in state.items() if k[0] != "_")))
    return tuple(parts)


def _fused_type() -> Optional[type]:
    if not HAVE_TORCHVISION:
        return None
    from fastdecode.transforms import FusedTransform

    return FusedTransform


def _stop(fused: Any) -> Optional[tuple[Any, str]]:
    """(step, why) when the plan fuses less than the leading geometric run, or
    nothing at all; None when the whole leading run joined the decode."""
    plan = fused.plan
    if not plan["trailing"]:
        return None
    first = plan["trailing"][0]
    if not plan["geometric"] and not plan["tensor"]:
        return first, ("not a transform fastdecode fuses (RandomResizedCrop, Resize, CenterCrop, "
                       "RandomHorizontalFlip, then ToTensor/PILToTensor/ToImage with Normalize/"
                       "ToDtype/ConvertImageDtype); the image is decoded in full and the whole "
                       "chain runs unfused")
    if type(first).__name__ in _GEOMETRIC:
        return first, ("its parameters cannot be fused; the decode stops before it and it and "
                       "everything after it run unfused")
    return None


class LiveFused:
    """The fused plan of one dataset's transform (rebuilt per process: it is
    not pickled, only the set of warnings already given is)."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.warned: set = set()
        self._key: Optional[tuple] = None
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
            self._warn("transform", "torchvision is not importable, so nothing is fused: the "
                       "file is decoded in full to a PIL image and the transform runs on it")
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
        stop = _stop(fused)
        if stop is None:
            return
        step, why = stop
        name = type(step).__name__
        if name in ("function", "builtin_function_or_method", "method"):
            name = getattr(step, "__qualname__", name)
        self._warn(name, why)

    def _warn(self, name: str, why: str) -> None:
        if (name, why) in self.warned:
            return
        self.warned.add((name, why))
        warnings.warn(
            f"fastdecode: {name} stopped fusion: {why}. See the plan with dataset.explain() "
            f"(or repr(fastdecode.fuse(transform))).", RuntimeWarning, stacklevel=5)

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
