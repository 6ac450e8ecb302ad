"""JPEGs the tests write themselves: Pillow's encoder, and cjpeg for the
variants Pillow cannot write (4:4:0, 4:1:1, arithmetic coding, restarts)."""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CJPEG = shutil.which("cjpeg")


@functools.lru_cache(maxsize=None)
def natural_image(height: int, width: int, seed: int = 0, gray: bool = False,
                  noise: float = 0.06) -> np.ndarray:
    """Smooth colour fields plus edges and fine texture: realistic work for
    the entropy decoder and the upsampler, deterministic per seed."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    channels = []
    for c in range(1 if gray else 3):
        fx, fy, phase = rng.uniform(1, 6, 3)
        base = 0.5 + 0.3 * np.sin(2 * np.pi * (fx * x + fy * y) + phase + c)
        edge = (x * rng.uniform(0.5, 2) + y * rng.uniform(0.5, 2) > rng.uniform(0.5, 1.5)) * 0.2
        grain = rng.normal(0, noise, (height, width)).astype(np.float32)
        channels.append(np.clip(base + edge + grain, 0, 1))
    arr = (np.stack(channels, axis=-1) * 255).round().astype(np.uint8)
    return arr[:, :, 0] if gray else arr


PIL_SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
CJPEG_SAMPLE = {"4:4:4": "1x1", "4:2:2": "2x1", "4:2:0": "2x2", "4:4:0": "1x2", "4:1:1": "4x1"}


@functools.lru_cache(maxsize=None)
def encode(height: int, width: int, *, subsampling: str = "4:2:0", quality: int = 90,
           coding: str = "baseline", seed: int = 0) -> bytes:
    """A JPEG of natural_image(height, width).

    subsampling: '4:4:4', '4:2:2', '4:2:0', '4:4:0', '4:1:1' or 'gray'.
    coding: 'baseline', 'progressive', 'optimized', 'restart', 'arithmetic'.
    """
    gray = subsampling == "gray"
    arr = natural_image(height, width, seed, gray)
    needs_cjpeg = coding in ("restart", "arithmetic") or subsampling in ("4:4:0", "4:1:1")
    if not needs_cjpeg:
        buf = io.BytesIO()
        kwargs = {"quality": quality}
        if not gray:
            kwargs["subsampling"] = PIL_SUBSAMPLING[subsampling]
        if coding == "progressive":
            kwargs["progressive"] = True
        if coding == "optimized":
            kwargs["optimize"] = True
        Image.fromarray(arr).save(buf, "JPEG", **kwargs)
        return buf.getvalue()
    if CJPEG is None:
        pytest.skip("cjpeg (libjpeg-turbo-progs) is needed for this sample")
    args = [CJPEG, "-quality", str(quality)]
    if gray:
        args += ["-grayscale"]
    else:
        args += ["-sample", CJPEG_SAMPLE[subsampling]]
    if coding == "progressive":
        args += ["-progressive"]
    if coding == "optimized":
        args += ["-optimize"]
    if coding == "restart":
        args += ["-restart", "1"]
    if coding == "arithmetic":
        args += ["-arithmetic"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / ("in.pgm" if gray else "in.ppm")
        Image.fromarray(arr).save(src)
        return subprocess.run(args + [str(src)], check=True, capture_output=True).stdout


def with_exif_orientation(data: bytes, orientation: int) -> bytes:
    """The same JPEG re-encoded by Pillow with an EXIF Orientation tag."""
    im = Image.open(io.BytesIO(data))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=95, exif=exif.tobytes())
    return buf.getvalue()


def pillow_rgb(data: bytes) -> np.ndarray:
    """What torchvision's ImageFolder loader gives: open + convert('RGB')."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def sample_jpeg(size: tuple[int, int], **kwargs) -> bytes:
    """encode() with the size as one (height, width) tuple."""
    return encode(*size, **kwargs)
