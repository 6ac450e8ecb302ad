"""FusedTransform: a chain split into geometry, colour, tensor table and trailing steps, run on bytes.

:func:`.split.split_chain` cuts the flat list of steps, in order and never
reordered, into the parts that fuse and the trailing rest, which runs
unfused on the type torchvision would have given it. Each image is drawn,
rendered and completed in three private steps, which FastLoader(threads=N)
runs in different threads; when an image's geometry stops at an op (a second
resample, a padded canvas...), one stop-and-replay routine
(:meth:`FusedTransform._unfused`) runs the rest unfused, for ``__call__`` and
``decode_into`` alike. See docs/decisions/fused-transforms.md.
"""

# Over ~400 lines on purpose: one image's three parts (draw, render, complete) and
# the batch protocol built on them share the plan's state; split, they would be one
# class across two modules.

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors

from fastdecode._options import DEFAULTS as _D
from fastdecode.transforms.color import Steps
from fastdecode.transforms.color import apply as apply_color
from fastdecode.transforms.color import draw as draw_color
from fastdecode.transforms.fingerprint import fingerprint
from fastdecode.transforms.geometry import Geometry, draw_geometry, static_output_size
from fastdecode.transforms.kinds import flatten, joint
from fastdecode.transforms.render import (
    DCT_MARGIN,
    Renderer,
    as_source,
    decoded_plan,
    read_header,
    to_pil,
)
from fastdecode.transforms.split import MultiCrop, split_chain
from fastdecode.transforms.tensor import ErasedSlots, Erases, TensorTail, as_numpy, draw_erases, erase

__all__ = ["FusedTransform", "fuse"]


class _Draw(NamedTuple):
    """One image's drawn geometry and where it stopped."""

    geo: Geometry
    stop: int  # index of the first op that did not join; len(geo_ops) when all did
    replacement: Optional[list]  # what runs instead of that op (None: the op itself)
    fmt: str
    rng: Optional[torch.Tensor]  # RNG state before the draws, for a tensor-stage replay
    color: Steps = ()  # the colour steps drawn (none when the geometry stopped)
    erase: Erases = ()  # the boxes erased in the result (idem)


