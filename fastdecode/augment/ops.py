"""The op vocabulary: each op as ``_native.augment`` steps, Pillow's arguments exactly.

A step is one tuple ``_native.augment`` takes: ``(AUG_COLOR, op, factor)``,
``(AUG_AFFINE, (a, b, c, d, e, f), resample, fill)``, ``(AUG_LUT, table)``,
``(AUG_AUTOCONTRAST,)``, ``(AUG_EQUALIZE,)``, ``(AUG_SHARPNESS, factor)``.
The arguments are what Pillow computes in Python before its C kernel runs
(``Image.rotate``'s matrix, ``ImageOps``' tables) and what torchvision passes
to Pillow (``_get_inverse_affine_matrix``), reproduced operation for
operation, so the native kernels (bit-exact with Pillow's) give torchvision's
and timm's pixels. See docs/decisions/augment.md ("Draws and plans").
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

from fastdecode import _native

__all__ = ["Fill", "Step", "affine", "autocontrast", "brightness", "color_step", "contrast",
           "equalize", "inverse_affine_matrix", "inverse_affine_matrix_v2", "invert", "lut", "pil_rotate",
           "posterize", "saturation", "sharpness", "solarize", "solarize_add", "tv_affine"]

Step = tuple  # one tuple of _native.augment's steps
Fill = Optional[tuple[int, int, int]]  # Pillow's fillcolor (None: black)


def color_step(op: int, factor: float) -> Step:
    """One of fd_color's steps (``_native.COLOR_*`` and its factor)."""
    return (_native.AUG_COLOR, op, factor)


def brightness(factor: float) -> Step:
    """``ImageEnhance.Brightness(img).enhance(factor)``."""
    return color_step(_native.COLOR_BRIGHTNESS, float(factor))


def contrast(factor: float) -> Step:
    """``ImageEnhance.Contrast(img).enhance(factor)``."""
    return color_step(_native.COLOR_CONTRAST, float(factor))


def saturation(factor: float) -> Step:
    """``ImageEnhance.Color(img).enhance(factor)``."""
    return color_step(_native.COLOR_SATURATION, float(factor))


def sharpness(factor: float) -> Step:
    """``ImageEnhance.Sharpness(img).enhance(factor)``."""
    return (_native.AUG_SHARPNESS, float(factor))


def autocontrast() -> Step:
    """``ImageOps.autocontrast(img)`` (no cutoff, nothing ignored)."""
    return (_native.AUG_AUTOCONTRAST,)


def equalize() -> Step:
    """``ImageOps.equalize(img)``."""
    return (_native.AUG_EQUALIZE,)


def lut(table: Sequence[int]) -> Step:
    """``img.point(table)``: one 256-entry table for the three channels."""
    return (_native.AUG_LUT, bytes(table))


@functools.cache
def invert() -> Step:
    """``ImageOps.invert(img)``."""
    return lut(range(255, -1, -1))


@functools.lru_cache(maxsize=1024)  # the tables are few per policy
def posterize(bits: int) -> Step:
    """``ImageOps.posterize(img, bits)``.

    Raises
    ------
    ValueError
        ``bits`` outside 1..8, as Pillow raises it.
    """
    if not 1 <= bits <= 8:
        raise ValueError("bits must be between or equal to 1 and 8")
    mask = ~(2 ** (8 - bits) - 1)
    return lut([i & mask for i in range(256)])


@functools.lru_cache(maxsize=1024)  # the tables are few per policy
def solarize(threshold: float) -> Step:
    """``ImageOps.solarize(img, threshold)``: ``i`` below it, ``255 - i`` from it."""
    return lut([i if i < threshold else 255 - i for i in range(256)])


@functools.lru_cache(maxsize=1024)  # the tables are few per policy
def solarize_add(add: int, threshold: float = 128) -> Step:
    """timm's ``solarize_add``: ``min(255, i + add)`` below the threshold, ``i`` from it."""
    return lut([min(255, i + add) if i < threshold else i for i in range(256)])


