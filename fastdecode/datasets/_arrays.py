"""torchvision's array datasets (CIFAR, MNIST and its kin, SVHN, STL10) with the fused path:
the same classes (subclasses), their items fused, their batches decoded in place.

One mechanism, :class:`ArrayDataset` (``fastdecode.datasets.ArrayDataset``): a
subclass of torchvision's class whose ``_pixels(i)`` gives the (H, W[, C])
uint8 pixels and ``_target(i)`` the target exactly as torchvision's
``__getitem__`` computes them (a new array dataset costs those two lines). The
constructor, attributes, splits, targets, ``download=`` and ``isinstance`` are
torchvision's; ``exact=`` is fuse's. Each item runs
:func:`~fastdecode.transforms.fuse` of ``transform`` on the pixels (the
chain's result on torchvision's PIL image, one channel for gray datasets as
torchvision gives); a batch (DataLoader's ``__getitems__``, FastLoader's rings
through ``decode_batch_into``) is rendered into one uint8 batch and finished
in one pass, as the file datasets' batch path does (``datasets/_batch.py``).
Decision record: docs/decisions/datasets.md ("torchvision's built-in
datasets").
"""

# No `from __future__ import annotations`: inspect.signature shows the
# constructors' annotations as objects.
import copy
import inspect
from typing import Any, NamedTuple, Optional

import numpy as np
import torch
from torchvision import datasets as tv

from fastdecode._system import settle_in_worker
from fastdecode.api import check_limits
from fastdecode.batching._buffers import BatchBuffers
from fastdecode.batching._seeding import row_seed, row_seeds, seeding_of
from fastdecode.datasets._chain import FusedChain, LiveFused
from fastdecode.datasets._planned import SPAN, kept_rngs, seed_rngs

__all__ = ["CIFAR10", "CIFAR100", "EMNIST", "KMNIST", "MNIST", "QMNIST", "STL10", "SVHN",
           "ArrayDataset", "FashionMNIST", "torchvision_signature"]


def torchvision_signature(cls: type, own: type, ours_doc: str) -> None:
    """Gives ``cls`` its constructor's signature and Parameters: its
    torchvision base's (documented as that class's), then the keyword-only
    parameters of ``own`` (fastdecode's, documented by ``ours_doc``)."""
    base = next(c for c in cls.__mro__ if c.__module__.startswith("torchvision."))
    theirs = list(inspect.signature(base).parameters.values())
    ours = [p for p in inspect.signature(own).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY]
    kwargs = [p for p in theirs if p.kind is inspect.Parameter.VAR_KEYWORD]
    theirs = [p for p in theirs if p.kind is not inspect.Parameter.VAR_KEYWORD]
    cls.__signature__ = inspect.Signature(theirs + ours + kwargs)  # type: ignore[attr-defined]

    def __init__(self: Any, *args: Any, **kw: Any) -> None:  # the class's own: its doc is cls's
        own.__init__(self, *args, **kw)  # type: ignore[misc]

    cls.__init__ = __init__  # type: ignore[misc]
    stars: dict[Any, str] = {inspect.Parameter.VAR_POSITIONAL: "*",
                             inspect.Parameter.VAR_KEYWORD: "**"}
    names = ", ".join(stars.get(p.kind, "") + p.name for p in theirs + kwargs)
    head = inspect.cleandoc(cls.__doc__ or f"torchvision's ``{base.__name__}`` on the fused path.")
    cls.__doc__ = (f"{head}\n\nParameters\n----------\n{names}\n    As for torchvision's "
                   f"``{base.__name__}``.\n{inspect.cleandoc(ours_doc)}\n\nRaises\n------\n"
                   f"RuntimeError, ValueError\n    What torchvision's constructor raises (a "
                   f"missing or corrupt dataset without ``download=True``, a bad split).\n")


class _Plan(NamedTuple):
    """A batch's draws (:meth:`ArrayDataset._plan_batch`): per slot its
    source pixels, the draw, its pixels when rendered already, its target."""

    fused: Any
    slots: list[tuple[Any, Any, Any, Any]]


