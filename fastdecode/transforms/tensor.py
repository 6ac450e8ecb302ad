"""The tensor tail: a converter and the per-pixel steps after it as one table per channel.

ToTensor / PILToTensor / v2.ToImage followed by Normalize / v2.ToDtype /
ConvertImageDtype / v2.ToPureTensor map each uint8 value of a channel to one
output value: a (C, 256) table, built by running the user's real transforms
on a 256-pixel ramp (the values and the result type are torchvision's own),
applied in one pass. See docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import PIL.Image
import torch

from fastdecode import _native

__all__ = ["TensorTail", "as_numpy"]


class TensorTail:
    """A converter and the per-pixel ops after it, as one table per channel.

    Raises (anything the steps raise, or TypeError) when the steps are not a
    per-pixel chain on a ramp; the caller then leaves them unfused.
    """

    def __init__(self, steps: list):
        from torchvision import tv_tensors  # here, not at import: see fastdecode.transforms.detached

        self.steps = steps
        ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
        result: Any = PIL.Image.fromarray(ramp, "RGB")
        for step in steps:
            result = step(result)
        # a uint8 CHW numpy array (timm's ToNumpy): the pixels as they are
        self.numpy = (isinstance(result, np.ndarray) and result.dtype == np.uint8
                      and result.shape == (3, 1, 256))
        if self.numpy:
            result = torch.from_numpy(np.ascontiguousarray(result))
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 1, 256):
            raise TypeError(f"not a per-pixel chain: {steps}")
        if type(result) not in (torch.Tensor, tv_tensors.Image):
            raise TypeError(f"unexpected result type {type(result).__name__}")
        self.wrap = type(result) is tv_tensors.Image
        self.dtype = result.dtype
        table = result.as_subclass(torch.Tensor)[:, 0, :].contiguous()
        self.identity = self.dtype == torch.uint8 and bool(
            (table == torch.arange(256, dtype=torch.uint8)).all()
        )
        self.table = table.numpy()  # (3, 256)
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
