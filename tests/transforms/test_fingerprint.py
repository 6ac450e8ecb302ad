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
