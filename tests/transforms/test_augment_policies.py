"""Same seed, same draws: the auto-augment policies fused into the decode (issue 50).

Each policy of torchvision (v1 and v2 RandAugment, TrivialAugmentWide,
AutoAugment with its three policies, AugMix) and of timm (``rand-m9-mstd0.5-inc1``,
``rand-m9-n2``, AutoAugment ``original`` and ``v0r``, AugMix basic and
blended) after a
RandomResizedCrop and a flip: ``fuse(chain, exact=True)(bytes)`` is the
chain's tensor on ``Image.open(f).convert('RGB')`` bit for bit, with the
generators each library draws from (torch, Python's ``random``, NumPy)
seeded alike and left in the same states; the default mode stays above the
documented floor per policy (docs/decisions/augment.md, "Draws and plans").
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.augment import pixel_op  # noqa: E402
from fastdecode.augment.tv_policies import TvPolicy  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402
from helpers.fusion import pil_of, pixels, psnr  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402
from helpers.rngs import seed_all, states  # noqa: E402

BILINEAR = T.InterpolationMode.BILINEAR
TIMM_HPARAMS = dict(translate_const=100, img_mean=(124, 116, 104))


def _timm_rand(config):
    def make():
        aa = pytest.importorskip("timm.data.auto_augment")
        return aa.rand_augment_transform(config, dict(TIMM_HPARAMS, interpolation=(
            Image.BILINEAR, Image.BICUBIC)))
    return make


def _timm_augmix(config):
    def make():
        aa = pytest.importorskip("timm.data.auto_augment")
        return aa.augment_and_mix_transform(config, dict(TIMM_HPARAMS, translate_pct=0.3,
                                                          interpolation=(Image.BILINEAR,
                                                                         Image.BICUBIC)))
    return make


class _MyAugMix(T.AugMix):
    """A user's subclass (it may override forward): runs unfused."""


def _timm_auto(config):
    def make():
        aa = pytest.importorskip("timm.data.auto_augment")
        return aa.auto_augment_transform(config, dict(TIMM_HPARAMS, interpolation=(
            Image.BILINEAR, Image.BICUBIC)))
    return make


POLICIES = {
    # id: (factory, v2 chain?)
    "v1-randaugment": (lambda: T.RandAugment(interpolation=BILINEAR), False),
    "v1-trivialaugment": (lambda: T.TrivialAugmentWide(interpolation=BILINEAR), False),
    "v1-autoaugment-imagenet": (lambda: T.AutoAugment(interpolation=BILINEAR), False),
    "v1-autoaugment-cifar10": (lambda: T.AutoAugment(T.AutoAugmentPolicy.CIFAR10), False),
    "v1-autoaugment-svhn-fill": (lambda: T.AutoAugment(T.AutoAugmentPolicy.SVHN,
                                                       fill=[10, 200, 30]), False),
    "v2-randaugment": (lambda: T2.RandAugment(interpolation=BILINEAR), True),
    "v2-trivialaugment": (lambda: T2.TrivialAugmentWide(interpolation="bicubic", fill=90), True),
    "v2-autoaugment-imagenet": (lambda: T2.AutoAugment(interpolation=BILINEAR), True),
    "v2-autoaugment-svhn": (lambda: T2.AutoAugment(T2.AutoAugmentPolicy.SVHN), True),
    "timm-rand-m9-mstd0.5-inc1": (_timm_rand("rand-m9-mstd0.5-inc1"), False),
    "timm-rand-m9-n2": (_timm_rand("rand-m9-n2"), False),
    "timm-original": (_timm_auto("original-mstd0.5"), False),
    "timm-v0r": (_timm_auto("v0r"), False),
    "v1-augmix": (lambda: T.AugMix(interpolation=BILINEAR), False),
    "v1-augmix-w2-d2-fill": (lambda: T.AugMix(severity=5, mixture_width=2, chain_depth=2,
                                              all_ops=False, fill=[10, 200, 30]), False),
    "v2-augmix": (lambda: T2.AugMix(interpolation=BILINEAR), True),
    "v2-augmix-nearest-fill": (lambda: T2.AugMix(severity=1, chain_depth=1, alpha=0.5,
                                                 fill=90), True),
    "timm-augmix-m5-w4-d2": (_timm_augmix("augmix-m5-w4-d2"), False),
    "timm-augmix-m3-w3-b1": (_timm_augmix("augmix-m3-w3-b1"), False),
}
SEEDS = range(4)
# The default mode's floor, measured on 48 photos x 4 seeds per policy
# (tests/transforms/augment_bound.py; docs/decisions/augment.md): 98 % of the results are
# bit-identical, the lowest 36.1 dB (RandAugment: a level step of solarize / posterize
# moves the pixels the resample left one level off); the colour steps' 35 dB floor holds.
MIN_PSNR = 35.0
MEDIAN_PSNR = 45.0


