"""_native.adjust_colors (src_c/fd_color.c): Pillow's ImageEnhance brightness,
contrast and colour blends on uint8 RGB, in place, bit for bit, both layouts;
its argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from fastdecode import _native

Image = pytest.importorskip("PIL.Image")
ImageEnhance = pytest.importorskip("PIL.ImageEnhance")

OPS = {
    "brightness": (_native.COLOR_BRIGHTNESS, ImageEnhance.Brightness),
    "contrast": (_native.COLOR_CONTRAST, ImageEnhance.Contrast),
    "saturation": (_native.COLOR_SATURATION, ImageEnhance.Color),
}
# 0 and 1 are Pillow's copy shortcuts; < 0 and > 1 extrapolate (clamped)
FACTORS = [0.0, 0.25, 0.6037, 1.0, 1.3999999, 2.5, -0.5, 1e6]


def random_image(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def natural(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(6 * x + c) * np.cos(4 * y - c) for c in range(3)], axis=-1)
    noise = rng.normal(0, 0.05, (h, w, 3))
    return np.clip((base * 0.5 + 0.5 + noise) * 255, 0, 255).astype(np.uint8)


IMAGES = {
    "1x1": lambda: np.array([[[200, 17, 99]]], np.uint8),
    "3x5-random": lambda: random_image(3, 5, 1),
    "31x17-random": lambda: random_image(31, 17, 2),
    "64x48-natural": lambda: natural(64, 48, 3),
    "black": lambda: np.zeros((9, 7, 3), np.uint8),
    "white": lambda: np.full((9, 7, 3), 255, np.uint8),
    "grey-mean-at-half": lambda: np.repeat(np.array([[[100], [101]]], np.uint8), 3, axis=2),
}


def pillow(arr: np.ndarray, steps) -> np.ndarray:
    im = Image.fromarray(arr, "RGB")
    by_code = {code: enhancer for code, enhancer in OPS.values()}
    for code, factor in steps:
        im = by_code[code](im).enhance(factor)
    return np.asarray(im)


def ours(arr: np.ndarray, steps, layout: str) -> np.ndarray:
    if layout == "HWC":
        image = arr.copy()
        assert _native.adjust_colors(image, steps, "HWC") is image
        return image
    image = np.array(arr.transpose(2, 0, 1), order="C")  # a copy, even where already contiguous
    assert _native.adjust_colors(image, steps, "CHW") is image
    return image.transpose(1, 2, 0)


LAYOUTS = ["HWC", "CHW"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("factor", FACTORS, ids=lambda f: f"f{f:g}")
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("image", list(IMAGES))
def test_one_step_is_pillows(image, op, factor, layout):
    arr = IMAGES[image]()
    steps = [(OPS[op][0], factor)]
    np.testing.assert_array_equal(ours(arr, steps, layout), pillow(arr, steps))


SEQUENCES = {
    "jitter-order-bcs": [(0, 1.31), (1, 0.72), (2, 1.18)],
    "jitter-order-scb": [(2, 0.61), (1, 1.39), (0, 0.93)],
    "contrast-twice": [(1, 1.4), (1, 0.6)],
    "grayscale-after-jitter": [(1, 1.2), (0, 0.8), (2, 0.0)],
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("sequence", list(SEQUENCES))
@pytest.mark.parametrize("image", list(IMAGES))
def test_a_sequence_is_pillows_one_image_after_another(image, sequence, layout):
    arr = IMAGES[image]()
    steps = [(code, f) for code, f in SEQUENCES[sequence]]
    np.testing.assert_array_equal(ours(arr, steps, layout), pillow(arr, steps))


def test_no_steps_leave_the_pixels():
    arr = random_image(5, 6, 4)
    np.testing.assert_array_equal(ours(arr, [], "HWC"), arr)


def test_saturation_zero_is_pillows_grayscale():
    """RandomGrayscale's result: convert('L') in the three channels."""
    arr = natural(40, 30, 5)
    grey = np.asarray(Image.fromarray(arr).convert("L"))
    np.testing.assert_array_equal(ours(arr, [(_native.COLOR_SATURATION, 0.0)], "HWC"),
                                  np.repeat(grey[:, :, None], 3, axis=2))


