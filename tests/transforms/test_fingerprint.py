"""A fused plan follows its transform: is_current() / refreshed() notice every change."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode import transforms as FT  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import MEAN, STD, pil_of  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402


class Preset:
    def __init__(self, t):
        self.transforms = t

    def __call__(self, img):
        return self.transforms(img)


def train_v1():
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(list(MEAN), list(STD))])


def train_v2():
    return T2.Compose([T2.RandomResizedCrop(64), T2.RandomHorizontalFlip(), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True),
                       T2.Normalize(list(MEAN), list(STD))])


def set_size(c):
    c.transforms[0].size = (48, 48)  # progressive resizing


def append_step(c):
    c.transforms.append(T.RandomErasing(p=1.0))


def replace_step(c):
    c.transforms[1] = T.RandomHorizontalFlip(1.0)


def reassign_list(c):
    c.transforms = c.transforms[:1] + [T.PILToTensor()]


def edit_mean_list(c):
    c.transforms[-1].mean[0] = 0.0


def flip_probability(c):
    c.transforms[1].p = 0.0




MUTATIONS = {f.__name__: f for f in (set_size, append_step, replace_step, reassign_list,
                                     edit_mean_list, flip_probability)}


@pytest.mark.parametrize("make", [train_v1, train_v2], ids=["v1", "v2"])
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_every_change_is_noticed(make, mutation):
    chain = make()
    f = fuse(chain)
    data = encode(120, 160)
    f(data)
    assert f.is_current(), "a call must not look like a change"
    MUTATIONS[mutation](chain)
    assert not f.is_current()
    g = f.refreshed()
    assert g is not f and g.is_current() and g.refreshed() is g
    torch.manual_seed(0)
    ours = g(data)
    torch.manual_seed(0)
    theirs = chain(pil_of(data))
    assert type(ours) is type(theirs) and ours.shape == theirs.shape


def test_tensor_parameters_edited_in_place():
    chain = T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize(torch.tensor(MEAN),
                                                                  torch.tensor(STD))])
    f = fuse(chain)
    chain.transforms[-1].mean.mul_(0.5)
    assert not f.is_current()
    data = encode(20, 20)
    assert torch.equal(f.refreshed()(data), chain(pil_of(data)))


def test_wrapper_inner_reassigned_and_options_kept():
    preset = Preset(T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]))
    f = fuse(preset, exact=True, region="whole", dct_margin=3.0)
    assert f.output_shape == (3, 32, 32)
    preset.transforms = T.Compose([T.Resize(40), T.CenterCrop(24), T.PILToTensor()])
    g = f.refreshed()
    assert g.output_shape == (3, 24, 24)
    assert (g.exact, g.renderer.region_mode, g.renderer.dct_margin) == (True, "whole", 3.0)


def test_own_classes_follow_their_attributes():
    t = FT.Compose([FT.CenterCrop(32), T.PILToTensor()])
    data = encode(60, 60)
    assert t(data).shape == (3, 32, 32)
    t.transforms[0].size = (20, 20)
    assert t(data).shape == (3, 20, 20)
    assert pickle.loads(pickle.dumps(t))(data).shape == (3, 20, 20)


def test_fingerprint_survives_pickling_to_a_worker():
    f = pickle.loads(pickle.dumps(fuse(train_v1())))
    assert f.is_current()
    f.source.transforms[0].size = (32, 32)
    assert not f.is_current() and f.refreshed().output_shape == (3, 32, 32)


# --------------------------------------------------------------------------
# Calls change nothing: the recipes' augmentation steps (issue 50). Each
# family keeps a plan current over many calls and loses it on a real edit.

def _v1_chain(step, after_tensor=False):
    head = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
    tail = [T.ToTensor(), T.Normalize(list(MEAN), list(STD))]
    return T.Compose(head + (tail + [step] if after_tensor else [step] + tail))


def _v2_chain(step, after_tensor=False):
    head = [T2.RandomResizedCrop(64), T2.RandomHorizontalFlip()]
    tail = [T2.ToImage(), T2.ToDtype(torch.float32, scale=True),
            T2.Normalize(list(MEAN), list(STD))]
    return T2.Compose(head + (tail + [step] if after_tensor else [step] + tail))


def _timm_chain(**kwargs):
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_transform(64, is_training=True, **kwargs)


def _step(chain, name):
    """The first step of the chain whose class is called ``name``."""
    return next(s for s in chain.transforms if type(s).__name__ == name)


def _set(name, attr, value):
    def edit(chain):
        setattr(_step(chain, name), attr, value)
    return edit


def _set_item(name, attr, key, value):
    """An in-place edit of a dict attribute (v2's ``_fill``, timm's ``kwargs``)."""
    def edit(chain):
        getattr(_step(chain, name), attr)[key] = value
    return edit


def _timm_op_set(name, attr, value):
    """An edit of the first op of timm's policy (RandAugment's ops, AutoAugment's sub-policies)."""
    def edit(chain):
        aug = _step(chain, name)
        op = aug.ops[0] if hasattr(aug, "ops") else aug.policy[0][0]
        setattr(op, attr, value)
    return edit


