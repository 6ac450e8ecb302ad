"""A fastdecode dataset's items against torchvision's class's, one by one, for the same seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image


def same_image(a: Any, b: Any) -> bool:
    """``a`` is ``b`` bit for bit: a PIL image of the same mode and pixels,
    or a tensor of the same type, dtype and values."""
    if isinstance(b, Image.Image):
        return (isinstance(a, Image.Image) and a.mode == b.mode
                and np.array_equal(np.asarray(a), np.asarray(b)))
    return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)


def assert_same_items(ours: Any, theirs: Any) -> None:
    """The same length (> 0) and ``classes``, and every item: the image bit
    for bit and the target equal and of the same type, each index drawn
    under ``torch.manual_seed(index)`` on both sides."""
    assert len(ours) == len(theirs) > 0
    assert getattr(ours, "classes", None) == getattr(theirs, "classes", None)
    for i in range(len(theirs)):
        torch.manual_seed(i)
        a, ta = ours[i]
        torch.manual_seed(i)
        b, tb = theirs[i]
        assert same_image(a, b), i
        assert type(ta) is type(tb) and ta == tb, i
