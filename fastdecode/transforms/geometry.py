"""Geometry: a chain's geometric transforms walked over one image's size.

The leading RandomResizedCrop / Resize / CenterCrop / RandomHorizontalFlip run
of a chain, translated into ops (:class:`GeoOp`), becomes one
:class:`Geometry` per image: the integer box of the stored image that is
decoded, the size it is resampled to, the part kept, where that lands on a
zero canvas (CenterCrop's padding) and the mirror. Random parameters are
drawn as torchvision draws them (:mod:`.draws`). An op that cannot join the
geometry exactly raises :class:`Stop`: it and everything after it run
unfused, in order, on the PIL image. See docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from fastdecode.transforms.draws import (  # resized_output_size: re-exported
    crop_offset,
    flip_draw,
    log_ratio,
    resized_output_size,
    sample_resized_crop,
)
from fastdecode.transforms.filters import PIL_BILINEAR, PIL_FILTER_NAMES

__all__ = ["CenterCropOp", "FlipOp", "GeoOp", "Geometry", "PadOp", "PilResize", "RandomCropOp",
           "RandomResizedCropOp", "ResizeOp", "Stop", "draw_geometry", "pad_canvas",
           "resized_output_size", "round_box", "static_output_size"]


class Stop(Exception):
    """Raised by an op that cannot join the geometry; carries what runs instead.

    ``steps`` are callables on a PIL image that replace the op itself (e.g. the
    resize half of a RandomResizedCrop whose crop already joined the geometry);
    None means the op runs unfused as it is.
    """

    def __init__(self, reason: str, steps=None):
        super().__init__(reason)
        self.reason = reason
        self.steps = steps


@dataclass
class Geometry:
    """The geometry of one image: what is decoded, resampled, kept, and where it lands.

    What :meth:`FusedTransform.decode_into` returns and
    ``FusedTransform.last_params`` holds: the random crop box and flip drawn
    for that image, in numbers. Boxes are (top, left, height, width). Stage
    0 is the stored image (``image_size``), stage 1 the resampled image
    (``size``) of ``crop``.

    Parameters
    ----------
    image_size : (int, int)
        (H, W) of the stored image.
    crop : (int, int, int, int)
        The integer box of the stored image that is decoded.
    size : (int, int) or None
        (h, w) that ``crop`` is resampled to; None for no resample.
    region : (int, int, int, int)
        The part kept, in stage-1 coordinates (stage 0 when ``size`` is
        None; it then equals ``crop``).
    canvas : (int, int)
        (H, W) of the result.
    content : (int, int, int, int)
        Where ``region`` lands on the canvas (before mirroring); the rest of
        the canvas is zero (CenterCrop's padding).
    flip : bool, default False
        Whether the canvas is mirrored left to right.
    filter : int, default PIL.Image.BILINEAR
        Pillow's filter id of the resample.
    pad : PadStage or None
        A padding_mode pad (or a non-zero fill) and the crops after it
        (:class:`~.render.PadStage`); the fields above are then its window.
    """

    image_size: tuple[int, int]
    crop: tuple[int, int, int, int]
    size: Optional[tuple[int, int]]
    region: tuple[int, int, int, int]
    canvas: tuple[int, int]
    content: tuple[int, int, int, int]
    flip: bool = False
    filter: int = PIL_BILINEAR
    pad: Optional[Any] = None

    @classmethod
    def start(cls, height: int, width: int) -> "Geometry":
        """The geometry of an image before any transform: all of it, kept as it is.

        Parameters
        ----------
        height, width : int
            The stored image's size.

        Returns
        -------
        Geometry
            The whole image decoded, not resampled, not mirrored.
        """
        box = (0, 0, height, width)
        return cls((height, width), box, None, box, (height, width), box)

    @property
    def padded(self) -> bool:
        """Whether part of the canvas is zero padding (CenterCrop larger than the image)."""
        return self.content != (0, 0) + self.canvas

    @property
    def region_is_full(self) -> bool:
        """Whether the whole resampled image is kept (no crop after the resample)."""
        return self.size is None or self.region == (0, 0) + self.size

    def source_box(self) -> tuple[float, float, float, float]:
        """The kept region in stored-image coordinates.

        Returns
        -------
        (float, float, float, float)
            (top, left, height, width) in pixels of the stored image
            (fractional after a resample).
        """
        if self.size is None:
            top, left, height, width = self.region
            return (float(top), float(left), float(height), float(width))
        ct, cl, ch, cw = self.crop
        sy, sx = ch / self.size[0], cw / self.size[1]
        top, left, height, width = self.region
        return (ct + top * sy, cl + left * sx, height * sy, width * sx)

    # -- the primitive operations -------------------------------------------------

    def do_crop(self, top: int, left: int, height: int, width: int) -> None:
        """Crops the current canvas, as CenterCrop or a crop box does (zero outside it).

        Parameters
        ----------
        top, left, height, width : int
            The box, in canvas pixels; parts outside the canvas become zero
            padding.
        """
        if self.pad is not None:
            return self.pad.crop(self, top, left, height, width)
        canvas_h, canvas_w = self.canvas
        if self.flip:
            left = canvas_w - left - width
        ct, cl, ch, cw = self.content
        it, il = max(ct, top), max(cl, left)
        ib, ir = min(ct + ch, top + height), min(cl + cw, left + width)
        ih, iw = max(0, ib - it), max(0, ir - il)
        rt, rl, _, _ = self.region
        rt, rl = rt + (it - ct), rl + (il - cl)
        self.region = (rt, rl, ih, iw)
        if self.size is None:
            self.crop = self.region
        self.content = (it - top, il - left, ih, iw)
        self.canvas = (height, width)

    def do_pad(self, left: int, top: int, right: int, bottom: int) -> None:
        """Pads the canvas with zeros, as ``F.pad(fill=0)`` does (in the
        coordinates torchvision sees, i.e. after any mirror).

        Parameters
        ----------
        left, top, right, bottom : int
            The zero border added on each side (>= 0).
        """
        if self.flip:
            left, right = right, left
        ct, cl, ch, cw = self.content
        self.content = (ct + top, cl + left, ch, cw)
        self.canvas = (self.canvas[0] + top + bottom, self.canvas[1] + left + right)

    def do_resize(self, height: int, width: int, pil_filter: int) -> None:
        """Resamples the canvas to (height, width), as Resize does.

        Parameters
        ----------
        height, width : int
            The new canvas size.
        pil_filter : int
            Pillow's filter id of the resample.

        Raises
        ------
        Stop
            The resample cannot join the geometry exactly (a second resample,
            a padded or empty canvas): it runs unfused instead.
        """
        if (height, width) == self.canvas:
            return  # torchvision returns the image unchanged
        if self.size is not None or self.pad is not None:
            raise Stop("a second resample" if self.pad is None else "a resample of a padded image")
        if self.padded:
            raise Stop("resample of a zero-padded canvas")
        if self.content[2] == 0 or self.content[3] == 0:
            raise Stop("resample of an empty image")
        self.crop = self.region
        self.size = (height, width)
        self.region = (0, 0, height, width)
        self.canvas = (height, width)
        self.content = (0, 0, height, width)
        self.filter = pil_filter

    def do_flip(self) -> None:
        """Mirrors the canvas left to right (twice is no mirror)."""
        self.flip = not self.flip


class GeoOp:
    """One geometric transform, translated. ``apply`` mutates the Geometry."""

    name = "geometric"
    stage = "pil"  # "tensor": the transform comes after the PIL-to-tensor converter

    def __init__(self, transform: Any):
        self.transform = transform

    def apply(self, geo: Geometry) -> None:  # pragma: no cover - abstract
        """Applies this op to ``geo``, drawing its random parameters as the
        transform draws them.

        Parameters
        ----------
        geo : Geometry
            The image's geometry so far; mutated.

        Raises
        ------
        Stop
            The op cannot join the geometry exactly: it and the ops after it run
            unfused.
        """
        raise NotImplementedError

    def fixed_size(self, size):
        """The canvas size every image has after this op, given the one before.

        Parameters
        ----------
        size : (int, int) or None
            (h, w) before this op; None when it depends on the image.

        Returns
        -------
        (int, int) or None
            (h, w) after it, or None when it depends on the image (this op
            keeps the size).
        """
        return size

    def __repr__(self) -> str:
        return repr(self.transform)


class _SizedOp(GeoOp):
    """An op whose output is its own ``size`` (h, w), whatever the canvas before."""

    size: tuple[int, int]

    def fixed_size(self, size):
        return tuple(self.size)


class RandomResizedCropOp(_SizedOp):
    """RandomResizedCrop (v1 or v2): a box drawn as torchvision draws it,
    cropped and resampled to ``size``.

    Parameters
    ----------
    transform : Any
        The RandomResizedCrop (its ``scale`` and ``ratio`` are read per draw).
    size : (int, int)
        (h, w) of the output.
    pil_filter : int
        Pillow's filter id of the resample.
    v2 : bool
        Whether ``transform`` is a ``transforms.v2`` class.
    """

    def __init__(self, transform, size, pil_filter, v2: bool):
        super().__init__(transform)
        self.size = size
        self.filter = pil_filter
        self.v2 = v2
        self._log_ratio: Optional[tuple] = None  # (ratio, its float32 log), as torchvision

    def draw(self, canvas: tuple[int, int]) -> tuple[int, int, int, int]:
        """Draws the crop box with torchvision's torch RNG calls
        (:func:`sample_resized_crop`).

        Parameters
        ----------
        canvas : (int, int)
            (H, W) of the canvas the box is drawn in.

        Returns
        -------
        (int, int, int, int)
            The box (top, left, height, width).
        """
        t = self.transform
        ratio = tuple(t.ratio)
        cached = self._log_ratio
        if cached is None or cached[0] != ratio:
            cached = self._log_ratio = (ratio, log_ratio(ratio))
        return sample_resized_crop(canvas[0], canvas[1], t.scale, cached[1], ratio)

    def pick_filter(self) -> int:
        """The filter of this image's resample (drawn after the box, where a
        transform draws it at all)."""
        return self.filter

    def apply(self, geo: Geometry) -> None:
        """Crops ``geo`` to a drawn box and resamples the crop to ``size``
        (as :meth:`GeoOp.apply`).

        Raises
        ------
        Stop
            The canvas is zero-padded (the op runs unfused), or the resample
            cannot join the geometry (the crop has joined it; the resize runs
            unfused, as a :class:`PilResize`).
        """
        if geo.padded:
            raise Stop("random crop of a zero-padded canvas")
        top, left, height, width = self.draw(geo.canvas)
        flt = self.pick_filter()
        geo.do_crop(top, left, height, width)
        try:
            geo.do_resize(self.size[0], self.size[1], flt)
        except Stop as stop:
            raise Stop(stop.reason, steps=[PilResize(self.size, flt)]) from None


class ResizeOp(GeoOp):
    """Resize (v1 or v2): the canvas resampled to the size torchvision
    computes from ``size`` and ``max_size``.

    Parameters
    ----------
    transform : Any
        The Resize.
    size : list of int or None
        ``[s]`` (the shorter edge), ``[h, w]``, or None (v2, with
        ``max_size``).
    max_size : int or None
        The longest edge allowed, as torchvision's.
    pil_filter : int
        Pillow's filter id of the resample.
    """

    def __init__(self, transform, size, max_size, pil_filter):
        super().__init__(transform)
        self.size = size  # None, [s] or [h, w]
        self.max_size = max_size
        self.filter = pil_filter

    def apply(self, geo: Geometry) -> None:
        """Resamples ``geo``'s canvas to the size torchvision computes for it
        (as :meth:`GeoOp.apply`).

        Raises
        ------
        Stop
            torchvision would raise for this size or give an empty image, or
            the resample cannot join the geometry (see :meth:`Geometry.do_resize`).
        """
        h, w = geo.canvas
        try:
            new_h, new_w = resized_output_size(h, w, self.size, self.max_size)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            raise Stop(f"torchvision raises here: {exc}") from None
        if new_h <= 0 or new_w <= 0:
            raise Stop("empty output size")
        geo.do_resize(new_h, new_w, self.filter)

    def fixed_size(self, size):
        """``size`` when the transform gives both (h, w), else None: the output
        depends on the image's size (as :meth:`GeoOp.fixed_size`)."""
        if self.size is not None and len(self.size) == 2:
            return (int(self.size[0]), int(self.size[1]))
        return None


