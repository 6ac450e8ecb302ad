"""The tensor tail: a converter and the per-pixel steps after it as one table per channel, then erasing.

ToTensor / PILToTensor / v2.ToImage followed by Normalize / v2.ToDtype /
ConvertImageDtype / v2.ToPureTensor map each uint8 value of a channel to one
output value: a (C, 256) table, built by running the user's real transforms
on a 256-pixel ramp (the values and the result type are torchvision's own),
applied in one pass. A RandomErasing right after it (torchvision's v1 and
v2, timm's in its 'const', 'rand' and 'pixel' modes: :func:`erase_op`)
draws what its own call draws, from the same generators in the same order
(:meth:`EraseOp.draw`), and :func:`erase` writes its boxes into the result
in place, as torchvision's and timm's erase do. See
docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any, Optional

import numpy as np
import PIL.Image
import torch

from fastdecode import _native, _rng
from fastdecode.transforms.draws import log_ratio as log_ratio_of

__all__ = ["EraseOp", "ErasedSlots", "Erases", "TensorTail", "as_numpy", "draw_erases", "erase",
           "erase_op", "erase_run"]

# One image's erased boxes: (top, left, height, width, values), the values a
# tensor that broadcasts over the (C, height, width) box.
Erases = tuple[tuple[int, int, int, int, torch.Tensor], ...]


class TensorTail:
    """A converter and the per-pixel ops after it, as one table per channel.

    Raises (anything the steps raise, or TypeError) when the steps are not a
    per-pixel chain on a ramp; the caller then leaves them unfused.
    """

    def __init__(self, steps: list, channels: int = 3):
        from torchvision import tv_tensors  # here, not at import: see fastdecode.batching._detached

        self.steps = steps
        ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
        result: Any = (PIL.Image.fromarray(ramp, "RGB") if channels == 3  # 1: an L image
                       else PIL.Image.fromarray(np.ascontiguousarray(ramp[:, :, 0])))
        for step in steps:
            result = step(result)
        # a uint8 CHW numpy array (timm's ToNumpy): the pixels as they are
        self.numpy = (isinstance(result, np.ndarray) and result.dtype == np.uint8
                      and result.shape == (channels, 1, 256))
        if self.numpy:
            result = torch.from_numpy(np.ascontiguousarray(result))
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (channels, 1, 256):
            raise TypeError(f"not a per-pixel chain: {steps}")
        if type(result) not in (torch.Tensor, tv_tensors.Image):
            raise TypeError(f"unexpected result type {type(result).__name__}")
        self.wrap = type(result) is tv_tensors.Image
        self.dtype = result.dtype
        table = result.as_subclass(torch.Tensor)[:, 0, :].contiguous()
        self.identity = self.dtype == torch.uint8 and bool(
            (table == torch.arange(256, dtype=torch.uint8)).all()
        )
        self.table = table.numpy()  # (channels, 256)
        if self.numpy and not self.identity:
            raise TypeError(f"not a per-pixel chain: {steps}")

    def apply(self, chw: np.ndarray, out: Any = None) -> Any:
        """uint8 (..., C, H, W) array -> the chain's tensor (into ``out``)."""
        if self.numpy:  # no batch path (output_shape is None): never an ``out``
            return chw
        if self.identity:
            tensor = _copied_into(chw, out)
        elif self.dtype == torch.float32:
            into = None if out is None else as_numpy(out, np.float32, chw.shape)
            result = _native.lut_to_float(chw, self.table, into)
            tensor = out if isinstance(out, torch.Tensor) else torch.from_numpy(result)
        else:
            channels = np.arange(chw.shape[-3]).reshape((-1, 1, 1))
            tensor = _copied_into(self.table[channels, chw], out)
        if self.wrap:
            from torchvision import tv_tensors

            return tensor.as_subclass(tv_tensors.Image)
        return tensor

    def __repr__(self) -> str:
        from fastdecode.transforms.kinds import short_name

        return " + ".join(short_name(s) for s in self.steps)


def as_numpy(out: Any, dtype, shape) -> np.ndarray:
    """``out`` (array or CPU tensor) as a writable C-contiguous array of
    ``dtype`` and ``shape``; TypeError / ValueError naming what differs."""
    arr = out.numpy() if isinstance(out, torch.Tensor) else out
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"out must be a numpy array or a CPU tensor, got {type(out).__name__}")
    if arr.dtype != dtype or tuple(arr.shape) != tuple(shape):
        raise ValueError(
            f"out must have dtype {np.dtype(dtype).name} and shape {tuple(shape)}, "
            f"got {arr.dtype} {tuple(arr.shape)}"
        )
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise ValueError("out must be writable and C-contiguous")
    return arr


