"""Each remote test starts from no remote root: its own index cache folder,
a short retry bound, and neither the roots nor the tree indexes that an
earlier test in the process opened (storage/_remote.py, _remote_index.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def fresh_remote_roots(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastdecode.storage import _remote, _remote_index

    monkeypatch.setenv("FASTDECODE_CACHE", str(cache))
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "2")
    _remote_index._TREES.clear()
    _remote._ROOTS.clear()
