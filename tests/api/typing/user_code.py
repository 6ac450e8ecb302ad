# Typical user code, checked by mypy against fastdecode's stubs and annotations
# (tests/api/test_typing.py). Each reveal_type line states what mypy must infer.
from __future__ import annotations

from typing import reveal_type

import numpy as np
import torch
from torchvision import transforms as T

import fastdecode as fd
from fastdecode.transforms import FusedTransform, fuse

data = b"\xff\xd8"
img = fd.decode_jpeg(data, crop=(0, 0, 10, 10), size=(8, 8), layout="CHW", flip=True)
reveal_type(img)  # E: numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]
thumb = fd.decode_image(data, mode=fd.Mode.L, min_size=(64, 64))
reveal_type(thumb)  # E: numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]
pixels = fd.read_image("cat.jpg", layout=fd.Layout.CHW, size=(224, 224))
reveal_type(pixels)  # E: numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]
bounded = fd.read_image("cat.jpg", interpolation=T.InterpolationMode.BICUBIC, size=(8, 8),
                        max_work_per_byte=None, mode="L")
reveal_type(bounded)  # E: numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]
header = fd.read_header(data)
reveal_type(header.width)  # E: int
reveal_type(header.subsampling)  # E: str | None

chain = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
train = fd.FastImageFolder("imagenet/train", chain, on_error="skip")
reveal_type(train)  # E: fastdecode.datasets._folder.FastImageFolder
loader = fd.FastLoader(train, batch_size=256, num_workers=2)
reveal_type(loader)  # E: fastdecode.loader._loader.FastLoader
fused = fuse(chain, exact=True)
reveal_type(fused)  # E: fastdecode.transforms.fused.FusedTransform
assert isinstance(fd.fuse(chain), FusedTransform)
out = np.empty((3, 224, 224), np.uint8)
fd.decode_jpeg(data, out=out, layout="CHW")
try:
    fd.decode_bmp(data, max_pixels=None)
except fd.ImageTooLargeError as exc:
    reveal_type(exc.path)  # E: str | None
except fd.DecodeError:
    pass
x: torch.Tensor = torch.zeros(1)
