"""The doctor's storage probe (fastdecode/cli/_storage.py) at its edges:
mountinfo lines without a separator, the listing cap, sampled files that
cannot be read or decoded (a FIFO and a file over the per-file limit
among them), a probe with nothing measured, and the advice
when nothing could be read or no decode cost is known.
test_doctor_storage.py covers the mount kinds and the usual advice."""

from __future__ import annotations

import os

import pytest

from fastdecode.cli import _storage

from helpers.jpeg_samples import encode


def test_a_mountinfo_line_without_its_separator_is_skipped(monkeypatch):
    monkeypatch.setattr(_storage.os.path, "realpath", lambda p: p)
    text = "\n".join(["22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
                      "31 22 0:50 / /data rw truncated-line-without-its-dash",
                      ""])
    found = _storage.mount_of("/data/train", text)
    assert (found.mount_point, found.fstype, found.kind) == ("/", "ext4", "local")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    (root / "b").mkdir()
    (root / "a").mkdir()
    for name in ("a/2.jpg", "a/1.JPG", "b/3.png"):
        (root / name).write_bytes(encode(16, 16, seed=len(name)))
    (root / "a" / "notes.txt").write_text("not an image")
    (root / "b" / "broken.jpg").write_bytes(b"not a jpeg at all")
    os.symlink(root / "missing.jpg", root / "b" / "dangling.jpg")
    return root


def test_image_files_are_listed_in_order_up_to_the_cap(tree):
    every = list(_storage.image_files(tree))
    assert [os.path.relpath(p, tree) for p in every] == [
        "a/1.JPG", "a/2.jpg", "b/3.png", "b/broken.jpg", "b/dangling.jpg"]
    assert list(_storage.image_files(tree, cap=2)) == every[:2]


def test_a_probe_names_unreadable_files_and_skips_undecodable_ones(tree):
    found = _storage.probe(tree, sample=10)
    assert found.files_listed == 5 and found.sampled == 5 and found.listing_complete
    assert found.errors == [f"{tree / 'b' / 'dangling.jpg'}: No such file or directory"]
    assert len(found.open_first_byte_s) == 4
    assert found.bytes_read == sum(os.path.getsize(tree / n) for n in
                                   ("a/1.JPG", "a/2.jpg", "b/3.png", "b/broken.jpg"))
    assert found.decode_s_per_image is not None and found.decode_s_per_image > 0


@pytest.mark.timeout(30)  # a FIFO's open would wait for a writer
def test_a_probe_names_a_fifo_and_a_file_over_the_limit_without_reading_them(tmp_path,
                                                                              monkeypatch):
    """The files ``doctor`` meets in a suspect tree: refused as the datasets
    refuse them, each named among the errors, never waited for or read."""
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "1MiB")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1.jpg").write_bytes(encode(16, 16, seed=1))
    os.mkfifo(tmp_path / "a" / "2.jpg")
    with open(tmp_path / "a" / "3.jpg", "wb") as f:
        f.truncate(1 << 40)  # a sparse TiB
    found = _storage.probe(tmp_path, sample=10)
    assert found.sampled == 3 and len(found.open_first_byte_s) == 1
    assert sorted(found.errors) == [
        f"{tmp_path / 'a' / '2.jpg'}: not a regular file (a device, a FIFO or a socket)",
        f"{tmp_path / 'a' / '3.jpg'}: larger than the per-file limit of 1,048,576 bytes (set "
        "FASTDECODE_MAX_FILE_BYTES to read larger files)"]
    assert found.bytes_read == os.path.getsize(tmp_path / "a" / "1.jpg")


def test_no_decodable_sample_has_no_decode_cost():
    assert _storage._decode_cost([b"garbage", b""]) is None
    assert _storage._decode_cost([]) is None


def _probe(**changes):
    fields = dict(root="/d", mount=_storage.MountInfo("/d", "nfs4", "s:/e", "nfs"),
                  files_listed=10, listing_complete=True, sampled=2)
    fields.update(changes)
    return _storage.StorageProbe(**fields)


def test_a_probe_that_measured_nothing_reports_zeros():
    found = _probe(sampled=0)
    assert (found.latency_s, found.latency_p90_s, found.throughput_bps,
            found.estimated_bytes) == (0.0, 0.0, 0.0, 0.0)


def test_nothing_readable_is_a_warning_naming_the_first_error():
    found = _probe(errors=["/d/a.jpg: Permission denied", "/d/b.jpg: Permission denied"])
    status, finding, advice = _storage.storage_advice(found, 2, 2, 1 << 30, 1 << 30, 16)
    assert status == "warn"
    assert finding.endswith("; 2 sampled file(s) unreadable: /d/a.jpg: Permission denied")
    assert advice == "no sampled file could be read: check the path and permissions"


def test_slow_storage_without_a_decode_cost_or_memory_facts_advises_shards():
    found = _probe(open_first_byte_s=[0.02, 0.03], bytes_read=2 << 20, read_s=0.1,
                   listing_complete=False)
    status, finding, advice = _storage.storage_advice(found, 2, 2, None, None, 16)
    assert status == "warn" and "at least 10 images" in finding
    assert advice == ("too large to cache in RAM here: convert it to shards (fastdecode convert "
                      "ROOT DST --to wds), one open per shard, not per file")
