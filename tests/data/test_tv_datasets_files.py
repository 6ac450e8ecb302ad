"""fastdecode.datasets' file datasets (Food101, DTD, OxfordIIITPet, ...) against torchvision's classes
on generated data in each dataset's on-disk layout (JPEG / PPM files, the split and label files as
torchvision's own dataset tests write them; no download): dataset x split x transform.

Same length, classes, class_to_idx, items and targets for the same seed (exact=True bit-identical),
the same exception for a missing dataset, ``isinstance`` of torchvision's class, batches equal to
the items; a configuration whose items are not one RGB file (OxfordIIITPet's segmentation) loads
as torchvision's, with one warning."""

import contextlib
import json
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

from helpers.tv_items import assert_same_items  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _photo(path, seed, mode="RGB", size=(60, 80)):
    """A smooth random image saved at ``path`` (its format from the suffix)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((size[1], size[0]), Image.Resampling.BICUBIC).convert(mode)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path, quality=90) if path.endswith(".jpg") else img.save(path)


def _food101(root):
    base = os.path.join(root, "food-101")
    classes = ["apple_pie", "baklava", "churros"]
    for split, ids in (("train", (1, 2, 3)), ("test", (4, 5))):
        meta = {c: [f"{c}/{c}{i}" for i in ids] for c in classes}
        os.makedirs(os.path.join(base, "meta"), exist_ok=True)
        with open(os.path.join(base, "meta", f"{split}.json"), "w") as f:
            json.dump(meta, f)
        for c in classes:
            for i in ids:  # one gray JPEG: torchvision converts it to RGB
                _photo(os.path.join(base, "images", c, f"{c}{i}.jpg"), i + 10 * len(c),
                       "L" if (c, i) == ("baklava", 2) else "RGB")


def _dtd(root):
    base = os.path.join(root, "dtd", "dtd")
    names = {c: [f"{c}_{i:04d}.jpg" for i in range(3)] for c in ("banded", "braided", "zigzagged")}
    for c, files in names.items():
        for k, name in enumerate(files):
            _photo(os.path.join(base, "images", c, name), k + 7 * len(c))
    os.makedirs(os.path.join(base, "labels"))
    for split in ("train", "val", "test"):
        for fold in range(1, 11):
            with open(os.path.join(base, "labels", f"{split}{fold}.txt"), "w") as f:
                picks = [(c, files[(fold + len(split)) % 3]) for c, files in names.items()]
                f.write("".join(f"{c}/{n}\n" for c, n in picks))


def _oxford_pet(root):
    base = os.path.join(root, "oxford-iiit-pet")
    ids = [("Abyssinian_1", 1, 1), ("Abyssinian_2", 1, 1), ("american_bulldog_1", 2, 2),
           ("Bengal_4", 3, 1), ("american_bulldog_7", 2, 2)]
    for k, (image_id, _, _) in enumerate(ids):
        _photo(os.path.join(base, "images", f"{image_id}.jpg"), k)
        trimap = np.random.default_rng(k).integers(1, 4, (60, 80), dtype=np.uint8)
        os.makedirs(os.path.join(base, "annotations", "trimaps"), exist_ok=True)
        Image.fromarray(trimap).save(os.path.join(base, "annotations", "trimaps", f"{image_id}.png"))
    for split, part in (("trainval", ids[:3]), ("test", ids[3:])):
        with open(os.path.join(base, "annotations", f"{split}.txt"), "w") as f:
            f.write("".join(f"{i} {label} {species} 1\n" for i, label, species in part))


def _country211(root):
    for split in ("train", "valid", "test"):
        for c in ("AD", "AE", "ZW"):
            for i in range(2):
                _photo(os.path.join(root, "country211", split, c, f"{i}.jpg"), i + len(split) + ord(c[1]))


def _gtsrb(root):
    base = os.path.join(root, "gtsrb")
    for c in range(3):
        for i in range(2):
            _photo(os.path.join(base, "GTSRB", "Training", f"{c:05d}", f"{i:05d}_{c:05d}.ppm"),
                   c * 3 + i, size=(31, 35))
    rows = []
    for i in range(4):
        name = f"{i:05d}.ppm"
        _photo(os.path.join(base, "GTSRB", "Final_Test", "Images", name), 50 + i, size=(40, 33))
        rows.append(f"{name};33;40;5;5;28;35;{i % 3}")
    with open(os.path.join(base, "GT-final_test.csv"), "w") as f:
        f.write("Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId\n" + "\n".join(rows) + "\n")


def _sun397(root):
    base = os.path.join(root, "SUN397")
    classes = ["/a/abbey", "/b/badlands", "/b/bakery/shop"]
    for k, c in enumerate(classes):
        for i in range(2):
            _photo(os.path.join(base, *c.strip("/").split("/"), f"sun_{k}{i}.jpg"), 3 * k + i)
    with open(os.path.join(base, "ClassName.txt"), "w") as f:
        f.write("".join(f"{c}\n" for c in classes))


def _fgvc(root):
    data = os.path.join(root, "fgvc-aircraft-2013b", "data")
    variants = ["707-320", "727-200", "A300B4"]
    os.makedirs(os.path.join(data, "images"))
    for level, names in (("variant", variants), ("family", ["Boeing 707", "Boeing 727", "A300"]),
                         ("manufacturer", ["Airbus", "Boeing"])):
        with open(os.path.join(data, {"variant": "variants.txt", "family": "families.txt",
                                      "manufacturer": "manufacturers.txt"}[level]), "w") as f:
            f.write("".join(f"{n}\n" for n in names))
        for split in ("train", "val", "trainval", "test"):
            with open(os.path.join(data, f"images_{level}_{split}.txt"), "w") as f:
                for i in range(4):
                    image = f"{1000000 + i + 10 * len(split)}"
                    _photo(os.path.join(data, "images", f"{image}.jpg"), i + len(split))
                    f.write(f"{image} {names[i % len(names)]}\n")


def _places365(root):
    classes = ["/a/airfield", "/b/bakery/shop", "/c/canyon"]
    with open(os.path.join(root, "categories_places365.txt"), "w") as f:
        f.write("".join(f"{c} {i}\n" for i, c in enumerate(classes)))
    lines = []
    for i, c in enumerate(classes):
        for k in range(2):
            name = f"{c}/{k:08d}.jpg"
            _photo(os.path.join(root, "data_large_standard", *name.strip("/").split("/")), 3 * i + k)
            lines.append(f"{name} {i}")
    with open(os.path.join(root, "places365_train_standard.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(root, "places365_val.txt"), "w") as f:
        for k in range(4):
            _photo(os.path.join(root, "val_large", f"Places365_val_{k:08d}.jpg"), 20 + k)
            f.write(f"Places365_val_{k:08d}.jpg {k % 3}\n")


def _lfw_people(root):
    base = os.path.join(root, "lfw-py")
    people = [("Ann_Smith", 2), ("Bo_Li", 1), ("Cy_Young", 3)]
    os.makedirs(base)
    open(os.path.join(base, "lfw-funneled.tgz"), "wb").close()  # checked for, never opened
    with open(os.path.join(base, "lfw-names.txt"), "w") as f:
        f.write("".join(f"{name} {n}\n" for name, n in people))
    for name, n in people:
        for k in range(1, n + 1):
            _photo(os.path.join(base, "lfw_funneled", name, f"{name}_{k:04d}.jpg"), k + len(name))
    with open(os.path.join(base, "peopleDevTrain.txt"), "w") as f:
        f.write(f"{len(people)}\n" + "".join(f"{name}\t{n}\n" for name, n in people))


def _flowers102(root):
    """flowers-102/jpg/image_NNNNN.jpg, imagelabels.mat (labels 1..C), setid.mat (trnid, valid,
    tstid), as torchvision's Flowers102TestCase writes them."""
    io = pytest.importorskip("scipy.io")
    base = os.path.join(root, "flowers-102")
    total = 12
    for k in range(1, total + 1):  # one gray JPEG: the default loader converts it to RGB
        _photo(os.path.join(base, "jpg", f"image_{k:05d}.jpg"), k, "L" if k == 4 else "RGB")
    rng = np.random.default_rng(3)
    io.savemat(os.path.join(base, "imagelabels.mat"),
               {"labels": rng.integers(1, 4, (1, total)).astype(np.uint8)})
    ids = rng.permutation(np.arange(1, total + 1, dtype=np.uint16))
    io.savemat(os.path.join(base, "setid.mat"), {"trnid": ids[:5].reshape(1, -1),
                                                 "valid": ids[5:9].reshape(1, -1),
                                                 "tstid": ids[9:].reshape(1, -1)})


