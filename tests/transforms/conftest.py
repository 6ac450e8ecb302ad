"""tests/transforms: one torch thread, as in DataLoader workers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """As in DataLoader workers; torch's own threads only fight over a small
    machine's cores (10x slower references on 2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
