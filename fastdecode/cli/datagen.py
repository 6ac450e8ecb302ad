"""A synthetic ImageNet-like ImageFolder, for benchmarks that need no download.

Its images decode as ImageNet's do: its sizes, compressed sizes, JPEG
flavours and image statistics are ImageNet's. Everything is drawn from
``seed``: the same call gives the same files. Decision record:
docs/decisions/benchmarks.md.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image, ImageDraw

from fastdecode._system import usable_cpus

__all__ = ["default_dataset_dir", "generate_imagenet_like"]

# Bumped whenever the images change, so that a cached folder is remade.
GENERATOR_VERSION = 1
MARKER_NAME = ".fastdecode-dataset.json"

# Share of files of each JPEG flavour; the rest are 4:2:0 colour baseline.
GRAY_SHARE = 0.03
CMYK_SHARE = 0.02
YUV444_SHARE = 0.15
PROGRESSIVE_SHARE = 0.05

# Strength of texture (the largest per region) and of grain; tuned so that
# the mean file is ~110 KB.
DETAIL = 0.45
GRAIN = 0.01  # std of sensor noise, ~2.5 grey levels


@dataclass(frozen=True)
class ImageSpec:
    """Everything needed to render one file, so that workers need no state."""

    path: str
    width: int
    height: int
    quality: int
    flavour: str  # "420", "444", "gray" or "cmyk"
    progressive: bool
    seed: tuple[int, int]


def default_dataset_dir(n_images: int = 1000, n_classes: int = 100, seed: int = 0) -> Path:
    """The cache folder for a dataset with these parameters."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = f"imagenet-like-n{n_images}-c{n_classes}-s{seed}-v{GENERATOR_VERSION}"
    return cache / "fastdecode" / name