def _stanford_cars(root):
    """stanford_cars/{cars_train,cars_test}/*.jpg, devkit/cars_train_annos.mat,
    cars_test_annos_withlabels.mat (records of class, fname), devkit/cars_meta.mat (class_names),
    as torchvision's StanfordCarsTestCase writes them."""
    io = pytest.importorskip("scipy.io")
    base = os.path.join(root, "stanford_cars")
    os.makedirs(os.path.join(base, "devkit"))
    for split, n, annos in (("train", 5, os.path.join("devkit", "cars_train_annos.mat")),
                            ("test", 4, "cars_test_annos_withlabels.mat")):
        names = [f"{i:05d}.jpg" for i in range(n)]
        for i, name in enumerate(names):
            _photo(os.path.join(base, f"cars_{split}", name), 40 + i + n)
        classes = np.random.default_rng(n).integers(1, 4, n).astype(np.uint8)
        records = np.rec.fromarrays([classes, np.array(names)], names=["class", "fname"])
        io.savemat(os.path.join(base, annos), {"annotations": records})
    io.savemat(os.path.join(base, "devkit", "cars_meta.mat"),
               {"class_names": np.array(["Audi A4 2012", "BMW M3 2010", "Fiat 500 2012"],
                                        dtype=object)})


# dataset -> (writer, [(split id, constructor kwargs)])
DATASETS = {
    "Food101": (_food101, [("train", {"split": "train"}), ("test", {"split": "test"})]),
    "DTD": (_dtd, [("train1", {"split": "train", "partition": 1}),
                   ("test10", {"split": "test", "partition": 10})]),
    "OxfordIIITPet": (_oxford_pet, [("trainval", {"split": "trainval"}),
                                    ("test-binary", {"split": "test",
                                                     "target_types": ["category", "binary-category"]})]),
    "Country211": (_country211, [("train", {"split": "train"}), ("valid", {"split": "valid"})]),
    "GTSRB": (_gtsrb, [("train", {"split": "train"}), ("test", {"split": "test"})]),
    "SUN397": (_sun397, [("all", {})]),
    "FGVCAircraft": (_fgvc, [("trainval-variant", {"split": "trainval"}),
                             ("test-manufacturer", {"split": "test",
                                                    "annotation_level": "manufacturer"})]),
    "Places365": (_places365, [("train-standard", {"split": "train-standard"}),
                               ("val", {"split": "val"})]),
    "LFWPeople": (_lfw_people, [("train", {"split": "train"})]),
    "Flowers102": (_flowers102, [("train", {"split": "train"}), ("val", {"split": "val"}),
                                 ("test", {"split": "test"})]),
    "StanfordCars": (_stanford_cars, [("train", {"split": "train"}), ("test", {"split": "test"})]),
}
# the datasets whose md5 checks are patched to file checks (the files are generated)
CHECKED = {"Places365": "places365", "LFWPeople": "lfw", "Flowers102": "flowers102"}

