"""One sample: read, decoded (fused, or whole for an unfused chain), its
target transformed, under the dataset's ``on_error`` policy.

:class:`OneSample` gives the fast datasets ``ds[i]`` (``__getitem__``) and the
per-sample steps the batch path calls (``datasets/_batch.py``,
``datasets/_planned.py``): a slot of a batch decoded in place, the whole image
an unfused chain takes, and the policy. Under ``on_error='skip'``/``'warn'`` a
failed sample ``i`` is replaced, on its k-th try, by the sample at
``(i * 2654435761 + k * 40503 + 1) % len(dataset)`` (a function of ``i``
alone: the same in every worker, epoch and sampler order); ``skipped`` counts
the replacements, and the 17th failure is raised. Decision record:
docs/decisions/datasets.md ("Bad files").
"""

# No `from __future__ import annotations`: inspect.signature shows the public
# methods' annotations as objects.
import os
import warnings
from functools import partial
from typing import Any, Callable, Optional

from fastdecode._system import settle_in_worker
from fastdecode.api import decode_image
from fastdecode.datasets._chain import FusedChain
from fastdecode.datasets._loading import _naming, _to_pil

__all__ = ["AHEAD_BYTES", "MAX_SKIPS", "ON_ERROR", "OneSample"]

ON_ERROR = ("raise", "skip", "warn")
# Attempts at another index before 'skip'/'warn' give up (never a hang on a
# dataset that is mostly broken).
MAX_SKIPS = 16
# Encoded bytes a batch holds while its draws run ahead of its renders
# (OneSample._decode_slots): enough for the Python of ~50 ImageNet files' draws
# to run back to back, bounded for large files.
AHEAD_BYTES = 8 << 20


class OneSample(FusedChain):
    """A sample loaded under the error policy (the module doc)."""

    on_error: str
    skipped: int
    target_transform: Optional[Callable]

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        settle_in_worker()
        index = range(len(self))[index]  # negative indices, bounds, as a list
        return self._with_policy(index, self._item)

    def _item(self, index: int) -> tuple[Any, Any]:
        sample, target = self._load(index)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def _load(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        transform = self.transform
        if not self._fast_loader():
            sample = self.loader(path)
            return (transform(sample) if transform is not None else sample), target
        fused = self._live.get(transform)
        path = os.fspath(path)
        with _naming(path, index, self._decode_paths()):
            data = self._read(path, index)
            if fused is not None:
                return fused(data), target
            image = self._decode_whole(data)
        return (transform(image) if transform is not None else image), target

    def _decode_whole(self, data: Any) -> Any:
        """The whole image as the PIL RGB image an unfused transform takes,
        under the dataset's limits."""
        return _to_pil(decode_image(data, **self._live.limits))

    def _decode_slots(self, fused: Any, indices: list[int], slots: Any) -> list[Any]:
        """A batch's decode step (``datasets/_batch.py``): ``indices`` decoded
        into the uint8 ``slots``, each under the policy; the targets.

        Under ``on_error='raise'`` the draws run ahead of the renders, up to
        :data:`AHEAD_BYTES` of files at a time: each sample's file read, its
        header and draws (and its target_transform) in sample order, then
        the native renders, which draw nothing, so the RNG calls are the
        same, in the same order, as sample by sample. The draws' Python then
        runs back to back rather than after each decode has pushed it out of
        the CPU's caches (docs/decisions/augment.md, "The prefetcher
        row ..."). A sample whose unfused rest draws is finished at its
        turn. Under 'skip'/'warn' a failed render is replaced at its turn,
        so the samples go one by one."""
        if self.on_error != "raise":
            return [self._with_policy(range(len(self))[index],
                                      partial(self._decode_slot, fused, out=slots[slot]))
                    for slot, index in enumerate(indices)]
        counts = self._decode_paths()
        targets, later, held = [], [], 0
        for slot, index in enumerate(indices):
            i = range(len(self))[index]
            path, target = self.samples[i]
            path = os.fspath(path)
            with _naming(path, i, counts):
                data, out, draw, rendered = fused._drawn_into(self._read(path, i), slots[slot])
            if not rendered:
                later.append((path, i, data, out, draw))
                held += memoryview(data).nbytes
            targets.append(self.target_transform(target) if self.target_transform else target)
            if held >= AHEAD_BYTES or slot == len(indices) - 1:
                for path, i, data, out, draw in later:
                    with _naming(path, i, counts):
                        fused._render_into(data, draw, out)
                later, held = [], 0
        return targets

    def _decode_slot(self, fused: Any, i: int, out: Any) -> Any:
        """Sample ``i`` decoded into the slot ``out``: its target."""
        path, target = self.samples[i]
        path = os.fspath(path)
        with _naming(path, i, self._decode_paths()):
            fused.decode_into(self._read(path, i), out)
        return self.target_transform(target) if self.target_transform else target

    def _replacement(self, index: int, attempt: int) -> int:
        """Deterministic stand-in for a broken sample: same index, same
        replacement, in every worker and every epoch."""
        return (index * 2654435761 + attempt * 40503 + 1) % len(self)

    def _with_policy(self, index: int, load: Callable[[int], Any]) -> Any:
        """load(index), or for 'skip'/'warn' a replacement's."""
        current = index
        for attempt in range(MAX_SKIPS + 1):
            try:
                return load(current)
            except Exception as exc:  # noqa: BLE001 - any failure of a sample is on_error's
                self._skip_or_raise(exc, attempt, current)
                current = self._replacement(index, attempt)
        raise AssertionError("unreachable")

    def _skip_or_raise(self, exc: Exception, attempt: int, index: Optional[int] = None) -> None:
        """``exc`` (attempt ``attempt`` at a sample, ``index``, failed)
        raised, or for 'skip'/'warn' counted (and warned): the caller loads a
        replacement."""
        if self.on_error == "raise" or attempt >= MAX_SKIPS:
            raise exc
        self.skipped += 1
        if self.on_error != "warn":
            return
        if isinstance(exc, OSError) or index is None:  # names the file (an ImageFileError)
            message = f"skipping unreadable sample: {exc}"
        else:  # a loader's or a transform's exception: name the file here
            message = (f"skipping sample {index} ({os.fspath(self.samples[index][0])}): "
                       f"{type(exc).__name__}: {exc}")
        warnings.warn(message, RuntimeWarning, stacklevel=4)

