"""One batch's path, as a pipeline: list -> plan -> read -> decode -> finish ->
hand over, from ``__getitems__`` on (DataLoader's batched fetch, and
FastLoader's through its rings and its thread pool).

:class:`BatchPath` drives it; each step is a call into a module below, which
never calls back into this one (nor into a module the batch already left):

1. list: ``self.samples[i]`` (``storage/_samples.py``), the (path, target)
   of each index, read where the steps below need them;
2. plan: ``_chain.FusedChain._batch_fused`` (the fused transform: one uint8
   shape for the batch, or None: each item on its own,
   ``_sample.OneSample.__getitem__``); a seeded batch
   (``FastLoader(resumable=True)``, ``threads=N``) has its random draws made
   first, under per-sample seeds (``_planned.plan``, which reads each file and
   its header);
3. read: ``_reading.SampleReads._prefetch`` starts the batch's reads (local
   read-ahead, remote fetches), ``SampleReads._read`` takes each file's bytes;
4. decode: into this thread's batch buffers (``batching/_buffers.py``,
   ``BatchBuffers.get``), slot by slot: ``_sample.OneSample._decode_slots``
   (each slot under ``on_error``, ``FusedTransform.decode_into``), or a
   plan's ``_planned.render_planned`` (``FusedTransform._render_into``);
5. finish: ``FusedTransform.finish``, the chain's tensor step over the batch
   (a plan with steps that may draw: ``_planned.render`` into a batch of its
   own, then ``_planned.complete`` in the thread that planned it);
6. hand over: ``BatchBuffers.rows``, the samples as views of the batch, which
   ``collate`` (``batching/_buffers.py``) takes whole.

FastLoader's side of it is ``loader/_protocol.py``'s ``RingDataset``
(``decode_batch_into``) and ``PlannedDataset`` (``_plan_batch``,
``_render_plan``, ``_finish_plan``). Decision record:
docs/decisions/datasets.md ("Batches in place") and docs/decisions/loaders.md
("threads=N is reproducible").
"""

# No `from __future__ import annotations`: inspect.signature shows the public
# methods' annotations as objects.
from typing import Any, Optional

import torch

from fastdecode._system import settle_in_worker
from fastdecode.batching._buffers import BatchBuffers
from fastdecode.batching._seeding import seeding_of
from fastdecode.datasets import _planned
from fastdecode.datasets._sample import OneSample

__all__ = ["BatchPath"]


