"""The three global generators the recipes draw from (torch's CPU generator,
Python's ``random``, NumPy's legacy one): seeded together, and their states
in a form that compares with ``==``."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    """The three seeded as a DataLoader worker seeds them."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def states() -> tuple:
    """(torch's state tensor, Python's state, NumPy's legacy state as lists):
    equal states compare equal (the tensor with ``torch.equal``)."""
    _, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return torch.get_rng_state(), random.getstate(), (keys.tolist(), pos, has_gauss, gauss)
