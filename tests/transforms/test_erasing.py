"""RandomErasing fused after the tensor table (issue 50): torchvision's v1 and v2, timm's
'const', 'rand' and 'pixel' modes. The same draws from the same generators in the same
order, erased in place in the result (per call, and per batch slot by ``finish``);
exact=True bit-identical to the chain on the PIL image."""

from __future__ import annotations

import pathlib
import random
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.batching._detached import detach  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import MEAN, STD, pil_of  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402
from helpers.trees import write_image  # noqa: E402


def _v1(erasing, size=64):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD), erasing])


def _v2(erasing, size=64, unwrap=True):
    return T2.Compose([T2.RandomResizedCrop(size), T2.RandomHorizontalFlip(), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD), erasing]
                      + ([T2.ToPureTensor()] if unwrap else []))


def _timm(**kwargs):
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_transform(64, is_training=True, **kwargs)


CHAINS = {
    "v1-zero": lambda: _v1(T.RandomErasing(p=0.7)),
    "v1-random": lambda: _v1(T.RandomErasing(p=0.7, value="random")),
    "v1-rgb": lambda: _v1(T.RandomErasing(p=0.7, value=(0.5, -1, 2))),
    "v1-two-steps": lambda: T.Compose([T.RandomResizedCrop(64), T.ToTensor(),
                                       T.RandomErasing(p=0.7), T.RandomErasing(p=0.7, value=1)]),
    "v1-after-jitter": lambda: T.Compose([T.RandomResizedCrop(64), T.ColorJitter(0.4, 0.4, 0.4),
                                          T.ToTensor(), T.RandomErasing(p=0.7)]),
    "v1-uint8": lambda: T.Compose([T.RandomResizedCrop(64), T.PILToTensor(),
                                   T.RandomErasing(p=0.7, value="random")]),
    "v2-zero": lambda: _v2(T2.RandomErasing(p=0.7)),
    "v2-random-image": lambda: _v2(T2.RandomErasing(p=0.7, value="random"), unwrap=False),
    "v2-rgb": lambda: _v2(T2.RandomErasing(p=0.7, value=[1.0, 0.0, -1.0])),
    "v2-uint8": lambda: T2.Compose([T2.RandomResizedCrop(64), T2.ToImage(),
                                    T2.RandomErasing(p=0.7, value="random")]),
    "v2-tensor-stage": lambda: T2.Compose([T2.RandomResizedCrop(80), T2.ToImage(),
                                           T2.RandomHorizontalFlip(), T2.CenterCrop(64),
                                           T2.ToDtype(torch.float32, scale=True),
                                           T2.RandomErasing(p=0.7, scale=(0.3, 0.9))]),
    "timm-const": lambda: _timm(re_prob=0.7, re_mode="const"),
    "timm-rand": lambda: _timm(re_prob=0.7, re_mode="rand"),
    "timm-pixel-count": lambda: _timm(re_prob=0.7, re_mode="pixel", re_count=3),
}
SEEDS = range(12)


