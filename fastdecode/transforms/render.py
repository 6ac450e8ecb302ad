"""The renderer: one image's :class:`~.geometry.Geometry` turned into pixels by the decoder.

The resampler is chosen per filter, explicitly (:mod:`.filters`): nearest,
bilinear and bicubic run in the native decoder (``decode_image(crop=...,
size=...)``, or ``_native.resize`` of a decoded crop for a sub-pixel box);
box, hamming and lanczos decode the crop natively and resample with Pillow,
exactly as torchvision would. With ``exact=True`` Pillow also runs every
two-pass bilinear / bicubic resample (its pass order is its own), so exact
results are torchvision's bit for bit. Formats other than JPEG and BMP are
cropped first and then resampled, in torchvision's order.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import PIL.Image

from fastdecode import _native, api
from fastdecode.transforms.filters import FILTERS
from fastdecode.transforms.geometry import Geometry, round_box

__all__ = ["DCT_MARGIN", "DCT_SCALES", "NATIVE_FORMATS", "REGION_MODES", "Renderer"]

# M of the M/8 DCT scales libjpeg-turbo runs with SIMD (the others are scalar
# and slower than a full decode), smallest first.
DCT_SCALES = (1, 2, 4)
REGION_MODES = ("box", "whole", "round")
DCT_MARGIN = 1.25


# Formats the native decoder resamples itself (crop first, then resample).
NATIVE_FORMATS = frozenset({"jpeg", "bmp"})


def _full(box, image_size) -> bool:
    return box == (0, 0) + tuple(image_size)


def _two_pass(geo: Geometry) -> bool:
    """The resample needs a horizontal and a vertical pass. Pillow 13 picks
    their order by its own cost rule, and the other order rounds differently
    (one level), so exact mode leaves those to Pillow itself."""
    assert geo.size is not None
    if not geo.region_is_full:
        return True  # a sub-pixel box: fractional in both directions
    return geo.crop[2] != geo.size[0] and geo.crop[3] != geo.size[1]


class Renderer:
    """Turns a Geometry into pixels: uint8 HWC or CHW, the canvas size.

    region_mode: how a region kept *after* a resample (Resize then CenterCrop)
      is decoded while decode_image takes only integer crops (``fuse``'s
      ``region=`` keyword):
      'box'    decode the integer crop that holds the region and its filter
               support, then resample the sub-pixel box (Pillow's
               ``resize(box=)``) with the native resampler: two native calls,
               exact (default);
      'whole'  resample the whole crop, then slice (exact; resamples more
               pixels than are kept);
      'round'  resample the nearest integer box straight to the kept size
               (one call, sub-pixel misalignment: ~24 dB worst case on photos).
    exact: scale=1 (no DCT-domain downscaling) and Pillow's own resample
      wherever the native one could differ (two-pass bilinear / bicubic):
      torchvision's pixels, bit for bit.
    dct_margin: otherwise a JPEG is decoded at the smallest M/8 in
      DCT_SCALES whose scaled crop is still >= dct_margin x the resample
      size. A DCT downscale is a sharper low-pass than Pillow's antialiased
      filters: with a margin of 1 (the decoder's own automatic choice) one of
      the 250 photos ends 31 dB from Pillow; 1.25 keeps every photo >= 43 dB
      and still lets large images (the ones where it pays) decode at 1/2-1/8.
    """

    def __init__(self, exact: bool = False, region_mode: str = "box",
                 dct_margin: float = DCT_MARGIN):
        if region_mode not in REGION_MODES:
            raise ValueError(f"region must be one of {REGION_MODES}, got {region_mode!r}")
        if not dct_margin >= 1:
            raise ValueError(f"dct_margin must be >= 1, got {dct_margin!r}")
        self.exact = exact
        self.region_mode = region_mode
        self.dct_margin = float(dct_margin)

    def scale_for(self, fmt: str, crop_hw, out_hw):
        """The decoder scale for resampling a crop of crop_hw to out_hw."""
        if fmt != "jpeg" or self.exact:
            return 1 if fmt == "jpeg" or not fmt else None  # None: no DCT scaling there
        for m in DCT_SCALES:
            if (crop_hw[0] * m >= self.dct_margin * 8 * out_hw[0]
                    and crop_hw[1] * m >= self.dct_margin * 8 * out_hw[1]):
                return m / 8
        return 1

    def render(self, data: Any, geo: Geometry, layout: str, out: Optional[np.ndarray] = None,
               fmt: str = "jpeg"):
        """The canvas of ``geo`` for ``data`` (format ``fmt``) in ``layout``
        ('HWC' or 'CHW'), into ``out`` when given."""
        H, W = geo.canvas
        ct, cl, ch, cw = geo.content
        shape = (3, H, W) if layout == "CHW" else (H, W, 3)
        if ch == 0 or cw == 0:
            if out is None:
                return np.zeros(shape, np.uint8)
            out[...] = 0
            return out
        if not geo.padded:
            return self._content(data, geo, layout, out, fmt)
        canvas = np.zeros(shape, np.uint8) if out is None else out
        if out is not None:
            canvas[...] = 0
        left = W - cl - cw if geo.flip else cl
        content = self._content(data, geo, layout, None, fmt)
        if layout == "CHW":
            canvas[:, ct:ct + ch, left:left + cw] = content
        else:
            canvas[ct:ct + ch, left:left + cw] = content
        return canvas

    def _decode(self, data, **kw):
        return api.decode_image(data, mode="RGB", **kw)

    def _content(self, data, geo: Geometry, layout: str, out, fmt: str):
        if geo.size is None:
            crop = None if _full(geo.region, geo.image_size) else geo.region
            return self._decode(data, crop=crop, flip=geo.flip, layout=layout, out=out)
        flt = FILTERS[geo.filter]
        if not flt.native or (self.exact and flt.name != "nearest" and _two_pass(geo)):
            return self._pillow(data, geo, layout, out)
        # nearest picks source pixels: any DCT pre-filter changes which
        scale = self.scale_for(fmt if flt.name != "nearest" else "", geo.crop[2:], geo.size)
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        if geo.region_is_full and fmt not in NATIVE_FORMATS:
            # torchvision's order: crop, then resample only the crop's pixels
            arr = self._decode(data, crop=crop)
            return _native.resize(arr, geo.size, interpolation=flt.name, flip=geo.flip,
                                  layout=layout, out=out)
        if geo.region_is_full and scale in (None, 1):
            return self._decode(data, crop=crop, size=geo.size, flip=geo.flip, layout=layout,
                                out=out, scale=scale, interpolation=flt.name)
        if geo.region_is_full:  # DCT-scaled: the crop's exact extent in the scaled frame
            return self._box(data, geo, layout, out, scale)
        kept = geo.region[2:]
        if self.region_mode == "round":
            return self._decode(data, crop=round_box(geo), size=kept, flip=geo.flip,
                                layout=layout, out=out, scale=scale, interpolation=flt.name)
        if self.region_mode == "box":
            return self._box(data, geo, layout, out, scale)
        whole = self._decode(data, crop=crop, size=geo.size, layout=layout, scale=scale,
                             interpolation=flt.name)
        return _slice(whole, geo.region, geo.flip, layout, out)

    def _box(self, data, geo: Geometry, layout: str, out, scale):
        """Pillow's resize(size, box=float box) of the stored image, from a
        decode of only the pixels it reads: the box widened by the filter
        support (taps are clipped at the image edges, never at ours)."""
        top, left, height, width = geo.source_box()
        out_h, out_w = geo.region[2:]
        H, W = geo.image_size
        flt = FILTERS[geo.filter]
        m = 8 if scale is None else int(round(scale * 8))
        # support in stored pixels: radius x max(1, decoded px per output px), at 8/m px each
        pad_y = (flt.radius * max(1.0, height * m / 8 / out_h) + 2) * 8 / m
        pad_x = (flt.radius * max(1.0, width * m / 8 / out_w) + 2) * 8 / m
        t0, l0 = max(0, math.floor(top - pad_y)), max(0, math.floor(left - pad_x))
        b0, r0 = min(H, math.ceil(top + height + pad_y)), min(W, math.ceil(left + width + pad_x))
        crop = (t0, l0, b0 - t0, r0 - l0)
        arr = self._decode(data, crop=None if _full(crop, geo.image_size) else crop, scale=scale)
        # the decoder's scaled frame starts the crop at floor(t0 * m / 8)
        oy, ox = (t0 * m) // 8, (l0 * m) // 8
        k = m / 8
        box = (left * k - ox, top * k - oy, (left + width) * k - ox, (top + height) * k - oy)
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(arr.shape[1]), box[2]),
               min(float(arr.shape[0]), box[3]))
        return _native.resize(arr, (out_h, out_w), interpolation=flt.name, box=box,
                              flip=geo.flip, layout=layout, out=out)

    def _pillow(self, data, geo: Geometry, layout: str, out):
        """Pillow resamples the natively decoded crop, exactly as torchvision
        would: the filters the native resampler lacks (box, hamming, lanczos)
        and, with ``exact``, every two-pass resample."""
        assert geo.size is not None
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        arr = self._decode(data, crop=crop, scale=1)
        im = PIL.Image.fromarray(arr, "RGB").resize((geo.size[1], geo.size[0]), geo.filter)
        return _slice(np.asarray(im), geo.region, geo.flip, "HWC", out, layout)


def _slice(arr, region, flip, layout, out, to_layout=None):
    """``region`` of ``arr`` (in ``layout``), mirrored when ``flip``, in
    ``to_layout``, into ``out`` when given."""
    to_layout = to_layout or layout
    top, left, h, w = region
    if layout == "CHW":
        part = arr[:, top:top + h, left:left + w]
        if flip:
            part = part[:, :, ::-1]
        if to_layout == "HWC":
            part = part.transpose(1, 2, 0)
    else:
        part = arr[top:top + h, left:left + w]
        if flip:
            part = part[:, ::-1]
        if to_layout == "CHW":
            part = part.transpose(2, 0, 1)
    if out is None:
        return np.ascontiguousarray(part)
    np.copyto(out, part)
    return out
