"""The geometry ops' random draws, from torch's global RNG exactly as torchvision makes them.

RandomResizedCrop's box (:func:`sample_resized_crop`) and RandomHorizontalFlip's
coin (:func:`flip_draw`) make torchvision's torch RNG calls, in its order and on
its dtypes, so the same seed gives the same boxes, flips and RNG state
(tests/transforms/test_parity.py), and DataLoader's per-worker seeding works
unchanged. torch loads on first use: a Ray worker running a detached plan
draws from :mod:`.torch_draws`, these draws without torch, and never imports
it. See docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["central_crop", "crop_offset", "flip_draw", "log_ratio", "resized_output_size",
           "sample_resized_crop", "standin"]

_SCRATCH = threading.local()


def _scratch() -> tuple[torch.Tensor, torch.Tensor]:
    """This thread's 1-element tensors for the draws (default dtype, int64)."""
    import torch

    pair = getattr(_SCRATCH, "pair", None)
    if pair is None or pair[0].dtype != torch.get_default_dtype():
        pair = _SCRATCH.pair = (torch.empty(1), torch.empty(1, dtype=torch.int64))
    return pair


def sample_resized_crop(height: int, width: int, scale, log_ratio: tuple[float, float],
                        ratio) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box draw (v1 ``get_params`` and v2
    ``make_params`` run the same code), with the same torch RNG calls in the
    same order on the same dtypes, so the same seed gives the same box and
    RNG state. Written again on purpose: torchvision's costs ~3x as much per
    image in tensor set-up (a stand-in image, ``torch.tensor(ratio)`` and its
    log, fresh 1-element tensors, ``torch.randint``'s argument parsing);
    ``tests/transforms/test_parity.py`` checks boxes and RNG states against
    torchvision's own over many seeds, sizes, scales and ratios."""
    uniform, integer = _scratch()
    area = height * width
    for _ in range(10):
        target_area = area * uniform.uniform_(scale[0], scale[1]).item()
        aspect_ratio = uniform.uniform_(log_ratio[0], log_ratio[1]).exp_().item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            # torch.randint(0, n, size=(1,)) is empty((1,), int64).random_(0, n)
            i = integer.random_(0, height - h + 1).item()
            j = integer.random_(0, width - w + 1).item()
            return int(i), int(j), h, w
    return central_crop(height, width, ratio)


def central_crop(height: int, width: int, ratio) -> tuple[int, int, int, int]:
    """RandomResizedCrop's fallback after ten rejected draws: the central crop
    of the aspect ratio clamped to ``ratio`` (no draw; torch_draws uses it too)."""
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def log_ratio(ratio: tuple[float, float]) -> tuple[float, float]:
    """``torch.log(torch.tensor(ratio))`` as torchvision computes it (float32),
    the log-ratio range :func:`sample_resized_crop` draws from."""
    import torch

    logs = torch.log(torch.tensor(ratio))
    return float(logs[0]), float(logs[1])


def crop_offset(n: int) -> int:
    """RandomCrop's ``torch.randint(0, n, size=(1,)).item()`` (its top, then
    its left), drawn into this thread's scratch tensor as
    :func:`sample_resized_crop` draws its offsets."""
    return int(_scratch()[1].random_(0, n).item())


def flip_draw(p: float, p32: float) -> bool:
    """RandomHorizontalFlip's coin: ``torch.rand(1) < p`` (v1 flips then; v2
    skips when ``torch.rand(1) >= p``), ``p32`` being ``p`` in float32.
    torch.rand(1) is empty(1).uniform_(0, 1): the same draw into this
    thread's scratch tensor, compared as torch compares it (6x cheaper)."""
    import torch

    uniform = _scratch()[0]
    if uniform.dtype == torch.float32:
        return uniform.uniform_(0, 1).item() < p32
    if uniform.dtype == torch.float64:
        return uniform.uniform_(0, 1).item() < p
    return bool(torch.rand(1) < p)  # a half-precision default dtype: let torch compare


def resized_output_size(height: int, width: int, size, max_size) -> tuple[int, int]:
    """torchvision's ``_compute_resized_output_size`` (v1 and v2), as (h, w).

    ``size`` is None (v2, with ``max_size``), a 1-sequence (shorter edge) or a
    2-sequence (h, w). Raises ValueError where torchvision does.
    """
    short, long = (width, height) if width <= height else (height, width)
    if size is None:
        if not isinstance(max_size, int):
            raise ValueError(f"max_size must be an integer when size is None, but got {max_size}")
        new_short, new_long = int(max_size * short / long), max_size
        new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    elif len(size) == 1:
        requested = size[0]
        new_short, new_long = requested, int(requested * long / short)
        if max_size is not None:
            if max_size <= requested:
                raise ValueError(
                    f"max_size = {max_size} must be strictly greater than the requested "
                    f"size for the smaller edge size = {size}"
                )
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
        new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    else:
        new_h, new_w = size[0], size[1]
    return int(new_h), int(new_w)


def standin(canvas: tuple[int, int]) -> torch.Tensor:
    """A zero-stride uint8 tensor of the canvas size: what torchvision's
    get_params / make_params need to know the size, without any pixel."""
    import torch

    return torch.zeros(1, dtype=torch.uint8).expand(3, canvas[0], canvas[1])
