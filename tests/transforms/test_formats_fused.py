"""PNG and WebP through the fused chains (issue 53): every file of the PNG and
WebP corpora through a crop-and-resize chain fused with exact=True, and the
train / eval chains on photos re-encoded to PNG and WebP (lossy, lossless):
torchvision's pixels, bit for bit; a typed error where Pillow refuses the file.
exact=False on WebP decodes the crop at libwebp's reduced scale: close to
torchvision. (Apart from tests/core, whose sanitizer run cannot import torch.)
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T

import fastdecode as fd
from fastdecode import _native
from fastdecode.transforms import fuse

from helpers.png_webp import corpus_files, photos, pillow_image, pillow_pixels

PNG_CHAIN = T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                       T.PILToTensor()])
WEBP_CHAIN = T.Compose([T.RandomResizedCrop(40, scale=(0.2, 1.0)), T.RandomHorizontalFlip(),
                        T.PILToTensor()])
TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
EVAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
NEEDS_PNG = pytest.mark.skipif("png" not in _native.NATIVE_FORMATS, reason="built without libspng")
NEEDS_WEBP = pytest.mark.skipif("webp" not in _native.NATIVE_FORMATS,
                                reason="built without libwebp")


def check_corpus_file(path, chain, seed):
    data = path.read_bytes()
    fused = fuse(chain, exact=True)
    if pillow_pixels(data) is None:
        with pytest.raises(fd.DecodeError, match=r"\w"):
            fused(data)
        return
    torch.manual_seed(seed)
    ours = fused(data)
    torch.manual_seed(seed)
    assert torch.equal(ours, chain(pillow_image(data)))


@NEEDS_PNG
@pytest.mark.parametrize("path", corpus_files("png", ".png"))
def test_png_corpus_fused_crop_resize(path):
    check_corpus_file(path, PNG_CHAIN, 7)


@NEEDS_WEBP
@pytest.mark.parametrize("path", corpus_files("webp", ".webp"))
def test_webp_corpus_fused_crop_resize(path):
    check_corpus_file(path, WEBP_CHAIN, 11)


@pytest.fixture(scope="module")
def encoded():
    return {"png": photos("PNG", 4), "webp-lossy": photos("WEBP", 3, quality=85),
            "webp-lossless": photos("WEBP", 2, lossless=True)}


PHOTO_CASES = [("png", i) for i in range(4)] + [("webp-lossy", i) for i in range(3)] + \
    [("webp-lossless", i) for i in range(2)]


@pytest.mark.parametrize("chain", ["train", "eval"])
@pytest.mark.parametrize("kind,index", PHOTO_CASES, ids=[f"{k}-{i}" for k, i in PHOTO_CASES])
def test_fused_chain_on_photos_is_torchvisions(encoded, kind, index, chain):
    fmt = kind.split("-")[0]
    if fmt not in _native.NATIVE_FORMATS:
        pytest.skip(f"built without {fmt}'s library")
    tf = {"train": TRAIN, "eval": EVAL}[chain]
    data = encoded[kind][index]
    torch.manual_seed(index)
    ours = fuse(tf, exact=True)(data)
    torch.manual_seed(index)
    assert torch.equal(ours, tf(pillow_image(data)))


@NEEDS_WEBP
def test_webp_default_mode_scales_with_libwebp(encoded):
    """exact=False: the crop is decoded at a reduced scale; close to torchvision."""
    data = encoded["webp-lossy"][0]
    torch.manual_seed(0)
    ours = fuse(EVAL)(data)
    torch.manual_seed(0)
    ref = EVAL(pillow_image(data))
    assert ours.shape == ref.shape
    assert (ours - ref).abs().mean() < 0.02
