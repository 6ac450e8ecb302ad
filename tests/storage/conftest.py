"""Slow storage for the tests: latencyfs (benchmarks/latencyfs.c), a FUSE
passthrough that adds a delay to every open and counts what reaches it.

Fixtures:

``latencyfs_available`` (session)
    Builds the binary if needed; skips the test with the reason when there is
    no /dev/fuse, no fusermount3, or no gcc / fuse3 headers.

``storage_tree`` (session)
    A small generated ImageFolder tree (2 classes x 12 JPEGs), the source the
    mounts serve. Tests that delete or break a file make their own copy.

``latency_tree`` (function)
    ``storage_tree`` mounted through latencyfs, unmounted when the test ends,
    also when its body raises. A ``LatencyTree(mount_path, stats_reader,
    set_delay, fs)``:

    - ``mount_path``: the ``Path`` to read the tree from (the same relative
      paths as ``storage_tree``);
    - ``stats_reader()``: the daemon's counters as a dict: ``opens``,
      ``reads``, ``bytes``, ``open_errors``, ``max_in_flight`` (the most
      opens + reads it served at once), ``delay_ms``, ``cpu_user_s``,
      ``cpu_system_s``, ``pid``. Reading them opens nothing that is counted;
    - ``set_delay(ms)``: the delay of every later open;
    - ``fs``: the ``benchmarks._latencyfs.LatencyFS`` itself, for
      ``fs.reset()`` (zero the counters), ``fs.fail(relative_path)`` (opens
      of that file fail with EIO from then on), ``fs.set_bandwidth(mbps)``.

    The delay starts at 0 ms, or at ``request.param`` when parametrized
    indirectly: ``@pytest.mark.parametrize("latency_tree", [5], indirect=True)``.

``mount_latencyfs`` (function)
    ``mount_latencyfs(source, delay_ms=0)``: any other folder mounted the same
    way (a test's own copy of the tree), unmounted at the test's end.
"""

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
