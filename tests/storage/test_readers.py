"""The reader factory (fastdecode/storage/_readers.py): which paths are
remote, the reader it makes for a local path, a path-like object or URLs of
several protocols, and the path helpers the datasets use."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import pytest

from fastdecode.errors import ImageFileError
from fastdecode.storage import _remote
from fastdecode.storage._readers import (
    LocalReader,
    as_reader,
    expand,
    is_remote,
    join,
    parent,
    reader_for,
    remote_paths,
    remote_root,
    scrub,
)

REMOTE = ["s3://bucket/train", "gs://bucket/a.jpg", "http://host/x.jpg", "https://host/x.jpg",
          "memory://x", "hf://datasets/org/name", "s3://user:pw@bucket/key"]
LOCAL = ["/data/train", "train/a.jpg", "~/data", "file:///data/train", "file://data", "", "C:\\x"]


@pytest.mark.parametrize("path", REMOTE)
def test_an_fsspec_url_is_remote(path):
    assert is_remote(path)


@pytest.mark.parametrize("path", LOCAL)
def test_a_local_path_or_file_url_is_local(path):
    assert not is_remote(path)


@pytest.mark.parametrize("path", [Path("/data/train"), Path("s3://bucket/x"), b"s3://bucket/x",
                                  None, 3])
def test_only_a_string_is_a_url(path):
    """A path-like object is local, whatever it holds (Path('s3://b') is the
    folder s3:/b); bytes and other objects are not URLs."""
    assert not is_remote(path)


@pytest.mark.parametrize("root", ["/data/train", Path("/data/train"), "file:///data/train"])
def test_a_local_root_is_read_by_the_local_reader(root):
    reader = reader_for(root)
    assert type(reader) is LocalReader and reader == LocalReader()
    assert reader_for(root, {"anon": True}) == LocalReader()  # options are an fsspec URL's


def test_the_local_reader_reads_whole_files_with_their_size(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"abcdef")
    opened = reader_for(str(tmp_path)).open(str(path))
    assert opened.size == 6 and opened.read() == b"abcdef"
    with LocalReader().open_file(str(path)) as f:
        assert f.read() == b"abcdef"
    with pytest.raises(FileNotFoundError):
        LocalReader().open(str(tmp_path / "missing"))
    assert pickle.loads(pickle.dumps(LocalReader())) == LocalReader()


@pytest.mark.parametrize("url", ["memory://fd-readers/train", "s3://bucket/train",
                                 "http://127.0.0.1:1/train", "https://host/train"])
def test_a_url_is_read_by_a_remote_of_its_protocol(url):
    pytest.importorskip("fsspec")
    reader = reader_for(url, {"client_kwargs": {}} if url.startswith("s3") else None)
    assert isinstance(reader, _remote.Remote)
    assert reader.protocol == url.split("://", 1)[0]


def test_a_url_s_credentials_stay_out_of_its_reader(monkeypatch):
    pytest.importorskip("fsspec")
    reader = reader_for("https://user:secret@host/train")
    assert isinstance(reader, _remote.Remote)
    assert "secret" not in repr(reader) and b"secret" not in pickle.dumps(reader)
    assert scrub("https://user:secret@host/train") == "https://host/train"


def test_a_remote_reader_reads_and_opens_files():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/fd-readers/manifest.csv", b"path,label\na.jpg,1\n")
    reader = reader_for("memory://fd-readers")
    assert reader.open("memory://fd-readers/manifest.csv").read() == b"path,label\na.jpg,1\n"
    with reader.open_file("memory://fd-readers/manifest.csv") as f:
        assert io.TextIOWrapper(f, encoding="utf-8").read().startswith("path,label")
    with pytest.raises(ImageFileError, match="memory://fd-readers/missing"):
        reader.open("memory://fd-readers/missing").read()


def test_a_remote_root_is_opened_and_a_local_one_left(tmp_path, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setenv("FASTDECODE_CACHE", str(tmp_path / "cache"))
    fsspec.filesystem("memory").pipe("/fd-readers-root/cat/a.jpg", b"x")
    remote = remote_root("memory://fd-readers-root")
    assert isinstance(remote, _remote.Remote)
    assert _remote.folder_classes("memory://fd-readers-root")[0] == ["cat"]
    assert remote_root(str(tmp_path / "nothing-here")) is None  # never listed
    assert remote_root(tmp_path) is None


def test_remote_paths_keeps_the_urls_in_order():
    paths = ["/a.jpg", "s3://b/1.jpg", "file:///c.jpg", "memory://2.jpg", "rel/d.jpg"]
    assert remote_paths(paths) == ["s3://b/1.jpg", "memory://2.jpg"]
    assert remote_paths([]) == []


def test_scrub_leaves_local_paths_as_they_are():
    assert scrub("/data/user:pw@host/a.jpg") == "/data/user:pw@host/a.jpg"
    assert scrub("s3://bucket/a.jpg") == "s3://bucket/a.jpg"


def test_expand_expands_a_local_home_only(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    assert expand("~/data") == "/home/someone/data"
    assert expand(Path("~/data")) == "/home/someone/data"
    assert expand("s3://~bucket/x") == "s3://~bucket/x"


@pytest.mark.parametrize("root, path, joined", [
    (None, "a.jpg", "a.jpg"),
    ("/data", "a.jpg", os.path.join("/data", "a.jpg")),
    ("/data", "/abs/a.jpg", "/abs/a.jpg"),
    ("/data", "s3://b/a.jpg", "s3://b/a.jpg"),
    ("s3://b/root", "/a.jpg", "/a.jpg"),  # absolute: kept, as a local root keeps it
    ("s3://b/root/", "sub/a.jpg", "s3://b/root/sub/a.jpg"),
    ("s3://b/root", "sub/a.jpg", "s3://b/root/sub/a.jpg"),
    ("file:///data", "a.jpg", os.path.join("file:///data", "a.jpg")),
])
def test_join_puts_a_relative_path_under_its_root(root, path, joined):
    assert join(root, path) == joined


def test_parent_is_the_folder_of_a_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parent("s3://b/lists/train.csv") == "s3://b/lists"
    assert parent("s3://b/lists/") == "s3://b"
    assert parent("train.csv") == str(tmp_path)


def test_as_reader_takes_readers_callables_and_none():
    assert as_reader(None) == LocalReader()
    local = LocalReader()
    assert as_reader(local) is local
    opened = as_reader(lambda path: path.encode()).open("xy")
    assert opened.size is None and opened.read() == b"xy"
    with pytest.raises(TypeError, match="a reader is an object with open"):
        as_reader(3)

