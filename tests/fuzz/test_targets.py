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


def test_pipeline_oracles_flag_an_undocumented_exception(monkeypatch):
    pytest.importorskip("torchvision")
    image = (seeds.generated()["gen-444-baseline.jpg"]) + bytes(TRAILER)
    for target in sorted(TORCH_TARGETS):
        targets.run(target, image)  # a valid JPEG: no finding

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("fastdecode.api.read_header", broken)
    monkeypatch.setattr("fastdecode.transforms.detached.api.read_header", broken)
    monkeypatch.setattr("fastdecode.api.decode_image", broken)
    for target in ("wds_handler", "detached_plan"):
        with pytest.raises(targets.Finding, match="ZeroDivisionError"):
            targets.run(target, image)
