"""The renderer: one image's :class:`~.geometry.Geometry` turned into pixels by the decoder.

The resampler is chosen per filter (:mod:`.filters`): nearest, bilinear and
bicubic run in the native decoder, box, hamming and lanczos in Pillow on the
natively decoded crop; with ``exact=True`` Pillow also runs every two-pass
bilinear / bicubic resample, so exact results are torchvision's bit for bit.
Formats the C core does not decode (``fastdecode._formats``) are cropped
first and then resampled, in torchvision's order.

Decoded images are sources too (:func:`as_source`): a uint8 array, tensor
or L / RGB PIL image is read as the HWC pixels ``PIL.Image.fromarray`` would
hold (format :data:`ARRAY`, one or three channels), sliced instead of
decoded and resampled by the same native resampler; a gray image keeps one
channel, as torchvision keeps an L image (:func:`decoded_plan`). See
docs/decisions/fused-transforms.md ("Decoded arrays as inputs").
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any, NamedTuple, Optional, cast

import numpy as np
import PIL.Image

from fastdecode import _formats, _native, api
from fastdecode._options import DEFAULTS as _D
from fastdecode.transforms.filters import FILTERS
from fastdecode.transforms.geometry import Geometry, Stop, round_box

__all__ = ["ARRAY", "ArrayHeader", "DCT_MARGIN", "PadStage", "REGION_MODES", "Renderer",
           "as_source", "decoded_plan", "read_header", "to_pil"]

ARRAY = "array"  # the header format of a decoded image (array, tensor, PIL image)

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
        if geo.pad is not None:
            return geo.pad.render(self, data, geo, layout, out, fmt)
        H, W = geo.canvas
        ct, cl, ch, cw = geo.content
        c = data.shape[2] if fmt == ARRAY else 3
        shape = (c, H, W) if layout == "CHW" else (H, W, c)
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
        if fmt == ARRAY:
            return _slice_array(data, **kw)
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
        im = to_pil(arr).resize((geo.size[1], geo.size[0]), geo.filter)
        return _slice(_hwc(np.asarray(im)), geo.region, geo.flip, "HWC", out, layout)


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
        part = np.ascontiguousarray(part)
        return part if part.flags.writeable else part.copy()  # (a PIL image's own pixels)
    np.copyto(out, part)
    return out


# -- decoded images as sources -------------------------------------------------------


class ArrayHeader(NamedTuple):
    """The header of a decoded source (what :func:`read_header` gives for it)."""

    format: str
    width: int
    height: int
    channels: int


_EXPECTED = ("encoded image bytes (bytes-like, or a 1-D uint8 array or tensor), a uint8 image "
             "array (H, W) / (H, W, C), a uint8 tensor (C, H, W) / (H, W, C) / (H, W) or a PIL "
             "image")


def _hwc(arr: np.ndarray) -> np.ndarray:
    return arr[:, :, None] if arr.ndim == 2 else arr


def as_source(data: Any) -> Any:
    """What a fused transform reads ``data`` as.

    Encoded bytes stay as they are (a 1-D uint8 tensor as its numpy view);
    a decoded image becomes the uint8 (H, W, C) array of its pixels, C = 1
    or 3, as ``PIL.Image.fromarray`` would read it: numpy arrays are (H, W)
    or (H, W, C), tensors (C, H, W) (torch's order; C = 1 or 3 first) or
    (H, W, C) or (H, W); an L or RGB PIL image its pixels. A PIL image of
    another mode, or a 4-channel array (RGBA), is returned as a PIL image
    (the chain runs on it unfused). TypeError for another dtype or type,
    ValueError for another shape, each naming what is expected.
    """
    if isinstance(data, PIL.Image.Image):
        return _hwc(np.asarray(data)) if data.mode in ("L", "RGB") else data
    if type(data).__module__.split(".")[0] == "torch":  # torch is imported only for tensors
        return _tensor_source(data)
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"a fused transform takes {_EXPECTED}; got a {data.dtype} array")
        return data if data.ndim == 1 else _image_array(data, "array")
    if isinstance(data, str):
        raise TypeError(f"a fused transform takes {_EXPECTED}; got a str (a path? read the "
                        "file's bytes first)")
    return data  # bytes-like (the decoder says what else it takes)


def _tensor_source(data: Any) -> Any:
    import torch

    if not isinstance(data, torch.Tensor):
        return data
    if data.dtype != torch.uint8:
        raise TypeError(f"a fused transform takes {_EXPECTED}; got a {data.dtype} tensor")
    if data.device.type != "cpu":
        raise ValueError(f"a fused transform takes CPU tensors, got one on {data.device}")
    tensor = data.as_subclass(torch.Tensor)
    if tensor.dim() == 1:
        return tensor.contiguous().numpy()
    if tensor.dim() == 3 and tensor.shape[0] in (1, 3, 4):
        tensor = tensor.permute(1, 2, 0)
    return _image_array(tensor.numpy(), "tensor")


def _image_array(arr: np.ndarray, what: str) -> Any:
    if arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (1, 3)):
        return _hwc(arr)
    if arr.ndim == 3 and arr.shape[2] == 4:
        return PIL.Image.fromarray(np.ascontiguousarray(arr))  # RGBA: unfused
    raise ValueError(f"a fused transform takes {_EXPECTED}; got a uint8 {what} of shape "
                     f"{tuple(arr.shape)}")


def read_header(data: Any) -> Any:
    """The header of a source: :class:`ArrayHeader` for decoded pixels,
    :func:`fastdecode.read_header`'s ImageInfo for encoded bytes."""
    if isinstance(data, np.ndarray) and data.ndim == 3:
        return ArrayHeader(ARRAY, data.shape[1], data.shape[0], data.shape[2])
    return api.read_header(data)


def to_pil(data: Any) -> PIL.Image.Image:
    """The PIL image of (H, W, 1 or 3) uint8 pixels (a PIL image as it is)."""
    if isinstance(data, PIL.Image.Image):
        return data
    return PIL.Image.fromarray(np.ascontiguousarray(data[:, :, 0] if data.shape[2] == 1 else data))


def _slice_array(arr: np.ndarray, crop=None, size=None, interpolation="bilinear", flip=False,
                 layout="HWC", out=None, scale=None, **_unused: Any):
    """decode_image's options on decoded pixels: the crop sliced, resampled
    by the native resampler when ``size`` is given, mirrored, in ``layout``."""
    if scale not in (None, 1):  # pragma: no cover - the renderer never scales an array
        raise ValueError("decoded pixels have no DCT scale")
    part = arr if crop is None else arr[crop[0]:crop[0] + crop[2], crop[1]:crop[1] + crop[3]]
    if size is not None:
        return _native.resize(part, size, interpolation=interpolation, flip=flip, layout=layout,
                              out=out)
    result = _slice(part, (0, 0) + part.shape[:2], flip, "HWC", out, layout)
    return result.copy() if out is None and np.may_share_memory(result, arr) else result


def decoded_plan(plan: Any, data: Any) -> Any:
    """The plan that runs on ``data`` (what :func:`as_source` gave): ``plan``
    for encoded bytes and RGB pixels; for gray pixels a copy whose tensor
    step has one channel and whose results have one (MNIST + ToTensor gives
    (1, H, W), as torchvision does); None when the chain runs unfused on the
    PIL image (a PIL mode or array the fused path does not read, a gray
    image with colour, erasing or tensor-stage steps, or a tensor step that
    fails on one channel, as it would in torchvision): warned once per plan."""
    if isinstance(data, PIL.Image.Image):
        return _unfused(plan, f"a {data.mode} image runs the chain unfused (the fused path "
                              "reads L and RGB pixels)")
    if not (isinstance(data, np.ndarray) and data.ndim == 3) or data.shape[2] == 3:
        return plan
    gray = plan.__dict__.get("_gray")
    if gray is None:
        gray = copy.copy(plan)
        gray.__dict__.pop("_gray", None)
        gray.output_shape = None if plan.output_shape is None else (1, *plan.output_shape[1:])
        gray.fused_gray = not (plan.color_ops or plan.erasing or plan.tensor_stage)
        if gray.fused_gray and plan.tail is not None:
            try:  # the plan's TensorTail class, over an L ramp
                gray.tail = type(plan.tail)(list(plan.tail.steps), channels=1)
            except Exception:  # noqa: BLE001 - it fails in torchvision too: let it say so
                gray.fused_gray = False
        plan.__dict__["_gray"] = gray
    if not gray.fused_gray:
        return _unfused(plan, "a gray image with colour, erasing or tensor-stage steps, or a "
                              "tensor step that fails on one channel, runs the chain unfused")
    return gray


def _unfused(plan: Any, reason: str) -> None:
    warned = plan.__dict__.setdefault("_warned_inputs", set())
    if reason not in warned:
        warned.add(reason)
        warnings.warn(f"fastdecode: {reason}", RuntimeWarning, stacklevel=4)
    return None


# -- padding modes -------------------------------------------------------------------


class PadStage:
    """A RandomCrop / Pad with a padding_mode (edge, reflect, symmetric) or a
    non-zero constant fill, and the crops after it.

    Its pixels come from the image, not from a zero canvas, so the geometry
    before it (``before``) is rendered whole, as the image torchvision pads;
    then each of ``pads`` is applied in turn, as ``F.pad`` pads a PIL image
    (``np.pad`` for the modes, the fill for 'constant'), and ``window`` is
    kept, mirrored by the outer Geometry's ``flip``. A resample or another
    pad after it stops the geometry (:class:`~.geometry.Stop`).
    """

    def __init__(self, before: Geometry, mode: str, fill: Any, pads: list) -> None:
        self.before = before
        self.mode = mode
        self.fill = fill
        self.pads = list(pads)
        self.window = (0, 0) + before.canvas

    @classmethod
    def start(cls, geo: Geometry, mode: tuple, pads: list) -> None:
        """Turns ``geo`` into the padded image's geometry: its canvas the
        padded size, not mirrored (``before`` holds the mirror so far)."""
        stage = cls(copy.copy(geo), mode[0], mode[1], pads)
        height, width = geo.canvas
        for left, top, right, bottom in pads:
            height, width = height + top + bottom, width + left + right
        stage.window = (0, 0, height, width)
        geo.pad, geo.flip = stage, False
        geo.canvas, geo.content = (height, width), (0, 0, height, width)

    def crop(self, geo: Geometry, top: int, left: int, height: int, width: int) -> None:
        """``Geometry.do_crop`` of the padded image (inside it; Stop otherwise)."""
        canvas_h, canvas_w = geo.canvas
        if geo.flip:
            left = canvas_w - left - width
        if top < 0 or left < 0 or top + height > canvas_h or left + width > canvas_w:
            raise Stop("a crop past a padded image's edge")
        self.window = (self.window[0] + top, self.window[1] + left, height, width)
        geo.canvas, geo.content = (height, width), (0, 0, height, width)

    def render(self, renderer: Renderer, data: Any, geo: Geometry, layout: str, out: Any,
               fmt: str) -> Any:
        """The kept window of the padded image, in ``layout`` (into ``out``)."""
        image = renderer.render(data, self.before, "HWC", fmt=fmt)
        for left, top, right, bottom in self.pads:
            widths = ((top, bottom), (left, right), (0, 0))
            if self.mode != "constant":
                image = np.pad(image, widths, mode=cast(Any, self.mode))
                continue
            padded = np.empty((image.shape[0] + top + bottom, image.shape[1] + left + right,
                               image.shape[2]), np.uint8)
            padded[...] = np.asarray(self.fill, np.uint8)[:image.shape[2]]
            padded[top:top + image.shape[0], left:left + image.shape[1]] = image
            image = padded
        return _slice(image, self.window, geo.flip, "HWC", out, layout)
