"""The guide's recipe for adding a dataset (docs/guides/torchvision-datasets.md, "Adding a
dataset") works as written: its block, run unchanged, swaps two torchvision datasets fastdecode
does not list, USPS (an array dataset, one channel) and Imagenette (a file dataset), on the public
bases ``fastdecode.datasets.ArrayDataset`` and ``FileDataset``.

On generated data in each dataset's on-disk format (USPS's bz2 libsvm rows, Imagenette's
``imagenette2/<split>/<wnid>/*.JPEG``; no download): torchvision's class (``isinstance``), its
constructor's signature plus fastdecode's keywords, the same length, classes and targets, every
item bit-identical with ``exact=True`` for the same seed, and DataLoader's batches through the
in-place batch path equal to torchvision's."""

import bz2
import inspect
import os
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import datasets as tvd  # noqa: E402
from torchvision import transforms as T  # noqa: E402

from fastdecode import datasets as fdd  # noqa: E402

from helpers.tv_items import assert_same_items  # noqa: E402

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "torchvision-datasets.md"


def _recipe() -> dict:
    """The namespace the guide's "Adding a dataset" block defines, run as written."""
    section = GUIDE.read_text().split("## Adding a dataset", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {"__name__": "guide_recipe"}
    exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    return namespace


RECIPE = _recipe()


def _usps(root):
    """USPS's ``usps.bz2``: a libsvm row per image, the label then 256 values in [-1, 1]."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(12):
        values = rng.uniform(-1, 1, 256)
        rows.append(f"{i % 10 + 1} " + " ".join(f"{k + 1}:{v:.6f}" for k, v in enumerate(values)))
    with bz2.open(os.path.join(root, "usps.bz2"), "wt") as f:
        f.write("\n".join(rows) + "\n")


def _imagenette(root):
    """Imagenette's full-size tree: imagenette2/train/<wnid>/<id>.JPEG (one a gray JPEG)."""
    for c, wnid in enumerate(["n01440764", "n02102040", "n03888257"]):
        for i in range(3):
            rng = np.random.default_rng(10 * c + i)
            base = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            img = Image.fromarray(base).resize((80 + 8 * i, 60), Image.Resampling.BICUBIC)
            if (c, i) == (1, 2):
                img = img.convert("L")
            folder = os.path.join(root, "imagenette2", "train", wnid)
            os.makedirs(folder, exist_ok=True)
            img.save(os.path.join(folder, f"{wnid}_{i}.JPEG"), quality=90)


DATASETS = {"USPS": (_usps, {"train": True}), "Imagenette": (_imagenette, {"split": "train"})}
CHAINS = {
    "none": lambda: None,
    "tensor": lambda: T.Compose([T.ToTensor(), T.Normalize((0.5,), (0.5,))]),
    "resize": lambda: T.Compose([T.Resize((24, 24)), T.ToTensor(), T.Normalize((0.5,), (0.5,))]),
    "train": lambda: T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip(),
                                T.PILToTensor()]),
    "pad-crop": lambda: T.Compose([T.RandomCrop(16, padding=2), T.RandomHorizontalFlip(),
                                   T.ToTensor()]),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    made = {}
    for name, (write, _) in DATASETS.items():
        made[name] = str(tmp_path_factory.mktemp(name.lower()))
        write(made[name])
    return made


def _pair(roots, name, transform):
    kw = DATASETS[name][1]
    return (RECIPE[name](roots[name], transform=transform, exact=True, **kw),
            getattr(tvd, name)(roots[name], transform=transform, **kw))


def test_the_recipe_subclasses_the_public_bases():
    assert issubclass(RECIPE["USPS"], fdd.ArrayDataset)
    assert issubclass(RECIPE["Imagenette"], fdd.FileDataset)
    assert {"ArrayDataset", "FileDataset"} <= set(fdd.__all__)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_the_constructor_is_torchvisions_plus_fastdecodes(name):
    theirs = list(inspect.signature(getattr(tvd, name)).parameters)
    ours = list(inspect.signature(RECIPE[name]).parameters)
    assert ours[:len(theirs)] == theirs and "exact" in ours[len(theirs):]
    assert "exact" in RECIPE[name].__doc__


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_items_are_torchvisions(roots, name, chain):
    """Length, classes, isinstance, every item (bit for bit) and target, for the same seed."""
    ours, theirs = _pair(roots, name, CHAINS[chain]())
    assert isinstance(ours, getattr(tvd, name))
    assert_same_items(ours, theirs)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_batches_take_the_batch_path(roots, name):
    """DataLoader's batches (the in-place batch path) are torchvision's, bit for bit."""
    chain = T.Compose([T.Resize((24, 24)), T.RandomHorizontalFlip(), T.ToTensor()])
    ours, theirs = _pair(roots, name, chain)
    assert ours.fixed_sample_shape() == ((1 if name == "USPS" else 3), 24, 24)
    got, want = [], []
    for ds, out in ((ours, got), (theirs, want)):
        torch.manual_seed(5)
        out.extend(DataLoader(ds, batch_size=4, shuffle=True,
                              generator=torch.Generator().manual_seed(3)))
    assert len(got) == len(want) > 1
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(ya, yb)
        assert torch.equal(xa.as_subclass(torch.Tensor), xb)
