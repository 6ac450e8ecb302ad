"""fastdecode's own transform classes on encoded bytes, and the documented errors."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402

from fastdecode import transforms as FT  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import (  # noqa: E402
    MEAN,
    MIN_PSNR,
    STD,
    eval_v1,
    pil_of,
    pixels,
    psnr,
    train_v1,
    unnormalize,
)
from helpers.jpeg_samples import encode  # noqa: E402

# --------------------------------------------------------------------------
# fastdecode's own transform classes.


def test_own_classes_on_bytes_match_torchvision():
    data = encode(375, 500, seed=12)
    ours = FT.Compose([FT.RandomResizedCrop(224, interpolation="bilinear"),
                       FT.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    theirs = train_v1()
    torch.manual_seed(2)
    a = ours(data)
    torch.manual_seed(2)
    b = theirs(pil_of(data))
    assert psnr(unnormalize(pixels(a)), unnormalize(pixels(b))) >= MIN_PSNR
    # the same object on PIL images is torchvision
    torch.manual_seed(2)
    assert torch.equal(ours(pil_of(data)), b)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: FT.RandomResizedCrop(64, interpolation=Image.BICUBIC), id="rrc"),
    pytest.param(lambda: FT.Resize(100, interpolation="nearest", max_size=150), id="resize"),
    pytest.param(lambda: FT.CenterCrop((90, 300)), id="center-crop"),
    pytest.param(lambda: FT.RandomHorizontalFlip(0.7), id="hflip"),
])
def test_own_single_transforms(make):
    data = encode(160, 240, seed=13)
    t = make()
    for seed in (0, 1):
        torch.manual_seed(seed)
        on_bytes = t(data)
        torch.manual_seed(seed)
        on_pil = t(pil_of(data))
        assert isinstance(on_bytes, Image.Image)
        assert on_bytes.size == on_pil.size
        assert psnr(pixels(on_bytes), pixels(on_pil)) >= MIN_PSNR
    # inside a plain torchvision Compose on PIL images
    torch.manual_seed(4)
    a = T.Compose([t, T.PILToTensor()])(pil_of(data))
    torch.manual_seed(4)
    b = T.Compose([t, T.PILToTensor()])(pil_of(data))
    assert torch.equal(a, b)
    assert pickle.loads(pickle.dumps(t)).forward is not None


def test_own_classes_pickle_after_use():
    t = FT.Compose([FT.CenterCrop(32), T.PILToTensor()])
    t(encode(40, 40))
    clone = pickle.loads(pickle.dumps(t))
    assert "_fd_fused" not in clone.__dict__
    assert torch.equal(clone(encode(40, 40)), t(encode(40, 40)))


def test_own_classes_fuse_like_torchvision():
    ours = fuse(FT.Compose([FT.Resize(256), FT.CenterCrop(224), T.ToTensor()]))
    assert len(ours.plan["geometric"]) == 2 and ours.output_shape == (3, 224, 224)


# --------------------------------------------------------------------------
# Documented errors.


def test_errors():
    with pytest.raises(ValueError, match="interpolation must be one of"):
        FT.Resize(10, interpolation="cubic-ish")
    with pytest.raises(ValueError, match="interpolation must be an InterpolationMode"):
        FT.RandomResizedCrop(10, interpolation=17)
    with pytest.raises(TypeError, match="is not callable"):
        fuse(T.Compose([T.CenterCrop(8), 42]))
    with pytest.raises(ValueError, match="region must be one of"):
        fuse(eval_v1(), region="nearest")
    with pytest.raises(ValueError, match="dct_margin must be >= 1"):
        fuse(eval_v1(), dct_margin=0.5)
    with pytest.raises(TypeError, match="uint8 image array .* got a torch.float32 tensor"):
        fuse(eval_v1())(torch.zeros(3, 8, 8))


def test_torchvision_errors_surface_unchanged():
    f = fuse(T.Compose([T.Resize(300, max_size=200), T.ToTensor()]))
    with pytest.raises(ValueError, match="max_size = 200 must be strictly greater"):
        f(encode(40, 40))
    f = fuse(T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize([0.5] * 3, [0.0] * 3)]))
    assert f.plan["trailing"][0].std == [0.0] * 3
    with pytest.raises(ValueError, match="std evaluated to zero"):
        f(encode(40, 40))
