"""The old module paths of the tools and of the sample store keep working for
one release: each is the moved module itself, not a copy (so patching or
isinstance through either path agrees). test_shims.py covers fastdecode._fuse
and fastdecode._plan."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    "fastdecode.bench": "fastdecode.cli.bench",
    "fastdecode.convert": "fastdecode.cli.convert",
    "fastdecode.datagen": "fastdecode.cli.datagen",
    "fastdecode.doctor": "fastdecode.cli.doctor",
    "fastdecode.tune": "fastdecode.cli.tune",
    "fastdecode._samples": "fastdecode.data._samples",
}


@pytest.mark.parametrize("old", list(MOVED), ids=list(MOVED))
def test_an_old_path_is_the_moved_module(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__name__ == MOVED[old]
