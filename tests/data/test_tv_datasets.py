"""fastdecode.datasets' array datasets (CIFAR, MNIST and its kin, SVHN, STL10) against torchvision's
classes on generated data in each dataset's on-disk format (as torchvision's own dataset tests
fake them: the files written, the md5 checks patched): dataset x split x transform.

Same length, targets, classes, class_to_idx and exceptions; the same items for the same seed,
exact=True bit-identical, one channel for gray datasets; batches (``__getitems__``, DataLoader)
equal to the items stacked; ``isinstance`` of torchvision's class."""

import contextlib
import os
import pickle
import re
import struct
from unittest import mock

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import datasets as tvd  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from fastdecode import datasets as fdd  # noqa: E402

N = 6  # images per split file


def _images(shape, seed):
    """Smooth random uint8 images (a photo-like low-frequency field plus noise)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (shape[0],) + (4, 4) + shape[3:], dtype=np.uint8)
    big = np.repeat(np.repeat(base, -(-shape[1] // 4), 1), -(-shape[2] // 4), 2)[:, :shape[1], :shape[2]]
    noise = rng.integers(-20, 21, big.shape)
    return np.clip(big.astype(np.int16) + noise, 0, 255).astype(np.uint8)


# -- the on-disk formats -------------------------------------------------------------


def _cifar(root, name):
    folder, files, meta, key, label = {
        "CIFAR10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
                    "batches.meta", "label_names", "labels"),
        "CIFAR100": ("cifar-100-python", ["train", "test"], "meta", "fine_label_names",
                     "fine_labels"),
    }[name]
    os.makedirs(os.path.join(root, folder))
    classes = 10 if name == "CIFAR10" else 100
    for k, fname in enumerate(files):
        data = _images((N, 32, 32, 3), k).transpose(0, 3, 1, 2).reshape(N, -1)
        labels = [int(v) for v in np.random.default_rng(k).integers(0, classes, N)]
        with open(os.path.join(root, folder, fname), "wb") as f:
            pickle.dump({"data": data, label: labels}, f)
    with open(os.path.join(root, folder, meta), "wb") as f:
        pickle.dump({key: [f"class{i}" for i in range(classes)]}, f)


def _idx(path, arr):
    code = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}[arr.dtype]
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, code, arr.ndim))
        f.write(struct.pack(f">{arr.ndim}I", *arr.shape))
        f.write(arr.astype(arr.dtype.newbyteorder(">")).tobytes())


def _mnist(root, name, **kw):
    raw = os.path.join(root, name, "raw")
    os.makedirs(raw)
    if name == "EMNIST":
        prefixes = [f"emnist-{kw['split']}-{part}" for part in ("train", "test")]
        pairs = [(f"{p}-images-idx3-ubyte", f"{p}-labels-idx1-ubyte") for p in prefixes]
    elif name == "QMNIST":
        pairs = [(f"qmnist-{p}-images-idx3-ubyte", f"qmnist-{p}-labels-idx2-int")
                 for p in ("train", "test")]
    else:
        pairs = [(f"{p}-images-idx3-ubyte", f"{p}-labels-idx1-ubyte") for p in ("train", "t10k")]
    for k, (images, labels) in enumerate(pairs):
        _idx(os.path.join(raw, images), _images((N, 28, 28), 10 + k))
        rng = np.random.default_rng(20 + k)
        if name == "QMNIST":
            _idx(os.path.join(raw, labels), rng.integers(0, 10, (N, 8)).astype(np.int32))
        else:
            _idx(os.path.join(raw, labels), rng.integers(0, 10, N).astype(np.uint8))


def _stl10(root, name):
    folder = os.path.join(root, "stl10_binary")
    os.makedirs(folder)
    for k, part in enumerate(("train", "test", "unlabeled")):
        # stored column-major per channel (torchvision transposes H and W back)
        _images((N, 96, 96, 3), 30 + k).transpose(0, 3, 2, 1).tofile(
            os.path.join(folder, f"{part}_X.bin"))
        if part != "unlabeled":
            (np.random.default_rng(k).integers(0, 10, N) + 1).astype(np.uint8).tofile(
                os.path.join(folder, f"{part}_y.bin"))
    with open(os.path.join(folder, "class_names.txt"), "w") as f:
        f.write("\n".join(f"class{i}" for i in range(10)) + "\n")
    with open(os.path.join(folder, "fold_indices.txt"), "w") as f:
        f.write("\n".join(" ".join(str(i) for i in range(k % N + 1)) for k in range(10)) + "\n")


def _svhn(root, name):
    io = pytest.importorskip("scipy.io")
    for k, split in enumerate(("train", "test", "extra")):
        x = _images((N, 32, 32, 3), 40 + k).transpose(1, 2, 3, 0)
        y = np.random.default_rng(k).integers(1, 11, (N, 1)).astype(np.uint8)
        io.savemat(os.path.join(root, f"{split}_32x32.mat"), {"X": x, "y": y})


# dataset -> (writer, [(split id, constructor kwargs)], module whose check_integrity is patched)
DATASETS = {
    "CIFAR10": (_cifar, [("train", {"train": True}), ("test", {"train": False})], "cifar"),
    "CIFAR100": (_cifar, [("train", {"train": True}), ("test", {"train": False})], "cifar"),
    "MNIST": (_mnist, [("train", {"train": True}), ("test", {"train": False})], "mnist"),
    "FashionMNIST": (_mnist, [("train", {"train": True}), ("test", {"train": False})], "mnist"),
    "KMNIST": (_mnist, [("train", {"train": True}), ("test", {"train": False})], "mnist"),
    "EMNIST": (_mnist, [("letters-train", {"split": "letters", "train": True}),
                        ("letters-test", {"split": "letters", "train": False})], "mnist"),
    "QMNIST": (_mnist, [("train", {"what": "train"}), ("test", {"what": "test"}),
                        ("train-nocompat", {"what": "train", "compat": False})], "mnist"),
    "STL10": (_stl10, [("train", {"split": "train"}), ("test", {"split": "test"}),
                       ("unlabeled", {"split": "unlabeled"}), ("fold3", {"split": "train", "folds": 3})],
              "stl10"),
    "SVHN": (_svhn, [("train", {"split": "train"}), ("extra", {"split": "extra"})], "svhn"),
}
GRAY = {"MNIST", "FashionMNIST", "KMNIST", "EMNIST", "QMNIST"}

CHAINS = {
    "none": lambda: None,
    "seed-example": lambda: T.Compose([T.Resize((224, 224)), T.ToTensor(),
                                       T.Normalize((0.5,), (0.5,))]),
    "cifar-crop": lambda: T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(),
                                     T.ToTensor(), T.Normalize((0.5,), (0.5,))]),
    "rrc-uint8": lambda: T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                    T.PILToTensor()]),
    "resize-center": lambda: T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor()]),
    "resize-short-side": lambda: T.Compose([T.Resize(40), T.ToTensor()]),
    "mnist-classic": lambda: T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))]),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    made = {}

    def root(name, split_kw):
        key = (name, split_kw.get("split"))
        if key not in made:
            path = str(tmp_path_factory.mktemp(name.lower()))
            writer = DATASETS[name][0]
            writer(path, name, **({"split": split_kw["split"]} if name == "EMNIST" else {}))
            made[key] = path
        return made[key]

    return root


def _patched(module):
    """check_integrity as a file-existence check (the md5 sums are the real files')."""
    return mock.patch(f"torchvision.datasets.{module}.check_integrity",
                      lambda fpath, md5=None: os.path.isfile(fpath))


def _pair(roots, name, split_kw, transform, **fast_kw):
    root = roots(name, split_kw)
    with _patched(DATASETS[name][2]):
        ours = getattr(fdd, name)(root, transform=transform, **split_kw, **fast_kw)
        theirs = getattr(tvd, name)(root, transform=transform, **split_kw)
    return ours, theirs


def _cases():
    return [pytest.param(name, kw, chain, id=f"{name}-{split}-{chain}")
            for name, (_, splits, _) in DATASETS.items() for split, kw in splits for chain in CHAINS]


def _same(a, b, exact):
    if isinstance(b, Image.Image):
        return isinstance(a, Image.Image) and a.mode == b.mode and np.array_equal(np.asarray(a),
                                                                                np.asarray(b))
    assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape)
    if exact:
        return torch.equal(a, b)
    tol = 1 if a.dtype == torch.uint8 else 1.01 / 255 / 0.5  # one level, normalized by std 0.5
    return (a.double() - b.double()).abs().max().item() <= tol