def _copied_into(values: np.ndarray, out: Any) -> Any:
    """``values`` as a tensor: itself without ``out``, else copied into ``out``
    (checked for dtype and shape) and ``out`` returned as a tensor."""
    if out is None:
        return torch.from_numpy(values)
    target = as_numpy(out, values.dtype, values.shape)
    np.copyto(target, values)
    return out if isinstance(out, torch.Tensor) else torch.from_numpy(target)


# -- RandomErasing after the table -------------------------------------------------


class EraseOp:
    """A RandomErasing fused after the table: its draws, made as its own call makes them."""

    def __init__(self, transform: Any):
        self.transform = transform

    def draw(self, channels: int, height: int, width: int,
             dtype: torch.dtype) -> Erases:  # pragma: no cover - every subclass defines it
        """The boxes this step erases on a (channels, height, width) result of
        ``dtype`` (none: it did not fire, or found no box), drawing from the
        generators its call draws from, in the same order."""
        raise NotImplementedError


class TorchvisionErase(EraseOp):
    """torchvision's RandomErasing, v1 (``forward`` and ``get_params``) or
    v2 (``forward`` and ``make_params``): ``torch.rand(1)`` against ``p``, then
    up to ten (area, log-ratio) uniform draws, the values (``normal_()`` for
    'random'), the top and left ``randint``."""

    def __init__(self, transform: Any, v2: bool, value: Optional[list]):
        super().__init__(transform)
        self.v2 = v2
        self.value = value  # None: 'random'

    def draw(self, channels: int, height: int, width: int, dtype: torch.dtype) -> Erases:
        t = self.transform
        if not _rng.below(t.p):  # v2: torch.rand(1) >= p; v1: not torch.rand(1) < p
            return ()
        log_ratio = t._log_ratio.tolist() if self.v2 else log_ratio_of(t.ratio)
        area = height * width
        for _ in range(10):
            erase_area = area * _rng.uniform(t.scale[0], t.scale[1])
            aspect_ratio = _rng.exp_of_uniform(log_ratio[0], log_ratio[1])
            h = int(round(math.sqrt(erase_area * aspect_ratio)))
            w = int(round(math.sqrt(erase_area / aspect_ratio)))
            if not (h < height and w < width):
                continue
            if self.value is None:
                v = torch.empty([channels, h, w], dtype=torch.float32).normal_()
            else:
                v = torch.tensor(self.value)[:, None, None]
            return ((_rng.randint(height - h + 1), _rng.randint(width - w + 1), h, w, v),)
        return ()  # v1 erases the image with itself, v2 leaves it: the same values


class TimmErase(EraseOp):
    """timm's RandomErasing on one image (``_erase``): Python's ``random`` for
    the probability, the count and each box, torch's generator for the
    values ('rand': one normal per channel, 'pixel': one per pixel, 'const':
    zeros), in the result's dtype."""

    def draw(self, channels: int, height: int, width: int, dtype: torch.dtype) -> Erases:
        t = self.transform
        if random.random() > t.probability:
            return ()
        area = height * width
        count = (t.min_count if t.min_count == t.max_count
                 else random.randint(t.min_count, t.max_count))
        boxes = []
        for _ in range(count):
            for _attempt in range(10):
                target_area = random.uniform(t.min_area, t.max_area) * area / count
                aspect_ratio = math.exp(random.uniform(*t.log_aspect_ratio))
                h = int(round(math.sqrt(target_area * aspect_ratio)))
                w = int(round(math.sqrt(target_area / aspect_ratio)))
                if w < width and h < height:
                    top = random.randint(0, height - h)
                    left = random.randint(0, width - w)
                    if t.per_pixel:
                        v = torch.empty((channels, h, w), dtype=dtype).normal_()
                    elif t.rand_color:
                        v = torch.empty((channels, 1, 1), dtype=dtype).normal_()
                    else:
                        v = torch.zeros((channels, 1, 1), dtype=dtype)
                    boxes.append((top, left, h, w, v))
                    break
        return tuple(boxes)


def erase_op(t: Any) -> Optional[EraseOp]:
    """The :class:`EraseOp` of a RandomErasing fuse runs after the table
    (exact types: torchvision's v1 and v2 with a value of one or three
    numbers or 'random', timm's on the CPU), or None."""
    from torchvision import transforms as T
    from torchvision.transforms import v2 as T2

    cls = type(t)
    if cls is T.RandomErasing:
        value = t.value
        if isinstance(value, str):
            return TorchvisionErase(t, False, None)
        if isinstance(value, (int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)) or len(value) not in (1, 3):
            return None
        return TorchvisionErase(t, False, [float(v) for v in value])
    if cls is T2.RandomErasing:
        if t.value is not None and len(t.value) not in (1, 3):
            return None
        return TorchvisionErase(t, True, None if t.value is None else list(t.value))
    if cls.__module__ == "timm.data.random_erasing" and cls.__name__ == "RandomErasing":
        if torch.device(t.device).type != "cpu":
            return None  # its values come from that device's generator
        return TimmErase(t)
    return None


