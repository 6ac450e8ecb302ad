"""Same seed, same images: timm's auto-augment chains through FastImageFolder and ImageFolder.

Issue 50 compared the two with ``torch.manualseed_all(i); random.seed(i)``
before each item and saw other augmentations with ``rand-*``. The reference
itself is not reproducible that way: timm's RandAugment picks its ops, and
its AugMix its depth, ops and mixing weights, from NumPy's global generator
(``np.random.choice``, ``np.random.dirichlet``); its other draws are
Python's ``random`` and torch's. Seeded all three, as DataLoader seeds each
worker, the fused dataset draws what timm draws, in timm's order, and with
``exact=True`` gives ImageFolder's tensors bit for bit. (timm's
``create_transform`` takes no TrivialAugment policy, so ``ta_wide`` is
torchvision's alone.)
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
timm_data = pytest.importorskip("timm.data")

from torchvision.datasets import ImageFolder  # noqa: E402

from fastdecode import FastImageFolder  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402
from helpers.rngs import seed_all, states  # noqa: E402
from helpers.trees import write_image  # noqa: E402

RECIPES = {
    # id: create_transform keywords beside is_training=True, interpolation='bilinear'
    "rand-m9-mstd0.5": dict(auto_augment="rand-m9-mstd0.5"),
    "rand-m9-mstd0.5-inc1-reprob": dict(auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25),
    "augmix-m5-w4-d2": dict(auto_augment="augmix-m5-w4-d2"),
    "v0r": dict(auto_augment="v0r"),  # AutoAugment: Python's random alone
}
ITEMS = 8


def _generated(root):
    for i in range(ITEMS):
        write_image(root / f"c{i % 2}" / f"{i}.jpg", "JPEG", (300 + 7 * i, 400 - 9 * i), seed=i)


def _photos(root):
    photos = corpus_dir("photos")
    if photos is None:
        pytest.skip("shared corpus 'photos' not present")
    for path in sorted(photos.rglob("*.JPEG"))[:ITEMS]:
        (root / "photos").mkdir(exist_ok=True)
        shutil.copy(path, root / "photos" / path.name)


@pytest.mark.filterwarnings("ignore:fastdecode stopped fusion:RuntimeWarning")
@pytest.mark.parametrize("source", [_generated, _photos], ids=["generated", "photos"])
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_same_seed_same_images_as_image_folder(recipe, source, exact, tmp_path):
    """The same draws from the three generators; exact=True: the same tensors."""
    source(tmp_path)
    chain = timm_data.create_transform(160, is_training=True, interpolation="bilinear",
                                       **RECIPES[recipe])
    ref = ImageFolder(str(tmp_path), transform=chain)
    fast = FastImageFolder(str(tmp_path), transform=chain, exact=exact)
    assert len(fast) == len(ref) > 0
    for i in range(len(ref)):
        seed_all(i)
        theirs, target = ref[i]
        after = states()
        seed_all(i)
        ours, ours_target = fast[i]
        assert ours_target == target
        mine = states()
        assert torch.equal(mine[0], after[0]), f"item {i}: torch's draws differ"
        assert mine[1] == after[1], f"item {i}: Python's random draws differ"
        assert np.array_equal(mine[2][0], after[2][0]) and mine[2][1:] == after[2][1:], \
            f"item {i}: NumPy's draws differ"
        assert ours.shape == theirs.shape
        if exact:
            assert torch.equal(ours, theirs), f"item {i}: other pixels for the same seed"
