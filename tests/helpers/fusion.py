"""Shared by tests/transforms: the standard chains, sample images, and the
parity check against torchvision on ``Image.open(f).convert('RGB')``."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.transforms import fuse

from helpers.jpeg_samples import encode, natural_image

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
MIN_PSNR = 40.0  # the default mode's documented floor (fuse's docstring)


# --------------------------------------------------------------------------
# Chains and images.


def train_v1():
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def eval_v1():
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])


def train_v2():
    return T2.Compose([T2.RandomResizedCrop(224), T2.RandomHorizontalFlip(), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])


def eval_v2():
    return T2.Compose([T2.Resize(256), T2.CenterCrop(224), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])


CHAINS = {"train-v1": train_v1, "eval-v1": eval_v1, "train-v2": train_v2, "eval-v2": eval_v2}


def encode_pil(arr: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt, **kwargs)
    return buf.getvalue()


def cmyk_jpeg(height: int, width: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(natural_image(height, width, 3)).convert("CMYK").save(buf, "JPEG", quality=92)
    return buf.getvalue()


SAMPLES = {
    "jpeg-420-500x375": lambda: encode(375, 500),
    "jpeg-444-333x500": lambda: encode(500, 333, subsampling="4:4:4", seed=1),
    "jpeg-progressive-640x480": lambda: encode(480, 640, coding="progressive", seed=2),
    "jpeg-gray-400x300": lambda: encode(300, 400, subsampling="gray", seed=3),
    "jpeg-cmyk-300x260": lambda: cmyk_jpeg(260, 300),
    "bmp-300x200": lambda: encode_pil(natural_image(200, 300, 4), "BMP"),
    "png-260x300": lambda: encode_pil(natural_image(300, 260, 5), "PNG"),
}
TINY = {
    "jpeg-1x1": lambda: encode(1, 1),
    "jpeg-3x5": lambda: encode(3, 5),
    "jpeg-4000x3": lambda: encode(3, 4000),
    "jpeg-3x4000": lambda: encode(4000, 3),
    "bmp-3x5": lambda: encode_pil(natural_image(3, 5, 6), "BMP"),
}


def pil_of(data) -> Image.Image:
    """What torchvision's ImageFolder loader gives."""
    with Image.open(io.BytesIO(bytes(data))) as im:
        return im.convert("RGB")


def reference(chain, data, seed: int):
    torch.manual_seed(seed)
    result = chain(pil_of(data))
    return result, torch.get_rng_state()


def fused(f, data, seed: int):
    torch.manual_seed(seed)
    result = f(data)
    return result, torch.get_rng_state()


def pixels(x) -> np.ndarray:
    """A result in 0..255 pixel units: PIL, uint8 tensors, or ImageNet-normalized floats."""
    if isinstance(x, Image.Image):
        return np.asarray(x, dtype=np.float64)
    arr = x.as_subclass(torch.Tensor).double().numpy()
    if x.dtype == torch.uint8:
        return arr
    return arr * 255.0


def unnormalize(x: np.ndarray) -> np.ndarray:
    return x * np.array(STD)[:, None, None] + np.array(MEAN)[:, None, None] * 255.0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def assert_same_kind(ours, theirs):
    assert type(ours) is type(theirs)
    if isinstance(theirs, Image.Image):
        assert (ours.mode, ours.size) == (theirs.mode, theirs.size)
    else:
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype


def check_parity(chain, data, seed=0, *, min_psnr=MIN_PSNR, normalized=False, **options):
    f = fuse(chain, **options)
    theirs, their_rng = reference(chain, data, seed)
    ours, our_rng = fused(f, data, seed)
    assert_same_kind(ours, theirs)
    assert torch.equal(our_rng, their_rng), "the RNG was consumed differently"
    a, b = pixels(ours), pixels(theirs)
    if normalized:
        a, b = unnormalize(a), unnormalize(b)
    quality = psnr(a, b)
    assert quality >= min_psnr, f"PSNR {quality:.2f} dB < {min_psnr}"
    return f, ours, theirs, quality


# Op combinations of the default mode's bound (measured by
# tests/transforms/bound_matrix.py, tested in test_bound.py); uint8 results.
BICUBIC, NEAREST = T.InterpolationMode.BICUBIC, T.InterpolationMode.NEAREST

COMBINATIONS = {
    "train-v1": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                   T.PILToTensor()]),
    "train-v2": lambda: T2.Compose([T2.RandomResizedCrop(224), T2.RandomHorizontalFlip(),
                                    T2.ToImage()]),
    "eval-v1": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()]),
    "eval-v2": lambda: T2.Compose([T2.Resize(256), T2.CenterCrop(224), T2.ToImage()]),
    "resize-only-v1": lambda: T.Compose([T.Resize(256), T.PILToTensor()]),
    "resize-only-v2": lambda: T2.Compose([T2.Resize(256), T2.ToImage()]),
    "resize-only-small": lambda: T.Compose([T.Resize(64), T.PILToTensor()]),
    "train-bicubic": lambda: T.Compose([T.RandomResizedCrop(224, interpolation=BICUBIC),
                                        T.PILToTensor()]),
    "eval-bicubic": lambda: T.Compose([T.Resize(256, interpolation=BICUBIC), T.CenterCrop(224),
                                       T.PILToTensor()]),
    "train-nearest": lambda: T.Compose([T.RandomResizedCrop(224, interpolation=NEAREST),
                                        T.PILToTensor()]),
    "eval-nearest": lambda: T.Compose([T.Resize(256, interpolation=NEAREST), T.CenterCrop(224),
                                       T.PILToTensor()]),
    "eval-antialias-false-v2": lambda: T2.Compose([T2.ToImage(), T2.Resize(256, antialias=False),
                                                   T2.CenterCrop(224)]),
    "padding-center-crop": lambda: T.Compose([T.CenterCrop(600), T.PILToTensor()]),
    "train-small-out": lambda: T.Compose([T.RandomResizedCrop(64), T.PILToTensor()]),
    "eval-small-out": lambda: T.Compose([T.Resize(73), T.CenterCrop(64), T.PILToTensor()]),
}