def read_only() -> np.ndarray:
    arr = np.zeros((3, 4, 4), np.uint8)
    arr.setflags(write=False)
    return arr


BAD = {
    "float-image": (lambda: np.zeros((3, 4, 4), np.float32), [], "CHW", TypeError,
                    r"image must be a uint8 numpy array"),
    "not-an-array": (lambda: bytearray(48), [], "CHW", TypeError,
                     r"image must be a uint8 numpy array, got bytearray"),
    "two-dims": (lambda: np.zeros((4, 4), np.uint8), [], "CHW", ValueError,
                 r"image must have shape \(3, H, W\) for layout 'CHW'"),
    "four-channels-hwc": (lambda: np.zeros((4, 4, 4), np.uint8), [], "HWC", ValueError,
                          r"image must have shape \(H, W, 3\) for layout 'HWC'"),
    "hwc-given-as-chw": (lambda: np.zeros((4, 5, 3), np.uint8), [], "CHW", ValueError,
                         r"got \(4, 5, 3\)"),
    "not-contiguous": (lambda: np.zeros((3, 4, 8), np.uint8)[:, :, ::2], [], "CHW", ValueError,
                       r"image must be writable and C-contiguous"),
    "read-only": (lambda: read_only(), [], "CHW", ValueError,
                  r"image must be writable and C-contiguous"),
    "empty": (lambda: np.zeros((3, 0, 5), np.uint8), [(0, 1.2)], "CHW", ValueError,
              r"color: empty image \(0 x 5\)"),
    "unknown-op": (lambda: np.zeros((3, 2, 2), np.uint8), [(4, 1.0)], "CHW", ValueError,
                   r"colour step 0: unknown op 4"),
    "negative-op": (lambda: np.zeros((3, 2, 2), np.uint8), [(0, 1.0), (-1, 1.0)], "CHW",
                    ValueError, r"colour step 1: unknown op -1"),
    "hue-shift-fraction": (lambda: np.zeros((3, 2, 2), np.uint8), [(3, 12.5)], "CHW",
                           ValueError, r"color: step 0: hue shift 12.5 is not an integer in 0..255"),
    "hue-shift-256": (lambda: np.zeros((3, 2, 2), np.uint8), [(3, 256)], "CHW", ValueError,
                      r"hue shift 256 is not an integer in 0..255"),
    "hue-shift-negative": (lambda: np.zeros((3, 2, 2), np.uint8), [(3, -1)], "CHW", ValueError,
                           r"hue shift -1 is not an integer in 0..255"),
    "nan-factor": (lambda: np.zeros((3, 2, 2), np.uint8), [(1, float("nan"))], "CHW",
                   ValueError, r"color: step 0: factor nan is not finite"),
    "inf-factor": (lambda: np.zeros((3, 2, 2), np.uint8), [(0, 1.0), (2, float("inf"))], "CHW",
                   ValueError, r"color: step 1: factor inf is not finite"),
    "float32-overflow": (lambda: np.zeros((3, 2, 2), np.uint8), [(0, 1e39)], "CHW",
                         ValueError, r"factor inf is not finite"),
    "too-many-steps": (lambda: np.zeros((3, 2, 2), np.uint8),
                       [(0, 1.0)] * (_native.COLOR_MAX_STEPS + 1), "CHW", ValueError,
                       rf"at most {_native.COLOR_MAX_STEPS} colour steps, got "
                       rf"{_native.COLOR_MAX_STEPS + 1}"),
    "bad-layout": (lambda: np.zeros((3, 2, 2), np.uint8), [], "WHC", ValueError,
                   r"layout must be 'HWC' or 'CHW'"),
    "step-not-a-pair": (lambda: np.zeros((3, 2, 2), np.uint8), [(0,)], "CHW", ValueError,
                        r"colour step 0 must be an \(op, factor\) pair, got \(0,\)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments_are_typed_errors_before_any_pixel_is_written(case):
    make, steps, layout, error, match = BAD[case]
    image = make()
    before = np.array(image, copy=True) if isinstance(image, np.ndarray) else None
    with pytest.raises(error, match=match):
        _native.adjust_colors(image, steps, layout)
    if before is not None:
        np.testing.assert_array_equal(image, before)


def test_a_bad_step_after_good_ones_changes_nothing():
    """All steps are checked before the first is applied."""
    image = random_image(6, 6, 7)
    before = image.copy()
    with pytest.raises(ValueError, match="factor nan is not finite"):
        _native.adjust_colors(image, [(0, 1.5), (2, 0.3), (1, float("nan"))], "HWC")
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_contrast_mean_over_many_simd_blocks(layout):
    """The planar L sum is kept in 32-bit lanes per block of 2^20 pixels."""
    arr = np.full((1100, 1000, 3), 250, np.uint8)
    arr[::7, ::3] = (3, 200, 17)
    steps = [(_native.COLOR_CONTRAST, 0.77), (_native.COLOR_CONTRAST, 1.3)]
    np.testing.assert_array_equal(ours(arr, steps, layout), pillow(arr, steps))


# --------------------------------------------------------------------------
# Hue: torchvision's adjust_hue on PIL (Pillow's HSV round trip, a uint8 shift of H)


def every_colour(step: int = 1, width: int = 4096) -> np.ndarray:
    """Every ``step``-th of the 2^24 RGB colours, as an image ``width`` wide
    (the last partial row left out)."""
    c = np.arange(0, 1 << 24, step, dtype=np.uint32)
    c = c[:len(c) // width * width]
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], axis=-1).astype(np.uint8)
    return rgb.reshape(-1, width, 3)


def pillow_hue(arr: np.ndarray, shift: int) -> np.ndarray:
    """What torchvision's adjust_hue does to a PIL image (torch is not imported
    in tests/core: tests/transforms compares with torchvision itself)."""
    h, s, v = Image.fromarray(arr, "RGB").convert("HSV").split()
    h = Image.fromarray(np.asarray(h) + np.uint8(shift), "L")  # wraps, as uint8
    return np.asarray(Image.merge("HSV", (h, s, v)).convert("RGB"))


def shift_of(hue_factor: float) -> int:
    """torchvision's shift of H for a hue factor."""
    return int(np.array(hue_factor * 255).astype(np.uint8))


# 0 (still a lossy round trip), positive, negative (wrapped by the uint8 cast), the ends.
# Not in the ASan/UBSan run: 16.7 M pixels through the same kernel add arithmetic, not
# memory paths, to what the every-shift sample below gives it (8 s a case under ASan)
@pytest.mark.no_sanitize
@pytest.mark.parametrize("hue_factor", [
    0.0, pytest.param(-0.27, marks=pytest.mark.slow),  # make test: -0.27's shift in the sample below
], ids=lambda f: f"h{f:g}")
def test_hue_is_pillows_round_trip_for_every_colour(hue_factor):
    arr = every_colour()
    shift = shift_of(hue_factor)
    np.testing.assert_array_equal(ours(arr, [(_native.COLOR_HUE, shift)], "HWC"),
                                  pillow_hue(arr, shift))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hue_every_shift_on_a_sample_of_colours(layout):
    """Every shift adjust_hue can add (0..127 and 129..255: |hue_factor| <= 0.5),
    each on every 509th colour."""
    arr = every_colour(509, width=256)
    for shift in [k for k in range(256) if k != 128]:
        factor = shift / 255 if shift < 128 else (shift - 256) / 255
        assert shift_of(factor) == shift
        np.testing.assert_array_equal(ours(arr, [(_native.COLOR_HUE, shift)], layout),
                                      pillow_hue(arr, shift), err_msg=f"shift {shift}")
