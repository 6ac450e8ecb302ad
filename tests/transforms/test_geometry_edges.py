"""The geometry ops at their edges (fastdecode/transforms/geometry.py):
torchvision's output-size rule with ``max_size`` (held to torchvision's own
function, errors included), ops that stop the fused geometry (an empty
output size, an empty crop, a resample of an empty image), the flip's draw
under a half-precision default dtype, PilResize on an image of its size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision.transforms import functional as F  # noqa: E402

from fastdecode.transforms.geometry import (  # noqa: E402
    CenterCropOp,
    FlipOp,
    Geometry,
    PilResize,
    ResizeOp,
    Stop,
    resized_output_size,
)

BILINEAR = Image.Resampling.BILINEAR


def _torchvision(height, width, size, max_size):
    try:
        return tuple(F._compute_resized_output_size((height, width), size, max_size,
                                                    allow_size_none=True))
    except ValueError:
        return ValueError


def _ours(height, width, size, max_size):
    try:
        return resized_output_size(height, width, size, max_size)
    except ValueError:
        return ValueError


SIZES = {
    "shorter-edge": (100, 200, [32], None),
    "shorter-edge-clamped-by-max": (100, 400, [32], 100),
    "shorter-edge-within-max": (100, 150, [32], 100),
    "tall-clamped-by-max": (400, 100, [32], 100),
    "max-not-above-size": (100, 200, [32], 32),
    "no-size-wide": (100, 200, None, 50),
    "no-size-tall": (300, 100, None, 50),
    "no-size-max-not-int": (100, 200, None, 50.5),
    "both-edges": (100, 200, [20, 30], None),
}


@pytest.mark.parametrize("height, width, size, max_size", list(SIZES.values()), ids=list(SIZES))
def test_the_output_size_is_torchvisions(height, width, size, max_size):
    assert _ours(height, width, size, max_size) == _torchvision(height, width, size, max_size)


def test_a_resize_to_nothing_stops_the_geometry():
    geo = Geometry.start(1000, 10)  # max_size 1 on the long edge: the short edge becomes 0
    with pytest.raises(Stop, match="empty output size"):
        ResizeOp(None, None, 1, BILINEAR).apply(geo)
    assert geo == Geometry.start(1000, 10)  # untouched


def test_a_resize_torchvision_refuses_stops_the_geometry():
    with pytest.raises(Stop, match="torchvision raises here: max_size = 32 must be strictly "
                                   "greater than the requested size"):
        ResizeOp(None, [32], 32, BILINEAR).apply(Geometry.start(100, 200))


@pytest.mark.parametrize("size", [(0, 10), (10, 0)], ids=["no-rows", "no-columns"])
def test_an_empty_center_crop_stops_the_geometry(size):
    with pytest.raises(Stop, match="empty crop"):
        CenterCropOp(None, size).apply(Geometry.start(20, 20))


def test_a_resample_of_an_empty_image_stops_the_geometry():
    geo = Geometry.start(20, 20)
    geo.do_crop(5, 5, 0, 10)  # nothing kept, nothing padded
    assert not geo.padded
    with pytest.raises(Stop, match="resample of an empty image"):
        geo.do_resize(8, 8, BILINEAR)


@pytest.fixture
def half_default_dtype():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("seed", range(4))
def test_the_flip_draws_as_torchvision_under_a_half_default_dtype(half_default_dtype, seed):
    torch.manual_seed(seed)
    theirs = bool(torch.rand(1) < 0.5)
    their_state = torch.get_rng_state()
    torch.manual_seed(seed)
    geo = Geometry.start(4, 6)
    FlipOp(None, 0.5).apply(geo)
    assert geo.flip is theirs
    assert torch.equal(torch.get_rng_state(), their_state)


def test_pil_resize_of_an_image_of_its_size_is_the_image():
    img = Image.new("RGB", (7, 5))
    assert PilResize((5, 7), BILINEAR)(img) is img
    assert PilResize((5, 8), BILINEAR)(img).size == (8, 5)
