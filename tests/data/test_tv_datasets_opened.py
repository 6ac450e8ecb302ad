"""fastdecode.datasets' Caltech101, Caltech256, CelebA and INaturalist against torchvision's classes:
the datasets whose ``__getitem__`` opens each file with ``PIL.Image.open`` and no
``convert('RGB')``, so a gray JPEG reaches the chain as an L image and a CMYK JPEG as a CMYK one.

Generated data in each dataset's on-disk layout (as torchvision's own dataset tests write it),
each with RGB, gray and (Caltech) CMYK JPEGs: dataset x configuration x chain. Same length,
classes, targets and items for the same seed (exact=True bit-identical: one channel for a gray
file, four for a CMYK one), the same exception where torchvision's chain fails on a file's mode,
the same exception for a missing dataset, DataLoader's batches."""

import contextlib
import os
import re
import warnings
from unittest import mock

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import datasets as tvd  # noqa: E402
from torchvision import transforms as T  # noqa: E402

from fastdecode import datasets as fdd  # noqa: E402


def _photo(path, seed, mode="RGB", size=(60, 80)):
    """A smooth random JPEG at ``path`` in PIL mode ``mode``."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((size[1], size[0]), Image.Resampling.BICUBIC).convert(mode)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path, quality=90)


def _mode(k):
    """Every third file gray, every seventh CMYK (as Caltech's own files are)."""
    return "CMYK" if k % 7 == 6 else "L" if k % 3 == 1 else "RGB"


def _caltech101(root):
    base = os.path.join(root, "caltech101", "101_ObjectCategories")
    for c, (category, n) in enumerate((("BACKGROUND_Google", 2), ("Faces", 3), ("ant", 4),
                                       ("airplanes", 2))):
        for k in range(1, n + 1):
            _photo(os.path.join(base, category, f"image_{k:04d}.jpg"), 10 * c + k, _mode(c + k))


def _caltech256(root):
    base = os.path.join(root, "caltech256", "256_ObjectCategories")
    for c, (category, n) in enumerate((("001.ak47", 3), ("002.american-flag", 5),
                                       ("257.clutter", 2))):
        for k in range(1, n + 1):
            _photo(os.path.join(base, category, f"{c + 1:03d}_{k:04d}.jpg"), 5 * c + k,
                   _mode(c + k))
        open(os.path.join(base, category, "RENAME2"), "w").close()  # not a .jpg: not counted


def _celeba(root):
    base = os.path.join(root, "celeba")
    names = [f"{i:06d}.jpg" for i in range(1, 9)]
    for i, name in enumerate(names):
        _photo(os.path.join(base, "img_align_celeba", name), i, "L" if i in (1, 2, 3) else "RGB",
               size=(44, 36))
    rng = np.random.default_rng(0)
    rows = {"list_eval_partition.txt": [[i % 3] for i in range(len(names))],
            "identity_CelebA.txt": [[int(v)] for v in rng.integers(1, 100, len(names))]}
    headed = {"list_bbox_celeba.txt": ("image_id x_1 y_1 width height", 4),
              "list_landmarks_align_celeba.txt": ("lefteye_x lefteye_y righteye_x righteye_y", 4),
              "list_attr_celeba.txt": ("Bald Bangs Big_Lips Smiling Young", 5)}
    for fname, values in rows.items():
        with open(os.path.join(base, fname), "w") as f:
            f.write("".join(f"{n} {' '.join(map(str, v))}\n" for n, v in zip(names, values)))
    for fname, (header, width) in headed.items():
        values = (rng.integers(0, 2, (len(names), width)) * 2 - 1 if "attr" in fname
                  else rng.integers(0, 200, (len(names), width)))
        with open(os.path.join(base, fname), "w") as f:
            f.write(f"{len(names)}\n{header}\n")
            f.write("".join(f"{n} {'  '.join(map(str, v))}\n" for n, v in zip(names, values)))


def _inaturalist(root):
    for c, name in enumerate(("Animalia_Arthropoda_Insecta_Lepidoptera_Nymphalidae_Danaus_plexippus",
                              "Animalia_Chordata_Aves_Passeriformes_Corvidae_Corvus_corax",
                              "Plantae_Tracheophyta_Magnoliopsida_Rosales_Rosaceae_Rosa_canina")):
        for k in range(3):
            _photo(os.path.join(root, "2021_train", f"{c:05d}_{name}", f"{k:04x}.jpg"), 3 * c + k,
                   "L" if (c + k) % 3 == 1 else "RGB")
    for s, (supercat, subcats) in enumerate((("Aves", (0, 2)), ("Plantae", (1,)))):
        for sub in subcats:
            for k in range(2):
                _photo(os.path.join(root, "2019", supercat, str(sub), f"{k}.jpg"), 40 + sub + k,
                       "L" if k == s else "RGB")


# dataset -> (writer, [(configuration id, constructor kwargs)], module whose check_integrity is
# patched to a file check, or None)
DATASETS = {
    "Caltech101": (_caltech101, [("category", {}),
                                 ("category-twice", {"target_type": ["category", "category"]})],
                   None),
    "Caltech256": (_caltech256, [("all", {})], None),
    "CelebA": (_celeba, [("train-attr", {"split": "train"}),
                         ("all-identity-bbox", {"split": "all",
                                                "target_type": ["identity", "bbox"]}),
                         ("valid-landmarks", {"split": "valid", "target_type": "landmarks"}),
                         ("test-none", {"split": "test", "target_type": []})], "celeba"),
    "INaturalist": (_inaturalist, [("2021-full", {"version": "2021_train"}),
                                   ("2021-kingdom-genus", {"version": "2021_train",
                                                           "target_type": ["kingdom", "genus"]}),
                                   ("2019-super-full", {"version": "2019",
                                                        "target_type": ["super", "full"]})],
                    None),
}

CHAINS = {
    "none": lambda: None,
    "rrc-uint8": lambda: T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                    T.PILToTensor()]),
    "eval": lambda: T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor(),
                               T.Normalize((0.5,), (0.5,))]),
    "pad-crop": lambda: T.Compose([T.RandomCrop(48, padding=4, pad_if_needed=True),
                                   T.RandomHorizontalFlip(), T.ToTensor()]),
    # torchvision's chain fails on a gray file's (1, H, W): so must ours, with its message
    "rgb-normalize": lambda: T.Compose([T.Resize((32, 32)), T.ToTensor(),
                                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    made = {}

    def root(name):
        if name not in made:
            made[name] = str(tmp_path_factory.mktemp(name.lower()))
            DATASETS[name][0](made[name])
        return made[name]

    return root


def _patched(name):
    module = DATASETS[name][2]
    if module is None:
        return contextlib.nullcontext()
    return mock.patch(f"torchvision.datasets.{module}.check_integrity",
                      lambda fpath, md5=None: os.path.isfile(fpath))


def _pair(roots, name, kw, transform, **fast_kw):
    root = roots(name)
    with _patched(name):
        return (getattr(fdd, name)(root, transform=transform, **kw, **fast_kw),
                getattr(tvd, name)(root, transform=transform, **kw))


def _run(ds, i):
    """(sample, target) or the exception, for the seed ``i``."""
    torch.manual_seed(i)
    try:
        return ds[i]
    except Exception as exc:  # noqa: BLE001 - compared with torchvision's
        return exc


def _same(a, b):
    if isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    if isinstance(b, Image.Image):
        return (isinstance(a, Image.Image) and a.mode == b.mode
                and np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(b, tuple):
        return type(a) is tuple and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(b, torch.Tensor):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name,kw,chain", [
    pytest.param(name, kw, chain, id=f"{name}-{config}-{chain}")
    for name, (_, configs, _) in DATASETS.items() for config, kw in configs for chain in CHAINS])
def test_contract(roots, name, kw, chain):
    """Length, classes, every item (each file in its own mode) and target, for the same seed;
    where torchvision's chain raises on a file's mode, the same exception."""
    ours, theirs = _pair(roots, name, kw, CHAINS[chain](), exact=True)
    assert isinstance(ours, getattr(tvd, name))
    assert len(ours) == len(theirs) > 0
    for attr in ("categories", "attr_names", "all_categories", "categories_index"):
        assert getattr(ours, attr, None) == getattr(theirs, attr, None)
    # each configuration has RGB and gray files (Caltech: CMYK ones too)
    opened = set()
    for path, _ in ours.samples:
        with Image.open(path) as image:
            opened.add(image.mode)
    assert {"L", "RGB"} <= opened, opened
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for i in range(len(theirs)):
            b = _run(theirs, i)
            a = _run(ours, i)
            assert type(a) is type(b), (i, a, b)
            if isinstance(b, Exception):
                assert _same(a, b), (i, a, b)
                continue
            assert _same(a[0], b[0]), i
            assert _same(a[1], b[1]), i
    # the only warnings: the chain run unfused on a CMYK image or, on a gray one, where it fails
    assert all(issubclass(w.category, RuntimeWarning) and "unfused" in str(w.message)
               for w in said), [str(w.message) for w in said]


@pytest.mark.parametrize("name", ["Caltech101", "Caltech256"])
def test_a_cmyk_file_runs_the_chain_unfused_once_said(roots, name):
    """A CMYK JPEG is a CMYK image in torchvision: ours opens it the same way, warned once."""
    ours, theirs = _pair(roots, name, {}, CHAINS["rrc-uint8"](), exact=True)
    cmyk = [i for i in range(len(theirs)) if _run(theirs, i)[0].shape[0] == 4]
    assert cmyk
    with pytest.warns(RuntimeWarning, match=r"\(jpeg, cmyk\) as a CMYK image"):
        assert _same(_run(ours, cmyk[0])[0], _run(theirs, cmyk[0])[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in cmyk:
            assert _run(ours, i)[0].shape[0] == 4


def _as_list(batch):
    """A collate for items of several channel counts (gray and RGB files): the list."""
    return batch


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "2-workers"])
def test_dataloader_batches(roots, workers):
    """DataLoader over CelebA's RGB and gray files: the same items (one or three channels, as
    each file's mode) and targets, batch by batch, in-process and in workers."""
    chain = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])
    ours, theirs = _pair(roots, "CelebA", {"split": "all", "target_type": ["attr", "identity"]},
                         chain, exact=True)
    assert ours.fixed_sample_shape() is None  # items one by one: a file's mode is its own
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(3)
        out.extend(DataLoader(ds, batch_size=3, shuffle=True, num_workers=workers,
                              collate_fn=_as_list, generator=torch.Generator().manual_seed(1)))
    assert len(got) == len(want) == 3
    channels = set()
    for a, b in zip(got, want):
        assert len(a) == len(b)
        for (xa, ta), (xb, tb) in zip(a, b):
            assert _same(xa, xb) and _same(ta, tb)
            channels.add(xb.shape[0])
    assert channels == {1, 3}


