"""_native.plan_shape: the C planner's geometry without a file, equal to what
the decoders produce, with the decoders' errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fastdecode import ImageTooLargeError, _native
from fastdecode._types import PlannedShape

from helpers.jpeg_samples import encode

HEIGHT, WIDTH = 75, 118
OPTIONS = {
    "plain": {},
    "scale-1/2": {"scale": 0.5},
    "scale-3/8": {"scale": 0.375},
    "min_size": {"min_size": (20, 20)},
    "crop": {"crop": (7, 13, 40, 51)},
    "crop-scale-1/4": {"crop": (7, 13, 40, 51), "scale": 0.25},
    "crop-min_size": {"crop": (3, 5, 60, 90), "min_size": (17, 30)},
    "size": {"size": (32, 24)},
    "crop-size": {"crop": (7, 13, 40, 51), "size": (9, 11)},
    "L-CHW": {"mode": "L", "layout": "CHW", "crop": (1, 2, 30, 40)},
    "CHW-size": {"layout": "CHW", "size": (16, 20)},
}


@pytest.fixture(scope="module")
def jpeg():
    return encode(HEIGHT, WIDTH, subsampling="4:2:0")


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_plan_shape_is_the_decoded_shape(jpeg, options):
    planned = _native.plan_shape(HEIGHT, WIDTH, **options)
    assert isinstance(planned, PlannedShape)
    assert _native.decode_jpeg(jpeg, **options).shape == planned.shape


@pytest.mark.parametrize("options", [o for o in OPTIONS.values() if "size" not in o],
                         ids=[k for k, o in OPTIONS.items() if "size" not in o])
def test_region_is_the_crop_of_the_scaled_image(jpeg, options):
    planned = _native.plan_shape(HEIGHT, WIDTH, **options)
    whole = _native.decode_jpeg(jpeg, scale=planned.scale_num / 8)
    assert whole.shape[:2] == planned.scaled_size
    top, left, h, w = planned.region
    crop_options = {k: v for k, v in options.items() if k not in ("mode", "layout")}
    part = _native.decode_jpeg(jpeg, **crop_options)
    np.testing.assert_array_equal(part, whole[top:top + h, left:left + w])


DRAFT = {8: 1, 4: 2, 2: 4, 1: 8}  # the plan's scale M/8 -> Pillow's draft, 1/k (k = 2^n only)
DRAFTED = {name: options for name, options in
           {**OPTIONS, "scale-1/8": {"scale": 0.125},
            "crop-scale-1/8": {"crop": (7, 13, 40, 51), "scale": 0.125}}.items()
           if "size" not in options
           and _native.plan_shape(HEIGHT, WIDTH, **options).scale_num in DRAFT}


def pillow_draft(jpeg: bytes, scale_num: int) -> np.ndarray:
    """The whole image at 1/k through Pillow's draft(): libjpeg's DCT scaling
    as Pillow asks for it, an oracle independent of our planner and decoder."""
    k = DRAFT[scale_num]
    with Image.open(io.BytesIO(jpeg)) as im:
        im.draft("RGB", (im.width // k, im.height // k))
        assert im.size == (-(-WIDTH // k), -(-HEIGHT // k)), f"Pillow drafted {im.size}"
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize("options", DRAFTED.values(), ids=DRAFTED.keys())
def test_region_is_the_crop_of_pillows_draft(jpeg, options):
    """Where the plan's scale is 1/2^n, the decode is Pillow's draft() of the
    whole image at that scale, cropped to the plan's region."""
    planned = _native.plan_shape(HEIGHT, WIDTH, **options)
    reference = pillow_draft(jpeg, planned.scale_num)
    assert reference.shape[:2] == planned.scaled_size
    top, left, h, w = planned.region
    crop_options = {k: v for k, v in options.items() if k not in ("mode", "layout")}
    np.testing.assert_array_equal(_native.decode_jpeg(jpeg, **crop_options),
                                  reference[top:top + h, left:left + w])


def test_pillows_draft_covers_the_dct_scales():
    assert {_native.plan_shape(HEIGHT, WIDTH, **o).scale_num for o in DRAFTED.values()} == \
        set(DRAFT)


@pytest.mark.parametrize(
    "options, scale_num",
    [({"size": (300, 300)}, 4), ({"min_size": (300, 300)}, 3), ({"scale": 0.625}, 5),
     ({"size": (90, 90)}, 1), ({"size": (300, 300), "scale": 0.375}, 3)],
    ids=["size-simd-only", "min_size-any", "scale", "size-smallest", "size-with-scale"],
)
def test_scale_rules(options, scale_num):
    planned = _native.plan_shape(800, 800, **options)
    assert planned.scale_num == scale_num
    assert planned.scaled_size == ((800 * scale_num + 7) // 8,) * 2


def test_no_crop_region_is_the_scaled_image():
    planned = _native.plan_shape(HEIGHT, WIDTH, scale=0.25)
    assert planned.region == (0, 0) + planned.scaled_size == (0, 0, 19, 30)
    assert planned.shape == (19, 30, 3)


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"crop": (70, 0, 10, 10)}, ValueError,
         r"^crop \(top=70, left=0, height=10, width=10\) is outside the 118x75 image$"),
        ({"max_pixels": 1000}, ImageTooLargeError,
         r"^image is 118x75 = 8850 pixels, above max_pixels=1000$"),
        ({"mode": "RGBA"}, ValueError, "mode must be 'RGB' or 'L'"),
        ({"scale": 0.3}, ValueError, "scale must be M/8"),
        ({"scale": 0.5, "min_size": (1, 1)}, ValueError, "give scale or min_size, not both"),
        ({"layout": "WHC"}, ValueError, "layout must be 'HWC' or 'CHW'"),
    ],
    ids=["crop-outside", "max_pixels", "mode", "scale", "scale-and-min_size", "layout"],
)
def test_errors_are_the_decoders(jpeg, options, error, match):
    with pytest.raises(error, match=match):
        _native.plan_shape(HEIGHT, WIDTH, **options)
    with pytest.raises(error, match=match):
        _native.decode_jpeg(jpeg, **options)


@pytest.mark.parametrize("dims", [(0, 5), (5, -1), (1 << 32, 1)], ids=["zero", "negative", "huge"])
def test_bad_dimensions(dims):
    with pytest.raises(ValueError, match="height and width must be positive 32-bit sizes"):
        _native.plan_shape(*dims)
