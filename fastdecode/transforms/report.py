"""Saying what fuse did: ``explain()`` text and the structured :class:`FusionReport`.

See docs/decisions/fused-transforms.md ("Saying what happened").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.transforms.color import ColorOp, color_op
from fastdecode.transforms.color import why_not as color_why_not
from fastdecode.transforms.filters import FILTERS, pil_filter
from fastdecode.transforms.geometry import static_output_size
from fastdecode.transforms.kinds import is_converter, kind, short_name

if TYPE_CHECKING:
    from fastdecode.transforms.fused import FusedTransform

__all__ = ["FusionReport", "describe", "explain", "fusion_report"]

_GEOMETRIC = tuple(getattr(m, name) for m in (T, T2) for name in
                   ("RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip"))
_RESAMPLING = ("RandomResizedCropOp", "ResizeOp", "TimmRandomResizedCropOp", "ResizeKeepRatioOp")


@dataclass(frozen=True)
class FusionReport:
    """Why a chain fused less than it could: what stopped fusion, or what cost the batch path.

    A report is made when the leading geometric run did not fuse in full
    (a geometric step left unfused, a second resample every image stops at,
    nothing fused at all), when a colour step could not fuse, and when a
    step after the fused part makes the chain lose the batch path (the rest
    of the chain would give every sample the same shape, but that step runs
    per sample in torchvision, and so does everything after it).

    Attributes
    ----------
    step : object
        The first transform that runs unfused where fusion was expected (an
        item of ``FusedTransform.steps``).
    index : int
        Its position in ``FusedTransform.steps`` (the flattened chain).
    reason : str
        Why it was not fused, in words.
    fused : int
        How many steps before it were fused (0: none).
    cost : str
        What the user loses because of it, in words: the steps after it
        that run unfused too and, when the chain loses it, the batch path.
        Empty when nothing beyond the step itself is lost.
    """

    step: Any
    index: int
    reason: str
    fused: int
    cost: str = ""

    @property
    def loses_batch_path(self) -> bool:
        """Whether this step is why the chain has no batch path."""
        return _BATCH_PATH in self.cost

    def __str__(self) -> str:
        what = "nothing fused" if self.fused == 0 else f"fused {self.fused} step(s), then"
        text = f"{what}: {short_name(self.step)} (step {self.index}) runs unfused: {self.reason}"
        return f"{text}; {self.cost}" if self.cost else text


# What a chain without a batch path loses, in the words every message uses.
_BATCH_PATH = "the batch path"
_BATCH_PATH_WHAT = (f"{_BATCH_PATH} (a batch decoded straight into one uint8 tensor and converted "
                    "in one pass, with no per-sample tensors to collate)")


_AFTER_CROPS = ("after FiveCrop/TenCrop only v2 tensor steps fuse (ToImage, ToDtype, Normalize: v2 "
                "runs them on each crop), into one pass per crop; this step runs in torchvision "
                "on the tuple of crops (written as v2 steps after the crops, they would fuse)")


def _type_name(t: Any) -> str:
    return f"{type(t).__module__}.{type(t).__qualname__}"


def _why(t: Any, on_tensor: bool) -> str:
    """Why a step that looks geometric (or colour) did not become a fused op."""
    colour = color_why_not(t)
    if colour is not None:
        return colour
    k = kind(t)
    if k is None and isinstance(t, _GEOMETRIC):
        return (f"a subclass ({_type_name(t)}) of torchvision's "
                f"{type(t).__mro__[1].__name__}: its forward may differ, so it runs as it is")
    if k is None:
        return f"not a transform fuse knows ({_type_name(t)})"
    name, v2 = k
    if on_tensor and not v2:
        return "a v1 transform after the tensor converter (torchvision runs it on the tensor)"
    if getattr(t, "antialias", True) is False:
        return ("antialias=False: torchvision resamples PIL images antialiased anyway and "
                "warns; it runs in torchvision")
    try:
        flt = FILTERS[pil_filter(t.interpolation)] if hasattr(t, "interpolation") else None
    except (ValueError, KeyError):
        return f"interpolation {t.interpolation!r} is not one fuse maps"
    if on_tensor and flt is not None and flt.name not in ("bilinear", "bicubic"):
        return f"{flt.name} on tensors is not Pillow's {flt.name}"
    if on_tensor and getattr(t, "antialias", True) is not True:
        return "antialias must be True on tensors (torch's resize is Pillow's only then)"
    return "parameters fuse does not translate (e.g. a size torchvision would reject)"


def _why_after(f: FusedTransform, t: Any) -> str:
    """Why the first step after the fused part (not geometric, not a colour
    step fuse knows) runs unfused."""
    known = color_why_not(t) if f.tail is None else None  # a colour / augmentation step
    if known is not None:
        return known
    if f.tail is not None and color_op(t) is not None:
        return ("a colour or augmentation step after the tensor converter runs in torchvision "
                "on each sample's tensor (these steps fuse right after the geometry, before the "
                "converter)")
    if f.tail is not None:
        return (f"fuse computes only per-pixel steps after the tensor converter (Normalize, "
                f"ToDtype, ConvertImageDtype), and {_type_name(t)} is not one; it runs in "
                f"torchvision on each sample's tensor")
    if is_converter(t):
        return "the tensor steps after it could not be made one table; they run in torchvision"
    return f"not a transform fuse knows ({_type_name(t)}); it runs on the decoded PIL image"


def _loses_batch_path(f: FusedTransform) -> bool:
    """Whether the unfused steps are all that keep ``f`` from the batch path:
    the fused geometry gives every image one size and the chain has a tensor
    converter (fused, or among the unfused steps), but ``output_shape`` is
    None because steps run after the fused part."""
    if f.output_shape is not None or not f.trailing or not f.geo_ops:
        return False
    if static_output_size(f.geo_ops) is None:
        return False  # each image has its own size: no batch path to lose
    if f.tail is not None:
        return not f.tail.numpy
    return any(is_converter(s) for s in f.trailing)


def _cost(f: FusedTransform, index: int) -> str:
    """What running ``f.steps[index]`` unfused costs, in words ('' for nothing)."""
    after = [short_name(s).split("(")[0] for s in f.steps[index + 1:]]
    parts = []
    if after and index >= len(f.steps) - len(f.trailing):
        shown = ", ".join(after[:4]) + (", ..." if len(after) > 4 else "")
        parts.append(f"the {len(after)} step(s) after it ({shown}) run unfused too, "
                     f"per sample")
    if _loses_batch_path(f):
        parts.append(f"batches lose {_BATCH_PATH_WHAT}")
    return " and ".join(parts) if len(parts) < 2 else f"{parts[0]}, and {parts[1]}"


def fusion_report(f: FusedTransform) -> Optional[FusionReport]:
    """``f.fusion_report()`` (:meth:`FusedTransform.fusion_report`): the
    :class:`FusionReport` of ``f``, or None when nothing was lost.

    A report when ``f`` fuses less than its leading geometric run (a
    geometric step left unfused, or a second resample every image stops at),
    stops at a colour step it cannot run exactly (a RandomApply of colour
    and other steps), fuses nothing at all, leaves the steps after a
    FiveCrop/TenCrop to torchvision (v1's ``Lambda`` recipe), or loses the
    batch path to a step after the fused part (an augmentation that does not
    fuse, such as a Lambda, timm's blur ops, a colour step on tensors) when the chain
    would have it otherwise. None when the leading geometric run and the colour
    steps after it fused and the unfused rest costs no batch path (a chain
    that returns PIL images, or images of different sizes, has none).
    """
    steps = f.steps
    resampling = [i for op, i in zip(f.geo_ops, f.op_index) if type(op).__name__ in _RESAMPLING]
    if len(resampling) > 1:
        i = resampling[1]
        return FusionReport(steps[i], i, "a second resample: Pillow resamples twice there, so "
                            "every image runs it and what follows unfused", i, _cost(f, i))
    fused = len(steps) - len(f.trailing)
    if fused == len(steps):
        return None
    first = steps[fused]
    if fused == 0:
        return FusionReport(first, 0, _why(first, on_tensor=False), 0, _cost(f, 0))
    looks_geometric = kind(first) is not None or isinstance(first, _GEOMETRIC)
    if looks_geometric and f.color_ops and fused == f.fill_end:
        return FusionReport(first, fused, "a geometric step after a colour step runs on the PIL "
                            "image, unfused (put the colour steps after the geometry to fuse "
                            "both)", fused, _cost(f, fused))
    if looks_geometric:
        on_tensor = f.tail is not None or any(op.stage == "tensor" for op in f.geo_ops)
        return FusionReport(first, fused, _why(first, on_tensor), fused, _cost(f, fused))
    colour = None if f.tail is not None else color_why_not(first)  # on tensors: by design
    if colour is not None:
        return FusionReport(first, fused, colour, fused, _cost(f, fused))
    if f.crops is not None and f.tail is None:  # the crops' tensor steps left to torchvision
        return FusionReport(first, fused, _AFTER_CROPS, fused, _cost(f, fused))
    if _loses_batch_path(f):
        return FusionReport(first, fused, _why_after(f, first), fused, _cost(f, fused))
    return None


def _fused_where(f: FusedTransform) -> dict[int, str]:
    """Index -> what happens to that step, for the fused steps."""
    where: dict[int, str] = {}
    for op, i in zip(f.geo_ops, f.op_index):
        name = type(op).__name__
        flt = getattr(op, "filter", None)
        if flt is not None and name in _RESAMPLING:
            how = ("fastdecode's resampler" if FILTERS[flt].native and not f.exact
                   else "Pillow's resampler where fastdecode's is not bit-exact")
            text = (f"fused into the decode: only the pixels it keeps are decoded, then resized "
                    f"({FILTERS[flt].name}) by {how}")
        elif "Flip" in name:
            text = "fused into the decode: the mirror image is written as the rows are decoded"
        else:
            text = "fused into the decode: only the region it keeps is decoded"
        if op.stage == "tensor":
            text += " (torchvision runs it on the uint8 tensor; the result is the same)"
        where[i] = text
    for cop in f.color_ops:
        index = next(i for i, s in enumerate(f.steps) if s is cop.transform)
        where[index] = cop.how
    if f.crops is not None:
        index = next(i for i, s in enumerate(f.steps) if s is f.crops.transform)
        where[index] = ("fused: the crops are cut from the decoded pixels"
                        + (" and each goes through the tensor pass" if f.tail else ""))
    for eop in f.erasing:
        index = next(i for i, s in enumerate(f.steps) if s is eop.transform)
        where[index] = ("fused: its boxes are drawn with the geometry (the same generators, in "
                        "the same order) and erased in place in the result")
    if f.tail is not None:
        for n, step in enumerate(f.tail.steps):
            index = next(i for i, s in enumerate(f.steps) if s is step)
            if f.tail.identity:
                where[index] = "fused: the decoded uint8 pixels are the tensor, with no extra pass"
            elif n == 0:
                where[index] = (f"fused: one pass over the decoded pixels makes the "
                                f"{str(f.tail.dtype).replace('torch.', '')} tensor")
            else:
                where[index] = "fused: done in that same pass"
    return where


def _batches(f: FusedTransform, report: Optional[FusionReport]) -> str:
    """The line on the batch path."""
    if f.output_shape is not None:
        shape = "x".join(map(str, f.output_shape))
        return (f"Batches: every sample is {shape} before the tensor step, so datasets and "
                f"FastLoader use {_BATCH_PATH_WHAT}.")
    if report is not None and (report.loses_batch_path or report.fused == 0):
        return (f"Batches: no batch path, because step {report.index} runs unfused; each "
                f"sample is made on its own and the collate stacks them.")
    if f.crops is not None:
        why = "the chain returns a tuple of crops"
    elif f.tail is None and not any(is_converter(s) for s in f.steps):
        why = "the chain returns PIL images, not tensors"
    elif f.tail is not None and f.tail.numpy:
        why = "the chain returns numpy arrays"
    else:
        why = "the samples' size depends on each image (no fixed-size crop)"
    return f"Batches: no batch path, because {why}; each sample is made on its own."


def explain(f: FusedTransform) -> str:
    """``f.explain()`` (:meth:`FusedTransform.explain`): each step of ``f``'s
    chain and how it runs, in words, then what that means."""
    where = _fused_where(f)
    report = fusion_report(f)
    first_unfused = len(f.steps) - len(f.trailing)
    on_tensor = f.tail is not None or any(op.stage == "tensor" for op in f.geo_ops)
    mode = ("exact=True: results bit-identical to torchvision's" if f.exact else
            "exact=False: a JPEG may decode at 1/2, 1/4 or 1/8 scale first, within fuse's "
            "documented 40 dB bound")
    lines = [f"fastdecode runs this chain of {len(f.steps)} step(s) so ({mode}):"]
    for i, step in enumerate(f.steps):
        if i in where:
            text = where[i]
        elif report is not None and i == report.index:
            text = f"runs unfused, in order, in torchvision: {report.reason}"
        elif i == first_unfused:
            looks_geometric = kind(step) is not None or isinstance(step, _GEOMETRIC)
            reason = _why(step, on_tensor) if looks_geometric else _why_after(f, step)
            text = f"runs unfused, in order, in torchvision: {reason}"
        else:
            text = ("runs unfused, in order, in torchvision: it comes after an unfused step "
                    "(fastdecode never reorders a chain)")
        lines.append(f"  {i}. {short_name(step)}\n       {text}")
    lines.append(_batches(f, report))
    done = "the leading geometric run" + (" and the pixel steps after it" if f.color_ops else "")
    if report is not None:
        lines.append(f"Summary: {report}.")
    elif not f.trailing:
        lines.append("Summary: every step fused.")
    else:
        lines.append(f"Summary: {done} fused; the steps after it run unfused, which costs "
                     f"nothing more for this chain.")
    return "\n".join(lines)


def describe(f: FusedTransform) -> str:
    """``repr(f)``: the plan's parts in a few lines (decode, colour, tensor,
    trailing), what stopped it, the output shape."""
    lines = [f"{type(f).__name__}("]
    geo = " -> ".join(short_name(op.transform) + (" (on tensors)" if op.stage == "tensor"
                                                  else "") for op in f.geo_ops)
    pillow = sorted({FILTERS[op.filter].name for op in f.geo_ops
                     if hasattr(op, "filter") and not FILTERS[op.filter].native})
    how = ("native decode + resample" if not pillow
           else f"native decode, Pillow resample ({', '.join(pillow)})")
    lines.append(f"  decode: {geo or 'full image'}   [{how}]")
    if f.color_ops:
        label = "colour" if all(isinstance(op, ColorOp) for op in f.color_ops) else "pixels"
        lines.append(f"  {label}: " + " -> ".join(short_name(op.transform) for op in f.color_ops)
                     + "   [native, Pillow's arithmetic]")
    if f.crops is not None:
        lines.append(f"  crops: {short_name(f.crops.transform)}   [cut from the decoded pixels]")
    if f.tail is not None:
        kind = ("uint8, no pass" if f.tail.identity
                else f"one table pass -> {f.tail.dtype}")
        lines.append(f"  tensor: {f.tail!r}   [{kind}]")
    if f.erasing:
        lines.append("  erasing: " + " -> ".join(short_name(op.transform) for op in f.erasing)
                     + "   [drawn with the geometry, in place in the result]")
    if f.trailing:
        lines.append("  trailing (unfused): " + " -> ".join(short_name(s) for s in f.trailing))
    report = f.fusion_report()
    if report is not None:
        lines.append(f"  stopped: {report}")
    lines.append(f"  output_shape={f.output_shape}, exact={f.exact})")
    return "\n".join(lines)
