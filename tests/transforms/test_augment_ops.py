"""The op vocabulary (fastdecode.augment.ops) run natively vs the library's op on the same pixels.

Each torchvision op of the policies (v1 ``_apply_op``, v2's
``_apply_image_or_video_transform``) and each of timm's op functions, over
magnitudes, resamples and fills, on one image: the native steps give the
library's PIL result bit for bit. Rotations by multiples of 90 degrees
(Pillow transposes) too. The documented exceptions last.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import autoaugment as A  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode import augment  # noqa: E402
from fastdecode.augment import ops  # noqa: E402
from fastdecode.augment.tv_policies import KNOWN, tv_fill, tv_steps  # noqa: E402

MODES = {"nearest": (InterpolationMode.NEAREST, 0), "bilinear": (InterpolationMode.BILINEAR, 2),
         "bicubic": (InterpolationMode.BICUBIC, 3)}
FILLS = {"no-fill": None, "fill": [10, 200, 30]}
MAGNITUDES = {
    "ShearX": (0.3, -0.99), "ShearY": (0.15, -0.3), "TranslateX": (13.7, -32.0),
    "TranslateY": (20.0, -5.5), "Rotate": (30.0, -135.0), "Brightness": (0.9, -0.45),
    "Color": (0.99, -0.9), "Contrast": (0.5, -0.99), "Sharpness": (0.9, -0.99),
    "Posterize": (8.0, 2.0), "Solarize": (255.0, 85.0), "AutoContrast": (0.0,),
    "Equalize": (0.0,), "Invert": (0.0,), "Identity": (0.0,),
}
SHAPES = {"37x53": (37, 53), "40x40": (40, 40)}


def _image(h: int, w: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(20, 230, w)[None, :, None] + np.linspace(-15, 15, h)[:, None, None]
    noise = rng.integers(-25, 26, (h, w, 3))
    return Image.fromarray(np.clip(ramp + noise, 0, 255).astype(np.uint8), "RGB")


def _native(img: Image.Image, steps) -> np.ndarray:
    return augment.apply(np.array(img), "HWC", tuple(steps))


def test_the_magnitudes_cover_the_vocabulary():
    assert set(MAGNITUDES) == KNOWN


CASES = [pytest.param(name, m, id=f"{name}-{m}") for name, ms in MAGNITUDES.items() for m in ms]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name,magnitude", CASES)
def test_torchvision_v1_op(name, magnitude, mode, fill, shape):
    img = _image(*SHAPES[shape])
    interpolation, resample = MODES[mode]
    theirs = A._apply_op(img, name, magnitude, interpolation=interpolation, fill=FILLS[fill])
    steps = tv_steps(name, magnitude, SHAPES[shape], resample, tv_fill(FILLS[fill]), v2=False)
    assert np.array_equal(_native(img, steps), np.asarray(theirs))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name,magnitude", CASES)
def test_torchvision_v2_op(name, magnitude, mode, fill, shape):
    """v2's Solarize magnitudes are fractions (its op multiplies by 255)."""
    from torchvision.transforms.v2._utils import _setup_fill_arg

    img = _image(*SHAPES[shape], seed=1)
    interpolation, resample = MODES[mode]
    if name == "Solarize":
        magnitude = magnitude / 255.0
    policy = T2.RandAugment(interpolation=interpolation, fill=FILLS[fill])
    theirs = policy._apply_image_or_video_transform(img, name, magnitude, interpolation,
                                                    _setup_fill_arg(FILLS[fill]))
    steps = tv_steps(name, magnitude, SHAPES[shape], resample, tv_fill(FILLS[fill]), v2=True)
    assert np.array_equal(_native(img, steps), np.asarray(theirs))


ANGLES = (0.0, 90.0, 180.0, 270.0, -90.0, 360.0, 45.0, -0.5)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("angle", ANGLES, ids=[f"{a:g}deg" for a in ANGLES])
def test_pillow_rotate(angle, mode, shape):
    """Image.rotate's own matrix; Pillow's transposes (180, and 90 / 270 on a
    square) sample the same pixels as that matrix does."""
    img = _image(*SHAPES[shape], seed=2)
    resample = MODES[mode][1]
    step = ops.pil_rotate(angle, SHAPES[shape], resample, (1, 2, 3))
    theirs = img.rotate(angle, resample, fillcolor=(1, 2, 3))
    ours = np.asarray(img) if step is None else _native(img, [step])
    assert np.array_equal(ours, np.asarray(theirs))


def _timm():
    return pytest.importorskip("timm.data.auto_augment")