def _chain(policy: str, size: int = 176):
    make, v2 = POLICIES[policy]
    if v2:
        return T2.Compose([T2.RandomResizedCrop(size, antialias=True), T2.RandomHorizontalFlip(),
                           make(), T2.PILToTensor()])
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), make(),
                      T.PILToTensor()])


def _photos(count: int = 12) -> list:
    root = corpus_dir("photos")
    paths = sorted(root.rglob("*.JPEG"))[:count] if root is not None else []
    if not paths:
        return [pytest.param(None, id="photos-absent",
                             marks=pytest.mark.skip(reason="shared corpus 'photos' not present"))]
    return [pytest.param(p, id=p.stem) for p in paths]


PHOTOS = _photos()


def _run(f, data, seed: int):
    seed_all(seed)
    try:
        out = f(data)
    except ValueError as exc:  # timm's posterize of 0 bits under Pillow 13: the same error
        out = str(exc)
    return out, states()


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_fuses_into_the_decode(policy):
    chain = _chain(policy)
    f = fuse(chain)
    assert f.plan["color"] == [chain.transforms[2]]
    assert f.output_shape == (3, 176, 176) and not f.trailing


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_exact_is_the_library_bit_for_bit(policy, photo, seed):
    chain = _chain(policy)
    data = photo.read_bytes()
    theirs, their_states = _run(lambda d: chain(pil_of(d)), data, seed)
    ours, our_states = _run(fuse(chain, exact=True), data, seed)
    assert torch.equal(our_states[0], their_states[0]), "torch's draws differ"
    assert our_states[1] == their_states[1], "Python's random draws differ"
    assert our_states[2] == their_states[2], "NumPy's draws differ"
    if isinstance(theirs, str):
        assert ours == theirs
        return
    assert type(ours) is type(theirs) and torch.equal(ours, theirs)


def _default_psnr(policy, photo, seed) -> float:
    chain = _chain(policy)
    data = photo.read_bytes()
    theirs, _ = _run(lambda d: chain(pil_of(d)), data, seed)
    ours, _ = _run(fuse(chain), data, seed)
    if isinstance(theirs, str):
        assert ours == theirs
        return float("inf")
    return psnr(pixels(ours), pixels(theirs))


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_default_mode_keeps_the_floor(policy, photo, seed):
    quality = _default_psnr(policy, photo, seed)
    assert quality >= MIN_PSNR, f"PSNR {quality:.2f} dB < {MIN_PSNR}"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_default_mode_median_over_the_photos(policy):
    """The median over photos x seeds of one policy (an aggregate: one test per policy)."""
    photos = [p.values[0] for p in PHOTOS if p.values[0] is not None]
    if not photos:
        pytest.skip("shared corpus 'photos' not present")
    values = [_default_psnr(policy, photo, seed) for photo in photos for seed in SEEDS]
    assert float(np.median(values)) >= MEDIAN_PSNR


SIZES = [(33, 47), (64, 64), (101, 60)]


@pytest.mark.parametrize("seed", range(3), ids=[f"seed{s}" for s in range(3)])
@pytest.mark.parametrize("size", SIZES, ids=[f"{h}x{w}" for h, w in SIZES])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_generated_images_of_odd_sizes(policy, size, seed):
    """No photos needed: odd, non-square sizes (the translate magnitudes and
    rotation centres depend on them), the policy straight after the decode."""
    make, v2 = POLICIES[policy]
    chain = (T2 if v2 else T).Compose([make(), (T2 if v2 else T).PILToTensor()])
    data = encode(*size)
    theirs, their_states = _run(lambda d: chain(pil_of(d)), data, seed)
    ours, our_states = _run(fuse(chain, exact=True), data, seed)
    assert torch.equal(our_states[0], their_states[0]) and our_states[1] == their_states[1]
    assert our_states[2] == their_states[2]
    if isinstance(theirs, str):
        assert ours == theirs
    else:
        assert torch.equal(ours, theirs)


def test_the_policy_is_a_pixel_op_of_its_kind():
    op = pixel_op(T.TrivialAugmentWide())
    assert isinstance(op, TvPolicy) and op.kind == "trivial" and not op.v2