class ArrayDataset(FusedChain):
    """The base of a torchvision array dataset on the fused path: subclass it
    to swap a dataset fastdecode does not list (the module doc).

    A subclass puts this class first and torchvision's class second
    (``class USPS(ArrayDataset, torchvision.datasets.USPS)``) and defines two
    methods, with torchvision's ``__getitem__`` as their specification:
    ``_pixels(index)``, the uint8 (H, W) or (H, W, C) numpy array torchvision
    makes its PIL image of, and ``_target(index)``, the target it returns
    before ``target_transform``. Everything else (constructor, attributes,
    ``download=``, length) stays torchvision's; the constructor's signature
    and docstring become torchvision's plus ``exact``. Items run the chain
    fused on the pixels, batches are rendered in place
    (:meth:`decode_batch_into`, DataLoader's ``__getitems__``, FastLoader).

    Parameters
    ----------
    *args, **kwargs
        torchvision's constructor's arguments (root, train or split,
        transform, target_transform, download...).
    exact : bool, default False
        Bit-identical to torchvision (see :func:`~fastdecode.transforms.fuse`).

    Attributes
    ----------
    channels : int
        3, or 1 for a dataset torchvision gives as L images (MNIST): a
        subclass sets it, the gray plan keeps one channel.

    Raises
    ------
    RuntimeError, ValueError
        What torchvision's constructor raises (a missing or corrupt dataset
        without ``download=True``, a bad split).
    """

    channels = 3
    data: Any  # torchvision's class sets them
    target_transform: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if any(c.__module__.startswith("torchvision.") for c in cls.__mro__):
            torchvision_signature(cls, ArrayDataset, """
                exact : bool, default False
                    Bit-identical to torchvision (see :func:`~fastdecode.transforms.fuse`).
                """)

    def __init__(self, *args: Any, exact: bool = False, **kwargs: Any) -> None:
        self._live = LiveFused(bool(exact), check_limits(None, None))
        super().__init__(*args, **kwargs)  # torchvision's constructor, next in the MRO

    # -- what a dataset defines ------------------------------------------------------

    def _pixels(self, index: int) -> np.ndarray:  # pragma: no cover - every subclass has it
        """The uint8 (H, W) or (H, W, C) pixels torchvision makes its PIL image of."""
        raise NotImplementedError

    def _target(self, index: int) -> Any:  # pragma: no cover - every subclass has it
        """The target torchvision's ``__getitem__`` returns, before target_transform."""
        raise NotImplementedError

    # -- items -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        settle_in_worker()
        index = range(len(self))[index]
        pixels, target = self._pixels(index), self._target(index)
        fused = self._live.get(self.transform)
        if fused is None:  # no transform: torchvision's PIL image
            from fastdecode.transforms.render import to_pil

            sample: Any = to_pil(pixels[:, :, None] if pixels.ndim == 2 else pixels)
        else:
            sample = fused(pixels)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    # -- batches ---------------------------------------------------------------------

    def _batch_fused(self) -> Any:
        """The plan batches are rendered with (this dataset's channel count),
        or None: each item on its own. Every image of an array dataset has
        one size, so a chain whose output size follows from the input's
        (``ToTensor()`` alone, ``Resize(64)``...) has a fixed shape here too:
        its plan is copied with that ``output_shape`` (cached per plan)."""
        fused = self._live.get(self.transform)
        if fused is None:
            return None
        if fused.output_shape is None:
            fused = self._sized(fused)
        if fused is not None and self.channels != 3:
            from fastdecode.transforms.render import decoded_plan

            fused = decoded_plan(fused, np.empty((1, 1, self.channels), np.uint8))
        return fused if fused is not None and fused.output_shape is not None else None

    def _sized(self, fused: Any) -> Any:
        """``fused`` with the output shape every image of this dataset gets
        (None when the chain has no fused tensor step, steps after it,
        tensor-stage geometry, or ends in FiveCrop/TenCrop's tuple)."""
        cached = self.__dict__.get("_sized_plan")
        if cached is not None and cached[0] is fused:
            return cached[1]
        sized = None
        if (len(self) and fused.tail is not None and not fused.tail.numpy and not fused.trailing
                and not fused.tensor_stage and not fused.crops):  # (crops: a tuple an item)
            from fastdecode.transforms.geometry import ResizeOp, resized_output_size

            size: Any = tuple(self._pixels(0).shape[:2])
            for op in fused.geo_ops:
                after = op.fixed_size(size)
                if after is None and isinstance(op, ResizeOp):
                    try:
                        after = resized_output_size(size[0], size[1], op.size, op.max_size)
                    except (ValueError, TypeError, ZeroDivisionError):
                        after = None  # torchvision raises: items on their own say so
                size = after
                if size is None or min(size) <= 0:
                    break
            if size is not None and min(size) > 0:
                sized = copy.copy(fused)  # (re-fused from the source: a plan of its own)
                sized.output_shape = (3, int(size[0]), int(size[1]))
        self.__dict__["_sized_plan"] = (fused, sized)
        return sized

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: the pixels rendered into one uint8
        batch, the chain's tensor step run over it, the samples views of it
        (``datasets/_batch.py``); each item on its own when the chain has no
        fixed output shape."""
        settle_in_worker()
        fused = self._batch_fused()
        if fused is None:
            return [self[i] for i in indices]
        shape = (len(indices), *fused.output_shape)
        buffers = self._batch_buffers()
        if fused.tensor_table is None:
            pixels = buffers.get("batch", shape, torch.uint8)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels)
        else:
            pixels = buffers.get("pixels", shape, torch.uint8, leaves=False)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels, out=buffers.get("batch", shape, fused.result_dtype))
        return list(zip(buffers.rows(batch), targets))

    def decode_batch_into(self, indices: list[int], pixels: Any) -> list[Any]:
        """Renders samples ``indices`` into the uint8 (N, C, H, W) ``pixels``
        (tensor or array), slot by slot, and returns their targets.

        Parameters
        ----------
        indices : list of int
            The samples, one per slot (negative indices count from the end).
        pixels : torch.Tensor or numpy.ndarray
            uint8, of shape ``(len(indices), *fixed_sample_shape())``.

        Returns
        -------
        list
            The targets, one per slot, ``target_transform`` applied.

        Raises
        ------
        TypeError
            The chain has no fixed output size (:meth:`fixed_sample_shape`
            is None).
        """
        fused = self._batch_fused()
        if fused is None:
            raise TypeError("decode_batch_into needs a transform chain with a fixed output "
                            "size (see fixed_sample_shape)")
        slots = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        seeded = seeding_of(indices)  # FastLoader(resumable=True): each slot seeded by position
        targets = []
        n = len(self)
        for slot, index in enumerate(indices):
            index = range(n)[index]
            if seeded is None:
                fused.decode_into(self._pixels(index), slots[slot])
            else:  # the draws of FastImageFolder's planned slot (datasets/_planned.py)
                with kept_rngs():
                    seed_rngs(row_seed(seeded[0], seeded[1][slot] * SPAN))
                    fused.decode_into(self._pixels(index), slots[slot])
            target = self._target(index)
            targets.append(self.target_transform(target) if self.target_transform else target)
        return targets

    # -- FastLoader(threads=N): draws here, renders in the pool ------------------------

    def _plan_batch(self, indices: list[int], seed: int,
                    keys: Optional[list[int]] = None) -> Optional["_Plan"]:
        """FastLoader(threads=N)'s split (``loader/_protocol.py``'s
        PlannedDataset): each slot's draws (and its target) made here, in the
        iterating thread, under the slot's seed ``row_seed(seed, key * SPAN)``
        (its position in the epoch, else its slot: FastImageFolder's planned
        slot's, so the batch is the one ``decode_batch_into`` gives under the
        same seeding); the global RNGs kept as they were. None (items whole
        in the pool) when the chain has no fixed output shape. A slot whose
        chain stops fusing (steps after its render may draw) is rendered here."""
        fused = self._batch_fused()
        if fused is None:
            return None
        from fastdecode.transforms.render import as_source

        n = len(self)
        slots = []
        seeds = row_seeds(seed, [(k if keys is None else keys[k]) * SPAN
                                 for k in range(len(indices))])  # row_seed's, at once
        with kept_rngs():
            for k, i in enumerate(indices):
                index = range(n)[i]
                seed_rngs(int(seeds[k]))
                source = as_source(self._pixels(index))
                draw = fused._draw(source)
                done = None
                if fused._draws_after_render(draw):  # finish it here, drawing in order
                    done = np.empty(fused.output_shape, np.uint8)
                    fused._fill_unfused(draw, fused._render_into(source, draw, done), done)
                target = self._target(index)
                if self.target_transform is not None:
                    target = self.target_transform(target)
                slots.append((source, draw, done, target))
        return _Plan(fused, slots)

    def _render_plan(self, plan: "_Plan") -> list[tuple[Any, Any]]:
        """The planned batch rendered in this (pool) thread, nothing drawn:
        each slot into this thread's uint8 batch buffer, then the chain's
        tensor step over the batch (the native resampler releases the GIL)."""
        fused = plan.fused
        shape = (len(plan.slots), *fused.output_shape)
        buffers = self._batch_buffers()
        if fused.tensor_table is None:
            pixels = buffers.get("batch", shape, torch.uint8)
        else:
            pixels = buffers.get("pixels", shape, torch.uint8, leaves=False)
        out = pixels.numpy()
        for k, (source, draw, done, _) in enumerate(plan.slots):
            if done is not None:
                out[k] = done
            else:
                fused._render_into(source, draw, out[k])
        if fused.tensor_table is None:
            batch = fused.finish(pixels)
        else:
            batch = fused.finish(pixels, out=buffers.get("batch", shape, fused.result_dtype))
        return list(zip(buffers.rows(batch), [s[3] for s in plan.slots]))

    def _finish_plan(self, plan: "_Plan") -> list[tuple[Any, Any]]:
        """Never left work (:meth:`_render_plan` renders every slot)."""
        return self._render_plan(plan)

    def _read_ahead(self, indices: Any) -> None:
        """Nothing to read ahead: the pixels are in memory (FastLoader calls it)."""

    def _batch_buffers(self) -> BatchBuffers:
        buffers = self.__dict__.get("_buffers")
        if buffers is None:
            buffers = self.__dict__.setdefault("_buffers", BatchBuffers())
        return buffers

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_buffers", None)  # per-thread buffers stay with their threads
        return state


def _hwc(chw: np.ndarray) -> np.ndarray:
    return np.transpose(chw, (1, 2, 0))


class CIFAR10(ArrayDataset, tv.CIFAR10):
    """torchvision's ``CIFAR10`` on the fused path (``exact=``: as for
    :func:`~fastdecode.transforms.fuse`); everything else is torchvision's."""

    def _pixels(self, index: int) -> np.ndarray:
        return self.data[index]

    def _target(self, index: int) -> Any:
        return self.targets[index]