TIMM_CASES = {
    # id: (function name, its level arguments)
    "shear_x": ("shear_x", (0.27,)), "shear_y": ("shear_y", (-0.3,)),
    "translate_x_rel": ("translate_x_rel", (0.405,)),
    "translate_y_rel": ("translate_y_rel", (-0.45,)),
    "translate_x_abs": ("translate_x_abs", (-90.0,)),
    "translate_y_abs": ("translate_y_abs", (33.3,)),
    "rotate": ("rotate", (-27.3,)), "rotate-90": ("rotate", (90.0,)),
    "auto_contrast": ("auto_contrast", ()), "equalize": ("equalize", ()),
    "invert": ("invert", ()), "solarize-0": ("solarize", (0,)),
    "solarize-230": ("solarize", (230,)), "solarize-256": ("solarize", (256,)),
    "solarize_add-99": ("solarize_add", (99,)), "solarize_add-0": ("solarize_add", (0,)),
    "posterize-1": ("posterize", (1,)), "posterize-4": ("posterize", (4,)),
    "posterize-8": ("posterize", (8,)), "contrast": ("contrast", (1.72,)),
    "color": ("color", (0.1,)), "brightness": ("brightness", (1.9,)),
    "sharpness": ("sharpness", (0.28,)), "desaturate": ("desaturate", (0.7,)),
}


@pytest.mark.parametrize("resample", [Image.BILINEAR, Image.BICUBIC], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("case", list(TIMM_CASES))
def test_timm_op(case, resample):
    """One AugmentOp of each function, drawn at p=1 without noise (the level
    function's sign draw seeded alike), vs the op on the same image."""
    import random

    from fastdecode.augment.timm_policies import native_op as _op

    aa = _timm()
    fn_name, args = TIMM_CASES[case]
    name = next(n for n, fn in aa.NAME_TO_OP.items() if fn is getattr(aa, fn_name))
    op = aa.AugmentOp(name, prob=1.0, magnitude=7,
                      hparams=dict(translate_const=100, img_mean=(124, 116, 104),
                                   interpolation=resample))
    op.level_fn = (lambda level, hparams: args) if args else None  # this case's arguments
    img = _image(41, 57, seed=3)
    random.seed(5)
    theirs = op(img)
    random.seed(5)
    ours = _native(img, _op(op).draw((img.height, img.width)))
    assert np.array_equal(ours, np.asarray(theirs))


# -- the documented exceptions ------------------------------------------------------


@pytest.mark.parametrize("bits", [0, 9, -1])
def test_posterize_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="bits must be between or equal to 1 and 8"):
        ops.posterize(bits)


@pytest.mark.parametrize("fill", [[1, 2], [300, 0, 0], [-1, 5, 5]], ids=["two", "300", "negative"])
def test_fill_that_is_not_an_rgb_colour(fill):
    with pytest.raises(ValueError, match="not an RGB colour|does not match the number of channels"):
        tv_fill(fill)


def test_unknown_torchvision_op():
    with pytest.raises(ValueError, match="The provided operator Warp is not recognized"):
        tv_steps("Warp", 1.0, (8, 8), 0, None, v2=False)


def test_timm_op_without_native_form():
    from fastdecode.augment.timm_policies import native_op as _op

    aa = _timm()
    with pytest.raises(ValueError, match="GaussianBlur: no native op"):
        _op(aa.AugmentOp("GaussianBlur", prob=1.0, magnitude=5))
    with pytest.raises(ValueError, match="is not timm's AugmentOp"):
        _op(object())


def test_the_inverse_matrix_is_torchvisions():
    from torchvision.transforms.functional import _get_inverse_affine_matrix

    for args in [([3.5, 2.0], 17.0, [4, -2], 1.25, [5.0, -8.0]), ([0, 0], -90.0, [0, 0], 1.0,
                                                                   [math.degrees(0.3), 0.0])]:
        assert ops.inverse_affine_matrix(*args) == _get_inverse_affine_matrix(*args)


def test_the_v2_inverse_matrix_is_v2s():
    """v2 groups the terms otherwise: its own copy, not v1's (they differ in the last bits)."""
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    args = ([31.5, 22.0], 13.7, [4, -2], 1.13, [7.3, -4.1])
    assert ops.inverse_affine_matrix_v2(*args) == _get_inverse_affine_matrix(*args)


WHOLE = {  # id: (height, width, the matrix's offsets or a quarter turn)
    "translate-in": (23, 31, (5, -7)), "translate-out": (17, 12, (-40, 30)),
    "translate-odd": (1, 9, (3, 0)), "turn-180": (13, 22, 180.0), "turn-90-square": (16, 16, 90.0),
    "turn-270-square": (9, 9, 270.0),
}


@pytest.mark.parametrize("resample", [2, 3], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("case", list(WHOLE))
def test_pixel_centre_maps_run_as_nearest(case, resample):
    """A matrix of 0 / +-1 and whole offsets runs as the nearest step (a copy),
    and that is Pillow's bilinear / bicubic result."""
    h, w, move = WHOLE[case]
    img = _image(h, w, seed=4)
    if isinstance(move, float):
        step = ops.pil_rotate(move, (h, w), resample, (9, 8, 7))
        theirs = img.rotate(move, resample, fillcolor=(9, 8, 7))
    else:
        step = ops.tv_affine((h, w), 0.0, list(move), 1.0, [0.0, 0.0], resample, (9, 8, 7))
        theirs = img.transform(img.size, Image.AFFINE, step[1], resample, fillcolor=(9, 8, 7))
    assert step[2] == 0
    assert np.array_equal(_native(img, [step]), np.asarray(theirs))