class FusedTransform:
    """A transform chain fused into the decoder: ``f(data)`` on encoded bytes.

    ``f(data)`` equals ``transform(Image.open(data).convert('RGB'))``,
    decoded and transformed in as few passes as the chain allows. Build it
    with :func:`fastdecode.transforms.fuse` (the same parameters). Picklable
    (re-fused from the source transform on unpickling), so it works in
    DataLoader workers.

    The batch protocol (what datasets and loaders use; stable): when
    :attr:`output_shape` is not None, :meth:`decode_into` fills a uint8
    (C, H, W) slot, :attr:`tensor_table` is the per-channel table that
    :meth:`finish` applies (None when ``finish`` returns the uint8 pixels
    themselves) and :attr:`result_dtype` is the dtype ``finish`` returns.

    Parameters
    ----------
    transform : callable or list, optional
        The chain, as for :func:`fastdecode.transforms.fuse`.
    exact : bool, default False
        Bit-identical to torchvision (full-resolution decode).
    region : {'box', 'whole', 'round'}, default 'box'
        How a region kept after a resample is resampled.
    dct_margin : float, default 2.0
        How much larger than the output a reduced-scale JPEG decode stays.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        The limit of every decode, as for :func:`fastdecode.decode_image`.
    max_work_per_byte : int or None, default 2048
        The work limit of every decode, as for :func:`fastdecode.decode_image`.

    Attributes
    ----------
    plan : dict
        ``{'geometric': [...], 'color': [...], 'tensor': [...],
        'trailing': [...]}``: the source transforms in each part (see the
        module docstring); ``repr`` prints it.
    output_shape : (int, int, int) or None
        (C, H, W) of every result when it is fixed and the whole chain is
        geometric, colour and tensor steps (then :meth:`decode_into` and
        :meth:`finish` work, and the datasets take the batch path);
        otherwise None.
    last_params : Geometry or None
        The :class:`~fastdecode.transforms.Geometry` of the last image
        (for debugging; not thread-safe).
    steps : list
        The flattened chain.

    Raises
    ------
    TypeError, ValueError
        As :func:`fastdecode.transforms.fuse` raises them.
    """

    def __init__(self, transform: Any, *, exact: bool = False, region: str = "box",
                 dct_margin: float = DCT_MARGIN, max_pixels: Optional[int] = _D["max_pixels"],
                 max_work_per_byte: Optional[int] = _D["max_work_per_byte"]):
        self.source = transform
        self._fingerprint = fingerprint(transform)
        self.exact = exact
        self.renderer = Renderer(exact=exact, region_mode=region, dct_margin=dct_margin,
                                 max_pixels=max_pixels, max_work_per_byte=max_work_per_byte)
        steps = flatten(transform)
        for step in steps:
            if not callable(step):
                raise TypeError(f"fuse: {step!r} in the chain is not callable")
        self.steps = steps
        split = split_chain(steps, exact)
        self.geo_ops = list(split.geo_ops)
        self.op_index = list(split.op_index)
        self.color_ops = list(split.color_ops)
        # a stop's unfused replay of the uint8 part runs steps[:fill_end]
        self.fill_end = (split.color_index[-1] + 1 if split.color_ops
                         else split.op_index[-1] + 1 if split.op_index else 0)
        self.tail: Optional[TensorTail] = split.tail
        self.tensor_stage = split.tensor_stage
        self.erasing = list(split.erasing)  # drawn in _draw; finish erases each slot's boxes
        self._erased = ErasedSlots()
        self.trailing = steps[split.end:]
        self.crops = split.crops  # a FiveCrop / TenCrop: a tuple of crops, no fixed shape
        fixed = static_output_size(self.geo_ops) if self.geo_ops else None
        self.output_shape = (
            (3, fixed[0], fixed[1]) if fixed is not None and self.tail is not None
            and not self.tail.numpy and not self.trailing and not self.crops else None
        )
        self.plan = {
            "geometric": [op.transform for op in self.geo_ops]  # (after the converter: on tensors)
            + ([self.crops.transform] if self.crops else []),
            "color": [op.transform for op in self.color_ops],
            "tensor": [s for s in steps[:split.end] if any(s is t for t in (
                *(self.tail.steps if self.tail else ()), *(op.transform for op in self.erasing)))],
            "trailing": list(self.trailing),
        }
        self.last_params: Optional[Geometry] = None

    # -- the batch protocol ----------------------------------------------------------

    @property
    def tensor_table(self) -> Optional[np.ndarray]:
        """The (C, 256) table of the tensor step: ``finish(pixels)[..., c, y, x]
        == table[c, pixels[..., c, y, x]]``; np.float32 for the ToTensor /
        Normalize / ToDtype(float32) chains (the array of the result dtype in
        general), before ``finish`` erases the boxes of a fused RandomErasing
        (:attr:`erasing` not empty: a loader deferring the table must not
        take that chain). None when that step is the identity (``finish`` returns the
        uint8 values as they are) or the chain has no fused tensor step.
        Read-only; do not modify."""
        if self.tail is None or self.tail.identity:
            return None
        return self.tail.table

    @property
    def result_dtype(self) -> Optional[torch.dtype]:
        """The torch dtype of what :meth:`finish` returns (torch.uint8 for a
        PILToTensor / ToImage tail, torch.float32 for ToTensor + Normalize...);
        None when the chain has no fused tensor step (``finish`` raises)."""
        return None if self.tail is None else self.tail.dtype

    # -- following the source transform ------------------------------------------

    def is_current(self) -> bool:
        """Whether the source transform still has the parameters this plan was built from.

        Cheap enough to ask per item (about 1.5 % of a fused 224x224 train
        call).

        Returns
        -------
        bool
            False after any change fuse would plan differently for (an
            attribute set, e.g. ``rrc.size = 160``; ``Compose.transforms``
            edited or reassigned; a wrapper's inner transform replaced; a
            tensor parameter edited in place).
        """
        return fingerprint(self.source) == self._fingerprint

    def refreshed(self) -> FusedTransform:
        """This plan, or a new one when the source transform changed.

        ``f = f.refreshed()`` per item follows a live transform (progressive
        resizing, an appended step) at once.

        Returns
        -------
        FusedTransform
            ``self`` when :meth:`is_current`, else a new fuse of the source
            with the same options (exact, region, dct_margin, limits).
        """
        if self.is_current():
            return self
        r = self.renderer
        return FusedTransform(self.source, exact=self.exact, region=r.region_mode,
                              dct_margin=r.dct_margin, **r.limits)

    # -- saying what happened -----------------------------------------------------

    def fusion_report(self):
        """What stopped fusion or cost the batch path, for warnings.

        Returns
        -------
        FusionReport or None
            None when the chain's leading geometric run (and the colour
            steps after it) fused and the unfused rest costs no batch path
            (nor, after a FiveCrop/TenCrop, the fused tensor pass);
            otherwise a :class:`~fastdecode.transforms.report.FusionReport`
            naming the first step that stopped fusion or cost the batch path,
            why, and what it costs (``.step``, ``.index``, ``.reason``,
            ``.fused``, ``.cost``, ``.loses_batch_path``; ``str()`` says it
            in one line). The datasets warn once with it.
        """
        from fastdecode.transforms.report import fusion_report

        return fusion_report(self)

    def explain(self) -> str:
        """The plan in words: how each step runs, and why.

        Returns
        -------
        str
            One entry per step of the chain (fused into the decode, fused
            into the tensor pass, or run unfused in torchvision, with the
            reason), a line saying whether batches take the batch path (and
            what stops it), and a summary with the :meth:`fusion_report`.
        """
        from fastdecode.transforms.report import explain

        return explain(self)

    # -- pickling: rebuild from the source ----------------------------------------

    def __reduce__(self):
        r = self.renderer
        return (_rebuild, (self.source, self.exact, r.region_mode, r.dct_margin, r.limits))

    # -- calls -----------------------------------------------------------------------

    def __call__(self, data: Any, *target: Any):
        """The chain's result for encoded image bytes (any bytes-like, or a 1-D
        uint8 tensor) or a decoded image (uint8 array or tensor, PIL image:
        the chain's result on its PIL image; :func:`.render.as_source`);
        ``f(data, target)`` / ``f((data, target))``: a v2 joint chain's (:func:`.kinds.joint`)."""
        if target or (isinstance(data, tuple) and len(data) == 2):
            return joint(self)(data, *target)
        data = as_source(data)
        plan = decoded_plan(self, data)  # self, a gray plan, or None: unfused
        if plan is None:
            return self._run(self.steps, to_pil(data))
        draw = plan._draw(data)
        return plan._complete(draw, plan._render_into(data, draw))

    def decode_into(self, data: Any, out: Any) -> Geometry:
        """Decodes ``data`` into a batch slot: the chain's uint8 pixels before the tensor step.

        For batch loaders: the random parameters are drawn exactly as
        ``f(data)`` draws them; ``finish(batch)`` then turns the uint8 batch
        into what ``f`` returns per image, stacked.

        Parameters
        ----------
        data : bytes-like or torch.Tensor
            The encoded image (any bytes-like, or a 1-D uint8 tensor).
        out : torch.Tensor or numpy.ndarray
            A writable C-contiguous uint8 tensor or array of shape
            :attr:`output_shape` (e.g. ``batch[i]`` of a preallocated
            (N, C, H, W) uint8 batch).

        Returns
        -------
        Geometry
            The :class:`~fastdecode.transforms.Geometry` drawn for the image.

        Raises
        ------
        TypeError
            :attr:`output_shape` is None (the chain has no batch path), or
            ``out`` is not an array or a CPU tensor.
        ValueError
            ``out`` has another dtype or shape, or is not writable and
            C-contiguous.
        DecodeError
            The data cannot be decoded (the subclasses as for
            :func:`fastdecode.decode_image`).
        """
        if self.output_shape is None:
            raise TypeError(
                "decode_into needs a chain with a fixed output shape made only of geometric "
                f"and tensor steps (output_shape is None); plan: {self.plan}"
            )
        data, target, draw, rendered = self._drawn_into(data, out)
        if not rendered:
            self._render_into(data, draw, target)
        return draw.geo

    def finish(self, images: Any, out: Any = None):
        """The deferred tensor step: :meth:`decode_into`'s uint8 pixels to what ``f`` returns.

        Parameters
        ----------
        images : torch.Tensor or numpy.ndarray
            uint8 (3, H, W) or (N, 3, H, W) pixels from :meth:`decode_into`.
        out : torch.Tensor or numpy.ndarray, optional
            Where to write the result: of the result dtype
            (:attr:`result_dtype`) and the same shape.

        Returns
        -------
        torch.Tensor
            What ``f(data)`` returns (stacked along N), e.g. float32
            normalized, made in one pass (into ``out`` when given). ``images``
            itself when the tensor step is a plain PILToTensor.

        Raises
        ------
        TypeError
            The chain has no batch path (:attr:`output_shape` is None).
        ValueError
            ``images`` is not uint8 (3, H, W) or (N, 3, H, W), or ``out``
            does not fit.
        """
        if self.output_shape is None or self.tail is None:
            raise TypeError("finish needs a chain whose output_shape is not None")
        arr = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
        if arr.dtype != np.uint8 or arr.ndim not in (3, 4) or arr.shape[-3] != self.output_shape[0]:
            raise ValueError(
                f"finish takes uint8 (C, H, W) or (N, C, H, W) of C={self.output_shape[0]}, "
                f"got {arr.dtype} {arr.shape}"
            )
        if self.tail.identity and out is None and isinstance(images, torch.Tensor):
            tensor = images.as_subclass(torch.Tensor)
            result = tensor.as_subclass(tv_tensors.Image) if self.tail.wrap else tensor
        else:
            result = self.tail.apply(np.ascontiguousarray(arr), out)
        if self.erasing:  # in place, in each row: the boxes drawn for its slot
            self._erased.apply(arr, result)
        return result

    # -- internals -----------------------------------------------------------------
    #
    # One image runs in three parts, so that a loader can run the part that
    # draws nothing in any thread (FastLoader(threads=N), see
    # fastdecode.datasets._planned): _draw (header + the random parameters, from
    # the global RNGs), _render_into (the native decode and resample, the
    # tensor table: no RNG), then _complete / _unfused (the steps that did not
    # fuse, which may draw). __call__ and decode_into are these parts in a row.

    def _draw(self, data) -> _Draw:
        """Reads the header and draws this image's geometry (consuming the RNG
        as torchvision would)."""
        info = read_header(data)
        rng = torch.get_rng_state() if self.tensor_stage else None
        geo, stop, replacement = draw_geometry(self.geo_ops, info.height, info.width)
        self.last_params = geo
        if stop < len(self.geo_ops) and self.geo_ops[stop].stage != "tensor":
            rng = None  # a PIL-stage stop: the rest runs unfused from there
        color: Steps = ()
        erases: Erases = ()
        if stop == len(self.geo_ops):  # a stop: they run unfused
            color = draw_color(self.color_ops, geo.canvas) if self.color_ops else ()
            erases = self._draw_erases(geo.canvas)
        return _Draw(geo, stop, replacement, info.format, rng, color, erases)

    def _drawn_into(self, data, out) -> tuple[Any, np.ndarray, _Draw, bool]:
        """:meth:`decode_into`'s first part: ``out`` checked, the header read
        and the parameters drawn. A stopped image (its unfused rest draws)
        is rendered and filled at once (True last); any other is left for
        ``_render_into(data, draw, target)``, which draws nothing, so a batch
        may draw its images ahead of their renders in the same RNG order."""
        target = as_numpy(out, np.uint8, self.output_shape)
        data = as_source(data)
        draw = self._draw(data)
        if draw.stop < len(self.geo_ops):
            self._fill_unfused(draw, self._render_into(data, draw, target), target)
            return data, target, draw, True
        return data, target, draw, False

    def _draw_erases(self, canvas: tuple[int, int]) -> Erases:
        """The fused RandomErasing steps' boxes for a result of ``canvas``."""
        if not self.erasing or self.tail is None:  # (erasing is fused only after a table)
            return ()
        return draw_erases(self.erasing, canvas, self.tail.dtype)

    def _render_into(self, data, draw: _Draw, out: Optional[np.ndarray] = None):
        """The part of one image that draws nothing (the native decode and
        resample, GIL-free, and the tensor table): safe in any thread.

        Every op joined: the uint8 (C, H, W) render, into ``out`` when given
        (decode_into's slot), else through the tensor table (the PIL image when
        the chain fused no converter). A stop: the PIL image :meth:`_unfused`
        resumes from (what joined; the whole image for a tensor-stage stop)."""
        if draw.stop < len(self.geo_ops):
            geo = Geometry.start(*draw.geo.image_size) if draw.rng is not None else draw.geo
            return self._pil(data, geo, draw.fmt)
        if out is not None:
            value = self.renderer.render(data, draw.geo, "CHW", out=out, fmt=draw.fmt)
            apply_color(out, "CHW", draw.color)
            if self.erasing:
                self._erased.keep(out, draw.erase)
            return value
        if self.crops:
            pixels = self.renderer.render(data, draw.geo, "HWC", fmt=draw.fmt)
            return self._crops(self.crops, apply_color(pixels, "HWC", draw.color))
        if self.tail is None:
            return self._pil(data, draw.geo, draw.fmt, draw.color)
        pixels = self.renderer.render(data, draw.geo, "CHW", fmt=draw.fmt)
        result = self.tail.apply(apply_color(pixels, "CHW", draw.color))
        erase(result, draw.erase)
        return result

    def _crops(self, multi: MultiCrop, pixels: np.ndarray) -> tuple:
        """The FiveCrop / TenCrop ``multi`` of the rendered (H, W, C)
        ``pixels``: a tuple of PIL images, or of the tensor table's results
        (torchvision's error, raised by its step, for a crop larger than the
        image)."""
        crops = multi.cut(pixels)
        if crops is None:
            return multi.transform(to_pil(pixels))
        if self.tail is None:
            return tuple(to_pil(c) for c in crops)
        return tuple(self.tail.apply(np.ascontiguousarray(c.transpose(2, 0, 1))) for c in crops)

    def _draws_after_render(self, draw: _Draw) -> bool:
        """Whether :meth:`_complete` runs steps (unfused, so they may draw)."""
        return draw.stop < len(self.geo_ops) or bool(self.trailing)

    def _complete(self, draw: _Draw, value):
        """``f(data)`` from :meth:`_render_into`'s ``value`` (no out): the
        unfused rest of the chain, drawing from the global RNGs."""
        if draw.stop < len(self.geo_ops):
            return self._unfused(draw, value, len(self.steps))
        return self._run(self.trailing, value)

    def _unfused(self, draw: _Draw, image: PIL.Image.Image, end: int):
        """``steps[:end]``'s result when the geometry stopped at op
        ``draw.stop``, from :meth:`_render_into`'s ``image``. A tensor-stage
        stop cannot be resumed (the converter already ran in torchvision's
        order): the RNG state from before the draws is restored and
        ``steps[:end]`` replay from the whole image. A PIL-stage stop runs the
        stopping op (or its replacement) on what joined, and the steps after
        it up to ``end``."""
        if draw.rng is not None:
            torch.set_rng_state(draw.rng)
            return self._run(self.steps[:end], image)
        index = self.op_index[draw.stop]
        first = draw.replacement if draw.replacement is not None else [self.steps[index]]
        return self._run(list(first) + self.steps[index + 1:end], image)

    def _fill_unfused(self, draw: _Draw, image: PIL.Image.Image, target: np.ndarray) -> None:
        """A stopped image's uint8 part (:meth:`_unfused` to ``fill_end``) into
        the slot ``target``, then its erasing drawn, for :meth:`finish`."""
        self._fill(target, self._unfused(draw, image, self.fill_end))
        if self.erasing:
            self._erased.keep(target, self._draw_erases(target.shape[1:]))

    @staticmethod
    def _fill(target: np.ndarray, result) -> None:
        """Copies an unfused result (PIL image or (C, H, W) tensor) into the
        uint8 slot ``target``."""
        if isinstance(result, PIL.Image.Image):
            arr = np.asarray(result.convert("RGB" if len(target) == 3 else "L")).reshape(
                result.height, result.width, -1).transpose(2, 0, 1)
        else:
            arr = result.as_subclass(torch.Tensor).numpy()
        if arr.shape != target.shape:  # pragma: no cover - static size says otherwise
            raise RuntimeError(f"unexpected shape {arr.shape}, expected {target.shape}")
        np.copyto(target, arr)

    def _pil(self, data, geo: Geometry, fmt: str, color: Steps = ()) -> PIL.Image.Image:
        return to_pil(apply_color(self.renderer.render(data, geo, "HWC", fmt=fmt), "HWC", color))

    @staticmethod
    def _run(steps, value):
        for step in steps:
            value = step(value)
        return value

    def __repr__(self) -> str:
        from fastdecode.transforms.report import describe

        return describe(self)


def _rebuild(source, exact, region, dct_margin, limits=None):
    return FusedTransform(source, exact=exact, region=region, dct_margin=dct_margin,
                          **(limits or {}))


def fuse(transform: Any = None, *, exact: bool = False, region: str = "box",
         dct_margin: float = DCT_MARGIN, max_pixels: Optional[int] = _D["max_pixels"],
         max_work_per_byte: Optional[int] = _D["max_work_per_byte"]) -> FusedTransform:
    """See :func:`fastdecode.transforms.fuse`."""
    return FusedTransform(transform, exact=exact, region=region, dct_margin=dct_margin,
                          max_pixels=max_pixels, max_work_per_byte=max_work_per_byte)
