"""The one atomic write (fastdecode/_atomic.py), which save_state, convert's
outputs and the listing indexes use: the target replaced whole or left as it
was, the temporary file beside it and removed on failure, fsync only when
durable."""

from __future__ import annotations

import os
import stat

import pytest

from fastdecode import _atomic
from fastdecode._atomic import AtomicFile


def files(directory):
    return sorted(p.name for p in directory.iterdir())


def test_the_target_is_replaced_whole(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with AtomicFile(path) as f:
        f.write(b"new")
        assert path.read_bytes() == b"old"  # not before the rename
        temp = files(tmp_path)
        assert len(temp) == 2
        name = next(n for n in temp if n != "out.bin")
        assert name.startswith(f".out.bin.{os.getpid()}.") and name.endswith(".tmp")
    assert path.read_bytes() == b"new" and files(tmp_path) == ["out.bin"]


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with AtomicFile(str(path)) as f:
            f.write(b"part")
            raise KeyboardInterrupt  # interrupts too
    assert path.read_bytes() == b"old" and files(tmp_path) == ["out.bin"]


def test_a_failed_rename_removes_the_temporary_file(tmp_path):
    target = tmp_path / "a-folder"
    target.mkdir()
    (target / "inside").write_bytes(b"")  # a non-empty folder cannot be replaced
    with pytest.raises(OSError):
        with AtomicFile(target) as f:
            f.write(b"x")
    assert files(tmp_path) == ["a-folder"]


def test_the_temporary_file_is_created_at_once_and_exclusively(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "urandom", lambda n: b"\0" * n)  # the same name twice
    first = AtomicFile(tmp_path / "out.bin")
    with pytest.raises(FileExistsError):
        AtomicFile(tmp_path / "out.bin")  # never another writer's file
    with first as f:
        f.write(b"1")
    assert files(tmp_path) == ["out.bin"]


def test_an_unwritable_folder_fails_at_creation_leaving_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        AtomicFile(tmp_path / "missing" / "out.bin")
    assert files(tmp_path) == []


def test_a_named_temporary_file_is_overwritten_and_removed_on_failure(tmp_path):
    path, temp = tmp_path / "out.bin", tmp_path / ".out.bin.partial"
    temp.write_bytes(b"left by a killed run, longer")
    with AtomicFile(path, temp=temp) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new" and files(tmp_path) == ["out.bin"]
    temp.write_bytes(b"left")
    with pytest.raises(ValueError):
        with AtomicFile(path, temp=temp) as f:
            raise ValueError("no")
    assert files(tmp_path) == ["out.bin"] and path.read_bytes() == b"new"


@pytest.mark.parametrize("mode", [0o666, 0o600])
def test_the_new_file_has_the_mode_asked_the_umask_applied(tmp_path, mode):
    umask = os.umask(0o022)
    os.umask(umask)
    with AtomicFile(tmp_path / "out.bin", mode=mode) as f:
        f.write(b"x")
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == mode & ~umask


@pytest.mark.parametrize("durable", [False, True])
def test_only_a_durable_write_syncs_the_file_and_the_folder(tmp_path, monkeypatch, durable):
    synced, folders = [], []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    monkeypatch.setattr(_atomic, "fsync_directory", folders.append)
    with AtomicFile(tmp_path / "out.bin", durable=durable) as f:
        f.write(b"x")
        assert synced == []  # after the block, before the rename
    assert len(synced) == durable and folders == ([str(tmp_path)] if durable else [])


def test_a_folder_syncs(tmp_path):
    _atomic.fsync_directory(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        _atomic.fsync_directory(str(tmp_path / "missing"))