def _targets_equal(a, b):
    if isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name,split_kw,chain", _cases())
def test_contract(roots, name, split_kw, chain):
    """Length, classes, targets, isinstance and every item, for the same seed (exact=True)."""
    ours, theirs = _pair(roots, name, split_kw, CHAINS[chain](), exact=True)
    assert isinstance(ours, getattr(tvd, name))
    assert len(ours) == len(theirs)
    assert getattr(ours, "classes", None) == getattr(theirs, "classes", None)
    if hasattr(theirs, "class_to_idx"):
        assert ours.class_to_idx == theirs.class_to_idx
    for attr in ("targets", "labels"):
        if hasattr(theirs, attr):
            mine, want = getattr(ours, attr), getattr(theirs, attr)
            assert (torch.equal(mine, want) if isinstance(want, torch.Tensor)
                    else np.array_equal(np.asarray(mine), np.asarray(want)))
    for i in range(len(theirs)):
        torch.manual_seed(i)
        a, ta = ours[i]
        torch.manual_seed(i)
        b, tb = theirs[i]
        assert _same(a, b, exact=True), i
        assert _targets_equal(ta, tb), i
        if name in GRAY and not isinstance(b, Image.Image):
            assert a.shape[0] == 1


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("name", ["CIFAR10", "MNIST", "STL10"])
@pytest.mark.parametrize("chain", ["seed-example", "cifar-crop", "rrc-uint8", "resize-short-side",
                                   "mnist-classic"])
