"""A FastDatasetFolder batch in three parts, for FastLoader(threads=N): the random
draws planned in the iterating thread, the decode rendered in a pool thread, the
steps that may draw completed back in the iterating thread.

Why: torch's, Python's and NumPy's global RNGs are process-wide, and the
training loop (dropout, its own augmentations) draws from them between
batches. So nothing that draws runs in a pool thread:

- :func:`plan` (iterating thread, sample order): reads each file, its header,
  and draws its parameters (``FusedTransform._draw``) under that sample's own
  seed: ``row_seed(batch_seed, slot * SPAN + attempt)``, where ``batch_seed``
  comes from the epoch's base seed (drawn from the loader's generator, as
  DataLoader seeds its workers) and the batch index. The three global states
  are saved before and restored after, so the consumer's streams are as if no
  loader ran. A sample whose later steps may draw keeps its RNG states as
  they were after its draws.
- render (pool thread): the native decode (GIL-free) and the tensor table;
  nothing draws. A fixed-shape batch with nothing to draw after its render
  is rendered into the dataset's batch buffers (:func:`into_buffers`,
  :func:`render_planned`, called by ``datasets/_batch.py``); any other
  into a batch of its own (:func:`render`).
- :func:`complete` (iterating thread), only when a sample needs it: a step
  that did not fuse (a stop, a trailing RandomErasing...) runs from its
  sample's saved RNG states; a sample that failed (its file, or any step of
  its own: a draw, the render, a transform, its target_transform) is
  replaced under ``on_error`` (drawn, then rendered, here), then the tensor
  table.

A sample's result depends only on (base seed, batch index, slot, attempt),
never on which thread rendered it or when. These functions call only the
steps below the batch path (``OneSample`` and its bases, ``storage/``,
``transforms/``), never back into it. Decision record:
docs/decisions/loaders.md ("threads=N is reproducible").
"""

from __future__ import annotations

import os
import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np
import torch

from fastdecode.batching._seeding import row_seed
from fastdecode.datasets._loading import _naming
from fastdecode.datasets._sample import OneSample

__all__ = ["Plan", "RenderFailed", "complete", "into_buffers", "plan", "render", "render_into",
           "render_planned"]

# seeds per slot: one per attempt at it (on_error's MAX_SKIPS + 1 at most)
SPAN = 64


# ---------------------------------------------------------------------------
# the global RNGs


def rng_states() -> tuple:
    """torch's CPU generator, Python's ``random`` (timm) and NumPy's global states."""
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def set_rng_states(states: tuple) -> None:
    torch.set_rng_state(states[0])
    random.setstate(states[1])
    np.random.set_state(states[2])


def seed_rngs(seed: int) -> None:
    torch.default_generator.manual_seed(seed)  # CPU only: CUDA's stays the consumer's
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)


@contextmanager
def kept_rngs() -> Iterator[None]:
    """Inside, the global RNGs may be seeded and drawn from; after, they are
    what they were."""
    saved = rng_states()
    try:
        yield
    finally:
        set_rng_states(saved)


# ---------------------------------------------------------------------------
# the plan


@dataclass
class Slot:
    """One sample of a planned batch."""

    original: int  # the index asked for
    index: int  # the index loaded (a replacement after a failure)
    attempt: int
    path: str
    target: Any  # after target_transform
    data: bytes
    draw: Any  # the FusedTransform's _Draw; None: decoded whole, the transform unfused
    after: Optional[tuple]  # RNG states after the draws, when later steps may draw
    value: Any = None  # what render left for complete
    error: Optional[Exception] = None  # the render failed: replaced by complete


@dataclass
class Plan:
    """A batch's draws. ``batched``: one uint8 batch of the fixed output shape,
    then the tensor table (``fused.output_shape`` is not None)."""

    seed: int
    fused: Any
    batched: bool
    slots: list[Slot]
    pixels: Optional[torch.Tensor] = None  # the uint8 batch complete finishes
    keys: Optional[list[int]] = None  # slot k's seed key (its position in the epoch); None: k


def plan(ds: OneSample, indices: list[int], seed: int,
         keys: Optional[list[int]] = None) -> Optional[Plan]:
    """The draws of batch ``indices`` under ``seed`` (slot ``k`` keyed by
    ``keys[k]``, its position in the epoch, or by ``k``); None when the
    dataset's items cannot be split (a custom loader: it and the transform
    are one call)."""
    if not ds._fast_loader():
        return None
    fused = ds._batch_fused()
    batched = fused is not None
    if fused is None:
        fused = ds._live.get(ds.transform)
    n = len(ds)
    with kept_rngs(), ds._prefetch(indices):
        slots = [_draw_slot(ds, fused, seed, k if keys is None else keys[k], range(n)[i], 0)
                 for k, i in enumerate(indices)]
    return Plan(seed, fused, batched, slots, keys=keys)


