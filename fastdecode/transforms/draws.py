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
from typing import TYPE_CHECKING

from fastdecode import _rng

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["central_crop", "crop_offset", "flip_draw", "log_ratio", "resized_output_size",
           "sample_resized_crop", "standin"]

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
    area = height * width
    for _ in range(10):
        target_area = area * _rng.uniform(scale[0], scale[1])
        aspect_ratio = _rng.exp_of_uniform(log_ratio[0], log_ratio[1])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return _rng.randint(height - h + 1), _rng.randint(width - w + 1), h, w
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
    its left), drawn as :func:`sample_resized_crop` draws its offsets."""
    return _rng.randint(n)


def flip_draw(p: float, p32: float) -> bool:
    """RandomHorizontalFlip's coin: ``torch.rand(1) < p`` (v1 flips then; v2
    skips when ``torch.rand(1) >= p``), ``p32`` being ``p`` in float32.
    torch.rand(1) is empty(1).uniform_(0, 1): the same draw into this
    thread's scratch tensor (:func:`fastdecode._rng.below`), compared as
    torch compares it (6x cheaper)."""
    return _rng.below(p, p32)


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


def standin(canvas: tuple[int, int]) -> PIL.Image.Image:
    """A pixel-less RGB PIL image of the canvas size (height, width): what
    timm's ``get_params`` read the size from (``F.get_image_size``,
    ``F.get_dimensions``), as a PIL image is what timm's transforms are
    given. No pixel memory: an ``Image.Image`` with its size and mode set
    (~0.2 us, against ~3 us and a torch dispatch for a zero-stride tensor)."""
    from PIL import Image

    im = Image.Image()
    im._size, im._mode = (int(canvas[1]), int(canvas[0])), "RGB"
    return im
