"""Fixtures the data tests share."""

from __future__ import annotations

import gc
from typing import Callable

import pytest


@pytest.fixture
def held() -> Callable[[], int]:
    """Received tensors on worker slots this test still holds alive: the
    pool's count (``_shared_pool.borrowed``) less what earlier tests' received
    tensors still held at its start, after gc (anything that keeps one alive
    past its test: its count is not this test's)."""
    from fastdecode.batching import _shared_pool

    gc.collect()
    base = _shared_pool.borrowed()
    return lambda: _shared_pool.borrowed() - base