def _draw_slot(ds: OneSample, fused: Any, seed: int, k: int, original: int, attempt: int) -> Slot:
    """Slot ``k``'s draws from ``attempt`` on: a file that cannot be read or
    whose header is bad, a draw or a target_transform that raises, is
    replaced under ``on_error``, as __getitem__ does."""
    while True:
        index = original if attempt == 0 else ds._replacement(original, attempt - 1)
        seed_rngs(row_seed(seed, k * SPAN + attempt))
        path, target = ds.samples[index]
        path = os.fspath(path)
        try:
            with _naming(path, index, ds._decode_paths()):
                data = ds._read(path, index)
                draw = None if fused is None else fused._draw(data)
            later = ds.transform is not None if fused is None else fused._draws_after_render(draw)
            after = rng_states() if later else None
            if ds.target_transform is not None:
                target = ds.target_transform(target)
        except Exception as exc:  # noqa: BLE001 - any failure of a sample is on_error's
            ds._skip_or_raise(exc, attempt, index)
            attempt += 1
            continue
        return Slot(original, index, attempt, path, target, data, draw, after)


# ---------------------------------------------------------------------------
# rendering, in any thread


class RenderFailed(Exception):
    """A planned slot's file failed to render into the batch buffers."""


def into_buffers(p: Plan) -> bool:
    """Whether ``p`` renders into the dataset's batch buffers: one batch of
    the fixed output shape, and no sample with a step that may draw after
    its render."""
    return p.batched and all(s.after is None for s in p.slots)


def render_planned(ds: OneSample, p: Plan, slots: np.ndarray) -> list[Any]:
    """The plan rendered into the uint8 ``slots``, slot by slot: the targets
    (:class:`RenderFailed` at a slot that fails)."""
    for k, s in enumerate(p.slots):
        _render_slot(ds, p, s, slots[k])
        if s.error is not None:
            raise RenderFailed
    return [s.target for s in p.slots]


def _render_slot(ds: OneSample, p: Plan, s: Slot, out: Optional[np.ndarray]) -> None:
    try:
        with _naming(s.path, s.index, ds._decode_paths()):
            if p.fused is None:
                s.value = ds._decode_whole(s.data)
            else:
                s.value = p.fused._render_into(s.data, s.draw, out)
        s.error = None
    except Exception as exc:  # noqa: BLE001 - replaced (or raised) by complete, in order
        s.error = exc


def render(ds: OneSample, p: Plan) -> Optional[list]:
    """Pool thread: the batch's samples rendered into a batch of its own, or
    None when :func:`complete` has work left (a step that may draw, a file
    that failed)."""
    if p.batched:
        p.pixels = torch.empty((len(p.slots), *p.fused.output_shape), dtype=torch.uint8)
        slots = p.pixels.numpy()
        for k, s in enumerate(p.slots):
            _render_slot(ds, p, s, slots[k])
        return None
    for s in p.slots:
        _render_slot(ds, p, s, None)
    if any(s.after is not None or s.error is not None for s in p.slots):
        return None
    return [(s.value, s.target) for s in p.slots]


def render_into(ds: OneSample, p: Plan, slots: np.ndarray) -> list[Any]:
    """``decode_batch_into`` for a plan made in this thread: each slot
    rendered into ``slots``, any step that may draw or failed file completed
    there; the targets."""
    for k, s in enumerate(p.slots):
        _render_slot(ds, p, s, slots[k])
    if any(s.after is not None or s.error is not None for s in p.slots):
        p.pixels = torch.from_numpy(slots)
        complete(ds, p)  # fills the slots (its tensor step's result is not needed)
    return [s.target for s in p.slots]


# ---------------------------------------------------------------------------
# completing, in the iterating thread


def complete(ds: OneSample, p: Plan) -> list:
    """The batch's samples, after :func:`render` returned None."""
    fused = p.fused
    out = None if p.pixels is None else p.pixels.numpy()
    with kept_rngs():
        for k in range(len(p.slots)):
            while True:
                s = p.slots[k]
                while s.error is not None:
                    ds._skip_or_raise(s.error, s.attempt, s.index)
                    key = k if p.keys is None else p.keys[k]
                    s = p.slots[k] = _draw_slot(ds, fused, p.seed, key, s.original, s.attempt + 1)
                    _render_slot(ds, p, s, None if out is None else out[k])
                if s.after is None:
                    break
                set_rng_states(s.after)
                try:
                    _complete_slot(ds, fused, s, None if out is None else out[k])
                    break
                except Exception as exc:  # noqa: BLE001 - a step of the sample's: on_error's
                    s.error = exc
    targets = [s.target for s in p.slots]
    if p.pixels is None:
        return [(s.value, s.target) for s in p.slots]
    if fused.tensor_table is None:
        batch = fused.finish(p.pixels)
    else:
        batch = fused.finish(p.pixels, out=torch.empty(p.pixels.shape, dtype=fused.result_dtype))
    return list(zip(batch.unbind(0), targets))


def _complete_slot(ds: OneSample, fused: Any, s: Slot, out: Optional[np.ndarray]) -> None:
    """The steps of slot ``s`` that may draw, under its RNG states (set)."""
    if fused is None:
        transform: Any = ds.transform  # not None: the draws after the render are its own
        s.value = transform(s.value)
    elif out is not None:
        fused._fill_unfused(s.draw, s.value, out)
    else:
        s.value = fused._complete(s.draw, s.value)
