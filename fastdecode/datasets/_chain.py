"""A dataset's transform, fused, and kept in step with the chain it came from.

:class:`LiveFused` holds the :class:`~fastdecode.transforms.FusedTransform`
of a dataset's ``transform``; at every item it asks the plan whether its
chain is unchanged (``FusedTransform.refreshed()``: fuse's fingerprint of the
chain's parameters), so a change (an attribute such as ``rrc.size = 160``,
``Compose.transforms.append(...)``, ``ds.transform = ...``) re-fuses before
that item, in whichever process runs it. When the plan fuses less than
the chain's leading geometric run, or nothing, or a step after the fused
part costs the batch path, it warns once per dataset and stopping step
(RuntimeWarning with fuse's fusion report: the transform that stopped
fusion, why, and what it costs).

A FusedTransform given as the transform is used as such; when its source chain
changes, ``refreshed()`` rebuilds it with its own options (exact, region,
dct_margin).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

from fastdecode.datasets._base import HAVE_TORCHVISION

__all__ = ["LiveFused"]


def _fused_type() -> Optional[type]:
    if not HAVE_TORCHVISION:
        return None
    from fastdecode.transforms import FusedTransform

    return FusedTransform


class LiveFused:
    """The fused plan of one dataset's transform (rebuilt per process: it is
    not pickled, only the set of warnings already given is)."""

    def __init__(self, exact: bool, limits: Optional[dict] = None) -> None:
        self.exact = exact
        self.limits = dict(limits or {})  # max_pixels, max_work_per_byte of every decode
        self.warned: set = set()
        self._fused: Any = None
        self._source: Any = None

    def __getstate__(self) -> dict:
        return {"exact": self.exact, "limits": dict(self.limits), "warned": set(self.warned)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["exact"], state.get("limits"))  # type: ignore[misc]
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
        fused = self._fused
        if fused is None or self._source is not transform:
            fused = self._build(transform)
            self._source = transform
        else:
            fresh = fused.refreshed()
            if fresh is fused:
                return fused
            fused = fresh
        self._fused = fused
        self._report(fused)
        return fused

    def _build(self, transform: Any) -> Any:
        fused_type: Any = _fused_type()
        if isinstance(transform, fused_type):
            if self.exact and not transform.exact:
                raise ValueError("exact=True, but the FusedTransform given as the transform was "
                                 "built with exact=False: pass the chain itself, or "
                                 "fuse(chain, exact=True)")
            if self.limits and transform.renderer.limits != self.limits:
                raise ValueError(f"the dataset's decode limits {self.limits} differ from those "
                                 f"of the FusedTransform given as the transform "
                                 f"{transform.renderer.limits}: pass the chain itself, or the "
                                 f"same limits to both")
            return transform.refreshed()
        from fastdecode.transforms import fuse

        return fuse(transform, exact=self.exact, **self.limits)

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