FAMILIES = {
    # id: (the chain, a real edit of it)
    "v1-autoaugment": (lambda: _v1_chain(T.AutoAugment()), _set("AutoAugment", "fill", [128] * 3)),
    "v2-autoaugment": (lambda: _v2_chain(T2.AutoAugment()),
                       _set_item("AutoAugment", "_fill", "others", 128)),
    "v1-randaugment": (lambda: _v1_chain(T.RandAugment()), _set("RandAugment", "magnitude", 5)),
    "v2-randaugment": (lambda: _v2_chain(T2.RandAugment()), _set("RandAugment", "magnitude", 5)),
    "v1-trivialaugment": (lambda: _v1_chain(T.TrivialAugmentWide()),
                          _set("TrivialAugmentWide", "num_magnitude_bins", 11)),
    "v2-trivialaugment": (lambda: _v2_chain(T2.TrivialAugmentWide()),
                          _set("TrivialAugmentWide", "num_magnitude_bins", 11)),
    "v1-augmix": (lambda: _v1_chain(T.AugMix()), _set("AugMix", "severity", 1)),
    "v2-augmix": (lambda: _v2_chain(T2.AugMix()), _set("AugMix", "severity", 1)),
    "v1-erasing": (lambda: _v1_chain(T.RandomErasing(), after_tensor=True),
                   _set("RandomErasing", "p", 0.25)),
    "v2-erasing": (lambda: _v2_chain(T2.RandomErasing(), after_tensor=True),
                   _set("RandomErasing", "p", 0.25)),
    "v1-affine-fill": (lambda: _v1_chain(T.RandomAffine(10, fill=3)),
                       _set("RandomAffine", "degrees", [-5.0, 5.0])),
    "v2-affine-fill": (lambda: _v2_chain(T2.RandomAffine(10, fill=3)),
                       _set("RandomAffine", "degrees", [-5.0, 5.0])),
    "v1-rotation-fill": (lambda: _v1_chain(T.RandomRotation(10, fill=3)),
                         _set("RandomRotation", "fill", 7)),
    "v2-rotation-fill": (lambda: _v2_chain(T2.RandomRotation(10, fill=3)),
                         _set_item("RandomRotation", "_fill", "others", 7)),
    "v1-crop-padding": (lambda: _v1_chain(T.RandomCrop(56, padding=4)),
                        _set("RandomCrop", "padding", 8)),
    "v2-crop-padding": (lambda: _v2_chain(T2.RandomCrop(56, padding=4)),
                        _set("RandomCrop", "padding", [8, 8, 8, 8])),
    "timm-rand": (lambda: _timm_chain(auto_augment="rand-m9-mstd0.5"),
                  _timm_op_set("RandAugment", "magnitude", 5)),
    "timm-rand-fill": (lambda: _timm_chain(auto_augment="rand-m9-mstd0.5-inc1"),
                       lambda c: _step(c, "RandAugment").ops[0].kwargs.update(fillcolor=(0, 0, 0))),
    "timm-augmix": (lambda: _timm_chain(auto_augment="augmix-m5-w4-d2"),
                    _set("AugMixAugment", "alpha", 0.5)),
    # v0r: v0's policy with the posterize timm runs under Pillow 13 (v0's asks for 0 bits)
    "timm-v0r": (lambda: _timm_chain(auto_augment="v0r"), _timm_op_set("AutoAugment", "prob", 0.1)),
    "timm-erasing": (lambda: _timm_chain(re_prob=0.25), _set("RandomErasing", "probability", 0.5)),
    # the single-op augmentations and timm's original policy, fused since issue 50
    "v1-posterize": (lambda: _v1_chain(T.RandomPosterize(4)), _set("RandomPosterize", "bits", 3)),
    "v2-invert": (lambda: _v2_chain(T2.RandomInvert()), _set("RandomInvert", "p", 0.2)),
    "v2-affine-fill-dict": (lambda: _v2_chain(T2.RandomAffine(10, fill={"others": 5})),
                            _set_item("RandomAffine", "_fill", "others", 9)),
    "timm-original": (lambda: _timm_chain(auto_augment="original-mstd0.5"),
                      _timm_op_set("AutoAugment", "prob", 0.1)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_calls_keep_the_plan_current_and_edits_do_not(family):
    make, edit = FAMILIES[family]
    chain = make()
    f = fuse(chain)
    data = encode(72, 96)
    for seed in range(50):
        torch.manual_seed(seed)
        f(data)
        assert f.is_current(), f"call {seed} looked like a change of the chain"
    assert f.refreshed() is f
    edit(chain)
    assert not f.is_current()
    g = f.refreshed()
    assert g is not f and g.is_current()


@pytest.mark.filterwarnings("ignore:fastdecode stopped fusion:RuntimeWarning")
def test_dataset_plans_once_for_a_randaugment_chain(tmp_path, monkeypatch):
    """FastImageFolder asks its plan per item: a v2 RandAugment chain is planned once, not per item."""
    from fastdecode import FastImageFolder
    from fastdecode.transforms import fused

    from helpers.trees import write_image

    for i in range(4):
        write_image(tmp_path / f"c{i % 2}" / f"{i}.jpg", "JPEG", (72, 96), seed=i)
    chain = _v2_chain(T2.RandAugment())
    ds = FastImageFolder(str(tmp_path), transform=chain)
    ds[0]  # the first plan
    plans = []
    init = fused.FusedTransform.__init__

    def counting(self, *args, **kwargs):
        plans.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(fused.FusedTransform, "__init__", counting)
    for i in range(30):
        torch.manual_seed(i)
        ds[i % len(ds)]
    assert not plans, f"{len(plans)} new plans in 30 items of an unchanged chain"
    chain.transforms[2].magnitude = 5
    ds[0]
    assert len(plans) == 1, "an edit re-plans once"
