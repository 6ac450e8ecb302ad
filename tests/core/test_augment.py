"""_native.augment (src_c/fd_augment.c): each step kind bit for bit what the
installed Pillow computes on the same RGB pixels (Image.transform /
Image.rotate, Image.point, ImageOps.autocontrast / equalize,
ImageEnhance.Sharpness and the colour enhancers), both layouts, generated
images of every small shape and real photos; the blur within 1 of
torchvision's gaussian_blur; its argument checks. docs/decisions/augment.md
("Kernels") records what is exact and how."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastdecode import _native

from helpers.corpus import corpus_dir, corpus_params

Image = pytest.importorskip("PIL.Image")
ImageEnhance = pytest.importorskip("PIL.ImageEnhance")
ImageOps = pytest.importorskip("PIL.ImageOps")


def random_image(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def natural(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth colour waves plus noise: what a photo's histogram looks like."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(6 * x + c) * np.cos(4 * y - c) for c in range(3)], axis=-1)
    noise = rng.normal(0, 0.05, (h, w, 3))
    return np.clip((base * 0.5 + 0.5 + noise) * 255, 0, 255).astype(np.uint8)


def two_colours(h: int, w: int) -> np.ndarray:
    arr = np.empty((h, w, 3), np.uint8)
    arr[...] = (12, 200, 77)
    arr[:, w // 3:] = (240, 3, 130)
    return arr


def full_range(h: int, w: int) -> np.ndarray:
    """Every value 0..255 in each channel, in different orders."""
    v = np.arange(h * w) % 256
    return np.stack([v, 255 - v, (v * 7) % 256], axis=-1).reshape(h, w, 3).astype(np.uint8)


IMAGES = {
    "1x1": lambda: np.array([[[200, 17, 99]]], np.uint8),
    "1x9": lambda: random_image(1, 9, 1),
    "9x1": lambda: random_image(9, 1, 2),
    "2x2": lambda: random_image(2, 2, 3),
    "3x3": lambda: random_image(3, 3, 4),
    "31x17-random": lambda: random_image(31, 17, 5),
    "48x65-natural": lambda: natural(48, 65, 6),
    "one-colour": lambda: np.full((11, 13, 3), (90, 91, 250), np.uint8),
    "two-colours": lambda: two_colours(12, 10),
    "full-range": lambda: full_range(32, 40),
}
LAYOUTS = ["HWC", "CHW"]


def ours(arr: np.ndarray, steps, layout: str) -> np.ndarray:
    if layout == "HWC":
        image = arr.copy()
        assert _native.augment(image, "HWC", steps) is image
        return image
    image = np.array(arr.transpose(2, 0, 1), order="C")  # a copy, even where already contiguous
    assert _native.augment(image, "CHW", steps) is image
    return image.transpose(1, 2, 0)


def pil(arr: np.ndarray):
    return Image.fromarray(arr, "RGB")


# --------------------------------------------------------------------------
# Affine transforms and rotation


def rotate_matrix(angle: float, w: int, h: int) -> tuple:
    """Image.rotate's inverse matrix (expand=False, centre of the image)."""
    a = -math.radians(angle % 360.0)
    m = [round(math.cos(a), 15), round(math.sin(a), 15), 0.0,
         round(-math.sin(a), 15), round(math.cos(a), 15), 0.0]
    cx, cy = w / 2.0, h / 2.0
    m[2] = m[0] * -cx + m[1] * -cy + m[2] + cx
    m[5] = m[3] * -cx + m[4] * -cy + m[5] + cy
    return tuple(m)


