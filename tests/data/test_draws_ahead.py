"""A batch's draws run ahead of its renders (``OneSample._decode_slots``): the same
samples and the same RNG states as the per-item path, whatever the chunk."""

from __future__ import annotations

import random
from contextlib import nullcontext

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.datasets import _sample  # noqa: E402

from helpers.rngs import seed_all, states  # noqa: E402
from helpers.trees import corrupt_file, make_tree  # noqa: E402


def _timm_rand():
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_transform(64, is_training=True, interpolation="random",
                                      auto_augment="rand-m9-mstd0.5-inc1-mmax9", re_prob=0.25)


CHAINS = {
    "v1-train": lambda: T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
                                   T.RandAugment(), T.ToTensor(), T.RandomErasing(0.5)]),
    "timm-rand": _timm_rand,
    # images narrower than 96 are padded, and their RandomResizedCrop stops fusion (its
    # unfused rest draws after the render); the others fuse: both kinds in one batch
    "some-stop": lambda: T.Compose([T.RandomCrop(96, pad_if_needed=True),
                                    T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
                                    T.PILToTensor()]),
}
# AHEAD_BYTES: a render after every sample, after a few, once for the batch
CHUNKS = {"each-sample": 1, "a-few": 6000, "whole-batch": _sample.AHEAD_BYTES}


def _drawing_target(target):
    """A target_transform that draws: its calls stay in the samples' order."""
    return target * 1000 + random.randrange(1000)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("tree"), per_class=6)


@pytest.mark.filterwarnings("ignore:fastdecode stopped fusion:RuntimeWarning")
@pytest.mark.parametrize("chunk", list(CHUNKS))
@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_batch_is_its_samples_one_by_one(tree, chain, chunk, monkeypatch):
    monkeypatch.setattr(_sample, "AHEAD_BYTES", CHUNKS[chunk])
    ds = fd.FastImageFolder(tree, CHAINS[chain](), target_transform=_drawing_target)
    assert ds.fixed_sample_shape() is not None  # the batch path
    indices = [3, 0, 7, 11, 5, 16, 1, 9, 13, 2]
    for seed in range(3):
        seed_all(seed)
        singles = [ds[i] for i in indices]
        after = states()
        seed_all(seed)
        batch = ds.__getitems__(indices)
        now = states()
        assert torch.equal(now[0], after[0]) and now[1:] == after[1:]
        for k, ((a, ta), (b, tb)) in enumerate(zip(singles, batch)):
            assert ta == tb, f"slot {k}"
            assert torch.equal(torch.as_tensor(a), b.as_subclass(torch.Tensor)), f"slot {k}"


@pytest.fixture()
def broken_tree(tmp_path):
    root = make_tree(tmp_path / "t", per_class=4, classes=("a", "b"))
    corrupt_file(root / "a" / "img1.jpg")
    return root


@pytest.mark.parametrize("chunk", list(CHUNKS))
def test_a_render_that_fails_names_its_file(broken_tree, chunk, monkeypatch):
    monkeypatch.setattr(_sample, "AHEAD_BYTES", CHUNKS[chunk])
    ds = fd.FastImageFolder(broken_tree, CHAINS["v1-train"]())
    with pytest.raises(fd.DecodeError, match=r"img1\.jpg: sample 1: truncated JPEG"):
        ds.__getitems__([0, 4, 1, 5])


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_replacements_keep_the_per_item_order(broken_tree, on_error):
    """Under skip/warn a failed render is replaced at its turn: the batch is
    still its samples one by one, replacements included."""
    ds = fd.FastImageFolder(broken_tree, CHAINS["v1-train"](), on_error=on_error)
    indices = [0, 4, 1, 5, 2]
    with pytest.warns(RuntimeWarning) if on_error == "warn" else nullcontext():
        seed_all(3)
        singles = [ds[i] for i in indices]
        after = states()
        seed_all(3)
        batch = ds.__getitems__(indices)
    assert ds.skipped == 2
    now = states()
    assert torch.equal(now[0], after[0]) and now[1:] == after[1:]
    for (a, ta), (b, tb) in zip(singles, batch):
        assert ta == tb and torch.equal(a, b.as_subclass(torch.Tensor))