def _file_modes(ds):
    modes = []
    for path, _ in ds.samples:
        with Image.open(path) as image:
            modes.append(image.mode)
    return modes


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("name", ["Caltech256", "CelebA", "INaturalist"])
def test_a_batch_of_rgb_files_takes_the_batch_path(roots, name, exact):
    """__getitems__: a batch of RGB JPEGs is decoded in place (its samples views of one batch,
    torchvision's items for the same seed); a batch with a gray or CMYK file, item by item."""
    chain = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize((0.5,), (0.5,))])
    ours, theirs = _pair(roots, name, DATASETS[name][1][0][1], chain, exact=exact)
    modes = _file_modes(ours)
    rgb = [i for i, m in enumerate(modes) if m == "RGB"][:3]
    mixed = [rgb[0], modes.index("L"), rgb[1]]
    for indices, batched in ((rgb, True), (mixed, False)):
        torch.manual_seed(8)
        got = ours.__getitems__(indices)
        torch.manual_seed(8)
        want = [theirs[i] for i in indices]
        for (a, ta), (b, tb) in zip(got, want):
            assert (type(a) is not torch.Tensor) == batched  # a row of the batch
            a = a.as_subclass(torch.Tensor)
            assert a.shape == b.shape and _same(ta, tb)
            assert torch.equal(a, b) if exact else (a - b).abs().max() < 0.2


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_broken_file_in_a_batch(tmp_path, on_error):
    """A truncated RGB JPEG (its header whole) in a batch: an OSError naming it, as the item
    path raises; under on_error='skip' the batch is made item by item, the file replaced."""
    root = str(tmp_path)
    _caltech256(root)
    bad = os.path.join(root, "caltech256", "256_ObjectCategories", "001.ak47", "001_0002.jpg")
    with open(bad, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    ours = fdd.Caltech256(root, transform=T.Compose([T.Resize((24, 24)), T.PILToTensor()]),
                          on_error=on_error)
    modes = _file_modes(ours)
    indices = [i for i, m in enumerate(modes) if m == "RGB"][:3]
    assert 1 in indices  # the broken file is in the batch of RGB files
    if on_error == "raise":
        with pytest.raises(OSError, match=re.escape("001_0002.jpg")):
            ours.__getitems__(indices)
        return
    got = ours.__getitems__(indices)
    assert len(got) == 3 and ours.skipped == 1
    assert all(type(x) is torch.Tensor for x, _ in got)  # item by item
    assert torch.equal(got[2][0], ours[indices[2]][0])


def test_fastloader_resumable_and_threads(roots):
    """FastLoader over gray and RGB files: resumable=True draws each item under its position's
    seed (the same batches in-process and in 2 workers); threads=2 runs the items whole in the
    pool, said once; each item keeps its file's channels."""
    import fastdecode as fd

    chain = T.Compose([T.RandomResizedCrop(24), T.ToTensor()])
    ours, theirs = _pair(roots, "CelebA", {"split": "all"}, chain, exact=True)
    runs = []
    for workers in (0, 2):
        loader = fd.FastLoader(ours, batch_size=3, shuffle=True, num_workers=workers,
                               pin_memory=False, resumable=True, collate_fn=_as_list,
                               generator=torch.Generator().manual_seed(4))
        runs.append([item for batch in loader for item in batch])
    assert len(runs[0]) == len(runs[1]) == len(theirs)
    for (xa, ya), (xb, yb) in zip(*runs):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert sorted({x.shape[0] for x, _ in runs[0]}) == [1, 3]
    with pytest.warns(RuntimeWarning, match="no draw/render split"):
        threaded = [item for batch in fd.FastLoader(ours, batch_size=3, threads=2,
                                                    collate_fn=_as_list, pin_memory=False)
                    for item in batch]
    modes = _file_modes(ours)
    assert [x.shape[0] for x, _ in threaded] == [1 if m == "L" else 3 for m in modes]


def test_a_loader_is_torchvisions_way(roots):
    """INaturalist with torchvision's default_loader: RGB items and FileDataset's batch path
    (a fixed sample shape, DataLoader's batches torchvision's); with a custom loader: called as
    torchvision calls it."""
    kw = {"version": "2021_train"}
    ours, theirs = _pair(roots, "INaturalist", kw | {"loader": tvd.folder.default_loader},
                         T.PILToTensor(), exact=True)
    for i in range(len(theirs)):
        assert ours[i][0].shape[0] == 3 and torch.equal(ours[i][0], theirs[i][0])
    chain = T.Compose([T.RandomResizedCrop(24), T.ToTensor()])
    ours.transform = theirs.transform = chain
    assert ours.fixed_sample_shape() == (3, 24, 24)
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(2)
        out.extend(DataLoader(ds, batch_size=4))
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(xa.as_subclass(torch.Tensor), xb) and torch.equal(ya, yb)
    calls = []
    ours = fdd.INaturalist(roots("INaturalist"), loader=lambda p: calls.append(p) or
                           Image.new("L", (5, 4)), transform=T.PILToTensor(), **kw)
    assert ours[0][0].shape == (1, 4, 5) and len(calls) == 1
    assert len(ours.__getitems__([1, 2])) == 2 and len(calls) == 3


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_dataset_raises_as_torchvision(tmp_path, name):
    kw = DATASETS[name][1][0][1]
    with _patched(name):
        with pytest.raises(RuntimeError) as want:
            getattr(tvd, name)(str(tmp_path / "theirs"), **kw)
        with pytest.raises(RuntimeError, match=re.escape(str(want.value))):
            getattr(fdd, name)(str(tmp_path / "ours"), **kw)


# torchvision's Caltech101 opens each annotation's .mat and image without closing them
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_annotation_targets_load_as_torchvision_with_one_warning(roots, tmp_path):
    """Caltech101 with an 'annotation' target: its items are torchvision's own, said once."""
    io = pytest.importorskip("scipy.io")
    root = roots("Caltech101")
    for category, n in (("Faces_2", 3), ("ant", 4), ("Airplanes_Side_2", 2)):
        os.makedirs(os.path.join(root, "caltech101", "Annotations", category), exist_ok=True)
        for k in range(1, n + 1):
            io.savemat(os.path.join(root, "caltech101", "Annotations", category,
                                    f"annotation_{k:04d}.mat"),
                       {"obj_contour": np.arange(6.0).reshape(2, 3) + k})
    kw = {"target_type": ["category", "annotation"], "transform": T.PILToTensor()}
    with pytest.warns(RuntimeWarning, match="load as torchvision loads them"):
        ours = fdd.Caltech101(root, **kw)
    theirs = tvd.Caltech101(root, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for i in (0, 4):
            (a, (ca, ma)), (b, (cb, mb)) = ours[i], theirs[i]
            assert torch.equal(a, b) and ca == cb and np.array_equal(ma, mb)
