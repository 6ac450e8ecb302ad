"""FastDatasetFolder's local listing (storage/_listing.py): the bytes walk gives
make_dataset's classes, paths, order and targets on an awkward tree; the local
index re-opens with identical samples, goes stale when a folder changes (or is
racy) and is rewritten; refresh_index walks again; the store holds a fixed
number of numpy arrays, whatever the number of samples (nothing per sample to
copy on read in a forked worker)."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchvision")

from benchmarks import bench_listing  # noqa: E402
from fastdecode.datasets import FastDatasetFolder, FastImageFolder  # noqa: E402
from fastdecode.storage import _listing  # noqa: E402
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset  # noqa: E402
from fastdecode.storage._samples import SampleStore  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTDECODE_CACHE", str(tmp_path / "cache"))


def _age(root: Path) -> None:
    """Every folder's mtime a minute back (not racy for the index)."""
    past = time.time() - 60
    for folder, _, _ in os.walk(root):
        os.utime(folder, (past, past))


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    for rel in ["a/1.jpg", "a/2.PNG", "a/x.txt", "a/y.tiff", "a/z.tif", "b/q.JPEG",
                "b/sub/r.jpg", "b/sub/deeper/s.webp", "b/sub-x.png", "é/ü.jpg", "é/a.jpg",
                "c/Ω.bmp", "c/d.jpg/inside.jpg"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    os.symlink("../a", root / "c" / "link")
    os.close(os.open(os.fsencode(root / "b") + b"/raw\xff\xfe.jpg", os.O_CREAT | os.O_WRONLY))
    _age(root)
    return root


EXTENSIONS = {"images": IMG_EXTENSIONS, "tif_tiff": (".tif", ".tiff"), "upper": (".JPG",),
              "str": ".jpg", "empty_ext": ("", ".jpg")}


@pytest.mark.parametrize("exts", list(EXTENSIONS.values()), ids=list(EXTENSIONS))
def test_walk_equals_make_dataset(tree, exts):
    classes, class_to_idx = find_classes(tree)
    expected = make_dataset(str(tree), class_to_idx, extensions=exts, allow_empty=True)
    got = _listing.folder_listing(str(tree), exts, allow_empty=True)
    assert got.classes == classes and got.class_to_idx == class_to_idx
    assert [(got.store.path(i), got.store.target(i)) for i in range(len(got.store))] == expected
    assert got.targets == [t for _, t in expected]


def test_empty_class_error_equals_make_dataset(tree):
    _, class_to_idx = find_classes(tree)
    with pytest.raises(FileNotFoundError) as expected:
        make_dataset(str(tree), class_to_idx, extensions=(".webp",))
    with pytest.raises(FileNotFoundError) as got:
        _listing.folder_listing(str(tree), (".webp",))
    assert str(got.value) == str(expected.value)


def _rows(ds) -> tuple:
    return list(ds.samples), ds.targets, ds.classes, ds.class_to_idx


def test_index_reopen_identical(tree):
    first = FastImageFolder(tree, refresh_index=True)
    assert first._listing_source == "walked"
    again = FastImageFolder(tree)
    assert again._listing_source == "index"
    assert _rows(again) == _rows(first)
    from torchvision.datasets import ImageFolder

    tv = ImageFolder(str(tree))
    assert list(again.samples) == tv.samples and again.targets == tv.targets
    assert again.classes == tv.classes


@pytest.mark.parametrize("change", ["add_file", "remove_file", "add_class", "nested_file",
                                    "rename"])
def test_stale_index_walked_again(tree, change):
    FastImageFolder(tree, refresh_index=True)
    if change == "add_file":
        (tree / "a" / "new.jpg").write_bytes(b"x")
    elif change == "remove_file":
        (tree / "a" / "1.jpg").unlink()
    elif change == "add_class":
        (tree / "d").mkdir()
        (tree / "d" / "n.png").write_bytes(b"x")
    elif change == "nested_file":
        (tree / "b" / "sub" / "deeper" / "t.jpg").write_bytes(b"x")
    else:
        (tree / "a" / "2.PNG").rename(tree / "a" / "0.png")
    _age(tree)
    ds = FastImageFolder(tree)
    assert ds._listing_source == "stale index"
    assert list(ds.samples) == make_dataset(str(tree), find_classes(tree)[1],
                                            extensions=IMG_EXTENSIONS)
    assert FastImageFolder(tree)._listing_source == "index"  # rewritten


def test_racy_folder_not_trusted(tree):
    FastImageFolder(tree, refresh_index=True)
    os.utime(tree / "a")  # now: within RACY_NS of nothing later, but after the walk
    (tree / "a" / "late.jpg").write_bytes(b"x")
    past = os.stat(tree / "a").st_mtime_ns
    index = _listing.index_path(str(tree), IMG_EXTENSIONS)
    assert os.path.exists(index)
    # a folder whose recorded mtime is as recent as the walk is walked again
    ds = FastImageFolder(tree)
    assert ds._listing_source == "stale index" and str(tree / "a" / "late.jpg") in \
        [p for p, _ in ds.samples]
    assert os.stat(tree / "a").st_mtime_ns == past


def test_refresh_walks_again(tree):
    FastImageFolder(tree, refresh_index=True)
    assert FastImageFolder(tree, refresh_index=True)._listing_source == "walked"


def test_small_tree_writes_no_index_unless_refreshed(tree, monkeypatch):
    FastImageFolder(tree)
    assert not os.path.exists(_listing.index_path(str(tree), IMG_EXTENSIONS))
    monkeypatch.setattr(_listing, "INDEX_MIN_FILES", 1)
    assert FastImageFolder(tree)._listing_source == "walked"
    assert FastImageFolder(tree)._listing_source == "index"


def test_custom_hooks_keep_torchvision_walk(tree):
    class Custom(FastImageFolder):
        def find_classes(self, directory):
            return ["a"], {"a": 0}

    assert Custom(tree)._listing_source == "listed"
    assert FastImageFolder(tree, is_valid_file=lambda p: p.endswith(".jpg"))._listing_source \
        == "listed"
    ds = FastDatasetFolder(tree, loader=None, extensions=(".jpg",))
    assert ds._listing_source == "walked"


def test_store_is_a_fixed_set_of_arrays(tree):
    """Structural: nothing per sample is a Python object (a forked worker
    reading samples writes no refcount of the listing)."""
    ds = FastImageFolder(tree)
    arrays = ds.samples.store.arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    assert set(arrays) == set(_listing._STORE_ARRAYS)
    before = {k: (a.ctypes.data, a.nbytes) for k, a in arrays.items()}
    for i in range(len(ds)):
        ds.samples[i]
    assert {k: (a.ctypes.data, a.nbytes) for k, a in ds.samples.store.arrays().items()} == before
    copy = pickle.loads(pickle.dumps(ds))
    assert list(copy.samples) == list(ds.samples) and copy.targets == ds.targets


def test_store_from_pairs_round_trip():
    pairs = [("/x/a.jpg", 3), ("rel/b.png", -1), ("c\0d", 70000)]
    store = SampleStore(pairs)
    again = pickle.loads(pickle.dumps(store))
    assert [(again.path(i), again.target(i)) for i in range(3)] == pairs


def test_growth_slope():
    rows = [{"samples": s, "uss_mib": [10 + s / 10_000 * w for w in (0, 2)]}
            for s in (0, 10_000, 20_000, 30_000)]
    result = bench_listing.growth(rows)
    assert result["slope_mib_per_10k"] == pytest.approx([0, 2])
    assert result["gain_mib"] == pytest.approx([0, 4])


def test_make_tree(tmp_path, tree):
    made = bench_listing.make_tree(tmp_path / "big", 25, 4, tree)
    assert made["files"] == 25 and bench_listing.tree_size(tmp_path / "big") == 25
    assert os.stat(next((tmp_path / "big" / "n00000000").iterdir())).st_nlink > 1
