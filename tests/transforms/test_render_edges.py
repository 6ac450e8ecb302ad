"""The renderer and the detached plan at their edges
(fastdecode/transforms/render.py, batching/_detached.py): a canvas with nothing kept
or a padded one written into an ``out`` that held other pixels, a JPEG
variant the native decoder refuses, the 'round' and 'whole' region modes
(flipped, DCT-scaled, nearest) against torchvision; the detached plan's
table (uint8, int, float) with and without ``out``, its ops' names and its
seeded decode of a chain with colour steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode import _formats, errors  # noqa: E402
from fastdecode.batching._detached import detach  # noqa: E402
from fastdecode.transforms import fuse, render  # noqa: E402
from fastdecode.transforms.geometry import Geometry  # noqa: E402

from helpers.fusion import check_parity  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402

NEAREST = T.InterpolationMode.NEAREST


@pytest.fixture(scope="module")
def jpeg():
    return encode(60, 80, seed=7)


@pytest.fixture(scope="module")
def big_jpeg():
    return encode(300, 400, seed=8)  # large enough for a DCT-scaled decode


# -- the renderer ------------------------------------------------------------------

@pytest.mark.parametrize("layout, shape", [("HWC", (6, 4, 3)), ("CHW", (3, 6, 4))],
                         ids=["HWC", "CHW"])
@pytest.mark.parametrize("into", [False, True], ids=["new", "into-out"])
def test_a_canvas_with_nothing_kept_is_black(jpeg, layout, shape, into):
    geo = Geometry.start(60, 80)
    geo.do_crop(100, 100, 6, 4)  # entirely outside the image
    out = np.full(shape, 9, np.uint8) if into else None
    got = render.Renderer().render(jpeg, geo, layout, out=out)
    assert got.shape == shape and not got.any()
    if into:
        assert got is out


def test_a_padded_canvas_into_out_is_padded_with_zeros(jpeg):
    geo = Geometry.start(60, 80)
    geo.do_crop(-10, -5, 80, 90)  # CenterCrop's padding around the whole image
    assert geo.padded
    fresh = render.Renderer().render(jpeg, geo, "HWC")
    out = np.full((80, 90, 3), 9, np.uint8)
    assert render.Renderer().render(jpeg, geo, "HWC", out=out) is out
    np.testing.assert_array_equal(out, fresh)
    assert not out[:10].any() and not out[:, :5].any() and out[10:70, 5:85].any()


def test_a_jpeg_the_native_decoder_refuses_goes_through_decode_image(jpeg, monkeypatch):
    geo = Geometry.start(60, 80)
    want = render.Renderer().render(jpeg, geo, "HWC")
    calls = []

    def refusing(data, **kw):
        calls.append(kw)
        raise errors.UnsupportedFormatError("a variant libjpeg-turbo lacks")
    monkeypatch.setitem(_formats.NATIVE, "jpeg",
                        dataclasses.replace(_formats.NATIVE["jpeg"], decode=refusing))
    np.testing.assert_array_equal(render.Renderer().render(jpeg, geo, "HWC"), want)
    assert len(calls) == 1


# (region, chain, PSNR floor): 'round' is documented down to about 24 dB on photos
REGIONS = {
    "round-bilinear": ("round", 24.0, lambda: T.Compose([T.Resize(64), T.CenterCrop(48),
                                                   T.PILToTensor()])),
    "whole-dct-scaled": ("whole", 40.0, lambda: T.Compose([T.Resize(60), T.CenterCrop(40),
                                                     T.PILToTensor()])),
    "whole-nearest-flipped": ("whole", 40.0, lambda: T.Compose([
        T.Resize(64, interpolation=NEAREST), T.CenterCrop(48), T.RandomHorizontalFlip(p=1.0),
        T.PILToTensor()])),
}


@pytest.mark.parametrize("region, floor, chain", list(REGIONS.values()), ids=list(REGIONS))
def test_the_region_modes_stay_within_the_bound(big_jpeg, region, floor, chain):
    f, ours, theirs, _ = check_parity(chain(), big_jpeg, region=region, min_psnr=floor)
    assert f.renderer.region_mode == region and ours.shape == theirs.shape


def test_whole_nearest_without_a_dct_scale_is_torchvisions(big_jpeg):
    chain = T.Compose([T.Resize(64, interpolation=NEAREST), T.CenterCrop(48),
                       T.RandomHorizontalFlip(p=1.0), T.PILToTensor()])
    _, ours, theirs, _ = check_parity(chain, big_jpeg, region="whole", exact=True)
    assert torch.equal(ours, theirs)


# -- the detached plan -----------------------------------------------------------

TABLES = {
    "uint8": lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]),
    "int32": lambda: T2.Compose([T2.Resize(40), T2.CenterCrop(32), T2.PILToTensor(),
                                 T2.ToDtype(torch.int32)]),
    "float32": lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]),
}


@pytest.mark.parametrize("chain", list(TABLES.values()), ids=list(TABLES))
def test_the_detached_table_is_the_fused_tail(jpeg, chain):
    f = fuse(chain())
    plan = detach(f)
    pixels = np.empty((2, *plan.output_shape), np.uint8)
    for row in pixels:
        plan.decode_into(jpeg, row)
    expected = np.stack([f.tail.apply(np.ascontiguousarray(row)).numpy() for row in pixels])
    np.testing.assert_array_equal(plan.finish(pixels), expected)
    out = np.empty(expected.shape, expected.dtype)
    assert plan.finish(pixels, out) is out
    np.testing.assert_array_equal(out, expected)


def test_the_detached_ops_keep_their_transforms_names():
    chain = T.Compose([T.RandomResizedCrop(32, scale=(0.5, 1.0)), T.RandomHorizontalFlip(),
                       T.PILToTensor()])
    plan = detach(fuse(chain))
    assert [repr(op.transform) for op in plan.geo_ops] == [repr(t) for t in chain.transforms[:2]]
    assert plan.geo_ops[0].transform.scale == (0.5, 1.0)
    assert repr(plan).startswith("DetachedPlan of ")


def test_a_seeded_decode_with_colour_steps_is_the_full_transforms(jpeg):
    chain = T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.4, 0.4), T.PILToTensor()])
    f = fuse(chain)
    plan = detach(f)
    assert not plan.torch_free  # colour steps draw from torch
    torch.manual_seed(1)
    before = torch.get_rng_state()
    got = np.empty(plan.output_shape, np.uint8)
    plan.decode_seeded(jpeg, got, seed=42)
    assert torch.equal(torch.get_rng_state(), before)  # left as it was
    torch.manual_seed(42)
    want = np.empty(plan.output_shape, np.uint8)
    f.decode_into(jpeg, want)
    np.testing.assert_array_equal(got, want)