class CIFAR100(CIFAR10, tv.CIFAR100):
    """torchvision's ``CIFAR100`` on the fused path (as :class:`CIFAR10`)."""


class MNIST(ArrayDataset, tv.MNIST):
    """torchvision's ``MNIST`` on the fused path: one channel, as
    torchvision's L images (as :class:`CIFAR10`)."""

    channels = 1

    def _pixels(self, index: int) -> np.ndarray:
        return self.data[index].numpy()

    def _target(self, index: int) -> Any:
        return int(self.targets[index])


class FashionMNIST(MNIST, tv.FashionMNIST):
    """torchvision's ``FashionMNIST`` on the fused path (as :class:`MNIST`)."""


class KMNIST(MNIST, tv.KMNIST):
    """torchvision's ``KMNIST`` on the fused path (as :class:`MNIST`)."""


class EMNIST(MNIST, tv.EMNIST):
    """torchvision's ``EMNIST`` on the fused path (as :class:`MNIST`)."""


class QMNIST(MNIST, tv.QMNIST):
    """torchvision's ``QMNIST`` on the fused path (as :class:`MNIST`; the
    target is the class, or the whole row with ``compat=False``)."""

    def _target(self, index: int) -> Any:
        target = self.targets[index]
        return int(target[0]) if self.compat else target


class SVHN(ArrayDataset, tv.SVHN):
    """torchvision's ``SVHN`` on the fused path (as :class:`CIFAR10`)."""

    def _pixels(self, index: int) -> np.ndarray:
        return _hwc(self.data[index])

    def _target(self, index: int) -> Any:
        return int(self.labels[index])


class STL10(ArrayDataset, tv.STL10):
    """torchvision's ``STL10`` on the fused path (as :class:`CIFAR10`; the
    unlabeled split's target is None, as torchvision's)."""

    def _pixels(self, index: int) -> np.ndarray:
        return _hwc(self.data[index])

    def _target(self, index: int) -> Any:
        return int(self.labels[index]) if self.labels is not None else None
