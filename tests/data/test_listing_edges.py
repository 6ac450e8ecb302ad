"""fastdecode/storage/_listing.py at its edges: list_images over URIs (pyarrow's
``local://`` filesystem, so no server), and folder_listing when the walk or
the index meets trouble: a folder that cannot be listed or an entry that
cannot be stat'ed (skipped as os.walk skips them, so still make_dataset's
rows), a class folder gone mid-walk, a removed folder whose parent kept its
mtime, an index from another version, a cache folder that cannot be
written, an interrupted index write. test_listing.py covers the main paths."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from fastdecode.storage import _listing
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset

pafs = pytest.importorskip("pyarrow.fs")


def _age(root: Path) -> None:
    past = time.time() - 60
    for folder, _, _ in os.walk(root):
        os.utime(folder, (past, past))


def _write(root: Path, rels: list[str]) -> Path:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    _age(root)
    return root


@pytest.fixture(scope="module")
def class_tree(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("listing") / "tree",
                  ["b/2.jpg", "b/1.PNG", "b/notes.txt", "b/sub/3.jpeg", "a/z.bmp", "a/y.jpg"])


@pytest.fixture(scope="module")
def flat_tree(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("listing") / "flat", ["b.jpg", "a.png", "c.txt"])


@pytest.fixture
def tree(tmp_path, monkeypatch) -> Path:
    """A tree of its own (the test changes it), its index in a cache of its own."""
    monkeypatch.setenv("FASTDECODE_CACHE", str(tmp_path / "cache"))
    return _write(tmp_path / "tree", ["a/1.jpg", "a/2.jpg", "a/sub/3.jpg", "a/sub/deep/4.jpg",
                                      "b/5.jpg", "b/6.png", "c/7.jpg"])


def _rows(listing) -> list[tuple[str, int]]:
    return [(listing.store.path(i), listing.store.target(i)) for i in range(len(listing.store))]


# -- list_images -----------------------------------------------------------------

def test_no_paths_is_an_error():
    with pytest.raises(ValueError, match="read_images: no paths given"):
        _listing.list_images([])


def test_local_paths_list_folders_recursively_and_files_as_named(class_tree, flat_tree):
    listing = _listing.list_images([f"file://{flat_tree}", class_tree / "b" / "notes.txt"])
    assert listing.paths == [f"{flat_tree}/a.png", f"{flat_tree}/b.jpg",
                             f"{class_tree}/b/notes.txt"]
    assert listing.labels.tolist() == [-1, -1, -1] and listing.classes == []
    assert listing.filesystem is None


def test_one_local_file_is_listed_alone(flat_tree):
    listing = _listing.list_images(str(flat_tree / "c.txt"))
    assert listing.paths == [str(flat_tree / "c.txt")] and listing.labels.tolist() == [-1]


def test_a_missing_local_path_is_named(flat_tree):
    with pytest.raises(FileNotFoundError,
                       match=f"read_images: no such file or directory: {flat_tree}/nope"):
        _listing.list_images([flat_tree, flat_tree / "nope"])


def test_a_class_tree_uri_lists_as_the_local_tree(class_tree):
    local = _listing.list_images(class_tree)
    remote = _listing.list_images(f"local://{class_tree}")
    assert isinstance(remote.filesystem, pafs.LocalFileSystem) and local.filesystem is None
    assert remote.classes == local.classes == ["a", "b"]
    assert remote.paths == local.paths
    assert remote.labels.tolist() == local.labels.tolist() == [0, 0, 1, 1, 1]


def test_a_flat_folder_uri_lists_its_images_unlabelled(flat_tree):
    listing = _listing.list_images(f"local://{flat_tree}/")
    assert listing.paths == [f"{flat_tree}/a.png", f"{flat_tree}/b.jpg"]
    assert listing.labels.tolist() == [-1, -1] and listing.classes == []


def test_several_uris_list_folders_recursively_and_files_as_named(class_tree, flat_tree):
    listing = _listing.list_images([f"local://{class_tree}/b", f"local://{flat_tree}/c.txt",
                                    f"local://{class_tree}/a/z.bmp"])
    assert listing.paths == [f"{class_tree}/b/1.PNG", f"{class_tree}/b/2.jpg",
                             f"{class_tree}/b/sub/3.jpeg", f"{flat_tree}/c.txt",
                             f"{class_tree}/a/z.bmp"]
    assert listing.labels.tolist() == [-1] * 5 and listing.classes == []


def test_a_missing_uri_is_named(class_tree):
    with pytest.raises(FileNotFoundError,
                       match=f"read_images: no such file or directory: {class_tree}/nope"):
        _listing.list_images([f"local://{class_tree}/a", f"local://{class_tree}/nope"])


def test_a_given_filesystem_lists_plain_paths(class_tree):
    listing = _listing.list_images([str(class_tree / "a")], filesystem=pafs.LocalFileSystem())
    assert listing.paths == [f"{class_tree}/a/y.jpg", f"{class_tree}/a/z.bmp"]
    assert listing.labels.tolist() == [-1, -1]


# -- folder_listing: the walk -------------------------------------------------

def test_a_folder_that_cannot_be_listed_is_skipped_as_os_walk_skips_it(tree, monkeypatch):
    real = os.scandir
    hidden = os.fsencode(tree / "a" / "sub")

    def scandir(path="."):
        if os.fsencode(path).rstrip(b"/") == hidden:
            raise PermissionError(13, "Permission denied", path)
        return real(path)
    monkeypatch.setattr(os, "scandir", scandir)
    expected = make_dataset(str(tree), find_classes(tree)[1], extensions=IMG_EXTENSIONS)
    got = _listing.folder_listing(str(tree), IMG_EXTENSIONS)
    assert _rows(got) == expected
    assert [p for p, _ in expected if "/sub/" in p] == []  # the folder's files are left out


class _Entry:
    """A scandir entry whose is_dir() fails (as on a folder removed meanwhile)."""

    def __init__(self, entry):
        self.entry, self.name, self.path = entry, entry.name, entry.path

    def is_dir(self):
        raise OSError(2, "No such file or directory")


class _ScandirResult:
    def __init__(self, entries):
        self.entries = entries

        self.it = iter(entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it)


def test_an_entry_that_cannot_be_stated_is_taken_as_a_file(tree, monkeypatch):
    real = os.scandir

    def scandir(path="."):
        with real(path) as it:
            entries = list(it)
        return _ScandirResult([_Entry(e) if os.fsdecode(e.name) == "sub" else e for e in entries])
    monkeypatch.setattr(os, "scandir", scandir)
    expected = make_dataset(str(tree), {"a": 0, "b": 1, "c": 2}, extensions=IMG_EXTENSIONS)
    got = _listing.folder_listing(str(tree), IMG_EXTENSIONS)
    assert _rows(got) == expected
    assert [p for p, _ in expected] == [str(tree / "a" / "1.jpg"), str(tree / "a" / "2.jpg"),
                                        str(tree / "b" / "5.jpg"), str(tree / "b" / "6.png"),
                                        str(tree / "c" / "7.jpg")]


def test_a_class_folder_gone_mid_walk_has_no_files(tree, monkeypatch):
    real = _listing.find_classes

    def then_removed(root):
        classes, class_to_idx = real(root)
        for path in sorted((tree / "b").iterdir()):
            path.unlink()
        (tree / "b").rmdir()
        return classes, class_to_idx
    monkeypatch.setattr(_listing, "find_classes", then_removed)
    got = _listing.folder_listing(str(tree), IMG_EXTENSIONS, allow_empty=True)
    assert got.classes == ["a", "b", "c"] and got.targets == [0, 0, 0, 0, 2]
    assert [os.path.basename(p) for p, _ in _rows(got)] == ["1.jpg", "2.jpg", "3.jpg", "4.jpg",
                                                            "7.jpg"]


def test_a_class_folder_gone_mid_walk_is_named_when_empty_is_not_allowed(tree, monkeypatch):
    real = _listing.find_classes

    def with_a_ghost(root):
        classes, _ = real(root)
        classes = [*classes, "ghost"]
        return classes, {name: i for i, name in enumerate(classes)}
    monkeypatch.setattr(_listing, "find_classes", with_a_ghost)
    with pytest.raises(FileNotFoundError, match="Found no valid file for the classes ghost. "
                                                "Supported extensions are: .jpg"):
        _listing.folder_listing(str(tree), (".jpg", ".png"))


# -- folder_listing: the index ------------------------------------------------

def test_a_removed_folder_makes_the_index_stale_even_when_its_parent_kept_its_mtime(tree):
    first = _listing.folder_listing(str(tree), IMG_EXTENSIONS, refresh=True)
    assert first.index_file is not None
    parent = tree / "a" / "sub"
    kept = os.stat(parent)
    (parent / "deep" / "4.jpg").unlink()
    (parent / "deep").rmdir()
    os.utime(parent, ns=(kept.st_atime_ns, kept.st_mtime_ns))  # the removal does not show there
    again = _listing.folder_listing(str(tree), IMG_EXTENSIONS)
    assert again.source == "stale index"
    assert [os.path.basename(p) for p, _ in _rows(again)] == ["1.jpg", "2.jpg", "3.jpg",
                                                              "5.jpg", "6.png", "7.jpg"]


def _rewrite_meta(index: str, **changes) -> None:
    with np.load(index) as data:
        arrays = {name: data[name] for name in data.files}
    import json

    meta = {**json.loads(arrays["meta"].tobytes()), **changes}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with open(index, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("changes", [{"version": 99}, {"root": "/somewhere/else"}],
                         ids=["another-version", "another-root"])
def test_an_index_not_of_this_version_and_root_is_not_used(tree, changes):
    first = _listing.folder_listing(str(tree), IMG_EXTENSIONS, refresh=True)
    _rewrite_meta(first.index_file, **changes)
    again = _listing.folder_listing(str(tree), IMG_EXTENSIONS)
    assert again.source == "walked" and _rows(again) == _rows(first)


def test_an_unwritable_cache_folder_writes_no_index(tree, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    monkeypatch.setenv("FASTDECODE_CACHE", str(blocker))
    got = _listing.folder_listing(str(tree), IMG_EXTENSIONS, refresh=True)
    assert got.index_file is None and got.source == "walked"
    assert _rows(got) == make_dataset(str(tree), find_classes(tree)[1], extensions=IMG_EXTENSIONS)


def test_an_interrupted_index_write_leaves_no_temporary_file(tree, monkeypatch):
    real = _listing.np.savez

    def interrupted(f, **arrays):
        f.write(b"PK partial")
        raise KeyboardInterrupt
    monkeypatch.setattr(_listing.np, "savez", interrupted)
    index = _listing.index_path(str(tree), IMG_EXTENSIONS)
    with pytest.raises(KeyboardInterrupt):
        _listing.folder_listing(str(tree), IMG_EXTENSIONS, refresh=True)
    assert os.listdir(os.path.dirname(index)) == []
    assert _listing.folder_listing(str(tree), IMG_EXTENSIONS).source == "walked"  # no index
    monkeypatch.setattr(_listing.np, "savez", real)
    assert _listing.folder_listing(str(tree), IMG_EXTENSIONS, refresh=True).index_file == index