# name -> matrix for a w x h image: torchvision's / timm's shears and
# translations, plain scales (Pillow's scale path), and matrices that leave
# its fixed-point range (its double path)
MATRICES = {
    "identity": lambda w, h: (1, 0, 0, 0, 1, 0),
    "shear-x-0.3": lambda w, h: (1, 0.3, 0, 0, 1, 0),
    "shear-x-neg": lambda w, h: (1, -0.27, 0, 0, 1, 0),
    "shear-x-far-right": lambda w, h: (1, 0.3, 1.5 * w, 0, 1, 0),
    "shear-x-rows-outside": lambda w, h: (1, -0.2, -0.5 * w, 0, 1, 0.6 * h),
    "shear-y-0.3": lambda w, h: (1, 0, 0, 0.3, 1, 0),
    "shear-xy-centred": lambda w, h: (1, 0.2, -0.1 * h, 0.15, 1, -0.075 * w),
    "translate-x-0.45": lambda w, h: (1, 0, 0.45 * w, 0, 1, 0),
    "translate-y-neg": lambda w, h: (1, 0, 0, 0, 1, -0.33 * h - 0.5),
    "translate-far": lambda w, h: (1, 0, 5 * w, 0, 1, 3 * h),
    "scale-down": lambda w, h: (2, 0, 0, 0, 2, 0),
    "scale-up-mirror": lambda w, h: (-0.5, 0, w, 0, 0.75, 0),
    "rotate-0": lambda w, h: rotate_matrix(0, w, h),
    "rotate-90": lambda w, h: rotate_matrix(90, w, h),
    "rotate-180": lambda w, h: rotate_matrix(180, w, h),
    "rotate-30": lambda w, h: rotate_matrix(30, w, h),
    "rotate-neg-45": lambda w, h: rotate_matrix(-45, w, h),
    "rotate-1000": lambda w, h: rotate_matrix(1000, w, h),
    "outside-fixed-range": lambda w, h: (0.9, 0.2, 40000, 0.1, 1.1, -3),
    "huge-coefficients": lambda w, h: (1e12, 3.0, -2e12, -1e9, 1.0, 0.5),
}
RESAMPLES = {"nearest": 0, "bilinear": 2, "bicubic": 3}
FILLS = {"fill-none": None, "fill-colour": (10, 200, 33)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("resample", list(RESAMPLES))
@pytest.mark.parametrize("matrix", list(MATRICES))
@pytest.mark.parametrize("image", list(IMAGES))
def test_affine_is_pillows_transform(image, matrix, resample, fill, layout):
    arr = IMAGES[image]()
    h, w = arr.shape[:2]
    m = MATRICES[matrix](w, h)
    step = (_native.AUG_AFFINE, m, RESAMPLES[resample], FILLS[fill])
    expected = pil(arr).transform((w, h), Image.AFFINE, m, RESAMPLES[resample],
                                  fillcolor=FILLS[fill])
    np.testing.assert_array_equal(ours(arr, [step], layout), np.asarray(expected))


# The filtered paths twice: the AVX2 kernel (a pixel's three channels in one
# vector, where the CPU has AVX2) and the scalar loops it falls back to
# (FASTDECODE_AUGMENT_SCALAR, read at every call), on matrices that reach
# its special cases (a constant row: dy 0; a constant column: dx 0) and
# random ones, on an image large enough that most taps are inside.
KERNELS = ["simd", "scalar"]


def random_affine(seed: int, w: int, h: int) -> tuple:
    """A RandomAffine-like inverse matrix: rotation, scale, shear, translation."""
    rng = np.random.default_rng(seed)
    angle, shear = math.radians(rng.uniform(-40, 40)), rng.uniform(-0.4, 0.4)
    scale = rng.uniform(0.7, 1.4)
    a, b = math.cos(angle) / scale, math.sin(angle) / scale + shear
    d, e = -math.sin(angle) / scale, math.cos(angle) / scale
    return (a, b, w / 2 - a * w / 2 - b * h / 2 + rng.uniform(-5, 5),
            d, e, h / 2 - d * w / 2 - e * h / 2 + rng.uniform(-5, 5))


FILTERED = {
    "shear-x-row-constant": lambda w, h: (1, 0.27, -0.1 * h, 0, 1, 0),
    "shear-y-column-constant": lambda w, h: (1, 0, 0, -0.31, 1, 0.2 * w),
    "translate-fraction-x": lambda w, h: (1, 0, 3.3, 0, 1, 0),
    "translate-fraction-y": lambda w, h: (1, 0, 0, 0, 1, -7.71),
    "translate-fraction-xy": lambda w, h: (1, 0, -2.25, 0, 1, 1.5),
    "rotate-23.4": lambda w, h: rotate_matrix(23.4, w, h),
    "rotate-neg-131": lambda w, h: rotate_matrix(-131, w, h),
    **{f"random-{seed}": (lambda w, h, seed=seed: random_affine(seed, w, h))
       for seed in range(6)},
}


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("resample", ["bilinear", "bicubic"])
@pytest.mark.parametrize("matrix", list(FILTERED))
def test_filtered_affine_both_kernels_are_pillows(matrix, resample, layout, kernels,
                                                  monkeypatch):
    arr = natural(57, 83, 7)
    h, w = arr.shape[:2]
    m = FILTERED[matrix](w, h)
    if kernels == "scalar":
        monkeypatch.setenv("FASTDECODE_AUGMENT_SCALAR", "1")
    step = (_native.AUG_AFFINE, m, RESAMPLES[resample], (3, 140, 250))
    expected = pil(arr).transform((w, h), Image.AFFINE, m, RESAMPLES[resample],
                                  fillcolor=(3, 140, 250))
    np.testing.assert_array_equal(ours(arr, [step], layout), np.asarray(expected))


ANGLES = [0, 90, 180, 270, -90, 12.5, -33, 721.7]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("resample", list(RESAMPLES))
@pytest.mark.parametrize("angle", ANGLES, ids=lambda a: f"angle{a:g}")
@pytest.mark.parametrize("image", ["1x9", "9x1", "2x2", "31x17-random", "48x65-natural"])
def test_rotation_matrix_is_pillows_rotate(image, angle, resample, fill, layout):
    """Image.rotate is transform with its matrix (the 0/90/180/270 shortcuts
    to copy and transpose included: the transform gives the same pixels)."""
    arr = IMAGES[image]()
    h, w = arr.shape[:2]
    step = (_native.AUG_AFFINE, rotate_matrix(angle, w, h), RESAMPLES[resample], FILLS[fill])
    expected = pil(arr).rotate(angle, RESAMPLES[resample], fillcolor=FILLS[fill])
    np.testing.assert_array_equal(ours(arr, [step], layout), np.asarray(expected))


# --------------------------------------------------------------------------
# Tables, autocontrast, equalize, sharpness, colour


def posterize(bits: int) -> bytes:
    mask = ~(2 ** (8 - bits) - 1) & 0xFF
    return bytes(i & mask for i in range(256))


TABLES = {
    "posterize-1": lambda: posterize(1),
    "posterize-4": lambda: posterize(4),
    "solarize-128": lambda: bytes(i if i < 128 else 255 - i for i in range(256)),
    "solarize-add-60": lambda: bytes(min(255, i + 60) if i < 128 else i for i in range(256)),
    "invert": lambda: bytes(255 - i for i in range(256)),
    "per-channel-768": lambda: bytes(np.random.default_rng(9).integers(0, 256, 768, np.uint8)),
    "bytearray": lambda: bytearray(reversed(range(256))),
    "numpy-uint8": lambda: np.arange(256, dtype=np.uint8) // 3,
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("image", list(IMAGES))
def test_lut_is_pillows_point(image, table, layout):
    arr, lut = IMAGES[image](), TABLES[table]()
    values = list(bytes(lut))
    expected = pil(arr).point(values * 3 if len(values) == 256 else values)
    np.testing.assert_array_equal(ours(arr, [(_native.AUG_LUT, lut)], layout),
                                  np.asarray(expected))


HISTOGRAM_OPS = {
    "autocontrast": (_native.AUG_AUTOCONTRAST, ImageOps.autocontrast),
    "equalize": (_native.AUG_EQUALIZE, ImageOps.equalize),
}
HISTOGRAM_IMAGES = {
    **IMAGES,
    "narrow-range": lambda: (natural(40, 30, 7) // 4 + 100).astype(np.uint8),
    # equalize's last present value maps past 255 (Image.point clips it)
    "equalize-overflow": lambda: np.repeat(
        np.array([0] * 255 + [1] * 254 + [5] * 3, np.uint8).reshape(16, 32, 1), 3, axis=2),
    "large-random": lambda: random_image(300, 257, 8),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", list(HISTOGRAM_OPS))
@pytest.mark.parametrize("image", list(HISTOGRAM_IMAGES))
def test_histogram_op_is_pillows(image, op, layout):
    arr = HISTOGRAM_IMAGES[image]()
    kind, reference = HISTOGRAM_OPS[op]
    np.testing.assert_array_equal(ours(arr, [(kind,)], layout), np.asarray(reference(pil(arr))))


SHARPNESS = [0.0, 0.1, 1.0, 1.9, 5.0, -0.7, 0.5000001]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("factor", SHARPNESS, ids=lambda f: f"f{f:g}")
@pytest.mark.parametrize("image", list(IMAGES))
def test_sharpness_is_pillows(image, factor, layout):
    arr = IMAGES[image]()
    expected = ImageEnhance.Sharpness(pil(arr)).enhance(factor)
    np.testing.assert_array_equal(ours(arr, [(_native.AUG_SHARPNESS, factor)], layout),
                                  np.asarray(expected))


COLOURS = {
    "brightness": (_native.COLOR_BRIGHTNESS, ImageEnhance.Brightness),
    "contrast": (_native.COLOR_CONTRAST, ImageEnhance.Contrast),
    "saturation": (_native.COLOR_SATURATION, ImageEnhance.Color),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("factor", [0.0, 0.1, 1.0, 1.9], ids=lambda f: f"f{f:g}")
@pytest.mark.parametrize("op", list(COLOURS))
@pytest.mark.parametrize("image", list(IMAGES))
def test_colour_step_is_pillows_enhancer(image, op, factor, layout):
    arr = IMAGES[image]()
    code, enhancer = COLOURS[op]
    np.testing.assert_array_equal(ours(arr, [(_native.AUG_COLOR, code, factor)], layout),
                                  np.asarray(enhancer(pil(arr)).enhance(factor)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hue_step_is_adjust_colors_hue(layout):
    """The colour step is fd_color.c's own (tests/core/test_color.py checks it
    against Pillow's HSV round trip for every colour)."""
    arr = natural(20, 30, 11)
    expected = arr.copy()
    _native.adjust_colors(expected, [(_native.COLOR_HUE, 40)], "HWC")
    np.testing.assert_array_equal(ours(arr, [(_native.AUG_COLOR, _native.COLOR_HUE, 40)], layout),
                                  expected)


def pillow_steps(img, steps):
    """Each step as its own Pillow call, one after another."""
    by_code = {code: enhancer for code, enhancer in COLOURS.values()}
    for step in steps:
        kind = step[0]
        if kind == _native.AUG_AFFINE:
            img = img.transform(img.size, Image.AFFINE, step[1], step[2], fillcolor=step[3])
        elif kind == _native.AUG_LUT:
            img = img.point(list(step[1]) * 3)
        elif kind == _native.AUG_COLOR:
            img = by_code[step[1]](img).enhance(step[2])
        elif kind == _native.AUG_SHARPNESS:
            img = ImageEnhance.Sharpness(img).enhance(step[1])
        else:
            img = {_native.AUG_AUTOCONTRAST: ImageOps.autocontrast,
                   _native.AUG_EQUALIZE: ImageOps.equalize}[kind](img)
    return img


def policy(w: int, h: int) -> list:
    """A RandAugment-like sequence touching every kind, the scratch reused."""
    return [(_native.AUG_AFFINE, rotate_matrix(17, w, h), 2, (128, 128, 128)),
            (_native.AUG_SHARPNESS, 1.6),
            (_native.AUG_EQUALIZE,),
            (_native.AUG_AFFINE, (1, 0.21, -3.5, 0, 1, 0), 0, None),
            (_native.AUG_COLOR, _native.COLOR_CONTRAST, 0.55),
            (_native.AUG_LUT, posterize(3)),
            (_native.AUG_AUTOCONTRAST,),
            (_native.AUG_AFFINE, (1, 0, 0, 0.1, 1, -4), 3, None)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("image", list(IMAGES))
def test_a_sequence_is_pillows_one_step_after_another(image, layout):
    arr = IMAGES[image]()
    steps = policy(arr.shape[1], arr.shape[0])
    np.testing.assert_array_equal(ours(arr, steps, layout),
                                  np.asarray(pillow_steps(pil(arr), steps)))


def test_no_steps_leave_the_pixels():
    arr = random_image(5, 4, 12)
    np.testing.assert_array_equal(ours(arr, [], "HWC"), arr)


# --------------------------------------------------------------------------
# Gaussian blur: torchvision's gaussian_blur on a PIL image, within 1 (torch
# convolves in 2-D in the CPU kernel's own order; docs/decisions/augment.md)

BLURS = {
    "3x3-s0.5": (3, 3, 0.5, 0.5),
    "9x9-s1.7": (9, 9, 1.7, 1.7),
    "5x7-s0.3-1.1": (5, 7, 0.3, 1.1),
    "1x1": (1, 1, 1.0, 1.0),
    "tiny-sigma": (3, 5, 1e-4, 0.2),
    "huge-sigma": (7, 3, 1e4, 2.0),
}
BLUR_MISMATCH_BOUND = 1e-3  # of the values; measured 1.3e-5 on photos


def torchvision_blur(arr: np.ndarray, kx: int, ky: int, sx: float, sy: float) -> np.ndarray:
    functional = pytest.importorskip("torchvision.transforms.functional")
    return np.asarray(functional.gaussian_blur(pil(arr), [kx, ky], [sx, sy]))


def assert_within_one(got: np.ndarray, expected: np.ndarray) -> None:
    diff = np.abs(got.astype(np.int16) - expected.astype(np.int16))
    assert diff.max() <= 1
    assert np.count_nonzero(diff) <= BLUR_MISMATCH_BOUND * diff.size + 1


# torchvision imports triton (through torch._dynamo), which aborts under the
# ASan preload of make test-sanitize: the comparisons with it skip that run,
# test_blur_without_torch covers the kernel there
@pytest.mark.no_sanitize
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("blur", list(BLURS))
@pytest.mark.parametrize("image", ["31x17-random", "48x65-natural", "full-range", "two-colours"])
def test_blur_is_torchvision_within_one(image, blur, layout):
    arr = IMAGES[image]()
    kx, ky, sx, sy = BLURS[blur]
    assert_within_one(ours(arr, [(_native.AUG_BLUR, kx, ky, sx, sy)], layout),
                      torchvision_blur(arr, kx, ky, sx, sy))


@pytest.mark.parametrize("blur", list(BLURS))
@pytest.mark.parametrize("image", list(IMAGES))
def test_blur_without_torch(image, blur):
    """Both layouts agree; a one-colour image stays as it is (the kernel sums
    to 1 within float rounding); a 1 x 1 kernel changes nothing; the
    kernel's radius is clipped to what the image allows."""
    arr = IMAGES[image]()
    h, w = arr.shape[:2]
    kx, ky, sx, sy = BLURS[blur]
    kx, ky = min(kx, 2 * w - 1), min(ky, 2 * h - 1)
    step = (_native.AUG_BLUR, kx, ky, sx, sy)
    np.testing.assert_array_equal(ours(arr, [step], "HWC"), ours(arr, [step], "CHW"))
    flat = np.full_like(arr, 77)
    np.testing.assert_array_equal(ours(flat, [step], "CHW"), flat)
    np.testing.assert_array_equal(ours(arr, [(_native.AUG_BLUR, 1, 1, sx, sy)], "HWC"), arr)


@pytest.mark.no_sanitize  # torchvision: see test_blur_is_torchvision_within_one
@pytest.mark.parametrize("image", ["1x9", "9x1", "3x3"])
def test_blur_kernel_up_to_the_image_side(image):
    """torch's reflect padding takes a radius up to the side less one."""
    arr = IMAGES[image]()
    h, w = arr.shape[:2]
    kx, ky = 2 * (w - 1) + 1, 2 * (h - 1) + 1
    assert_within_one(ours(arr, [(_native.AUG_BLUR, kx, ky, 1.3, 0.8)], "CHW"),
                      torchvision_blur(arr, kx, ky, 1.3, 0.8))


# --------------------------------------------------------------------------
# Real photos (the shared corpus, when present)


def photo_rows() -> list:
    base = corpus_dir("photos")
    if base is None:
        return []
    return [{"file": p.name, "path": p} for p in sorted(base.glob("*/*.JPEG"))[:12]]


PHOTO_OPS = {
    "rotate-bilinear": lambda w, h: [(_native.AUG_AFFINE, rotate_matrix(23.4, w, h), 2, None)],
    "rotate-nearest-fill": lambda w, h: [(_native.AUG_AFFINE, rotate_matrix(-8, w, h), 0,
                                          (128, 128, 128))],
    "rotate-bicubic": lambda w, h: [(_native.AUG_AFFINE, rotate_matrix(130, w, h), 3, None)],
    "shear-x": lambda w, h: [(_native.AUG_AFFINE, (1, 0.29, 0, 0, 1, 0), 0, None)],
    "shear-y-bilinear": lambda w, h: [(_native.AUG_AFFINE, (1, 0, 0, -0.3, 1, 0), 2, None)],
    "shear-x-bilinear": lambda w, h: [(_native.AUG_AFFINE, (1, 0.3, -0.15 * h, 0, 1, 0), 2,
                                       (124, 116, 104))],
    "shear-x-bicubic": lambda w, h: [(_native.AUG_AFFINE, (1, -0.3, 0, 0, 1, 0), 3, None)],
    "shear-y-bicubic": lambda w, h: [(_native.AUG_AFFINE, (1, 0, 0, 0.25, 1, 0), 3, None)],
    "translate-fraction-bicubic": lambda w, h: [(_native.AUG_AFFINE, (1, 0, 2.6, 0, 1, -4.3),
                                                 3, None)],
    "translate": lambda w, h: [(_native.AUG_AFFINE, (1, 0, 0.4 * w, 0, 1, -37), 0, None)],
    "autocontrast": lambda w, h: [(_native.AUG_AUTOCONTRAST,)],
    "equalize": lambda w, h: [(_native.AUG_EQUALIZE,)],
    "sharpness": lambda w, h: [(_native.AUG_SHARPNESS, 1.81)],
    "blur-sharpness": lambda w, h: [(_native.AUG_SHARPNESS, 0.13)],
    "posterize": lambda w, h: [(_native.AUG_LUT, posterize(2))],
    "policy": policy,
}


@pytest.mark.no_sanitize  # torchvision: see test_blur_is_torchvision_within_one
@pytest.mark.parametrize("blur", ["9x9-s1.7", "5x7-s0.3-1.1"])
@pytest.mark.parametrize("row", corpus_params("photos", photo_rows(), "file"))
def test_photo_blur_is_torchvision_within_one(row, blur):
    with Image.open(row["path"]) as im:
        arr = np.asarray(im.convert("RGB"))
    kx, ky, sx, sy = BLURS[blur]
    assert_within_one(ours(arr, [(_native.AUG_BLUR, kx, ky, sx, sy)], "CHW"),
                      torchvision_blur(arr, kx, ky, sx, sy))


@pytest.mark.parametrize("op", list(PHOTO_OPS))
@pytest.mark.parametrize("row", corpus_params("photos", photo_rows(), "file"))
def test_photo_op_is_pillows(row, op):
    with Image.open(row["path"]) as im:
        arr = np.asarray(im.convert("RGB"))
    steps = PHOTO_OPS[op](arr.shape[1], arr.shape[0])
    np.testing.assert_array_equal(ours(arr, steps, "CHW"),
                                  np.asarray(pillow_steps(pil(arr), steps)))


# --------------------------------------------------------------------------
# Argument checks


def chw(h: int = 2, w: int = 2) -> np.ndarray:
    return np.zeros((3, h, w), np.uint8)


A = _native.AUG_AFFINE
BAD = {
    "not-an-array": (lambda: b"\0" * 12, "HWC", [], TypeError, r"pixels must be a uint8 numpy"),
    "float-array": (lambda: np.zeros((2, 2, 3), np.float32), "HWC", [], TypeError,
                    r"pixels must be a uint8 numpy array, got ndarray float32"),
    "wrong-shape": (lambda: np.zeros((2, 2, 4), np.uint8), "HWC", [], ValueError,
                    r"pixels must have shape \(H, W, 3\) for layout 'HWC', got \(2, 2, 4\)"),
    "chw-wrong-shape": (lambda: np.zeros((2, 2, 3), np.uint8), "CHW", [], ValueError,
                        r"pixels must have shape \(3, H, W\)"),
    "not-contiguous": (lambda: np.zeros((3, 4, 4), np.uint8)[:, ::2], "CHW", [], ValueError,
                       r"writable and C-contiguous"),
    "read-only": (lambda: np.frombuffer(bytes(12), np.uint8).reshape(2, 2, 3), "HWC", [],
                  ValueError, r"writable and C-contiguous"),
    "empty": (lambda: np.zeros((0, 4, 3), np.uint8), "HWC", [], ValueError, r"pixels are empty"),
    "bad-layout": (chw, "WHC", [], ValueError, r"layout must be 'HWC' or 'CHW'"),
    "steps-a-string": (chw, "CHW", "abc", TypeError, r"steps must be a sequence of tuples"),
    "too-many-steps": (chw, "CHW", [(_native.AUG_EQUALIZE,)] * (_native.AUG_MAX_STEPS + 1),
                       ValueError, rf"at most {_native.AUG_MAX_STEPS} augment steps, "
                       rf"got {_native.AUG_MAX_STEPS + 1}"),
    "step-not-a-tuple": (chw, "CHW", [[_native.AUG_EQUALIZE]], TypeError,
                         r"augment step 0 must be a tuple \(kind, \.\.\.\)"),
    "empty-step": (chw, "CHW", [()], TypeError, r"augment step 0 must be a tuple"),
    "kind-not-int": (chw, "CHW", [("equalize",)], TypeError,
                     r"augment step 0: the kind must be an int, got 'equalize'"),
    "unknown-kind": (chw, "CHW", [(99,)], ValueError, r"augment step 0: unknown kind 99"),
    "negative-kind": (chw, "CHW", [(-1,)], ValueError, r"augment step 0: unknown kind -1"),
    "wrong-arity": (chw, "CHW", [(_native.AUG_SHARPNESS,)], ValueError,
                    r"augment step 0: AUG_SHARPNESS takes a tuple of 2, got 1"),
    "colour-op-unknown": (chw, "CHW", [(_native.AUG_COLOR, 7, 1.0)], ValueError,
                          r"augment step 0: unknown colour op 7"),
    "colour-factor-nan": (chw, "CHW", [(_native.AUG_COLOR, 0, float("nan"))], ValueError,
                          r"augment step 0: the colour factor must be finite, got nan"),
    "colour-factor-str": (chw, "CHW", [(_native.AUG_COLOR, 0, "1.5")], TypeError,
                          r"the colour factor must be a real number, got '1.5'"),
    "hue-fraction": (chw, "CHW", [(_native.AUG_COLOR, _native.COLOR_HUE, 12.5)], ValueError,
                     r"augment step 0: the hue shift must be an integer in 0\.\.255, got 12\.5"),
    "hue-256": (chw, "CHW", [(_native.AUG_COLOR, _native.COLOR_HUE, 256)], ValueError,
                r"augment step 0: the hue shift must be an integer in 0\.\.255, got 256"),
    "matrix-short": (chw, "CHW", [(A, (1, 0, 0, 0, 1), 0, None)], ValueError,
                     r"augment step 0: the matrix must be 6 numbers, got 5"),
    "matrix-not-a-sequence": (chw, "CHW", [(A, 1.0, 0, None)], TypeError,
                              r"the matrix must be 6 numbers, got 1\.0"),
    "matrix-inf": (chw, "CHW", [(A, (1, 0, float("inf"), 0, 1, 0), 0, None)], ValueError,
                   r"augment step 0: matrix entry 2 must be finite, got inf"),
    "resample-lanczos": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 1, None)], ValueError,
                         r"resample must be 0 \(NEAREST\), 2 \(BILINEAR\) or 3 \(BICUBIC\), got 1"),
    "resample-huge": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 2 ** 70, None)], ValueError,
                      r"resample must be 0"),
    "resample-float": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 2.0, None)], TypeError,
                       r"augment step 0: resample must be an int, got 2\.0"),
    "fill-two-values": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 0, (1, 2))], ValueError,
                        r"fill must be None or \(r, g, b\), got \(1, 2\)"),
    "fill-256": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 0, (1, 256, 3))], ValueError,
                 r"augment step 0: fill value 1 \(256\) is not in 0\.\.255"),
    "fill-negative": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 0, (-1, 0, 0))], ValueError,
                      r"fill value 0 \(-1\) is not in 0\.\.255"),
    "fill-int": (chw, "CHW", [(A, (1, 0, 0, 0, 1, 0), 0, 7)], TypeError,
                 r"fill must be None or \(r, g, b\), got 7"),
    "table-short": (chw, "CHW", [(_native.AUG_LUT, bytes(255))], ValueError,
                    r"augment step 0: the table must have 256 or 768 bytes, got 255"),
    "table-list": (chw, "CHW", [(_native.AUG_LUT, list(range(256)))], TypeError,
                   r"augment step 0: the table must be bytes-like, got list"),
    "sharpness-inf": (chw, "CHW", [(_native.AUG_SHARPNESS, float("-inf"))], ValueError,
                      r"augment step 0: the sharpness factor must be finite, got -inf"),
    "sharpness-huge-int": (chw, "CHW", [(_native.AUG_SHARPNESS, 10 ** 400)], ValueError,
                           r"augment step 0: the sharpness factor must be finite, got 1000"),
    "sharpness-none": (chw, "CHW", [(_native.AUG_SHARPNESS, None)], TypeError,
                       r"the sharpness factor must be a real number, got None"),
    "blur-even-kernel": (lambda: chw(9, 9), "CHW", [(_native.AUG_BLUR, 4, 3, 1.0, 1.0)],
                         ValueError, r"augment step 0: kernel_size_x must be odd and positive, "
                         r"got 4"),
    "blur-zero-kernel": (chw, "CHW", [(_native.AUG_BLUR, 1, 0, 1.0, 1.0)], ValueError,
                         r"kernel_size_y must be odd and positive, got 0"),
    "blur-kernel-float": (chw, "CHW", [(_native.AUG_BLUR, 3.0, 3, 1.0, 1.0)], TypeError,
                          r"augment step 0: kernel_size_x must be an int, got 3\.0"),
    "blur-sigma-zero": (chw, "CHW", [(_native.AUG_BLUR, 1, 1, 0.0, 1.0)], ValueError,
                        r"augment step 0: sigma_x must be > 0, got 0\.0"),
    "blur-sigma-nan": (chw, "CHW", [(_native.AUG_BLUR, 1, 1, 1.0, float("nan"))], ValueError,
                       r"augment step 0: sigma_y must be finite, got nan"),
    "blur-radius-too-wide": (lambda: chw(4, 3), "CHW", [(_native.AUG_BLUR, 7, 3, 1.0, 1.0)],
                             ValueError, r"augment: step 0: blur kernel width 7 is not odd with "
                             r"a radius below the image's 3"),
    "blur-radius-too-tall": (lambda: chw(4, 3), "CHW", [(_native.AUG_BLUR, 1, 9, 1.0, 1.0)],
                             ValueError, r"blur kernel height 9 is not odd with a radius below "
                             r"the image's 4"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments_are_typed_errors_before_any_pixel_is_written(case):
    make, layout, steps, error, match = BAD[case]
    image = make()
    before = np.array(image, copy=True) if isinstance(image, np.ndarray) else None
    with pytest.raises(error, match=match):
        _native.augment(image, layout, steps)
    if before is not None:
        np.testing.assert_array_equal(image, before)


def test_a_bad_step_after_good_ones_changes_nothing():
    """Every step is checked before the first is applied."""
    image = random_image(6, 7, 13)
    before = image.copy()
    steps = [(_native.AUG_EQUALIZE,), (_native.AUG_AFFINE, (1, 0.2, 0, 0, 1, 0), 2, None),
             (_native.AUG_LUT, bytes(300))]
    with pytest.raises(ValueError, match=r"augment step 2: the table must have 256 or 768"):
        _native.augment(image, "HWC", steps)
    np.testing.assert_array_equal(image, before)


def test_the_step_limit_itself_is_accepted():
    image = random_image(4, 4, 14)
    steps = [(_native.AUG_LUT, bytes(255 - i for i in range(256)))] * _native.AUG_MAX_STEPS
    np.testing.assert_array_equal(ours(image, steps, "HWC"), image)  # an even number of inverts


def test_threads_calling_at_once_get_each_their_own_result():
    """The GIL is released around the C call; each call owns its scratch."""
    from concurrent.futures import ThreadPoolExecutor

    images = [natural(96, 80, seed) for seed in range(8)]
    steps = policy(80, 96)
    expected = [ours(arr, steps, "CHW") for arr in images]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda arr: ours(arr, steps, "CHW"), images * 4))
    for i, result in enumerate(got):
        np.testing.assert_array_equal(result, expected[i % len(images)])