def seeded(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def states():
    return torch.get_rng_state(), random.getstate()


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("chain_id", list(CHAINS))
def test_erasing_fuses_with_the_same_draws(chain_id, exact):
    chain = CHAINS[chain_id]()
    f = fuse(chain, exact=exact)
    assert f.erasing and not f.trailing and f.fusion_report() is None
    assert f.output_shape == (3, 64, 64)
    data = encode(200, 260, seed=31)
    erased = 0
    for seed in SEEDS:
        seeded(seed)
        ours = f(data)
        after = states()
        seeded(seed)
        theirs = chain(pil_of(data))
        assert torch.equal(after[0], torch.get_rng_state()) and after[1] == random.getstate()
        assert type(ours) is type(theirs) and ours.dtype == theirs.dtype
        assert ours.shape == theirs.shape
        if exact:
            assert torch.equal(ours, theirs), f"seed {seed}"
        erased += bool(f._draw(data).erase)
    assert erased, "no seed erased anything: the test shows nothing"


def _finish(f, pixels):
    if f.tensor_table is None:
        return f.finish(pixels)
    return f.finish(pixels, out=torch.empty(pixels.shape, dtype=f.result_dtype))


@pytest.mark.parametrize("chain_id", ["v1-random", "v1-uint8", "v2-zero", "timm-pixel-count"])
def test_finish_erases_each_batch_slot_in_place(chain_id):
    chain = CHAINS[chain_id]()
    f = fuse(chain, exact=True)
    datas = [encode(180 + 9 * k, 240 - 7 * k, seed=k) for k in range(6)]
    seeded(3)
    want = torch.stack([chain(pil_of(d)) for d in datas])
    after = states()
    seeded(3)
    pixels = torch.empty((len(datas), *f.output_shape), dtype=torch.uint8)
    for k, d in enumerate(datas):
        f.decode_into(d, pixels[k])
    assert torch.equal(torch.get_rng_state(), after[0]) and random.getstate() == after[1]
    got = _finish(f, pixels)
    assert torch.equal(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
    # a loader may finish the same pixels twice (a batch completed in place): the same boxes
    assert torch.equal(_finish(f, pixels).as_subclass(torch.Tensor),
                       want.as_subclass(torch.Tensor))


def test_a_stopped_image_draws_its_erasing_after_the_unfused_part():
    """A second resample stops every image: the geometry and the colour run
    unfused into the slot, then the erasing is drawn, as torchvision draws it."""
    chain = T.Compose([T.RandomResizedCrop(96), T.Resize((64, 64)), T.ColorJitter(0.3), T.ToTensor(),
                       T.Normalize(MEAN, STD), T.RandomErasing(p=0.9, value="random")])
    f = fuse(chain, exact=True)
    assert f.erasing and f.output_shape == (3, 64, 64)
    datas = [encode(150, 200, seed=k) for k in range(4)]
    seeded(5)
    want = torch.stack([chain(pil_of(d)) for d in datas])
    seeded(5)
    pixels = torch.empty((len(datas), 3, 64, 64), dtype=torch.uint8)
    for k, d in enumerate(datas):
        f.decode_into(d, pixels[k])
    assert torch.equal(_finish(f, pixels), want)
    seeded(5)
    assert torch.equal(torch.stack([f(d) for d in datas]), want)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: _v1(T.RandomErasing(value=(1.0, 2.0))), id="v1-two-values"),
    pytest.param(lambda: _v2(T2.RandomErasing(value=[1.0, 2.0])), id="v2-two-values"),
    pytest.param(lambda: _v1(type("MyErasing", (T.RandomErasing,), {})()), id="subclass"),
    pytest.param(lambda: T.Compose([T.RandomResizedCrop(64), T.RandomErasing()]), id="on-pil"),
    pytest.param(lambda: _timm(re_prob=0.5, use_prefetcher=False, re_mode="const").__class__(
        [*_timm(re_prob=0.5).transforms[:-1], _cuda_erasing()]), id="timm-on-cuda"),
])
def test_what_is_not_fused_runs_as_before(make):
    f = fuse(make())
    assert not f.erasing
    assert any("Erasing" in type(s).__name__ for s in f.trailing)


def _cuda_erasing():
    from timm.data.random_erasing import RandomErasing

    return RandomErasing(0.5, device="cuda")  # its values come from the CUDA generator


def test_the_plan_says_erasing_is_fused():
    f = fuse(CHAINS["v2-zero"]())
    assert [type(s).__name__ for s in f.plan["tensor"]] == [
        "ToImage", "ToDtype", "Normalize", "RandomErasing", "ToPureTensor"]
    text = f.explain()
    assert "5. RandomErasing" in text and "erased in place in the result" in text
    assert "Summary: every step fused." in text
    assert "  erasing: RandomErasing(" in repr(f)
    assert detach(f) is None  # its boxes are drawn per slot: the full plan travels


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("erasing")
    for i in range(8):
        write_image(pathlib.Path(root) / f"c{i % 2}" / f"{i}.jpg", "JPEG", (120 + 5 * i, 160),
                    seed=i)
    return str(root)


@pytest.mark.parametrize("chain_id", ["v2-random-image", "timm-rand"])
def test_batches_are_image_folders_and_keep_the_batch_path(tree, chain_id):
    chain = CHAINS[chain_id]()
    ours = fd.FastImageFolder(tree, chain, exact=True)
    theirs = ImageFolder(tree, chain)
    assert ours._batch_fused() is not None
    assert ours.fixed_sample_shape() == (3, 64, 64)  # the rings carry the erasing
    loader = torch.utils.data.DataLoader
    seeded(0)
    want = [x for x, _ in loader(theirs, batch_size=4)]
    seeded(0)
    got = [x for x, _ in loader(ours, batch_size=4)]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


class _Unfused(T.RandomErasing):
    """torchvision's RandomErasing, unfused (fuse takes exact types only)."""


@pytest.mark.parametrize("options", [dict(threads=2), dict(resumable=7, threads=2)],
                         ids=["threads", "resumable-threads"])
def test_fast_loader_batches_match_the_unfused_chain(tree, options):
    """FastLoader's own ways through a batch (draws in the iterating thread,
    renders in others, per-sample seeds; a second resample stops every image,
    so its erasing is drawn after the unfused part): the same batches as the
    chain with torchvision's RandomErasing unfused."""
    def chain(erasing):
        return T.Compose([T.RandomResizedCrop(96), T.Resize(48), T.CenterCrop(48), T.ToTensor(),
                          T.Normalize(MEAN, STD), erasing(p=0.8, value="random")])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the second resample, said once
        ours = fd.FastImageFolder(tree, chain(T.RandomErasing), exact=True)
        reference = fd.FastImageFolder(tree, chain(_Unfused), exact=True)
        assert ours._batch_fused() is not None and reference._batch_fused() is None
        seeded(0)
        got = [x for x, _ in fd.FastLoader(ours, batch_size=4, **options)]
        seeded(0)
        want = [x for x, _ in fd.FastLoader(reference, batch_size=4, **options)]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
