"""`fastdecode doctor ROOT`: the storage under a dataset, named from
mountinfo (fake tables) and measured on a latencyfs mount (the daemon counts
the files the probe opened)."""

from __future__ import annotations

import json

import pytest

from fastdecode.cli import _storage
from fastdecode.cli.__main__ import main

# /proc/self/mountinfo lines: id parent major:minor root point options [tags] - type source super
MOUNTINFO = "\n".join([
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
    "23 22 0:21 / /dev/shm rw,nosuid,nodev shared:2 - tmpfs tmpfs rw",
    "24 22 0:40 / /mnt/nfs rw,relatime shared:3 - nfs4 server:/export rw,vers=4.2",
    "25 22 0:41 / /mnt/s3 rw,nosuid,nodev - fuse.s3fs s3fs rw,user_id=0",
    "26 22 0:42 / /lustre rw - lustre 10.0.0.1@tcp:/fs rw",
    "27 22 0:43 / /gpfs/fs1 rw - gpfs fs1 rw",
    "28 1 0:44 / /var/lib/docker/x rw - overlay overlay rw,lowerdir=/a",
    "29 22 0:45 / /mnt/with\\040space rw - xfs /dev/sdb1 rw",
    "30 24 0:46 / /mnt/nfs/scratch rw - tmpfs tmpfs rw",
])


@pytest.mark.parametrize("path, kind, point", [
    ("/home/me/data", "local", "/"),
    ("/dev/shm/ds", "tmpfs", "/dev/shm"),
    ("/mnt/nfs/imagenet/train", "nfs", "/mnt/nfs"),
    ("/mnt/s3/bucket", "fuse", "/mnt/s3"),
    ("/lustre/proj", "lustre", "/lustre"),
    ("/gpfs/fs1/data", "gpfs", "/gpfs/fs1"),
    ("/var/lib/docker/x/data", "overlay", "/var/lib/docker/x"),
    ("/mnt/with space/d", "local", "/mnt/with space"),
    ("/mnt/nfs/scratch/d", "tmpfs", "/mnt/nfs/scratch"),  # the deepest mount wins
    ("/mnt/nfsish/d", "local", "/"),  # a prefix of a name is not a parent folder
], ids=["ext4", "tmpfs", "nfs4", "fuse-s3fs", "lustre", "gpfs", "overlay", "escaped-space",
        "nested", "name-prefix"])
def test_mount_kind_from_mountinfo(path, kind, point, monkeypatch):
    monkeypatch.setattr(_storage.os.path, "realpath", lambda p: p)
    found = _storage.mount_of(path, MOUNTINFO)
    assert (found.kind, found.mount_point) == (kind, point)


def test_a_path_no_mount_holds_is_an_error(monkeypatch):
    monkeypatch.setattr(_storage.os.path, "realpath", lambda p: p)
    with pytest.raises(FileNotFoundError, match="no mount holds it"):
        _storage.mount_of("/x", "22 1 8:1 / /other rw - ext4 /dev/sda1 rw")


def test_probe_of_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent: does not exist$"):
        _storage.probe(tmp_path / "absent")


def test_probe_of_a_file_is_an_error(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="a.jpg: not a folder$"):
        _storage.probe(tmp_path / "a.jpg")


def test_local_tree_is_fine(storage_tree, capsys):
    assert main(["doctor", str(storage_tree), "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    check = next(c for c in out["checks"] if c["name"] == "storage")
    assert out["facts"]["storage"]["sampled"] == 24
    assert out["facts"]["storage"]["mount"]["kind"] in ("local", "tmpfs", "overlay")
    assert "open + first 4 KiB" in check["finding"]


@pytest.mark.parametrize("latency_tree", [5], indirect=True, ids=["5ms"])
def test_fuse_mount_is_named_and_measured(latency_tree, capsys):
    assert main(["doctor", str(latency_tree.mount_path), "--json", "--sample", "10"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    storage = out["facts"]["storage"]
    check = next(c for c in out["checks"] if c["name"] == "storage")
    assert storage["mount"]["kind"] == "fuse"
    assert storage["mount"]["fstype"] == "fuse.latencyfs"
    assert storage["latency_s"] > 0
    assert storage["sampled"] == len(storage["open_first_byte_s"]) == 10
    # each sampled file opened once by the storage probe, and once by the formats check
    assert latency_tree.stats_reader()["opens"] == 20
    assert check["status"] == "warn"  # 5 ms per open is over the 1 ms of a page cache hit
    assert "reads in flight per worker" in check["recommendation"]
    assert "fits in RAM: cache=" in check["recommendation"]


def test_advice_for_a_large_slow_dataset():
    found = _storage.StorageProbe("/d", _storage.MountInfo("/d", "nfs4", "s:/e", "nfs"),
                                  files_listed=1_000_000, listing_complete=True, sampled=2,
                                  open_first_byte_s=[0.02, 0.02], bytes_read=2 << 20,
                                  read_s=0.1, decode_s_per_image=0.005)
    status, finding, advice = _storage.storage_advice(found, usable_cpus=8, num_workers=8,
                                                      ram_bytes=64 << 30, shm_bytes=32 << 30,
                                                      default_depth=16)
    assert status == "warn"
    assert "on nfs" in finding and "~1,000,000 MiB" in finding
    # 8 CPUs / 5 ms = 1,600 images/s x 20 ms = 32 in flight, over 8 workers: 4 each
    assert "keep >= 4 reads in flight per worker" in advice
    assert "convert it to shards" in advice and "cache=" not in advice


def test_advice_raises_the_depth_past_the_default():
    found = _storage.StorageProbe("/d", _storage.MountInfo("/d", "fuse.x", "x", "fuse"),
                                  files_listed=100, listing_complete=True, sampled=1,
                                  open_first_byte_s=[0.05], bytes_read=1000, read_s=0.01,
                                  decode_s_per_image=0.001)
    _, _, advice = _storage.storage_advice(found, 2, 2, 1 << 30, 1 << 30, 16)
    # 2,000 images/s x 50 ms / 2 workers = 50
    assert "readahead=50" in advice and "FASTDECODE_READAHEAD=50" in advice


def test_a_missing_root_fails_the_storage_check(tmp_path, capsys):
    assert main(["doctor", str(tmp_path / "absent"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    check = next(c for c in out["checks"] if c["name"] == "storage")
    # the path once, and what is wrong with it
    assert check["status"] == "fail" and check["finding"] == f"{tmp_path / 'absent'}: does not exist"
