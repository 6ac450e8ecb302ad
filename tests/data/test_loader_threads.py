"""FastLoader(threads=N) is reproducible: the same seeds give the same batches
whatever the thread scheduling, and the pool never touches the global RNGs
the consumer draws from (CPU-only)."""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.loader import _setup as loader_mod  # noqa: E402

from helpers.trees import corrupt_file, make_tree  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def uint8_train():
    return T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.PILToTensor()])


def float_train():
    return v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(), v2.PILToTensor(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def timm_train():
    timm_transforms = pytest.importorskip("timm.data.transforms")
    return T.Compose([timm_transforms.RandomResizedCropAndInterpolation(40, interpolation="random"),
                      T.RandomHorizontalFlip(), T.ToTensor()])


def random_step_after_fused():
    """A random step after the fused run (unfused, trailing)."""
    return T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD), T.RandomVerticalFlip(p=0.7)])


def padded_crop_stop():
    """The geometry stops at a random step (a random resized crop of a
    zero-padded canvas: Pad fuses, issue 52) on every image: that step runs
    unfused, on the PIL image."""
    return T.Compose([T.Resize(44), T.CenterCrop(44), T.Pad(4), T.RandomResizedCrop(40),
                      T.RandomHorizontalFlip(), T.PILToTensor()])


def second_resample_stop():
    """A fixed-shape batch whose geometry stops (a second resample) on every
    image: the RandomResizedCrop runs unfused on what joined."""
    return T.Compose([T.Resize(48), T.RandomResizedCrop(40), T.RandomHorizontalFlip(),
                      T.PILToTensor()])


def tensor_stage_replay():
    """A fixed-shape batch replayed unfused from the whole image (a resample
    on tensors after one on PIL), with the RNG state from before its draws."""
    return v2.Compose([v2.Resize(48), v2.ToImage(), v2.RandomResizedCrop(40),
                       v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])


def colour_jitter_train():
    """timm's default training chain's shape: the jitter fused between the decode
    and the tensor table (its draws in the iterating thread)."""
    return T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(),
                      T.ColorJitter(0.4, 0.4, 0.4), T.RandomGrayscale(0.3), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def colour_jitter_v2_random_apply():
    return v2.Compose([v2.RandomResizedCrop(40), v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4)],
                                                                p=0.6),
                       v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)])


def colour_jitter_stop():
    """A geometry stop before fused colour steps: they run unfused after it."""
    return T.Compose([T.Resize(48), T.RandomResizedCrop(40), T.ColorJitter(0.4, 0.4, 0.4),
                      T.PILToTensor()])


CHAINS = [
    pytest.param(uint8_train, id="uint8-train"),
    pytest.param(float_train, id="float-train"),
    pytest.param(timm_train, id="timm-random-interpolation"),
    pytest.param(random_step_after_fused, id="unfused-random-step"),
    pytest.param(padded_crop_stop, id="unfused-stop-padded-crop"),
    pytest.param(second_resample_stop, id="unfused-stop-second-resample"),
    pytest.param(tensor_stage_replay, id="unfused-stop-tensor-replay"),
    pytest.param(colour_jitter_train, id="colour-jitter-grayscale"),
    pytest.param(colour_jitter_v2_random_apply, id="colour-jitter-v2-random-apply"),
    pytest.param(colour_jitter_stop, id="colour-jitter-after-stop"),
]
THREADS = [pytest.param(n, id=f"threads{n}") for n in (1, 2, 4)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("threadtree"), per_class=6)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    loader_mod._warned.clear()
    # threads=4 on a 2-CPU machine would warn of oversubscription (tested elsewhere)
    monkeypatch.setattr(loader_mod, "usable_cpus", lambda: 8)
    yield