@pytest.mark.parametrize("seed", range(4), ids=[f"seed{s}" for s in range(4)])
def test_the_tensor_tail_follows_the_policy(seed):
    """ToTensor + Normalize after the policy (one table over its pixels): the same values."""
    chain = T.Compose([T.RandomResizedCrop(96), T.RandAugment(num_ops=3), T.ToTensor(),
                       T.Normalize([0.5] * 3, [0.25] * 3)])
    data = encode(120, 150)
    theirs, _ = _run(lambda d: chain(pil_of(d)), data, seed)
    ours, _ = _run(fuse(chain, exact=True), data, seed)
    assert torch.equal(ours, theirs)


# -- what explain() and fusion_report() say --------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
def test_explain_names_the_policy_and_where_it_runs(policy):
    chain = _chain(policy)
    f = fuse(chain)
    text = f.explain()
    assert "drawn as its library draws it" in text and "Summary: every step fused." in text
    assert f.fusion_report() is None
    assert "pixels: " in repr(f)


UNFUSED = {
    # id: (the step after the policy / in its place, words of the reason)
    "user-callable": (lambda: T.Lambda(lambda img: img), "not a transform fuse knows"),
    "augmix-subclass": (_MyAugMix, "not a transform fuse knows"),
    "timm-blur": (lambda: pytest.importorskip("timm.data.auto_augment").rand_augment_transform(
        "rand-m9-t3a", {}), "holds an op without a native form"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", list(UNFUSED))
def test_what_cannot_run_natively_runs_unfused_and_says_why(case):
    """The chain still fuses what comes before; the step and the rest run
    unfused, and the report (the datasets' one warning) says why."""
    make, words = UNFUSED[case]
    step = make()
    chain = T.Compose([T.RandomResizedCrop(64), T.RandAugment(), step, T.PILToTensor()])
    f = fuse(chain)
    assert f.plan["color"] == [chain.transforms[1]] and f.trailing[0] is step
    report = f.fusion_report()
    assert report is not None and report.step is step and words in report.reason
    assert words in f.explain()
    data = encode(90, 120)
    theirs, _ = _run(lambda d: chain(pil_of(d)), data, 3)
    ours, _ = _run(fuse(chain, exact=True), data, 3)
    assert torch.equal(ours, theirs)


# -- the batch path keeps the draws -------------------------------------------------------


@pytest.mark.parametrize("way", ["getitems", "dataloader", "fastloader-threads2"])
@pytest.mark.parametrize("recipe", ["ta_wide", "imagenet", "augmix"])
def test_batches_of_the_reference_recipe_draw_as_image_folder(recipe, way, tmp_path):
    """FastImageFolder's batched fetch and DataLoader over it: ImageFolder's
    samples in order for one seed, exact=True bit for bit; FastLoader(threads=2)'s
    planned batches: its one-thread batches."""
    from torchvision.datasets import ImageFolder

    from benchmarks.presets import ClassificationPresetTrain
    from fastdecode import FastImageFolder, FastLoader

    from helpers.trees import write_image

    for i in range(6):
        write_image(tmp_path / f"c{i % 2}" / f"{i}.jpg", "JPEG", (150 + 9 * i, 200 - 7 * i),
                    seed=i)
    preset = ClassificationPresetTrain(crop_size=64, auto_augment_policy=recipe,
                                       random_erase_prob=0.5)
    ref = ImageFolder(str(tmp_path), transform=preset)
    fast = FastImageFolder(str(tmp_path), transform=preset, exact=True)
    seed_all(7)
    if way == "getitems":
        theirs = torch.stack([ref[i][0] for i in range(6)])
        seed_all(7)
        ours = torch.stack([s for s, _ in fast.__getitems__(list(range(6)))])
    elif way == "dataloader":  # a loader draws its base seed first
        theirs = next(iter(torch.utils.data.DataLoader(ref, batch_size=6)))[0]
        seed_all(7)
        ours = next(iter(torch.utils.data.DataLoader(fast, batch_size=6)))[0]
    else:  # FastLoader's planned batches (draws in order, renders in 2 threads) = one thread's
        theirs = next(iter(FastLoader(fast, batch_size=6, num_workers=0, threads=1)))[0]
        seed_all(7)
        ours = next(iter(FastLoader(fast, batch_size=6, num_workers=0, threads=2)))[0]
    assert torch.equal(ours, theirs)
