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
dct_margin). :class:`FusedChain` is the fast datasets' side of it: the
``transform`` property, the limits, ``explain``, and the batch shape and
per-pixel table the plan fixes. Decision record: docs/decisions/datasets.md
("Exact on request, the plan follows the chain, no silent fallbacks").
"""

# No `from __future__ import annotations`: inspect.signature shows the public
# methods' annotations as objects.
import warnings
from typing import Any, Callable, Optional

import torch

from fastdecode.datasets._base import HAVE_TORCHVISION
from fastdecode.datasets._reading import SampleReads

__all__ = ["FusedChain", "LiveFused"]


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


class FusedChain(SampleReads):
    """A fast dataset's side of its transform: the ``transform`` property
    (followed live), the decode limits, :meth:`explain`, and the batch shape
    and per-pixel table the fused plan fixes."""

    _live: LiveFused

    @property
    def transform(self) -> Optional[Callable]:
        """The sample transform chain (None: the decoded PIL image). Followed
        live: a chain set here (or changed in place) is fused again and used
        from the next item on; with the fast loader, setting it fuses it at
        once, so a chain that cannot be fused warns once, here."""
        return self.__dict__.get("_transform")

    @transform.setter
    def transform(self, value: Optional[Callable]) -> None:
        self.__dict__["_transform"] = value
        if self._fast_loader():
            self._live.get(value)  # fuse now, here: a bad chain warns once, in this process

    @property
    def exact(self) -> bool:
        """The constructor's ``exact``: True when decodes are bit-identical
        to ImageFolder's (no reduced DCT scale)."""
        return self._live.exact

    @property
    def max_pixels(self) -> Optional[int]:
        """The constructor's ``max_pixels``: the most pixels a decode of the
        dataset accepts (None: no limit)."""
        return self._live.limits["max_pixels"]

    @property
    def max_work_per_byte(self) -> Optional[int]:
        """The constructor's ``max_work_per_byte``: the most decoding work
        per byte of file a decode of the dataset accepts (None: no limit)."""
        return self._live.limits["max_work_per_byte"]

    def explain(self) -> str:
        """How each item is loaded: the fused plan of ``transform`` (what joins
        the decode, what runs unfused), as text.

        Returns
        -------
        str
            The plan, and once samples were decoded in this process, a line
            counting the decodes that took the native and the Pillow path
            (:meth:`decode_stats`); for a custom ``loader``, a line saying it
            is called as torchvision calls it, nothing fused.
        """
        if not self._fast_loader():
            return f"custom loader {self.loader!r}: called as torchvision calls it, nothing fused"
        text = self._live.explain(self.transform)
        paths = self._decode_paths().summary()  # the slow path, visible (issue 53)
        return text if paths is None else f"{text}\n{paths}"

    def _batch_fused(self) -> Any:
        """The fused transform when batches can be decoded in place."""
        if not self._fast_loader():
            return None
        fused = self._live.get(self.transform)
        return fused if fused is not None and fused.output_shape is not None else None

    def fixed_sample_shape(self) -> Optional[tuple[int, int, int]]:
        """(C, H, W) of the uint8 geometric result when every sample has it
        (the leading transforms fix the size), else None.

        Returns
        -------
        tuple of int or None
            The shape every sample's pixels have before the chain's tensor
            step (a fused RandomErasing included: it erases boxes of the
            result, in place); None with a custom ``loader`` or a chain whose
            output size varies. FastLoader uses it to size its batch rings.
        """
        fused = self._batch_fused()
        return None if fused is None else tuple(fused.output_shape)

    def pixel_table(self) -> Optional[torch.Tensor]:
        """The per-channel table (C, 256) that turns the uint8 result into
        the chain's float result (ToTensor, Normalize, ToDtype...), or None
        when the chain's result is the uint8 pixels themselves. Lets a loader
        defer that step to the GPU.

        Returns
        -------
        torch.Tensor or None
            The (C, 256) table, entry ``[c, v]`` the result for value ``v``
            of channel ``c``; None also when :meth:`fixed_sample_shape` is
            None, and for a chain with a fused RandomErasing (its result is
            not the table's alone).
        """
        fused = self._batch_fused()
        if fused is None or fused.erasing or fused.tensor_table is None:
            return None
        return torch.from_numpy(fused.tensor_table)

    def _ring_table(self) -> Optional[torch.Tensor]:
        """:meth:`pixel_table`, also for a chain with a fused RandomErasing,
        whose boxes a ring that applies the table elsewhere then writes after
        it (:meth:`_slot_erases`); FastLoader's rings read it
        (loader/_protocol.py)."""
        fused = self._batch_fused()
        if fused is None or fused.tensor_table is None:
            return None
        return torch.from_numpy(fused.tensor_table)

    def _slot_erases(self, pixels: Any) -> Optional[list]:
        """The erasing boxes drawn for each slot of the uint8 (N, C, H, W)
        ``pixels`` that :meth:`decode_batch_into` just filled, taken out, their
        values in the result's dtype (None: the chain erases nothing)."""
        fused = self._batch_fused()
        if fused is None or not fused.erasing:
            return None
        arr = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        return fused._erased.take(arr, fused.result_dtype)