CHAINS = {
    "none": lambda: None,
    "train": lambda: T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                                T.Normalize(MEAN, STD)]),
    "eval": lambda: T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor(), T.Normalize(MEAN, STD)]),
    "pad-crop": lambda: T.Compose([T.RandomCrop(48, padding=4, pad_if_needed=True),
                                   T.RandomHorizontalFlip(), T.PILToTensor()]),
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
    if name not in CHECKED:
        return contextlib.nullcontext()
    return mock.patch(f"torchvision.datasets.{CHECKED[name]}.check_integrity",
                      lambda fpath, md5=None: os.path.isfile(fpath))


def _pair(roots, name, kw, transform, **fast_kw):
    root = roots(name)
    with _patched(name):
        return (getattr(fdd, name)(root, transform=transform, **kw, **fast_kw),
                getattr(tvd, name)(root, transform=transform, **kw))


@pytest.mark.parametrize("name,kw,chain", [
    pytest.param(name, kw, chain, id=f"{name}-{split}-{chain}")
    for name, (_, splits) in DATASETS.items() for split, kw in splits for chain in CHAINS])
def test_contract(roots, name, kw, chain):
    """Length, classes, class_to_idx, isinstance, every item and target, for the same seed."""
    ours, theirs = _pair(roots, name, kw, CHAINS[chain](), exact=True)
    assert isinstance(ours, getattr(tvd, name))
    assert getattr(ours, "class_to_idx", None) == getattr(theirs, "class_to_idx", None)
    assert_same_items(ours, theirs)  # classes too (GTSRB: none)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("name", ["Food101", "GTSRB", "Flowers102", "StanfordCars"])
def test_batches_and_dataloader(roots, name, exact):
    """The in-place batch path under DataLoader: the items' tensors (exact: bit for bit)."""
    kw = DATASETS[name][1][0][1]
    ours, theirs = _pair(roots, name, kw, CHAINS["train"](), exact=exact)
    assert ours.fixed_sample_shape() == (3, 48, 48)
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(11)
        out.extend(DataLoader(ds, batch_size=3, shuffle=True,
                              generator=torch.Generator().manual_seed(2)))
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(ya, yb)
        if exact:
            assert torch.equal(xa.as_subclass(torch.Tensor), xb)
        else:  # fuse's default-mode bound on these small images: a few levels
            assert (xa.as_subclass(torch.Tensor) - xb).abs().max() < 0.2


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_dataset_raises_as_torchvision(tmp_path, name):
    kw = DATASETS[name][1][0][1]
    with _patched(name):
        with pytest.raises(RuntimeError) as want:
            getattr(tvd, name)(str(tmp_path), **kw)
        with pytest.raises(RuntimeError, match=re.escape(str(want.value))):
            getattr(fdd, name)(str(tmp_path), **kw)


