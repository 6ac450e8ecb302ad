"""The parity matrix: exact mode bit-identical, the default mode within its documented bound.

Chains (train, eval, resize-only, v1/v2, uint8 and float tails, bicubic,
nearest, antialias=False, padding CenterCrop, small outputs) x formats (JPEG
variants, PNG, WebP, TIFF, GIF, BMP, PPM) x exact True/False on generated
images, and the default mode per op combination on the shared photos.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

from helpers.corpus import CORPUS, corpus_params, read_manifest  # noqa: E402
from helpers.fusion import (  # noqa: E402
    CHAINS,
    COMBINATIONS,
    MIN_PSNR,
    check_parity,
    cmyk_jpeg,
    encode_pil,
)
from helpers.jpeg_samples import encode, natural_image  # noqa: E402


def gif(height: int, width: int, seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(natural_image(height, width, seed)).quantize(256).save(buf, "GIF")
    return buf.getvalue()


FORMATS = {
    "jpeg-420": lambda: encode(300, 400, seed=30),
    "jpeg-444-progressive": lambda: encode(320, 290, subsampling="4:4:4", coding="progressive",
                                           seed=31),
    "jpeg-gray": lambda: encode(260, 330, subsampling="gray", seed=32),
    "jpeg-cmyk": lambda: cmyk_jpeg(250, 300),
    "png": lambda: encode_pil(natural_image(290, 310, 33), "PNG"),
    "webp": lambda: encode_pil(natural_image(270, 350, 34), "WEBP", quality=90),
    "tiff": lambda: encode_pil(natural_image(300, 280, 35), "TIFF"),
    "gif": lambda: gif(280, 300, 36),
    "bmp": lambda: encode_pil(natural_image(240, 320, 37), "BMP"),
    "ppm": lambda: encode_pil(natural_image(250, 260, 38), "PPM"),
}
MATRIX_CHAINS = {**{name: make for name, make in CHAINS.items()},
                 **{name: make for name, make in COMBINATIONS.items()
                    if name not in ("train-v1", "train-v2", "eval-v1", "eval-v2")}}


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("chain_id", list(MATRIX_CHAINS))
def test_parity_matrix(chain_id, fmt, exact):
    chain = MATRIX_CHAINS[chain_id]()
    data = FORMATS[fmt]()
    normalized = chain_id in CHAINS
    for seed in (0, 1):
        _, ours, theirs, quality = check_parity(chain, data, seed, exact=exact,
                                                normalized=normalized)
        if exact:
            assert torch.equal(ours.as_subclass(torch.Tensor), theirs.as_subclass(torch.Tensor))


PHOTOS = read_manifest("photos")
PHOTO_COMBINATIONS = ["train-v1", "eval-v2", "resize-only-v1", "resize-only-small",
                      "train-bicubic", "eval-nearest", "train-small-out", "eval-small-out"]


@pytest.mark.parametrize("combination", PHOTO_COMBINATIONS)
@pytest.mark.parametrize("row", corpus_params("photos", PHOTOS, "file"))
def test_default_mode_bound_on_photos(combination, row):
    data = (CORPUS / "photos" / row["file"]).read_bytes()
    seed = sum(map(ord, row["file"]))
    chain = COMBINATIONS[combination]()
    _, ours, theirs, quality = check_parity(chain, data, seed)
    assert quality >= MIN_PSNR


def test_the_documented_bound_is_the_tested_one():
    doc = fuse.__doc__ + (__import__("fastdecode.transforms").transforms.__doc__ or "")
    assert f"floor is {MIN_PSNR:.0f} dB" in doc
    assert np.isfinite(MIN_PSNR) and MIN_PSNR >= 40
