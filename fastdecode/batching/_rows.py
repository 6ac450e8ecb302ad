"""Encoded rows into one preallocated batch, with random draws seeded per row:
the decode core shared by the Ray Data and WebDataset integrations.

A row's draws depend only on (seed, its key), never on which process, task or
batch decodes it, so a dataset gives the same augmentations on any cluster
shape, and a retried task reproduces the rows it lost.

torch loads only where a draw needs it: a decoder unpickled with a
torch-free detached plan (``batching/_detached.py``) decodes seeded rows
without it, so a Ray read task never imports torch. Decision record:
docs/decisions/ray.md ("read_images is a Datasource", "A read task imports
no torch").
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from fastdecode.errors import FastDecodeError

__all__ = ["BatchDecoder"]

class BatchDecoder:
    """Decodes a list of encoded images into one (N, C, H, W) batch through a
    fused transform: each row straight into its slot of a uint8 batch, then
    the chain's tensor step (ToTensor, Normalize...) in one pass.

    The uint8 scratch is kept between calls when the tensor step consumes it;
    the returned batch is always fresh (it is handed on: to Ray's object
    store, to a training step).
    """

    def __init__(self, transform: Any, *, exact: bool = False) -> None:
        from fastdecode.batching._detached import DetachedPlan

        self.fused: Any = transform
        if not isinstance(transform, DetachedPlan):  # (what an unpickled decoder holds)
            from fastdecode.transforms import FusedTransform, fuse

            if not isinstance(transform, FusedTransform):
                self.fused = fuse(transform, exact=exact)
        if self.fused.output_shape is None or self.fused.tail is None:
            raise ValueError(
                "the transform must give every image the same shape and end in tensor steps "
                "only (e.g. RandomResizedCrop(224), ToTensor(), Normalize(...)); this one does "
                f"not: {self.fused.plan}"
            )
        self.shape = tuple(self.fused.output_shape)
        self.identity = self.fused.tail.identity
        self.dtype = _numpy_dtype(self.fused.tail.dtype)
        self._scratch: Optional[np.ndarray] = None
        self._sent: Any = None

    def __getstate__(self):
        # a fully fused chain travels without its torchvision source: a fresh Ray
        # worker then imports neither torchvision nor the chain's transforms
        if self._sent is None:
            from fastdecode.batching._detached import detach

            self._sent = detach(self.fused) or self.fused
        return {"fused": self._sent}

    def __setstate__(self, state):
        BatchDecoder.__init__(self, state["fused"])

    def _pixels(self, n: int) -> np.ndarray:
        if self.identity:  # the uint8 pixels are the result: fresh
            return np.empty((n, *self.shape), np.uint8)
        if self._scratch is None or self._scratch.shape[0] < n:
            self._scratch = np.empty((n, *self.shape), np.uint8)
        return self._scratch[:n]

    def decode(self, items: Sequence[Any], seeds: Optional[np.ndarray] = None,
               name: Optional[Callable[[int], str]] = None) -> np.ndarray:
        """The chain's result for ``items`` (encoded bytes-likes), stacked.

        seeds: one torch seed per row (see :func:`row_seeds`), or None to draw
          from torch's global RNG as it stands. The global RNG state is kept
          as it was either way when seeds are given.
        name: row -> what to call it in an error (a path, a key); a row that
          cannot be decoded raises its FastDecodeError type naming it.
        """
        n = len(items)
        pixels = self._pixels(n)
        if seeds is not None and getattr(self.fused, "torch_free", False):
            self._decode_seeded(items, seeds, name, pixels)
            return self._finish(pixels)
        import torch

        state = torch.get_rng_state() if seeds is not None else None
        generator = torch.default_generator
        try:
            for j in range(n):
                if seeds is not None:
                    generator.manual_seed(int(seeds[j]))
                try:
                    self.fused.decode_into(items[j], pixels[j])
                except FastDecodeError as exc:
                    raise _named(exc, name, j) from exc
        finally:
            if state is not None:
                torch.set_rng_state(state)
        return self._finish(pixels)

    def _decode_seeded(self, items: Sequence[Any], seeds: np.ndarray,
                       name: Optional[Callable[[int], str]], pixels: np.ndarray) -> None:
        for j in range(len(items)):
            try:
                self.fused.decode_seeded(items[j], pixels[j], int(seeds[j]))
            except FastDecodeError as exc:
                raise _named(exc, name, j) from exc

    def _finish(self, pixels: np.ndarray) -> np.ndarray:
        if self.identity:
            return pixels
        out = np.empty((len(pixels), *self.shape), self.dtype)
        self.fused.finish(pixels, out=out)
        return out


def _named(exc: FastDecodeError, name: Optional[Callable[[int], str]],
           row: int) -> FastDecodeError:
    """``exc`` again, of its type, naming row ``row`` (its path or key)."""
    return type(exc)(exc.reason, path=name(row) if name is not None else f"row {row}")


def _numpy_dtype(dtype: Any) -> np.dtype:
    """A tail's result dtype as numpy's (a detached plan's is numpy's already)."""
    if isinstance(dtype, np.dtype):
        return dtype
    import torch

    return np.dtype(torch.empty((), dtype=dtype).numpy().dtype)