# torchvision's OxfordIIITPet opens each mask without closing it (its own ResourceWarning)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_segmentation_targets_load_as_torchvision_with_one_warning(roots):
    """OxfordIIITPet with a segmentation target: items are torchvision's own, said once."""
    kw = {"split": "trainval", "target_types": ["category", "segmentation"]}
    with pytest.warns(RuntimeWarning, match="load as torchvision loads them"):
        ours = fdd.OxfordIIITPet(roots("OxfordIIITPet"), transform=T.PILToTensor(), **kw)
    theirs = tvd.OxfordIIITPet(roots("OxfordIIITPet"), transform=T.PILToTensor(), **kw)
    assert len(ours) == len(theirs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # said once, at construction
        (a, (ca, sa)), (b, (cb, sb)) = ours[1], theirs[1]
        assert torch.equal(a, b) and ca == cb
        assert np.array_equal(np.asarray(sa), np.asarray(sb))
        assert len(ours.__getitems__([0, 2])) == 2


def test_a_bad_file_is_an_oserror_naming_it(roots, tmp_path):
    """A corrupt file raises an OSError naming it (torchvision's PIL raises one too)."""
    root = str(tmp_path)
    _food101(root)
    bad = os.path.join(root, "food-101", "images", "churros", "churros1.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff not a jpeg")
    ours = fdd.Food101(root, split="train", transform=T.PILToTensor())
    index = [str(p) for p in ours._image_files].index(bad)
    with pytest.raises(OSError, match=re.escape("churros1.jpg")):
        ours[index]


def test_lfw_people_calls_a_custom_loader_as_torchvision_does(roots):
    """LFW keeps its ``loader`` as ``_loader``: a custom one is still called (nothing fused)."""
    def gray(path):
        with open(path, "rb") as f:
            return Image.open(f).convert("L")

    with _patched("LFWPeople"):
        ours = fdd.LFWPeople(roots("LFWPeople"), split="train", transform=T.PILToTensor(),
                             loader=gray)
        theirs = tvd.LFWPeople(roots("LFWPeople"), split="train", transform=T.PILToTensor(),
                               loader=gray)
    assert ours.fixed_sample_shape() is None
    for i in range(len(theirs)):
        (a, ta), (b, tb) = ours[i], theirs[i]
        assert a.shape[0] == 1 and torch.equal(a, b) and ta == tb


def _lfw_pairs(root):
    """LFW's pairs view: ``pairsDevTrain.txt`` (its count, matched then unmatched pairs) over
    the people tree."""
    _lfw_people(root)
    with open(os.path.join(root, "lfw-py", "pairsDevTrain.txt"), "w") as f:
        f.write("2\nAnn_Smith\t1\t2\nCy_Young\t1\t3\nAnn_Smith\t1\tBo_Li\t1\nBo_Li\t1\tCy_Young\t2\n")


def test_lfw_pairs_loads_as_torchvision_with_one_warning(tmp_path):
    """LFWPairs (two images and a target per item): the swap keeps torchvision's items, said
    once at construction; DataLoader and FastLoader take its items one by one."""
    from fastdecode.loader import FastLoader

    root = str(tmp_path)
    _lfw_pairs(root)
    chain = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    with _patched("LFWPeople"):
        with pytest.warns(RuntimeWarning, match="load as torchvision loads them"):
            ours = fdd.LFWPairs(root, split="train", transform=chain)
        theirs = tvd.LFWPairs(root, split="train", transform=chain)
    assert isinstance(ours, tvd.LFWPairs) and len(ours) == len(theirs) == 4
    assert ours.fixed_sample_shape() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # said once, at construction
        for i in range(len(theirs)):
            torch.manual_seed(i)
            a1, a2, ta = ours[i]
            torch.manual_seed(i)
            b1, b2, tb = theirs[i]
            assert torch.equal(a1, b1) and torch.equal(a2, b2) and ta == tb
        torch.manual_seed(3)
        got = list(DataLoader(ours, batch_size=2))
        torch.manual_seed(3)
        want = list(DataLoader(theirs, batch_size=2))
        assert all(torch.equal(x, y) for g, w in zip(got, want) for x, y in zip(g, w))
        assert sum(len(b[2]) for b in FastLoader(ours, batch_size=2, num_workers=0)) == 4