class BatchPath(OneSample):
    """A fast dataset's batches, decoded in place (the module doc)."""

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: one uint8 batch, each sample decoded
        straight into its slot, then the chain's tensor step in one pass over
        the batch. The samples are views of that batch, so the stock collate
        takes it whole, as :func:`fastdecode.collate` does: the samples are a
        ``torch.Tensor`` subclass (``BatchRow``; in a worker ``SlotView``) that
        torch's ``default_collate`` hands to fastdecode (batching/_buffers.py)."""
        settle_in_worker()
        seeded = seeding_of(indices)  # FastLoader(resumable=True): seeds by position
        if seeded is not None:
            planned = self._plan_batch(list(indices), *seeded)
            if planned is not None:
                samples = self._render_plan(planned)
                return self._finish_plan(planned) if samples is None else samples
        fused = self._batch_fused()
        if fused is None:
            return [self[i] for i in indices]
        return self._into_buffers(fused, indices, None)

    def _into_buffers(self, fused: Any, indices: list[int],
                      plan: Optional[_planned.Plan]) -> list[tuple[Any, Any]]:
        """Decode, finish, hand over: ``indices`` decoded (``plan``, when
        given, rendered) into this thread's batch buffers, the chain's tensor
        step run over the batch, the samples views of it."""
        shape = (len(indices), *fused.output_shape)
        buffers = self._batch_buffers()
        if fused.tensor_table is None:  # the uint8 pixels are the result
            pixels = buffers.get("batch", shape, torch.uint8)
            targets = self._decode_pixels(indices, pixels, plan)
            batch = fused.finish(pixels)
        else:  # the pixels are consumed at once, by the chain's tensor step
            pixels = buffers.get("pixels", shape, torch.uint8, leaves=False)
            targets = self._decode_pixels(indices, pixels, plan)
            batch = fused.finish(pixels, out=buffers.get("batch", shape, fused.result_dtype))
        return list(zip(buffers.rows(batch), targets))

    def _decode_pixels(self, indices: list[int], pixels: torch.Tensor,
                       plan: Optional[_planned.Plan]) -> list[Any]:
        """The uint8 batch ``pixels`` decoded (or ``plan`` rendered into it):
        the targets. A planned slot that fails raises ``RenderFailed``."""
        if plan is None:
            return self.decode_batch_into(indices, pixels)
        return _planned.render_planned(self, plan, pixels.numpy())

    def decode_batch_into(self, indices: list[int], pixels: Any) -> list[Any]:
        """Decodes samples ``indices`` into the uint8 (N, C, H, W) ``pixels``
        (tensor or array), slot by slot, and returns their targets.

        Parameters
        ----------
        indices : list of int
            The samples, one per slot (negative indices count from the end).
        pixels : torch.Tensor or numpy.ndarray
            uint8, of shape ``(len(indices),
            *fixed_sample_shape())`` (a CPU tensor is written through its
            numpy view); slot ``j`` receives sample ``indices[j]``.

        Returns
        -------
        list
            The targets, one per slot, ``target_transform`` applied. Under
            ``on_error='skip'``/``'warn'`` a failed slot holds its
            replacement's pixels and target.

        Raises
        ------
        TypeError
            The dataset has a custom ``loader`` or a chain without a fixed
            output size (:meth:`fixed_sample_shape` is None).
        ImageFileError
            A sample cannot be read or decoded (``on_error='raise'``, or 16
            failed replacements).
        """
        fused = self._batch_fused()
        if fused is None:
            raise TypeError("decode_batch_into needs the default loader and a transform chain "
                            "with a fixed output size (see fixed_sample_shape)")
        slots = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        seeded = seeding_of(indices)  # FastLoader(resumable=True): seeds by position
        if seeded is not None:
            planned = self._plan_batch(list(indices), *seeded)
            if planned is not None:
                return _planned.render_into(self, planned, slots)
        with self._prefetch(indices):
            return self._decode_slots(fused, indices, slots)

    def _plan_batch(self, indices: list[int], seed: int,
                    keys: Optional[list[int]] = None) -> Optional[_planned.Plan]:
        """The batch's random draws, under per-sample seeds from ``seed``
        (keyed by ``keys``, the samples' positions, or their slots), in the
        calling thread (None: a custom loader, nothing to split)."""
        return _planned.plan(self, indices, seed, keys)

    def _render_plan(self, plan: _planned.Plan) -> Optional[list[tuple[Any, Any]]]:
        """What __getitems__ returns, rendered from ``plan`` without drawing
        (any thread); None when :meth:`_finish_plan` has work left. A plan of
        one fixed-shape batch with nothing to draw after its render goes into
        this thread's batch buffers, as an unplanned batch does."""
        if _planned.into_buffers(plan) and self._batch_fused() is plan.fused:
            try:
                return self._into_buffers(plan.fused, [s.index for s in plan.slots], plan)
            except _planned.RenderFailed:
                pass  # rendered again, into a batch of its own (rare: a broken file)
        return _planned.render(self, plan)

    def _finish_plan(self, plan: _planned.Plan) -> list[tuple[Any, Any]]:
        """The rest of a rendered plan (the thread that planned it)."""
        return _planned.complete(self, plan)

    def _batch_buffers(self) -> BatchBuffers:
        buffers = self.__dict__.get("_buffers")
        if buffers is None:
            buffers = self.__dict__.setdefault("_buffers", BatchBuffers())
        return buffers

