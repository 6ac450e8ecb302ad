"""latencyfs itself: it mounts and always unmounts, serves the tree as it is,
and counts every open and read that reaches it (counts, never timings)."""

from __future__ import annotations

import concurrent.futures
import os
import time
from pathlib import Path

import pytest

from benchmarks import _latencyfs


def files_under(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_mounts_the_tree_and_unmounts(storage_tree, latencyfs_available, tmp_path):
    fs = _latencyfs.LatencyFS(storage_tree, mountpoint=tmp_path / "mnt")
    with fs:
        assert fs._in_mount_table()
        pid = fs.stats()["pid"]
        assert files_under(fs.path) == files_under(storage_tree)
    assert not fs._in_mount_table()
    assert fs.process is None
    assert not Path(f"/proc/{pid}").exists()


def test_unmounted_even_when_the_body_raises(storage_tree, latencyfs_available, tmp_path,
                                            monkeypatch):
    # the held file keeps the lazily unmounted daemon serving until it is
    # killed after UNMOUNT_TIMEOUT_S: 1 s here, not 10
    monkeypatch.setattr(_latencyfs, "UNMOUNT_TIMEOUT_S", 1.0)
    fs = _latencyfs.LatencyFS(storage_tree, mountpoint=tmp_path / "mnt")
    with pytest.raises(RuntimeError, match="the body failed"):
        with fs:
            held = open(next(fs.path.rglob("*.jpg")), "rb")  # a busy mount: lazy unmount
            raise RuntimeError("the body failed")
    held.close()
    assert not fs._in_mount_table()
    assert fs.process is None


@pytest.mark.parametrize("latency_tree", [0, 5], indirect=True, ids=["0ms", "5ms"])
def test_counts_one_open_per_file_read(latency_tree, storage_tree):
    files = files_under(storage_tree)
    for relative in files:
        assert (latency_tree.mount_path / relative).read_bytes() == \
            (storage_tree / relative).read_bytes()
    stats = latency_tree.stats_reader()
    assert stats["opens"] == len(files)
    assert stats["bytes"] == sum((storage_tree / f).stat().st_size for f in files)
    assert stats["open_errors"] == 0


def test_delay_is_set_at_mount_and_at_run_time(latency_tree):
    assert latency_tree.stats_reader()["delay_ms"] == 0
    latency_tree.set_delay(20)
    assert latency_tree.stats_reader()["delay_ms"] == 20


def test_reset_zeroes_the_counters(latency_tree, storage_tree):
    relative = files_under(storage_tree)[0]
    (latency_tree.mount_path / relative).read_bytes()
    latency_tree.fs.reset()
    assert latency_tree.stats_reader()["opens"] == 0


def test_a_failing_path_raises_eio_and_counts(latency_tree, storage_tree):
    broken, fine = files_under(storage_tree)[:2]
    latency_tree.fs.fail(str(broken))
    with pytest.raises(OSError, match="Input/output error"):
        (latency_tree.mount_path / broken).read_bytes()
    (latency_tree.mount_path / fine).read_bytes()
    assert latency_tree.stats_reader()["open_errors"] == 1
    latency_tree.fs.clear_failures()
    (latency_tree.mount_path / broken).read_bytes()


def test_read_only(latency_tree, storage_tree):
    relative = files_under(storage_tree)[0]
    with pytest.raises(OSError, match="Read-only file system"):
        open(latency_tree.mount_path / relative, "r+b")


@pytest.mark.parametrize("latency_tree", [300], indirect=True, ids=["300ms"])
def test_serves_more_than_libfuses_default_ten_requests_at_once(latency_tree, storage_tree):
    """Each open sleeps 300 ms in its own request thread; 16 opened together
    overlap beyond the 10 threads libfuse would otherwise allow."""
    files = files_under(storage_tree)[:16]
    with concurrent.futures.ThreadPoolExecutor(len(files)) as pool:
        list(pool.map(lambda f: os.close(os.open(latency_tree.mount_path / f, os.O_RDONLY)),
                      files))
    assert latency_tree.stats_reader()["max_in_flight"] > 10


def test_the_daemons_cpu_is_read_from_proc(latency_tree, storage_tree):
    """cpu_s() (/proc/<pid>/stat, in clock ticks) agrees with the daemon's own
    getrusage, taken just before and after, once it has used some CPU."""
    def own_cpu() -> float:
        stats = latency_tree.stats_reader()
        assert stats["pid"] == latency_tree.fs.process.pid
        return stats["cpu_user_s"] + stats["cpu_system_s"]

    deadline = time.monotonic() + 60
    while own_cpu() < 0.05 and time.monotonic() < deadline:  # 5 clock ticks at least
        for relative in files_under(storage_tree):
            (latency_tree.mount_path / relative).read_bytes()
    before = own_cpu()
    cpu = latency_tree.fs.cpu_s()
    after = own_cpu()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before >= 0.05 and before - 3 * tick <= cpu <= after + 3 * tick, (before, cpu, after)


def test_cpu_of_an_unmounted_fs_is_an_error(storage_tree, tmp_path):
    with pytest.raises(_latencyfs.LatencyFSUnavailable, match="not mounted"):
        _latencyfs.LatencyFS(storage_tree, mountpoint=tmp_path).cpu_s()


def test_a_failed_mount_leaves_nothing_behind(tmp_path, latencyfs_available):
    fs = _latencyfs.LatencyFS(tmp_path / "no-such-source")
    with pytest.raises(_latencyfs.LatencyFSUnavailable, match="did not mount"):
        fs.mount()
    assert fs.process is None and not fs._in_mount_table()
    assert not fs.path.exists()  # the mount point it made is gone


@pytest.mark.parametrize("latency_tree", [200], indirect=True, ids=["200ms"])
def test_settle_waits_for_the_opens_in_flight(latency_tree, storage_tree):
    files = files_under(storage_tree)[:4]
    with concurrent.futures.ThreadPoolExecutor(len(files)) as pool:
        for f in files:
            pool.submit(lambda f: (latency_tree.mount_path / f).read_bytes(), f)
        stats = latency_tree.fs.settle()  # returns once every 200 ms open is served
    assert stats["in_flight"] == 0 and stats["opens"] == len(files)
