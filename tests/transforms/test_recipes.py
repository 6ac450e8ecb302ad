"""Transforms real recipes build: reference presets (wrappers), weights' presets, timm."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import models  # noqa: E402
from torchvision import transforms as T  # noqa: E402

from benchmarks.presets import ClassificationPresetEval, ClassificationPresetTrain  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import MEAN, STD, check_parity, pil_of  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402

# torchvision's references/classification/presets.py, written the way it is,
# is benchmarks/presets.py (bench_recipes measures the same classes).

PRESETS = {
    # name: (factory, steps fused into the decode, steps in the tensor table)
    "train-v1": (lambda: ClassificationPresetTrain(crop_size=176), 2, 3),
    "train-v2": (lambda: ClassificationPresetTrain(crop_size=176, use_v2=True), 2, 4),
    "train-v1-autoaugment-erasing": (lambda: ClassificationPresetTrain(
        crop_size=176, auto_augment_policy="ta_wide", random_erase_prob=0.25), 2, 4),
    "train-v2-ra-erasing": (lambda: ClassificationPresetTrain(
        crop_size=176, auto_augment_policy="ra", random_erase_prob=0.25, use_v2=True), 2, 5),
    "train-v2-tensor-backend": (lambda: ClassificationPresetTrain(
        crop_size=176, backend="tensor", use_v2=True), 2, 4),
    "train-v1-bicubic-no-flip": (lambda: ClassificationPresetTrain(
        crop_size=160, hflip_prob=0.0, interpolation=T.InterpolationMode.BICUBIC), 1, 3),
    "eval-v1": (lambda: ClassificationPresetEval(crop_size=224, resize_size=232), 2, 3),
    "eval-v2": (lambda: ClassificationPresetEval(crop_size=224, resize_size=232, use_v2=True),
                2, 4),
    "eval-v2-tensor-backend": (lambda: ClassificationPresetEval(
        crop_size=224, resize_size=256, backend="tensor", use_v2=True), 2, 4),
}


@pytest.mark.parametrize("preset_id", list(PRESETS))
def test_reference_presets_fuse_through_the_wrapper(preset_id):
    make, geometric, tensor = PRESETS[preset_id]
    preset = make()
    f = fuse(preset)
    assert len(f.plan["geometric"]) == geometric
    assert len(f.plan["tensor"]) == tensor
    report = f.fusion_report()
    # the augmentation policy runs on the pixels in the decode (issue 50): the whole chain
    # fuses, the batch path kept
    augmenting = "autoaugment" in preset_id or "-ra-" in preset_id
    assert [type(t).__name__ for t in f.plan["color"]] == (
        [type(preset.transforms.transforms[2]).__name__] if augmenting else [])
    assert report is None and f.output_shape is not None
    data = encode(375, 500, seed=21)
    for seed in (0, 1):
        random.seed(seed)  # autoaugment draws from torch; keep Python's fixed too
        check_parity(preset, data, seed, normalized=True)


@pytest.mark.parametrize("preset_id", list(PRESETS))
def test_reference_presets_exact_is_bit_exact(preset_id):
    preset = PRESETS[preset_id][0]()
    data = encode(375, 500, seed=22)
    _, ours, theirs, _ = check_parity(preset, data, 3, exact=True, normalized=True)
    assert torch.equal(ours, theirs)


class ScaledWrapper:
    def __init__(self, t):
        self.transforms = t

    def __call__(self, img):
        return self.transforms(img) * 2


class StoredWrapper:
    def __init__(self, t):
        self.transforms = t

    def __call__(self, img):
        out = self.transforms(img)
        return out


class ExtraArgWrapper:
    def __init__(self, t):
        self.transforms = t

    def __call__(self, img, *extra):
        return self.transforms(img)


class PropertyWrapper:
    def __init__(self, t):
        self._t = t

    @property
    def transforms(self):  # runs code of its own on every access
        return self._t

    def __call__(self, img):
        return self.transforms(img)


class OtherArgumentWrapper:
    def __init__(self, t):
        self.transforms = t
        self.other = t

    def __call__(self, img):
        return self.transforms(self)  # not the image


@pytest.mark.parametrize("wrapper", [ScaledWrapper, StoredWrapper, ExtraArgWrapper,
                                     PropertyWrapper, OtherArgumentWrapper],
                         ids=lambda w: w.__name__)
def test_anything_but_a_pure_wrapper_stays_opaque(wrapper):
    inner = T.Compose([T.CenterCrop(32), T.PILToTensor()])
    w = wrapper(inner)
    f = fuse(w)
    assert f.steps == [w] and f.plan["trailing"] == [w]
    report = f.fusion_report()
    assert report is not None and report.step is w and report.fused == 0
    assert "not a transform fuse knows" in report.reason


def test_nested_wrappers_and_lambda():
    inner = ClassificationPresetEval(crop_size=64, resize_size=72)

    class Outer:
        def __init__(self):
            self.preset = inner

        def __call__(self, image):
            return self.preset(image)

    f = fuse(Outer())
    assert len(f.plan["geometric"]) == 2 and f.output_shape == (3, 64, 64)
    lam = T.Lambda(lambda im: im)
    assert fuse(T.Compose([T.CenterCrop(8), lam])).plan["trailing"] == [lam]


# --------------------------------------------------------------------------
# Pretrained weights' transforms().

WEIGHTS = {
    "resnet50-v2": lambda: models.ResNet50_Weights.IMAGENET1K_V2,
    "resnet18-v1": lambda: models.ResNet18_Weights.IMAGENET1K_V1,
    "efficientnet-b1-bicubic": lambda: models.EfficientNet_B1_Weights.IMAGENET1K_V2,
    "vit-b-16-swag-384": lambda: models.ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1,
    "convnext-tiny": lambda: models.ConvNeXt_Tiny_Weights.IMAGENET1K_V1,
}


def equivalent_chain(p):
    return T.Compose([T.Resize(p.resize_size, interpolation=p.interpolation,
                               antialias=p.antialias),
                      T.CenterCrop(p.crop_size), T.PILToTensor(),
                      T.ConvertImageDtype(torch.float), T.Normalize(p.mean, p.std)])


@pytest.mark.parametrize("weights_id", list(WEIGHTS))
@pytest.mark.parametrize("exact", [False, True], ids=["default", "exact"])
def test_weights_transforms_fuse_like_the_equivalent_chain(weights_id, exact):
    preset = WEIGHTS[weights_id]().transforms()  # builds the preset, downloads nothing
    chain = equivalent_chain(preset)
    ours, theirs = fuse(preset, exact=exact), fuse(chain, exact=exact)
    assert ours.output_shape == theirs.output_shape == (3, *preset.crop_size * 2)[:3]
    assert ours.fusion_report() is None
    data = encode(300, 420, seed=23)
    a, b = ours(data), theirs(data)
    assert type(a) is type(b) and a.dtype == b.dtype == torch.float32
    assert torch.equal(a, b)
    reference = preset(pil_of(data))
    assert type(reference) is type(a) and reference.shape == a.shape
    if exact:
        assert torch.equal(a, reference)


# --------------------------------------------------------------------------
# timm's create_transform.

TIMM = {
    # name: (create_transform keywords, steps fused into the decode, tensor steps)
    "train-default": (dict(is_training=True), 2, 2),  # ColorJitter fuses (test_color_jitter)
    "train-bicubic-no-jitter": (dict(is_training=True, interpolation="bicubic",
                                     color_jitter=None), 2, 2),
    "train-random-interp": (dict(is_training=True, interpolation="random", color_jitter=None),
                            2, 2),
    "train-no-hflip": (dict(is_training=True, hflip=0.0, color_jitter=None), 1, 2),
    "train-autoaugment-erasing": (dict(is_training=True, auto_augment="rand-m9-mstd0.5",
                                       re_prob=0.25), 2, 3),  # RandAugment fuses (issue 50)
    "eval-default": (dict(is_training=False), 2, 2),
    "eval-bicubic-crop-pct": (dict(is_training=False, interpolation="bicubic", crop_pct=0.95),
                              2, 2),
    "eval-squash": (dict(is_training=False, crop_mode="squash"), 2, 2),
    "eval-border": (dict(is_training=False, crop_mode="border"), 1, 0),
}


def timm_transform(kwargs):
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_transform(160, **kwargs)


def seeded(seed):
    """The three RNGs timm's chains draw from (RandAugment picks ops with numpy)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@pytest.mark.parametrize("timm_id", list(TIMM))
