"""A JPEG variant libjpeg-turbo refuses (lossless, SOF3) loads through Pillow
with a transform too, as ImageFolder loads it (issue 53 item 1).

Before, ``read_header`` raised on SOF3 where ``decode_image`` fell back, so
``fuse`` and ``FastImageFolder`` raised (or, under ``on_error='skip'``, lost
the file) wherever a transform was set.
"""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets import ImageFolder

import fastdecode as fd
from fastdecode.datasets import FastImageFolder
from fastdecode.transforms import fuse

from helpers.corpus import CORPUS

LOSSLESS = CORPUS / "jpeg-edge" / "jpeg-decoder" / "reftest" / "lossless" / "1"
SOF3_8BIT = LOSSLESS / "jpeg_lossless_sel1-8bit.jpg"  # Pillow 13 decodes it
SOF3_16BIT = LOSSLESS / "jpeg_lossless_sel1.jpg"  # Pillow cannot open it

pytestmark = pytest.mark.skipif(not SOF3_8BIT.exists(), reason="shared jpeg-edge corpus absent")

CHAINS = {
    "resize-centercrop": T.Compose([T.Resize(100), T.CenterCrop(90), T.PILToTensor()]),
    "randomresizedcrop-flip": T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
                                         T.PILToTensor()]),
    "totensor": T.Compose([T.CenterCrop(300), T.ToTensor()]),
}


def pillow_rgb(path):
    with Image.open(path) as im:
        return im.convert("RGB")


def test_read_header_is_pillows():
    info = fd.read_header(SOF3_8BIT.read_bytes())
    assert (info.format, info.width, info.height, info.channels) == ("jpeg", 512, 512, 1)


def test_read_header_pillow_refuses_too():
    with pytest.raises(fd.UnsupportedFormatError, match="SOF type 0xc3"):
        fd.read_header(SOF3_16BIT.read_bytes())


@pytest.mark.parametrize("chain", list(CHAINS), ids=list(CHAINS))
def test_fused_chain_exact(chain):
    tf = CHAINS[chain]
    torch.manual_seed(3)
    ours = fuse(tf, exact=True)(SOF3_8BIT.read_bytes())
    torch.manual_seed(3)
    ref = tf(pillow_rgb(SOF3_8BIT))
    assert torch.equal(ours, ref)


def test_image_folder_loads_it_as_imagefolder(tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copy(SOF3_8BIT, tmp_path / "a" / "lossless.jpg")
    data = Image.new("RGB", (40, 30), (200, 10, 10))
    buf = io.BytesIO()
    data.save(buf, "JPEG")
    (tmp_path / "a" / "plain.jpg").write_bytes(buf.getvalue())
    tf = CHAINS["resize-centercrop"]
    ours = FastImageFolder(tmp_path, transform=tf, exact=True)
    ref = ImageFolder(tmp_path, transform=tf)
    assert len(ours) == len(ref) == 2
    for i in range(2):
        assert torch.equal(ours[i][0], ref[i][0])
        assert ours[i][1] == ref[i][1]


def test_skip_keeps_it(tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copy(SOF3_8BIT, tmp_path / "a" / "lossless.jpg")
    ds = FastImageFolder(tmp_path, transform=CHAINS["totensor"], on_error="skip")
    image, target = ds[0]
    assert image.shape == (3, 300, 300) and target == 0
    ref = np.asarray(pillow_rgb(SOF3_8BIT))[106:406, 106:406].transpose(2, 0, 1) / 255
    assert np.allclose(image.numpy(), ref, atol=1e-6)