def test_batches_equal_items(roots, name, chain, exact):
    """__getitems__ (the in-place batch path) gives the items' tensors, draws in the same order."""
    kw = DATASETS[name][1][0][1]
    ours, theirs = _pair(roots, name, kw, CHAINS[chain](), exact=exact)
    assert ours.fixed_sample_shape() is not None
    indices = [3, 0, 5, 1]
    torch.manual_seed(7)
    batch = ours.__getitems__(indices)
    torch.manual_seed(7)
    items = [theirs[i] for i in indices]
    for (a, ta), (b, tb) in zip(batch, items):
        assert _same(a.as_subclass(torch.Tensor), b, exact)
        assert ta == tb


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "2-workers"])
def test_dataloader_as_in_the_seed_example(roots, workers):
    """The seed's example, torchvision's DataLoader unchanged: the same batches and targets."""
    ours, theirs = _pair(roots, "CIFAR10", {"train": True}, CHAINS["cifar-crop"](), exact=True)
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(5)  # in-process, the chain draws from the global generator
        loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers,
                            generator=torch.Generator().manual_seed(3))
        out.extend(loader)
    assert len(got) == len(want)
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(xa.as_subclass(torch.Tensor), xb)
        assert torch.equal(ya, yb)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_dataset_raises_as_torchvision(tmp_path, name):
    """No files and no download: torchvision's own exception and message."""
    if name == "SVHN":
        pytest.importorskip("scipy.io")
    kw = DATASETS[name][1][0][1]
    with _patched(DATASETS[name][2]):
        with pytest.raises(RuntimeError) as want:
            getattr(tvd, name)(str(tmp_path), **kw)
        with pytest.raises(RuntimeError, match=re.escape(str(want.value))):
            getattr(fdd, name)(str(tmp_path), **kw)


def test_gray_stays_one_channel(roots):
    """MNIST + ToTensor is (1, 28, 28), as torchvision's; every image has that size, so the
    batch path takes it (N, 1, 28, 28), as it takes a chain that fixes the size itself."""
    ours, theirs = _pair(roots, "MNIST", {"train": True}, T.ToTensor())
    assert ours[0][0].shape == theirs[0][0].shape == (1, 28, 28)
    assert ours.fixed_sample_shape() == (1, 28, 28)  # the dataset's own size
    assert ours.__getitems__([0, 1])[0][0].shape == (1, 28, 28)
    ours.transform = T.Compose([T.RandomCrop(24, padding=2), T.ToTensor()])
    assert ours.fixed_sample_shape() == (1, 24, 24)
    ours.transform = T.Compose([T.ToTensor(), T.Lambda(lambda x: x)])
    assert ours.fixed_sample_shape() is None  # a step after the table: items one by one


