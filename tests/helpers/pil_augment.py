"""A Pillow executor of ``_native.augment``'s steps, for the tests: each step
as the Pillow call the op vocabulary (fastdecode.augment.ops) stands for, so
a test tells a wrong draw or argument from a kernel difference."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from fastdecode import _native

_ENHANCERS = {"COLOR_BRIGHTNESS": ImageEnhance.Brightness, "COLOR_CONTRAST": ImageEnhance.Contrast,
              "COLOR_SATURATION": ImageEnhance.Color}


def run_steps(img: Image.Image, steps) -> Image.Image:
    """``img`` (RGB) after ``steps``, each run by Pillow."""
    for step in steps:
        kind = step[0]
        if kind == _native.AUG_COLOR:
            name = next(n for n in _ENHANCERS if getattr(_native, n) == step[1])
            img = _ENHANCERS[name](img).enhance(step[2])
        elif kind == _native.AUG_AFFINE:
            img = img.transform(img.size, Image.AFFINE, step[1], step[2], fillcolor=step[3])
        elif kind == _native.AUG_LUT:
            table = list(step[1])
            img = img.point(table * 3 if len(table) == 256 else table)
        elif kind == _native.AUG_AUTOCONTRAST:
            img = ImageOps.autocontrast(img)
        elif kind == _native.AUG_EQUALIZE:
            img = ImageOps.equalize(img)
        elif kind == _native.AUG_SHARPNESS:
            img = ImageEnhance.Sharpness(img).enhance(step[1])
        else:
            raise ValueError(f"unknown step {step!r}")
    return img


def run_on_array(pixels: np.ndarray, steps) -> np.ndarray:
    """HWC uint8 pixels after ``steps`` (Pillow), a new array."""
    return np.asarray(run_steps(Image.fromarray(pixels, "RGB"), steps))