def test_timm_chains_fuse_their_leading_geometric_run(timm_id):
    kwargs, geometric, tensor = TIMM[timm_id]
    chain = timm_transform(kwargs)
    f = fuse(chain)
    assert len(f.plan["geometric"]) == geometric
    assert len(f.plan["tensor"]) == tensor
    data = encode(375, 500, seed=24)
    for seed in (0, 1, 2):
        seeded(seed)
        ours = f(data)
        ours_state = (random.getstate(), torch.get_rng_state())
        seeded(seed)
        theirs = chain(pil_of(data))
        assert random.getstate() == ours_state[0], "Python's RNG was consumed differently"
        assert torch.equal(torch.get_rng_state(), ours_state[1])
        assert type(ours) is type(theirs) and ours.shape == theirs.shape


@pytest.mark.parametrize("timm_id", list(TIMM))
def test_timm_chains_exact_is_bit_exact(timm_id):
    chain = timm_transform(TIMM[timm_id][0])
    f = fuse(chain, exact=True)
    data = encode(375, 500, seed=25)
    for seed in (0, 1, 2):
        seeded(seed)
        ours = f(data)
        seeded(seed)
        theirs = chain(pil_of(data))
        assert torch.equal(ours, theirs)


def test_timm_random_interpolation_draws_like_timm():
    chain = timm_transform(dict(is_training=True, interpolation="random", color_jitter=None))
    f = fuse(chain)
    rrc = chain.transforms[0]
    filters = set()
    for seed in range(12):
        seeded(seed)
        f(encode(200, 260, seed=26))
        filters.add(f.last_params.filter)
        seeded(seed)
        box = rrc.get_params(pil_of(encode(200, 260, seed=26)), rrc.scale, rrc.ratio)
        mode = random.choice(rrc.interpolation)
        assert f.last_params.crop == tuple(box)
        assert f.last_params.filter == {"bilinear": 2, "bicubic": 3}[mode.value]
    assert filters == {2, 3}


@pytest.mark.parametrize("converter", ["ToNumpy", "ToTensor", "MaybePILToTensor"])
def test_timm_converters(converter):
    timm_transforms = pytest.importorskip("timm.data.transforms")
    chain = T.Compose([T.CenterCrop(48), getattr(timm_transforms, converter)()])
    f = fuse(chain, exact=True)
    assert len(f.plan["tensor"]) == 1
    data = encode(100, 120, seed=27)
    ours, theirs = f(data), chain(pil_of(data))
    assert type(ours) is type(theirs) and ours.dtype == theirs.dtype
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))


def test_mean_std_constants_match_timm():
    timm_data = pytest.importorskip("timm.data")
    assert list(timm_data.IMAGENET_DEFAULT_MEAN) == pytest.approx(MEAN)
    assert list(timm_data.IMAGENET_DEFAULT_STD) == pytest.approx(STD)
