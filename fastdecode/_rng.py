"""One-value draws from torch's global generator, made on this thread's reused 1-element tensors.

``torch.rand(1)`` is ``empty(1).uniform_(0, 1)``, ``torch.randint(0, n, (1,))``
(or ``randint(n, ())``) is ``empty(1, dtype=int64).random_(0, n)``: made on a
1-element tensor kept per thread, they are the same generator calls, so the
same values and the same generator state afterwards, without the tensor's
set-up and the argument parsing (1-3 us a draw). The crop's and flip's draws
(:mod:`fastdecode.transforms.draws`), the policies' (:mod:`fastdecode.augment`)
and RandomErasing's all draw here; tests/transforms/test_rng.py checks each
call against torch's own, test_parity.py and test_augment_policies.py the
draws against torchvision's, values and generator states. torch loads on the
first draw, so a module importing this one stays torch-free until it draws (a
detached plan draws from transforms.torch_draws instead). See
docs/decisions/augment.md ("The rows on an idle machine ...").
"""

from __future__ import annotations

import struct
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

__all__ = ["below", "exp_of_uniform", "float32", "randint", "scratch", "uniform"]

_LOCAL = threading.local()


def scratch() -> tuple[torch.Tensor, torch.Tensor]:
    """This thread's 1-element tensors: (the default dtype, int64); remade
    when the default dtype changed."""
    import torch

    pair = getattr(_LOCAL, "pair", None)
    if pair is None or pair[0].dtype != torch.get_default_dtype():
        pair = _LOCAL.pair = (torch.empty(1), torch.empty(1, dtype=torch.int64))
    return pair


def randint(n: int) -> int:
    """``int(torch.randint(0, n, size=(1,)).item())`` (also ``randint(n, ())``)."""
    return int(scratch()[1].random_(0, n).item())


def uniform(low: float = 0.0, high: float = 1.0) -> float:
    """``torch.empty(1).uniform_(low, high).item()``; with the defaults
    ``torch.rand(1).item()`` (and ``torch.rand(()).item()``)."""
    return scratch()[0].uniform_(low, high).item()


def exp_of_uniform(low: float, high: float) -> float:
    """``torch.exp(torch.empty(1).uniform_(low, high)).item()``: the aspect
    ratio of RandomResizedCrop's and RandomErasing's boxes."""
    return scratch()[0].uniform_(low, high).exp_().item()


def float32(value: float) -> float:
    """``value`` rounded to float32 (what torch compares a float32 tensor
    with a Python number in)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def below(p: float, p32: Optional[float] = None) -> bool:
    """``bool(torch.rand(1) < p)``, compared as torch compares it: in the
    default dtype, so ``p`` in float32 (``p32``, when the caller kept it)
    under float32. ``not below(p)`` is ``torch.rand(1) >= p``."""
    import torch

    u = scratch()[0]
    if u.dtype == torch.float32:
        return u.uniform_(0, 1).item() < (float32(p) if p32 is None else p32)
    if u.dtype == torch.float64:
        return u.uniform_(0, 1).item() < p
    return bool(torch.rand(1) < p)  # a half-precision default dtype: let torch compare
