"""The renderer: one image's :class:`~.geometry.Geometry` turned into pixels by the decoder.

The resampler is chosen per filter (:mod:`.filters`): nearest, bilinear and
bicubic run in the native decoder, box, hamming and lanczos in Pillow on the
natively decoded crop; with ``exact=True`` Pillow also runs every two-pass
bilinear / bicubic resample, so exact results are torchvision's bit for bit.
Formats the C core does not decode (``fastdecode._formats``) are cropped
first and then resampled, in torchvision's order. See
docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import PIL.Image

from fastdecode import _formats, _native, api
from fastdecode._options import DEFAULTS as _D
from fastdecode.transforms.filters import FILTERS
from fastdecode.transforms.geometry import Geometry, round_box

__all__ = ["DCT_MARGIN", "REGION_MODES", "Renderer"]

REGION_MODES = ("box", "whole", "round")
DCT_MARGIN = 2.0  # see fuse's docstring: the measured bound


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
    max_pixels, max_work_per_byte: the decode limits of every decode the
      renderer runs (what they mean for ``decode_image``).
    dct_margin: otherwise a JPEG is decoded at the DCT scale the C planner
      picks automatically (``_native.plan_shape``: the smallest SIMD M/8
      whose scaled crop still covers the size asked) for dct_margin x the
      resample size. A DCT downscale is a sharper low-pass than Pillow's
      antialiased filters, so the margin bounds how far the result strays
      (see ``fuse``'s docstring for the measured bound).
    """

    def __init__(self, exact: bool = False, region_mode: str = "box",
                 dct_margin: float = DCT_MARGIN, max_pixels: Optional[int] = _D["max_pixels"],
                 max_work_per_byte: Optional[int] = _D["max_work_per_byte"]):
        self.limits = api.check_limits(max_pixels, max_work_per_byte)
        if region_mode not in REGION_MODES:
            raise ValueError(f"region must be one of {REGION_MODES}, got {region_mode!r}")
        if not dct_margin >= 1:
            raise ValueError(f"dct_margin must be >= 1, got {dct_margin!r}")
        self.exact = exact
        self.region_mode = region_mode
        self.dct_margin = float(dct_margin)

    def scale_for(self, fmt: str, geo: Geometry):
        """The decoder scale for resampling ``geo.crop`` to ``geo.size``."""
        scales = _formats.dct_scaling(fmt)
        if not scales or self.exact:
            return 1 if scales or not fmt else None  # None: no DCT scaling there
        assert geo.size is not None
        want = (math.ceil(self.dct_margin * geo.size[0]), math.ceil(self.dct_margin * geo.size[1]))
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        scale_num = _native.plan_shape(*geo.image_size, crop=crop, size=want).scale_num
        return 1 if scale_num == 8 else scale_num / 8

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

    def _decode(self, data, fmt: str, **kw):
        """decode_image(data, mode='RGB', **kw) under the renderer's limits,
        for data of format ``fmt`` (the header said so): no second sniff."""
        kw.update(self.limits)
        kw["mode"] = "RGB"
        return api.decode_format(data, fmt, kw)  # type: ignore[arg-type]

    def _content(self, data, geo: Geometry, layout: str, out, fmt: str):
        if geo.size is None:
            crop = None if _full(geo.region, geo.image_size) else geo.region
            return self._decode(data, fmt, crop=crop, flip=geo.flip, layout=layout, out=out)
        flt = FILTERS[geo.filter]
        if not flt.native or (self.exact and flt.name != "nearest" and _two_pass(geo)):
            return self._pillow(data, geo, layout, out, fmt)
        # nearest picks source pixels: any DCT pre-filter changes which
        scale = self.scale_for(fmt if flt.name != "nearest" else "", geo)
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        if geo.region_is_full and scale in (None, 1):
            return self._resample(data, crop, geo.size, flt.name, geo.flip, layout, out, fmt)
        if geo.region_is_full:  # DCT-scaled: the crop's exact extent in the scaled frame
            return self._box(data, geo, layout, out, scale, fmt)
        kept = geo.region[2:]
        if self.region_mode == "round":
            return self._decode(data, fmt, crop=round_box(geo), size=kept, flip=geo.flip,
                                layout=layout, out=out, scale=scale, interpolation=flt.name)
        if self.region_mode == "box" and flt.name != "nearest":
            return self._box(data, geo, layout, out, scale, fmt)
        # nearest picks one source pixel per output pixel: a sub-pixel box
        # rounds differently from slicing the whole resample (up to 248
        # levels on 14 % of photos), so it resamples the whole crop.
        if scale not in (None, 1):
            return self._box(data, geo, layout, out, scale, fmt)  # 'whole' of a DCT-scaled crop
        whole = self._resample(data, crop, geo.size, flt.name, False, layout, None, fmt)
        return _slice(whole, geo.region, geo.flip, layout, out)

    def _resample(self, data, crop, size, interpolation: str, flip: bool, layout: str, out,
                  fmt: str):
        """``crop`` of the full-resolution image resampled to ``size``: in one
        decode call where the decoder resamples (the native formats), else
        decoded, cropped, then resampled (torchvision's order: only the crop's
        pixels are read)."""
        row = _formats.native(fmt)
        if row is not None:
            return self._decode(data, fmt, crop=crop, size=size, flip=flip, layout=layout, out=out,
                                scale=1 if row.dct_scaling else None, interpolation=interpolation)
        arr = self._decode(data, fmt, crop=crop)
        return _native.resize(arr, size, interpolation=interpolation, flip=flip, layout=layout,
                              out=out)

    def _box(self, data, geo: Geometry, layout: str, out, scale, fmt: str):
        """Pillow's resize(size, box=float box) of ``geo.crop`` (the pixels
        the resample reads), from a decode of only the part it reads: the box
        widened by the filter support, clipped at the crop's edges, where
        torchvision's taps are clipped too (never at ours)."""
        top, left, height, width = geo.source_box()
        out_h, out_w = geo.region[2:]
        H, W = geo.image_size
        ct, cl, ch, cw = geo.crop
        flt = FILTERS[geo.filter]
        m = 8 if scale is None else int(round(scale * 8))
        # support in stored pixels: radius x max(1, decoded px per output px), at 8/m px each
        pad_y = (flt.radius * max(1.0, height * m / 8 / out_h) + 2) * 8 / m
        pad_x = (flt.radius * max(1.0, width * m / 8 / out_w) + 2) * 8 / m
        t0, l0 = max(ct, math.floor(top - pad_y)), max(cl, math.floor(left - pad_x))
        b0 = min(ct + ch, math.ceil(top + height + pad_y))
        r0 = min(cl + cw, math.ceil(left + width + pad_x))
        crop = (t0, l0, b0 - t0, r0 - l0)
        crop_arg = None if _full(crop, geo.image_size) else crop
        arr = self._decode(data, fmt, crop=crop_arg, scale=scale)
        # where the decoder's scaled frame puts that crop (the C planner's own arithmetic)
        oy, ox = _native.plan_shape(H, W, crop=crop_arg, scale=m / 8).region[:2]
        k = m / 8
        box = (left * k - ox, top * k - oy, (left + width) * k - ox, (top + height) * k - oy)
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(arr.shape[1]), box[2]),
               min(float(arr.shape[0]), box[3]))
        return _native.resize(arr, (out_h, out_w), interpolation=flt.name, box=box,
                              flip=geo.flip, layout=layout, out=out)

    def _pillow(self, data, geo: Geometry, layout: str, out, fmt: str):
        """Pillow resamples the natively decoded crop, exactly as torchvision
        would: the filters the native resampler lacks (box, hamming, lanczos)
        and, with ``exact``, every two-pass resample."""
        assert geo.size is not None
        crop = None if _full(geo.crop, geo.image_size) else geo.crop
        arr = self._decode(data, fmt, crop=crop, scale=1)
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
