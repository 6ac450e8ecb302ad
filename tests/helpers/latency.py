"""latencyfs fixtures, shared by tests/storage and tests/cli (documented in
tests/storage/conftest.py); a test module imports the ones it uses."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest

from benchmarks import _latencyfs

from helpers.trees import write_image

CLASSES = ("cat", "dog")
PER_CLASS = 12


class LatencyTree(NamedTuple):
    mount_path: Path
    stats_reader: Callable[[], dict[str, Any]]
    set_delay: Callable[[float], None]
    fs: _latencyfs.LatencyFS


@pytest.fixture(scope="session")
def latencyfs_available() -> Path:
    reason = _latencyfs.unavailable()
    if reason is not None:
        pytest.skip(f"latencyfs: {reason}")
    try:
        return _latencyfs.build()
    except _latencyfs.LatencyFSUnavailable as exc:
        pytest.skip(f"latencyfs: {exc}")


def make_storage_tree(root: Path) -> Path:
    seed = 0
    for name in CLASSES:
        for i in range(PER_CLASS):
            seed += 1
            write_image(root / name / f"img{i:02d}.jpg", "JPEG", (72 + 5 * i, 96 + 3 * i), seed)
    return root


@pytest.fixture(scope="session")
def storage_tree(tmp_path_factory) -> Path:
    return make_storage_tree(tmp_path_factory.mktemp("storage-tree"))


@pytest.fixture
def mount_latencyfs(latencyfs_available, tmp_path):
    mounted: list[_latencyfs.LatencyFS] = []

    def mount(source: Path, delay_ms: float = 0.0) -> LatencyTree:
        fs = _latencyfs.LatencyFS(source, delay_ms=delay_ms,
                                  mountpoint=tmp_path / f"mnt{len(mounted)}")
        mounted.append(fs)
        try:
            fs.mount()
        except _latencyfs.LatencyFSUnavailable as exc:
            pytest.skip(f"latencyfs: {exc}")
        return LatencyTree(fs.path, fs.stats, fs.set_delay, fs)

    try:
        yield mount
    finally:
        for fs in mounted:
            fs.unmount()


@pytest.fixture
def latency_tree(request, storage_tree, mount_latencyfs) -> LatencyTree:
    return mount_latencyfs(storage_tree, getattr(request, "param", 0.0))


@pytest.fixture
def own_tree(tmp_path, storage_tree) -> Path:
    """A copy of the storage tree this test may break."""
    return Path(shutil.copytree(storage_tree, tmp_path / "own"))
