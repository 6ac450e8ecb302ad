"""The fuzz targets themselves (tests/fuzz/targets.py), in an ordinary process:
each target's seeds (a seeded sample of what `make fuzz` starts from) pass its
oracle, and the oracle of the pipeline targets sees what it must."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from fuzz import seeds, targets
from fuzz.spec import TAKES_OPTIONS, TARGET_NAMES, TRAILER
from helpers.corpus import CORPUS

PER_TARGET = 12
TORCH_TARGETS = {"wds_handler", "detached_plan", "dataset_item"}


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    counts = seeds.write(root, CORPUS if CORPUS.is_dir() else None)
    assert set(counts) == set(TARGET_NAMES) and all(counts.values())
    return root


def test_every_target_is_listed_and_takes_its_trailer():
    assert tuple(targets.TARGETS) == TARGET_NAMES
    assert TAKES_OPTIONS <= set(TARGET_NAMES)
    assert targets.split(b"x" * (TRAILER + 3)) == (b"xxx", b"x" * TRAILER)


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_seeds_pass_the_oracle(seed_dir, target):
    if target in TORCH_TARGETS:
        pytest.importorskip("torchvision")
    files = sorted((seed_dir / target).iterdir())
    random.Random(target).shuffle(files)
    for path in files[:PER_TARGET]:
        targets.run(target, path.read_bytes())


def colour_input(h: int, w: int, steps: list[tuple[int, float]], pixels: bytes) -> bytes:
    body = b"".join(bytes([op + 1]) + struct.pack("<f", f) for op, f in steps)
    return bytes([h - 1, w - 1, len(steps)]) + body + pixels


@pytest.mark.parametrize("h, w", [(1, 1), (1, 5), (4, 1), (7, 9)])
def test_colour_target_on_every_shape(h, w):
    """1 x 1: the CHW copy must not alias the HWC image (a transpose of a
    1 x 1 image is contiguous: an aliasing copy applied the steps twice)."""
    pixels = np.random.default_rng(h * 31 + w).integers(0, 256, 3 * h * w, np.uint8).tobytes()
    for steps in ([(1, 0.002)], [(0, 0.58), (2, 0.58)], [(3, 13.0), (1, 1.5)]):
        targets.run("adjust_colors", colour_input(h, w, steps, pixels))


@pytest.mark.parametrize("steps", [[(3, 2.5)], [(0, float("nan"))], [(4, 1.0)], []],
                         ids=["hue-not-integer", "nan-factor", "unknown-op", "no-steps"])
def test_colour_target_accepts_the_documented_refusals(steps):
    targets.run("adjust_colors", colour_input(2, 3, steps, b"\x10\x80\xf0"))


AUGMENT_RECORDS = {
    "rotate-bilinear-fill": seeds.augment_step(1, np.array((0.8, 0.6, -2, -0.6, 0.8, 3), "<f2")
                                               .tobytes(), 2, 1),
    "shear-nearest": seeds.augment_step(1, np.array((1, 0.3, -2, 0, 1, 0), "<f2").tobytes()),
    "bicubic-mirror": seeds.augment_step(1, np.array((-1, 0, 5, 0, 1, 0), "<f2").tobytes(), 3),
    "lut-768": seeds.augment_step(2, bytes([3, 7, 255, 1])),
    "autocontrast": seeds.augment_step(3),
    "equalize": seeds.augment_step(4),
    "sharpness": seeds.augment_step(5, struct.pack("<f", 1.9)),
    "contrast": seeds.augment_step(0, bytes([2]) + struct.pack("<f", 0.4)),
    "blur": seeds.augment_step(6, bytes([1, 1]) + np.array((0.8, 1.5), "<f2").tobytes()),
}


@pytest.mark.parametrize("record", list(AUGMENT_RECORDS))
@pytest.mark.parametrize("h, w", [(1, 1), (1, 5), (4, 1), (7, 9)])
def test_augment_target_on_every_shape(h, w, record):
    """Each kind on every small shape: HWC = CHW = Pillow, the call repeatable."""
    pixels = np.random.default_rng(h * 31 + w).integers(0, 256, 3 * h * w, np.uint8).tobytes()
    targets.run("augment", bytes([h - 1, w - 1, 1]) + AUGMENT_RECORDS[record] + pixels)


REFUSED_RECORDS = {
    "unknown-kind": seeds.augment_step(-1),
    "blur-even-kernel": seeds.augment_step(6, bytes([4, 3]) + np.array((1, 1), "<f2").tobytes()),
    "blur-wider-than-image": seeds.augment_step(6, bytes([9, 3])
                                                + np.array((1, 1), "<f2").tobytes()),
    "resample-1": seeds.augment_step(1, np.array((1, 0, 0, 0, 1, 0), "<f2").tobytes(), 1),
    "matrix-inf": seeds.augment_step(1, np.array((1, 0, np.inf, 0, 1, 0), "<f2").tobytes()),
    "lut-100-bytes": seeds.augment_step(2, bytes([1, 0, 0, 2, 100])),
    "sharpness-nan": seeds.augment_step(5, struct.pack("<f", float("nan"))),
    "hue-fraction": seeds.augment_step(0, bytes([4]) + struct.pack("<f", 2.5)),
}


@pytest.mark.parametrize("record", list(REFUSED_RECORDS))
def test_augment_target_accepts_the_documented_refusals(record):
    """A refused step after an accepted one: refused in both layouts, nothing written."""
    steps = seeds.augment_step(4) + REFUSED_RECORDS[record]
    targets.run("augment", bytes([2, 3, 2]) + steps + b"\x10\x80\xf0")


def test_augment_oracle_flags_pixels_pillow_does_not_give(monkeypatch):
    from fastdecode import _native

    real = _native.augment

    def off_by_one(pixels, layout, steps):
        real(pixels, layout, steps)
        pixels[0, 0, 0] ^= 1  # the same in every call and layout: only Pillow can tell
        return pixels

    monkeypatch.setattr(_native, "augment", off_by_one)
    data = bytes([0, 0, 1]) + AUGMENT_RECORDS["equalize"] + b"\x10\x80\xf0"
    with pytest.raises(targets.Finding, match="Pillow gives other pixels"):
        targets.run("augment", data)


def test_pipeline_oracles_flag_an_undocumented_exception(monkeypatch):
    pytest.importorskip("torchvision")
    image = (seeds.generated()["gen-444-baseline.jpg"]) + bytes(TRAILER)
    for target in sorted(TORCH_TARGETS):
        targets.run(target, image)  # a valid JPEG: no finding

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("fastdecode.api.read_header", broken)
    monkeypatch.setattr("fastdecode.batching._detached.api.read_header", broken)
    monkeypatch.setattr("fastdecode.api.decode_image", broken)
    for target in ("wds_handler", "detached_plan"):
        with pytest.raises(targets.Finding, match="ZeroDivisionError"):
            targets.run(target, image)


@pytest.mark.parametrize("seed", range(40))
def test_raster_target_on_random_inputs(seed):
    """fd_raster on random shapes, modes, grids and bodies: only documented outcomes."""
    rng = random.Random(seed)
    head = bytes([rng.randrange(64), rng.randrange(64), seed % 6, rng.randrange(32),
                  rng.randrange(32)])
    targets.run("raster", head + bytes(rng.randrange(256) for _ in range(rng.randrange(90))))


def test_raster_oracle_flags_a_sampled_pixel_that_differs(monkeypatch):
    from fastdecode import _native

    real = _native.raster_polygons

    def off_by_one(polys, h, w, rows, cols, out):
        real(polys, h, w, rows, cols, out)
        if out.shape != (h, w):
            out[0, 0] ^= 1

    monkeypatch.setattr(_native, "raster_polygons", off_by_one)
    body = (np.array([1, 1, 30, 3, 12, 25], np.float64) * 8).astype("<i2").tobytes()
    with pytest.raises(targets.Finding, match="sampled raster differs"):
        targets.run("raster", bytes([31, 39, 0, 17, 23]) + body)