def generate_imagenet_like(
    root: str | os.PathLike[str] | None = None,
    n_images: int = 1000,
    n_classes: int = 100,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Writes the dataset to ``root`` (default: :func:`default_dataset_dir`)
    unless a finished one with the same parameters is already there.

    The files go to a temporary sibling folder that is renamed into place at
    the end, so an interrupted run never leaves a half dataset behind, and
    two concurrent runs both end with the same complete folder.
    """
    if n_images < 1 or n_classes < 1:
        raise ValueError(f"need n_images >= 1 and n_classes >= 1, got {n_images}, {n_classes}")
    root = Path(root) if root is not None else default_dataset_dir(n_images, n_classes, seed)
    params = {"generator_version": GENERATOR_VERSION, "n_images": n_images,
              "n_classes": n_classes, "seed": seed}
    if _marker(root) == params:
        return root
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()  # an empty folder made for the dataset
    elif root.exists():
        if _marker(root) is None:
            raise FileExistsError(f"{root} exists and is not a fastdecode dataset; not touching it")
        shutil.rmtree(root)  # ours, made with other parameters

    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would make a shared cache unreadable to others
    try:
        specs = plan_dataset(tmp, n_images, n_classes, seed)
        for label in {Path(s.path).parent for s in specs}:
            label.mkdir()
        _render_all(specs, progress)
        (tmp / MARKER_NAME).write_text(json.dumps(params, indent=1) + "\n")
        try:
            tmp.rename(root)
        except OSError:
            if _marker(root) != params:  # not a concurrent run that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _marker(root: Path) -> dict | None:
    try:
        return json.loads((root / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------
# What to draw: sizes and flavours.

def plan_dataset(root: Path, n_images: int, n_classes: int, seed: int) -> list[ImageSpec]:
    """One spec per file, drawn from a single generator in file order."""
    rng = np.random.default_rng(seed)
    specs = []
    for index in range(n_images):
        label = f"n{index % n_classes:08d}"  # ImageNet-style folder names
        width, height = _draw_size(rng)
        u = rng.random()
        if u < GRAY_SHARE:
            flavour = "gray"
        elif u < GRAY_SHARE + CMYK_SHARE:
            flavour = "cmyk"
        elif u < GRAY_SHARE + CMYK_SHARE + YUV444_SHARE:
            flavour = "444"
        else:
            flavour = "420"
        specs.append(ImageSpec(
            path=str(root / label / f"{label}_{index:05d}.JPEG"),
            width=width,
            height=height,
            quality=int(rng.integers(75, 96)),
            flavour=flavour,
            progressive=bool(rng.random() < PROGRESSIVE_SHARE),
            seed=(seed, index),
        ))
    return specs


def _draw_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) following ImageNet's shape: most images have a long
    side of exactly 500 (500x375 and 500x333 dominate), about a quarter are
    smaller, a few larger, and about a quarter are portrait."""
    u = rng.random()
    if u < 0.65:
        long_side = 500
        short_side = int(rng.choice([375, 333, 500, int(rng.integers(250, 500))],
                                    p=[0.5, 0.25, 0.05, 0.2]))
    elif u < 0.92:
        long_side = int(rng.integers(160, 500))
        short_side = int(long_side * rng.uniform(0.6, 1.0))
    else:
        long_side = int(np.exp(rng.uniform(np.log(501), np.log(2000))))
        short_side = int(long_side * rng.choice([0.75, 0.667, 1.0, rng.uniform(0.5, 1.0)]))
    if rng.random() < 0.25:
        return short_side, long_side
    return long_side, short_side


# --------------------------------------------------------------------------
# How to draw: pixels.

def _render_all(specs: list[ImageSpec], progress: bool) -> None:
    # A worker costs ~0.5 s to start; below ~50 images one process is faster.
    workers = max(1, min(usable_cpus(), len(specs) // 50))
    results: Iterable[None]
    if workers == 1:
        results = map(write_image, specs)
        pool = None
    else:
        # spawn, not fork: forking a process that runs threads (a DataLoader,
        # torch) can deadlock.
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(write_image, specs, chunksize=8)
    if progress:
        print(f"generating {len(specs)} ImageNet-like images with {workers} process(es)",
              file=sys.stderr, flush=True)
    live = progress and sys.stderr.isatty()  # a log file gets no carriage returns
    try:
        for done, _ in enumerate(results, 1):
            if live and (done % 50 == 0 or done == len(specs)):
                print(f"\r{done}/{len(specs)}", end="\n" if done == len(specs) else "",
                      file=sys.stderr, flush=True)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def write_image(spec: ImageSpec) -> None:
    Path(spec.path).write_bytes(encode_image(spec))


def encode_image(spec: ImageSpec) -> bytes:
    rng = np.random.default_rng(spec.seed)
    img = render_ycbcr(rng, spec.height, spec.width)
    if spec.flavour == "gray":
        img = img.getchannel("Y")
    elif spec.flavour == "cmyk":
        img = img.convert("RGB").convert("CMYK")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=spec.quality, progressive=spec.progressive,
             subsampling=0 if spec.flavour == "444" else 2)
    return buf.getvalue()


def render_ycbcr(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """A scene of overlapping shapes on a background, each region with its own
    tone, colour and texture strength, under smooth shading and grain.

    Built directly in YCbCr, the space the JPEG encoder works in, which also
    saves a colour conversion per pixel.
    """
    labels = _draw_regions(rng, height, width)
    n = int(labels.max()) + 1
    tone = rng.uniform(0.15, 0.85, n).astype(np.float32)
    chroma = rng.normal(0.0, 0.08, (2, n)).astype(np.float32)
    # Squared uniform: many calm regions (sky, walls), a few busy ones (foliage).
    texture_gain = (rng.uniform(0.0, 1.0, n) ** 2 * DETAIL).astype(np.float32)

    y = tone[labels]
    y += 0.12 * _smooth_field(rng, height, width, alpha=rng.uniform(2.0, 3.0))
    y += texture_gain[labels] * _tiled_texture(rng, height, width)
    y += rng.standard_normal((height, width), dtype=np.float32) * GRAIN
    planes = [y]
    for c in chroma:
        plane = c[labels]
        plane += 0.05 * _smooth_field(rng, height, width, alpha=3.0, max_side=64)
        planes.append(plane + 0.5)
    return Image.merge("YCbCr", [Image.fromarray(_to_uint8(p)) for p in planes])


def _draw_regions(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A label map: 0 is the background, 1..n the shapes drawn over it."""
    canvas = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    side = max(width, height)
    for label in range(1, int(rng.integers(2, 10)) + 1):
        x0, y0 = rng.uniform(-0.3, 0.9) * width, rng.uniform(-0.3, 0.9) * height
        size = rng.uniform(0.1, 0.7) * side
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x0 + size, y0 + size * rng.uniform(0.3, 1.5)], fill=label)
        else:
            corners = [(x0 + rng.uniform(0, size), y0 + rng.uniform(0, size))
                       for _ in range(int(rng.integers(3, 8)))]
            draw.polygon(corners, fill=label)
    return np.asarray(canvas)


def _noise_field(rng: np.random.Generator, height: int, width: int, alpha: float) -> np.ndarray:
    """Gaussian noise with power spectrum 1/f^alpha, unit variance."""
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    f2 = fy * fy + fx * fx
    f2[0, 0] = 1.0
    amplitude = f2 ** np.float32(-alpha / 4)  # power 1/f^alpha -> amplitude f^(-alpha/2)
    amplitude[0, 0] = 0.0
    shape = amplitude.shape
    spectrum = (rng.standard_normal(shape, dtype=np.float32)
                + 1j * rng.standard_normal(shape, dtype=np.float32)) * amplitude
    field = np.fft.irfft2(spectrum, s=(height, width)).astype(np.float32)
    field /= field.std() + np.float32(1e-6)
    return field


def _smooth_field(rng: np.random.Generator, height: int, width: int, alpha: float,
                  max_side: int = 192) -> np.ndarray:
    """A low-frequency field, made small and upscaled: a full-size FFT of a
    2000 px image would dominate the generation time for no visible gain."""
    k = max(1, -(-max(height, width) // max_side))
    small = _noise_field(rng, -(-height // k), -(-width // k), alpha)
    if k == 1:
        return small
    return np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC))


def _tiled_texture(rng: np.random.Generator, height: int, width: int,
                   tile: int = 128) -> np.ndarray:
    """Fine texture, tiled: JPEG's 8x8 blocks cannot exploit the repetition,
    so this costs the decoder as much as texture that never repeats."""
    patch = _noise_field(rng, tile, tile, alpha=rng.uniform(0.8, 1.6))
    return np.tile(patch, (-(-height // tile), -(-width // tile)))[:height, :width]


def _to_uint8(plane: np.ndarray) -> np.ndarray:
    plane *= 255.0
    np.clip(plane, 0.0, 255.0, out=plane)
    return plane.astype(np.uint8)