_UNIT = (-1.0, 0.0, 1.0)


def affine(matrix: Sequence[float], resample: int, fill: Fill) -> Step:
    """``img.transform(img.size, Image.AFFINE, matrix, resample, fillcolor=fill)``.

    A matrix of 0 / +-1 entries and whole offsets (torchvision's
    translations, rotations by quarter turns) maps each output pixel centre
    onto an input pixel centre, where Pillow's bilinear and bicubic filters
    weigh that one pixel by exactly 1 and the others by 0, and reject the
    same positions as nearest does: the nearest step (a copy) is Pillow's
    result with any of the three (tested per filter)."""
    m = tuple(float(v) for v in matrix[:6])
    if (resample and m[0] in _UNIT and m[1] in _UNIT and m[3] in _UNIT and m[4] in _UNIT
            and m[2].is_integer() and m[5].is_integer()):
        resample = 0
    return (_native.AUG_AFFINE, m, resample, fill)


def pil_rotate(angle: float, size: tuple[int, int], resample: int, fill: Fill,
               center: Optional[Sequence[float]] = None) -> Optional[Step]:
    """``img.rotate(angle, resample, center=center, fillcolor=fill)`` (no
    expand or translate) on an image of ``size`` (height, width): Pillow's
    matrix, computed as ``Image.rotate`` computes it; None for a multiple of
    360 degrees without a centre (Pillow returns a copy). Pillow transposes
    for 180 degrees (and 90 / 270 on a square): the matrix then holds only 0,
    1 and -1 and whole offsets, and samples the same pixels."""
    angle = angle % 360.0
    if angle == 0 and not center:
        return None
    h, w = size
    cx, cy = (w / 2, h / 2) if center is None else (center[0], center[1])
    rad = -math.radians(angle)
    m = [round(math.cos(rad), 15), round(math.sin(rad), 15), 0.0,
         round(-math.sin(rad), 15), round(math.cos(rad), 15), 0.0]
    x, y = -cx, -cy
    m[2], m[5] = m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]
    m[2] += cx
    m[5] += cy
    return affine(m, resample, fill)


def inverse_affine_matrix(center: Sequence[float], angle: float, translate: Sequence[float],
                          scale: float, shear: Sequence[float]) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` (inverted=True), the same
    operations in the same order (the matrix Pillow receives)."""
    rot = math.radians(angle)
    sx = math.radians(shear[0])
    sy = math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix = [x / scale for x in matrix]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def inverse_affine_matrix_v2(center: Sequence[float], angle: float, translate: Sequence[float],
                             scale: float, shear: Sequence[float]) -> list[float]:
    """torchvision v2's own ``_get_inverse_affine_matrix`` (inverted=True): the
    same matrix as v1's, its terms grouped otherwise (so it rounds otherwise)."""
    rot = math.radians(angle)
    sx = math.radians(shear[0])
    sy = math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy = math.cos(sy)
    tan_sx = math.tan(sx)
    rot_minus_sy = rot - sy
    cx_plus_tx = cx + tx
    cy_plus_ty = cy + ty
    a = math.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot_minus_sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    matrix = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    matrix[2] += cx - matrix[0] * cx_plus_tx - matrix[1] * cy_plus_ty
    matrix[5] += cy - matrix[3] * cx_plus_tx - matrix[4] * cy_plus_ty
    return matrix


def tv_affine(size: tuple[int, int], angle: float, translate: Sequence[float], scale: float,
              shear: Sequence[float], resample: int, fill: Fill,
              center: Optional[Sequence[float]] = None, v2: bool = False) -> Step:
    """torchvision's ``F.affine`` on a PIL image of ``size`` (height, width),
    v1's or v2's matrix (the centre defaults to ``[width * 0.5, height * 0.5]``)."""
    h, w = size
    if center is None:
        center = [w * 0.5, h * 0.5]
    matrix = (inverse_affine_matrix_v2 if v2 else inverse_affine_matrix)(
        center, angle, translate, scale, shear)
    return affine(matrix, resample, fill)
