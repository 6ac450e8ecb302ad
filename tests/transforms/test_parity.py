"""Fused chains against torchvision: the same draws, the same type, values within the bound."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import Geometry, fuse  # noqa: E402

from helpers.fusion import (  # noqa: E402
    CHAINS,
    MEAN,
    SAMPLES,
    STD,
    TINY,
    check_parity,
    pil_of,
    pixels,
)
from helpers.jpeg_samples import encode  # noqa: E402

# --------------------------------------------------------------------------
# Same crop boxes and flips as torchvision.


def torchvision_draws(chain, img, seed):
    """(box, flip) torchvision draws for RandomResizedCrop + RandomHorizontalFlip."""
    rrc, flip = chain.transforms[0], chain.transforms[1]
    torch.manual_seed(seed)
    if isinstance(rrc, T2.RandomResizedCrop):
        p = rrc.make_params([img])
        box = (p["top"], p["left"], p["height"], p["width"])
    else:
        box = tuple(T.RandomResizedCrop.get_params(img, rrc.scale, rrc.ratio))
    return box, bool(torch.rand(1) < flip.p)


@pytest.mark.parametrize("chain_id", ["train-v1", "train-v2"])
@pytest.mark.parametrize("size", [(375, 500), (500, 333), (3, 4000), (1, 1)],
                         ids=lambda s: f"{s[1]}x{s[0]}")
def test_random_draws_match_torchvision(chain_id, size):
    chain = CHAINS[chain_id]()
    data = encode(*size)
    img = pil_of(data)
    f = fuse(chain)
    for seed in range(8):
        torch.manual_seed(seed)
        f(data)
        assert (f.last_params.crop, f.last_params.flip) == torchvision_draws(chain, img, seed)


RRC_VARIANTS = {
    "default": {},
    "narrow-scale": {"scale": (0.5, 0.6)},
    "wide-ratio": {"ratio": (0.2, 5.0)},
    "tiny-scale": {"scale": (0.001, 0.01), "ratio": [0.9, 1.1]},
    "fallback-prone": {"scale": (0.95, 1.0), "ratio": (3.0, 4.0)},
}


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("variant", list(RRC_VARIANTS))
@pytest.mark.parametrize("size", [(375, 500), (500, 333), (7, 3000), (1, 1), (64, 64)],
                         ids=lambda s: f"{s[1]}x{s[0]}")
def test_box_draws_and_rng_states_are_torchvision_s(size, variant, v2):
    """The replica of RandomResizedCrop's draw against torchvision's own."""
    cls = T2.RandomResizedCrop if v2 else T.RandomResizedCrop
    rrc = cls(32, **RRC_VARIANTS[variant])
    f = fuse(rrc)
    img = torch.zeros(3, *size, dtype=torch.uint8)
    for seed in range(40):
        torch.manual_seed(seed)
        op = f.geo_ops[0]
        ours = op.draw(size)
        ours_state = torch.get_rng_state()
        torch.manual_seed(seed)
        if v2:
            p = rrc.make_params([img])
            theirs = (p["top"], p["left"], p["height"], p["width"])
        else:
            theirs = tuple(T.RandomResizedCrop.get_params(img, rrc.scale, rrc.ratio))
        assert ours == theirs
        assert torch.equal(ours_state, torch.get_rng_state())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 0.7, 1.0])
def test_flip_draws_are_torchvision_s(p, v2, dtype):
    flip = (T2 if v2 else T).RandomHorizontalFlip(p)
    op = fuse(flip).geo_ops[0]
    img = Image.new("RGB", (2, 1))
    img.putpixel((0, 0), (255, 0, 0))
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        for seed in range(60):
            torch.manual_seed(seed)
            geo = Geometry.start(1, 2)
            op.apply(geo)
            ours = (geo.flip, torch.get_rng_state())
            torch.manual_seed(seed)
            flipped = flip(img).getpixel((1, 0)) == (255, 0, 0)
            assert ours[0] == flipped
            assert torch.equal(ours[1], torch.get_rng_state())
    finally:
        torch.set_default_dtype(before)


# --------------------------------------------------------------------------
# Parity on the standard chains.


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_standard_chains(chain_id, sample):
    data = SAMPLES[sample]()
    for seed in (0, 1):
        check_parity(CHAINS[chain_id](), data, seed, normalized=True)


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_standard_chains_exact_is_bit_exact(chain_id, sample):
    f, ours, theirs, _ = check_parity(CHAINS[chain_id](), SAMPLES[sample](), 3, exact=True,
                                      normalized=True)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", ["jpeg-420-500x375", "jpeg-444-333x500", "bmp-300x200"])
def test_exact_mode_is_bit_exact_for_every_seed(chain_id, sample):
    for seed in range(5):
        _, ours, theirs, _ = check_parity(CHAINS[chain_id](), SAMPLES[sample](), seed,
                                          exact=True, normalized=True)
        assert torch.equal(ours, theirs)


# --------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(TINY))
def test_tiny_and_extreme_images(chain_id, sample):
    chain = CHAINS[chain_id]()
    if chain_id.startswith("eval"):  # Resize(256) of 3x4000 is 341333 px wide
        resize = T.Resize(32) if chain_id == "eval-v1" else T2.Resize(32)
        crop = T.CenterCrop(24) if chain_id == "eval-v1" else T2.CenterCrop(24)
        chain.transforms[:2] = [resize, crop]
    for seed in (0, 1, 2):
        check_parity(chain, TINY[sample](), seed, normalized=True)


PADDING = {
    "crop-larger": T.Compose([T.CenterCrop(300), T.PILToTensor()]),
    "crop-larger-odd": T.Compose([T.CenterCrop((251, 333)), T.PILToTensor()]),
    "crop-taller": T.Compose([T.CenterCrop((301, 100)), T.PILToTensor()]),
    "flip-then-pad": T.Compose([T.RandomHorizontalFlip(1.0), T.CenterCrop((120, 333)),
                                T.PILToTensor()]),
    "pad-then-flip": T.Compose([T.CenterCrop((120, 333)), T.RandomHorizontalFlip(1.0),
                                T.PILToTensor()]),
    "resize-then-pad": T.Compose([T.Resize((100, 300)), T.CenterCrop(200), T.PILToTensor()]),
    "pad-then-resize": T.Compose([T.CenterCrop(300), T.Resize(128), T.PILToTensor()]),
    "pad-then-rrc": T.Compose([T.CenterCrop(300), T.RandomResizedCrop(64), T.PILToTensor()]),
    "pad-v2": T2.Compose([T2.CenterCrop(301), T2.RandomHorizontalFlip(), T2.ToImage()]),
    "pad-pil": T.Compose([T.CenterCrop(333)]),
}


@pytest.mark.parametrize("chain_id", list(PADDING))
def test_center_crop_padding(chain_id):
    data = encode(150, 251, seed=7)
    for seed in range(3):
        check_parity(PADDING[chain_id], data, seed)


@pytest.mark.parametrize("chain_id", list(PADDING))
def test_center_crop_padding_bit_exact(chain_id):
    data = encode(150, 251, seed=7)
    _, ours, theirs, _ = check_parity(PADDING[chain_id], data, 1, exact=True)
    assert np.array_equal(pixels(ours), pixels(theirs))


SIZES = {
    "resize-max-size": T.Compose([T.Resize(200, max_size=250), T.PILToTensor()]),
    "resize-max-size-extreme": T.Compose([T.Resize(8, max_size=300), T.PILToTensor()]),
    "resize-tuple": T.Compose([T.Resize((200, 300)), T.PILToTensor()]),
    "resize-1-seq": T.Compose([T.Resize([180]), T.CenterCrop((150, 120)), T.PILToTensor()]),
    "v2-resize-none-max-size": T2.Compose([T2.Resize(None, max_size=222), T2.ToImage()]),
    "v2-resize-max-size": T2.Compose([T2.Resize(200, max_size=250), T2.ToImage()]),
    "rrc-tuple": T.Compose([T.RandomResizedCrop((120, 200), scale=(0.3, 1.0)), T.PILToTensor()]),
    "rrc-bicubic": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.BICUBIC),
                              T.ToTensor()]),
    "rrc-nearest": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.NEAREST),
                              T.PILToTensor()]),
    "rrc-lanczos": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.LANCZOS),
                              T.PILToTensor()]),
    "v2-rrc-string-interp": T2.Compose([T2.RandomResizedCrop(100, interpolation="bicubic"),
                                        T2.PILToTensor()]),
    "eval-bicubic": T.Compose([T.Resize(128, interpolation=Image.BICUBIC), T.CenterCrop(112),
                               T.ToTensor()]),
    "resize-identity": T.Compose([T.Resize((375, 500)), T.CenterCrop(300), T.PILToTensor()]),
    "double-resize": T.Compose([T.Resize(300), T.RandomResizedCrop(160), T.PILToTensor()]),
    "flip-first": T.Compose([T.RandomHorizontalFlip(), T.RandomResizedCrop(96), T.PILToTensor()]),
    "crop-only": T.Compose([T.CenterCrop(128), T.RandomHorizontalFlip(), T.ToTensor()]),
    "geometry-only-pil": T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip()]),
    "no-geometry": T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]),
    "v2-pure-tensor": T2.Compose([T2.RandomResizedCrop(96), T2.ToImage(), T2.ToPureTensor()]),
    "v2-float64": T2.Compose([T2.CenterCrop(96), T2.ToImage(),
                              T2.ToDtype(torch.float64, scale=True)]),
    "v2-uint8-normalize-unfused": T2.Compose([T2.CenterCrop(96), T2.ToImage(),
                                              T2.ToDtype(torch.float32, scale=True),
                                              T2.Normalize([0.5], [0.25])]),
    "v1-convert-dtype": T.Compose([T.CenterCrop(96), T.PILToTensor(),
                                   T.ConvertImageDtype(torch.float32)]),
    "v2-deprecated-totensor": T2.Compose([T2.CenterCrop(96), T2.ToImage(), T2.ToPureTensor()]),
    "mixed-v1-v2": T2.Compose([T.Resize(160), T2.CenterCrop(128), T.ToTensor()]),
    "nested-compose": T.Compose([T.Compose([T.Resize(160), T.CenterCrop(128)]),
                                 T2.Compose([T.ToTensor()])]),
}


@pytest.mark.parametrize("chain_id", list(SIZES))
def test_sizes_interpolations_and_types(chain_id):
    data = encode(375, 500, seed=8)
    for seed in (0, 1):
        check_parity(SIZES[chain_id], data, seed)


@pytest.mark.parametrize("chain_id", list(SIZES))
def test_sizes_exact_is_bit_exact(chain_id):
    data = encode(375, 500, seed=8)
    _, ours, theirs, _ = check_parity(SIZES[chain_id], data, 4, exact=True)
    assert np.array_equal(pixels(ours), pixels(theirs))


REGION_CHAINS = {
    "eval-bilinear-flip": T.Compose([T.Resize(256), T.CenterCrop(224), T.RandomHorizontalFlip(),
                                     T.PILToTensor()]),
    "eval-bicubic": T.Compose([T.Resize(200, interpolation=T.InterpolationMode.BICUBIC),
                               T.CenterCrop((150, 190)), T.PILToTensor()]),
    "upscale-then-crop": T.Compose([T.Resize(700), T.CenterCrop(500), T.PILToTensor()]),
    "rrc-then-center-crop": T.Compose([T.RandomResizedCrop(160), T.CenterCrop(100),
                                       T.PILToTensor()]),
}


@pytest.mark.parametrize("region", ["box", "whole"])
@pytest.mark.parametrize("chain_id", list(REGION_CHAINS))
def test_region_after_resample_is_exact(chain_id, region):
    data = encode(375, 500, seed=14)
    for seed in (0, 1):
        _, ours, theirs, _ = check_parity(REGION_CHAINS[chain_id], data, seed, exact=True,
                                          region=region)
        assert torch.equal(ours, theirs)


def test_region_round_is_an_approximation():
    f, *_ = check_parity(REGION_CHAINS["eval-bilinear-flip"], encode(375, 500, seed=14), 0,
                         exact=True, region="round", min_psnr=25.0)
    assert f.renderer.region_mode == "round"