class CenterCropOp(_SizedOp):
    """CenterCrop: a window of ``size`` around the canvas centre, zero-padded
    where it is larger than the canvas (as torchvision's ``F.center_crop``).

    Parameters
    ----------
    transform : Any
        The CenterCrop (or timm's CenterCropOrPad with a zero fill).
    size : (int, int)
        (h, w) of the crop.
    """

    def __init__(self, transform, size):
        super().__init__(transform)
        self.size = size  # (h, w)

    def apply(self, geo: Geometry) -> None:
        """Crops ``geo``'s canvas to ``size`` around its centre (as
        :meth:`GeoOp.apply`).

        Raises
        ------
        Stop
            The crop size is empty.
        """
        crop_h, crop_w = self.size
        if crop_h <= 0 or crop_w <= 0:
            raise Stop("empty crop")
        image_h, image_w = geo.canvas
        # F.center_crop: pad (left/top get the floor half) where the crop is
        # larger, then crop at round((size - crop) / 2) (banker's rounding);
        # in a padded dimension the padded size equals the crop, offset -pad.
        top = (-((crop_h - image_h) // 2) if crop_h > image_h
               else int(round((image_h - crop_h) / 2.0)))
        left = (-((crop_w - image_w) // 2) if crop_w > image_w
                else int(round((image_w - crop_w) / 2.0)))
        # (in the coordinates of what torchvision sees, i.e. after any flip:
        # do_crop mirrors the window when the canvas is flipped)
        geo.do_crop(top, left, crop_h, crop_w)


def pad_canvas(geo: Geometry, pads, mode) -> None:
    """``pads`` ((left, top, right, bottom) each, in turn) added to ``geo``:
    zeros on the canvas (``mode`` None), or a :class:`~.render.PadStage`."""
    if mode is None and geo.pad is None:
        for sides in pads:
            geo.do_pad(*sides)
    elif pads:
        if geo.pad is not None:
            raise Stop("a pad after a padding_mode pad")
        mode[2](geo, mode, pads)  # (padding_mode, fill, render.PadStage.start)


class PadOp(GeoOp):
    """Pad (v1): a border of (left, top, right, bottom) ``sides``, each >= 0,
    on the canvas (``mode`` as :class:`RandomCropOp`'s)."""

    def __init__(self, transform, sides, mode=None):
        super().__init__(transform)
        self.sides = sides
        self.mode = mode  # (padding_mode, fill), or None: the canvas's own zeros

    def apply(self, geo: Geometry) -> None:
        """Adds the border (as :meth:`GeoOp.apply`)."""
        pad_canvas(geo, [self.sides], self.mode)

    def fixed_size(self, size):
        """``size`` with the border (as :meth:`GeoOp.fixed_size`)."""
        if size is None:
            return None
        left, top, right, bottom = self.sides
        return (size[0] + top + bottom, size[1] + left + right)


class RandomCropOp(_SizedOp):
    """RandomCrop (v1) with a zero constant fill: ``padding``, then
    ``pad_if_needed``'s padding, then a box of ``size`` drawn as
    ``RandomCrop.get_params`` draws it (the top, then the left offset).

    Parameters
    ----------
    transform : Any
        The RandomCrop.
    size : (int, int)
        (h, w) of the crop.
    sides : (int, int, int, int) or None
        ``padding`` as (left, top, right, bottom), or None.
    mode : (str, tuple, callable) or None
        (padding_mode, fill, ``PadStage.start``) of a :class:`~.render.PadStage`;
        None: a zero constant fill (the canvas's own zeros).
    """

    def __init__(self, transform, size, sides, mode=None):
        super().__init__(transform)
        self.size = size
        self.sides = sides
        self.mode = mode

    def apply(self, geo: Geometry) -> None:
        """Pads and crops ``geo``'s canvas (as :meth:`GeoOp.apply`); Stop when
        the padded canvas is smaller than ``size`` (torchvision raises)."""
        th, tw = self.size
        pads = [self.sides] if self.sides else []  # F.pad's calls, in torchvision's order
        height, width = geo.canvas
        for left, top, right, bottom in pads:
            height, width = height + top + bottom, width + left + right
        if self.transform.pad_if_needed and width < tw:
            pads.append((tw - width, 0, tw - width, 0))
            width += 2 * (tw - width)
        if self.transform.pad_if_needed and height < th:
            pads.append((0, th - height, 0, th - height))
            height += 2 * (th - height)
        if height < th or width < tw:
            raise Stop("torchvision raises here: the crop is larger than the image")
        pad_canvas(geo, pads, self.mode)
        i = crop_offset(height - th + 1) if (height, width) != (th, tw) else 0
        geo.do_crop(i, crop_offset(width - tw + 1) if (height, width) != (th, tw) else 0, th, tw)


class FlipOp(GeoOp):
    """RandomHorizontalFlip (v1 or v2): the canvas mirrored with probability
    ``p``, decided by the same ``torch.rand(1)`` draw as torchvision's.

    Parameters
    ----------
    transform : Any
        The RandomHorizontalFlip.
    p : float
        The probability of the mirror.
    """

    def __init__(self, transform, p):
        super().__init__(transform)
        self.p = p
        # a float32 tensor compares with a Python number in float32
        self.p32 = float(np.float32(p))

    def apply(self, geo: Geometry) -> None:
        """Draws ``torch.rand(1)`` as the transform does and mirrors ``geo``'s
        canvas when the draw is below ``p`` (:func:`.draws.flip_draw`; as
        :meth:`GeoOp.apply`)."""
        if flip_draw(self.p, self.p32):
            geo.do_flip()


class PilResize:
    """The resize half of a RandomResizedCrop, on a PIL image (what
    torchvision's resized_crop does after its crop)."""

    def __init__(self, size, pil_filter):
        self.size = (int(size[0]), int(size[1]))
        self.filter = pil_filter

    def __call__(self, img):
        """Resamples ``img`` to ``size`` with ``filter``.

        Parameters
        ----------
        img : PIL.Image.Image
            The cropped image.

        Returns
        -------
        PIL.Image.Image
            The resampled image; ``img`` itself when it has that size already.
        """
        if (img.height, img.width) == self.size:
            return img
        return img.resize((self.size[1], self.size[0]), self.filter)

    def __repr__(self) -> str:
        return f"PilResize(size={self.size}, filter={PIL_FILTER_NAMES.get(self.filter)})"


def draw_geometry(ops, height: int, width: int):
    """Walks ``ops`` over an image of (height, width): returns the Geometry,
    the index of the first op that did not join it (len(ops) when all did) and
    the replacement steps for that op (None: run it as it is)."""
    geo = Geometry.start(height, width)
    for index, op in enumerate(ops):
        try:
            op.apply(geo)
        except Stop as stop:
            return geo, index, stop.steps
    return geo, len(ops), None


def static_output_size(ops) -> Optional[tuple[int, int]]:
    """The canvas size every image ends with after ``ops``, when fixed."""
    size = None
    for op in ops:
        size = op.fixed_size(size)
    return size


def round_box(geo: Geometry) -> tuple[int, int, int, int]:
    """The integer box of the stored image nearest to the kept region."""
    top, left, height, width = geo.source_box()
    H, W = geo.image_size
    t, lf = int(math.floor(top + 0.5)), int(math.floor(left + 0.5))
    b, r = int(math.floor(top + height + 0.5)), int(math.floor(left + width + 0.5))
    t, lf = min(max(t, 0), H - 1), min(max(lf, 0), W - 1)
    b, r = min(max(b, t + 1), H), min(max(r, lf + 1), W)
    return (t, lf, b - t, r - lf)