def folder(root, chain, **kwargs):
    """The dataset; the stop chains' once-per-chain fusion warning is expected."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        return fd.FastImageFolder(root, chain(), **kwargs)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def run(dataset, threads: int, seed: int, batch_size: int = 4) -> list:
    seed_everything(seed)
    loader = fd.FastLoader(dataset, batch_size=batch_size, shuffle=True, threads=threads,
                           generator=torch.Generator().manual_seed(seed))
    return [(x.clone(), y.clone()) for x, y in loader]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(y, v)
                                    for (x, y), (u, v) in zip(a, b))


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("threads", THREADS)
def test_same_seeds_give_the_same_batches(tree, threads, chain):
    ds = folder(tree, chain)
    first, again = run(ds, threads, seed=3), run(ds, threads, seed=3)
    assert len(first) == 5
    assert same(first, again)


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("threads", THREADS)
def test_another_seed_gives_other_batches(tree, threads, chain):
    ds = folder(tree, chain)
    a, b = run(ds, threads, seed=3), run(ds, threads, seed=4)
    images = lambda batches: [x for x, _ in batches]  # noqa: E731
    assert len(a) == len(b) == 5
    assert not any(torch.equal(x, u) for x, u in zip(images(a), images(b))
                   if x.shape == u.shape)


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("threads", [p for p in THREADS if p.values[0] > 1])
def test_n_threads_give_what_one_thread_gives(tree, threads, chain):
    ds = folder(tree, chain)
    assert same(run(ds, threads, seed=5), run(ds, 1, seed=5))


def consumer_draws(loader, n: int) -> list:
    """What a training loop draws from the global RNGs (dropout, its own
    augmentations) between batches; with ``loader=None``, without a loader."""
    seed_everything(11)
    draws = []
    batches = iter(loader) if loader is not None else iter(range(n))
    for _ in batches:
        draws.append((torch.rand(4), random.random(), np.random.rand()))
    return draws


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("threads", THREADS)
def test_the_pool_never_touches_the_consumers_rng(tree, threads, chain):
    ds = folder(tree, chain)
    loader = fd.FastLoader(ds, batch_size=2, shuffle=True, threads=threads,
                           generator=torch.Generator().manual_seed(1))
    got = consumer_draws(loader, 0)
    want = consumer_draws(None, len(got))
    assert len(got) == 9
    for (t, r, n), (u, s, m) in zip(got, want):
        assert torch.equal(t, u) and r == s and n == m


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory):
    root = make_tree(tmp_path_factory.mktemp("brokentree"), per_class=6)
    corrupt_file(root / "cat" / "img0.jpg")  # the body is cut: fails in the render
    (root / "dog" / "img1.jpg").write_bytes(b"not a jpeg at all")  # fails at the header
    return root


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("threads", THREADS)
def test_skipped_samples_are_replaced_reproducibly(broken_tree, threads, chain):
    ds = folder(broken_tree, chain, on_error="skip")
    first = run(ds, threads, seed=2)
    assert ds.skipped == 2
    assert same(first, run(ds, threads, seed=2))
    assert same(first, run(ds, 1, seed=2))
    assert ds.skipped == 6


@pytest.mark.parametrize("broken", [pytest.param(("cat", "img0.jpg"), id="body-cut-render"),
                                    pytest.param(("dog", "img1.jpg"), id="bad-header-plan")])
@pytest.mark.parametrize("threads", [p for p in THREADS if p.values[0] > 1])
def test_a_broken_file_raises_its_named_error_in_the_iterating_thread(broken_tree, threads,
                                                                      broken):
    ds = folder(broken_tree, uint8_train)
    index = [os.fspath(p) for p, _ in ds.samples].index(os.fspath(broken_tree.joinpath(*broken)))
    loader = fd.FastLoader(ds, batch_size=4, sampler=[index], threads=threads)
    with pytest.raises(fd.errors.ImageFileError, match=rf"{broken[1]}: sample {index}: "):
        next(iter(loader))


class Noisy(torch.utils.data.Dataset):
    """A dataset FastLoader cannot split: its item draws from the global RNG."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        return torch.rand(2), index


def test_a_dataset_it_cannot_split_is_said_once():
    loader = fd.FastLoader(Noisy(), batch_size=2, threads=2)
    with pytest.warns(RuntimeWarning, match=r"threads=2: Noisy .* not reproducible"):
        assert len(list(loader)) == 2
    assert len(list(loader)) == 2  # once


def opaque(chain):
    """The same chain behind a step fuse cannot open: the loader's plan then
    draws nothing and runs the whole chain, unfused, from the sample's seed."""
    return lambda: T.Compose([T.Lambda(lambda im: im), *chain().transforms])


@pytest.mark.parametrize("chain", [p for p in CHAINS if "colour" in p.id])
@pytest.mark.parametrize("threads", [p for p in THREADS if p.values[0] > 1])
def test_fused_colour_steps_give_the_unfused_chains_batches(tree, threads, chain):
    """exact=True: the planned, fused batches are torchvision's own, sample for sample."""
    fused = folder(tree, chain, exact=True)
    unfused = folder(tree, opaque(chain), exact=True)
    assert fused.explain().count("fused: the colours are adjusted natively") >= 1
    assert "the colours are adjusted natively" not in unfused.explain()
    assert same(run(fused, threads, seed=7), run(unfused, threads, seed=7))