def test_a_chain_that_fails_on_gray_fails_as_in_torchvision(roots):
    """A 3-channel Normalize on MNIST raises torchvision's error (run unfused, warned once)."""
    chain = T.Compose([T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    ours, theirs = _pair(roots, "MNIST", {"train": True}, chain)
    with pytest.raises(RuntimeError) as want:
        theirs[0]
    with pytest.warns(RuntimeWarning, match="runs the chain unfused"):
        with pytest.raises(RuntimeError, match=re.escape(str(want.value))):
            ours[0]


@pytest.mark.parametrize("name", ["CIFAR10", "MNIST"])
def test_fastloader_in_process_gives_the_items(roots, name):
    """FastLoader (its CPU ring, decode_batch_into) in-process: DataLoader's batches over
    torchvision's class, for the same seed."""
    import fastdecode as fd

    chain = CHAINS["cifar-crop"]()
    ours, theirs = _pair(roots, name, DATASETS[name][1][0][1], chain, exact=True)
    torch.manual_seed(4)
    got = list(fd.FastLoader(ours, batch_size=4, num_workers=0, pin_memory=False))
    torch.manual_seed(4)
    want = list(DataLoader(theirs, batch_size=4))
    assert len(got) == len(want)
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(xa.as_subclass(torch.Tensor), xb)
        assert torch.equal(ya, yb)


def test_fastloader_resumable_draws_by_position(roots):
    """FastLoader(resumable=True): each sample's draws depend on its position only, so the
    batches are the same in-process and with 2 workers, run after run."""
    import fastdecode as fd

    ours, _ = _pair(roots, "CIFAR10", {"train": True}, CHAINS["cifar-crop"](), exact=True)
    runs = []
    for workers in (0, 2, 0):
        loader = fd.FastLoader(ours, batch_size=4, shuffle=True, num_workers=workers,
                               pin_memory=False, resumable=True,
                               generator=torch.Generator().manual_seed(9))
        runs.append([(x.as_subclass(torch.Tensor).clone(), y) for x, y in loader])
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for (xa, ya), (xb, yb) in zip(runs[0], other):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def _threads_run(ds, seed=9, **kw):
    import fastdecode as fd

    loader = fd.FastLoader(ds, batch_size=4, shuffle=True, pin_memory=False,
                           generator=torch.Generator().manual_seed(seed), **kw)
    return [(x.as_subclass(torch.Tensor).clone(), y) for x, y in loader]


@pytest.mark.parametrize("name", ["CIFAR10", "MNIST"])
@pytest.mark.parametrize("chain", ["cifar-crop", "rrc-uint8", "seed-example", "two-resamples"])
def test_fastloader_threads_split_draws_from_renders(roots, name, chain):
    """FastLoader(threads=N): each batch's draws are made in the loader's thread under
    per-sample seeds, the renders run in the pool (no 'unsplit' warning: warnings are errors).
    So the batches are the same for 1 and 2 threads, run after run; with resumable=True they
    are num_workers=0's (each sample seeded by its position); the loop's global RNG is as if
    no loader ran."""
    transform = CHAINS[chain]() if chain in CHAINS else T.Compose([  # fusion stops at the second
        T.RandomCrop(24, padding=4), T.Resize((40, 40)), T.Resize((20, 20)), T.ToTensor()])
    with (pytest.warns(RuntimeWarning, match="a second resample") if chain not in CHAINS
          else contextlib.nullcontext()):
        ours, _ = _pair(roots, name, DATASETS[name][1][0][1], transform, exact=True)
    state = torch.get_rng_state()
    runs = [_threads_run(ours, threads=t) for t in (1, 2, 2)]
    assert torch.equal(torch.get_rng_state(), state)
    resumable = [_threads_run(ours, threads=2, resumable=True),
                 _threads_run(ours, num_workers=0, resumable=True)]
    for first, other in ((runs[0], runs[1]), (runs[0], runs[2]), tuple(resumable)):
        assert len(first) == len(other) == -(-len(ours) // 4)
        for (xa, ya), (xb, yb) in zip(first, other):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(runs[0][0][0], _threads_run(ours, seed=10, threads=2)[0][0])


CROP_CHAINS = {
    "v2-five": lambda: v2.Compose([v2.Resize(40), v2.FiveCrop(32), v2.ToImage(),
                                   v2.ToDtype(torch.float32, scale=True),
                                   v2.Normalize((0.5,), (0.5,))]),
    "v1-ten-lambda": lambda: T.Compose([T.TenCrop(24), T.Lambda(
        lambda crops: torch.stack([T.functional.pil_to_tensor(c) for c in crops]))]),
}


@pytest.mark.filterwarnings("ignore:fastdecode.*only v2 tensor steps fuse:RuntimeWarning")
@pytest.mark.parametrize("chain", sorted(CROP_CHAINS))
@pytest.mark.parametrize("name", ["CIFAR10", "MNIST"])
def test_five_and_ten_crop_items_and_batches(roots, name, chain):
    """FiveCrop/TenCrop: an item is a tuple (or the Lambda's stack), so no batch path; DataLoader's
    batches and the items are torchvision's, bit for bit with exact=True."""
    kw = DATASETS[name][1][0][1]
    ours, theirs = _pair(roots, name, kw, CROP_CHAINS[chain](), exact=True)
    assert ours.fixed_sample_shape() is None
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(4)
        out.extend(DataLoader(ds, batch_size=4, shuffle=True,
                              generator=torch.Generator().manual_seed(1)))
    assert len(got) == len(want) > 1
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(ya, yb)
        xa, xb = (xa, xb) if isinstance(xb, list) else ([xa], [xb])
        assert len(xa) == len(xb) and all(torch.equal(a.as_subclass(torch.Tensor), b.as_subclass(
            torch.Tensor)) for a, b in zip(xa, xb))