def erase(result: torch.Tensor, erases: Erases) -> None:
    """Writes ``erases`` into the (C, H, W) ``result`` in place, box after
    box: ``result[..., i:i+h, j:j+w] = values``, torchvision's and timm's
    own assignment (so the same casts to the result's dtype)."""
    if erases:
        pixels = result.as_subclass(torch.Tensor)
        for i, j, h, w, v in erases:
            pixels[..., i:i + h, j:j + w] = v


def erase_run(steps: list, start: int, tail: TensorTail) -> tuple[tuple[EraseOp, ...], TensorTail, int]:
    """The RandomErasing steps from ``steps[start]`` on, after ``tail``:
    (their ops, the tail with the v2.ToPureTensor steps right after them
    joined (they only unwrap the type), the index of the first step left)."""
    from torchvision.transforms import v2 as T2

    ops = []
    end = start
    while not tail.numpy and end < len(steps) and (op := erase_op(steps[end])) is not None:
        ops.append(op)
        end += 1
    if not ops:
        return (), tail, start
    unwrap = end
    while unwrap < len(steps) and type(steps[unwrap]) is T2.ToPureTensor:
        unwrap += 1
    if unwrap > end:
        tail = TensorTail(tail.steps + steps[end:unwrap])
    return tuple(ops), tail, unwrap


def draw_erases(ops: list, canvas: tuple[int, int], dtype: torch.dtype) -> Erases:
    """Every erasing step's boxes for a (3, H, W) result, drawn in chain order."""
    height, width = canvas
    return tuple(box for op in ops for box in op.draw(3, height, width, dtype))


class ErasedSlots:
    """The erasing drawn for each batch slot, kept by the slot's address from
    ``decode_into`` until ``finish`` writes it into that row of the result.

    A finish takes its rows' boxes; a second finish of the same rows in the
    same thread, with no decode in between, writes the same boxes again (a
    batch loader may finish its pixels twice). Slots decoded and never
    finished are forgotten, oldest first, past ``MAX_SLOTS``.
    """

    MAX_SLOTS = 1 << 14  # far more slots than batches in flight hold

    def __init__(self) -> None:
        self._slots: dict[int, Erases] = {}
        self._lock = threading.Lock()  # slots are kept from several render threads
        self._local = threading.local()

    def keep(self, slot: np.ndarray, erases: Erases) -> None:
        """Keeps ``erases`` for the uint8 (C, H, W) ``slot`` (replacing what it held)."""
        key = slot.__array_interface__["data"][0]
        with self._lock:
            self._slots.pop(key, None)
            self._slots[key] = erases
            if len(self._slots) > self.MAX_SLOTS:
                del self._slots[next(iter(self._slots))]

    def apply(self, pixels: np.ndarray, result: torch.Tensor) -> None:
        """Erases each row of ``result`` (made from the uint8 ``pixels``,
        (C, H, W) or (N, C, H, W)) with the boxes kept for its slot."""
        base = pixels.__array_interface__["data"][0]
        rows = [(base, result)] if pixels.ndim == 3 else [
            (base + k * pixels.strides[0], result[k]) for k in range(pixels.shape[0])]
        last = getattr(self._local, "last", {})
        with self._lock:
            taken = [self._slots.pop(key, None) for key, _ in rows]
        now = {}
        for (key, row), erases in zip(rows, taken):
            now[key] = last.get(key, ()) if erases is None else erases
            erase(row, now[key])
        self._local.last = now

    def take(self, pixels: np.ndarray, dtype: torch.dtype) -> list[Erases]:
        """The boxes kept for each (C, H, W) slot of the uint8 (N, C, H, W)
        ``pixels`` (no box: ``()``), taken out, their values cast to the
        result's ``dtype`` (the cast :func:`erase`'s assignment makes): for a
        loader that applies the table and the erasing elsewhere (the CUDA ring)."""
        base = pixels.__array_interface__["data"][0]
        with self._lock:
            taken = [self._slots.pop(base + k * pixels.strides[0], ())
                     for k in range(pixels.shape[0])]
        return [tuple((i, j, h, w, v.to(dtype)) for i, j, h, w, v in boxes) for boxes in taken]
