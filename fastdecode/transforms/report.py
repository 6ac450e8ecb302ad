"""Saying what fuse did: ``explain()`` text and the structured :class:`FusionReport`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from torchvision import transforms as T
from torchvision.transforms import v2 as T2

from fastdecode.transforms.color import why_not as color_why_not
from fastdecode.transforms.filters import FILTERS, pil_filter
from fastdecode.transforms.kinds import kind, short_name

if TYPE_CHECKING:
    from fastdecode.transforms.fused import FusedTransform

__all__ = ["FusionReport", "explain", "fusion_report"]

_GEOMETRIC = tuple(getattr(m, name) for m in (T, T2) for name in
                   ("RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip"))
_RESAMPLING = ("RandomResizedCropOp", "ResizeOp", "TimmRandomResizedCropOp", "ResizeKeepRatioOp")


@dataclass(frozen=True)
class FusionReport:
    """Why a chain fused less than its leading geometric run, or nothing.

    step:   the first transform that runs unfused where fusion was expected
            (an item of ``FusedTransform.steps``).
    index:  its position in ``FusedTransform.steps`` (the flattened chain).
    reason: why it was not fused, in words.
    fused:  how many steps before it were fused (0: nothing was).
    """

    step: Any
    index: int
    reason: str
    fused: int

    def __str__(self) -> str:
        what = "nothing fused" if self.fused == 0 else f"fused {self.fused} step(s), then"
        return f"{what}: {short_name(self.step)} (step {self.index}) runs unfused: {self.reason}"


def _why(t: Any, on_tensor: bool) -> str:
    """Why a step that looks geometric (or colour) did not become a fused op."""
    colour = color_why_not(t)
    if colour is not None:
        return colour
    k = kind(t)
    if k is None and isinstance(t, _GEOMETRIC):
        return (f"a subclass ({type(t).__module__}.{type(t).__qualname__}) of torchvision's "
                f"{type(t).__mro__[1].__name__}: its forward may differ, so it runs as it is")
    if k is None:
        return f"not a transform fuse knows ({type(t).__module__}.{type(t).__qualname__})"
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


def fusion_report(f: FusedTransform) -> Optional[FusionReport]:
    """A :class:`FusionReport` when ``f`` fuses less than its leading geometric
    run (a geometric step left unfused, or a second resample every image
    stops at), stops at a colour step it cannot run exactly (a RandomApply
    of colour and other steps) or fuses nothing at all; None when the leading geometric run and the colour
    steps after it fused (what follows an augmentation step runs unfused by
    design)."""
    steps = f.steps
    resampling = [i for op, i in zip(f.geo_ops, f.op_index) if type(op).__name__ in _RESAMPLING]
    if len(resampling) > 1:
        i = resampling[1]
        return FusionReport(steps[i], i, "a second resample: Pillow resamples twice there, so "
                            "every image runs it and what follows unfused", i)
    fused = len(steps) - len(f.trailing)
    if fused == len(steps):
        return None
    first = steps[fused]
    if fused == 0:
        return FusionReport(first, 0, _why(first, on_tensor=False), 0)
    looks_geometric = kind(first) is not None or isinstance(first, _GEOMETRIC)
    if looks_geometric and f.color_ops and fused == f.fill_end:
        return FusionReport(first, fused, "a geometric step after a colour step runs on the PIL "
                            "image, unfused (put the colour steps after the geometry to fuse "
                            "both)", fused)
    if looks_geometric:
        on_tensor = f.tail is not None or any(op.stage == "tensor" for op in f.geo_ops)
        return FusionReport(first, fused, _why(first, on_tensor), fused)
    colour = None if f.tail is not None else color_why_not(first)  # on tensors: by design
    if colour is not None:
        return FusionReport(first, fused, colour, fused)
    return None


def explain(f: FusedTransform) -> str:
    """Each step of ``f``'s chain and where it runs, then the report."""
    where: dict[int, str] = {}
    for op, i in zip(f.geo_ops, f.op_index):
        flt = getattr(op, "filter", None)
        resampler = ""
        if flt is not None and type(op).__name__ in _RESAMPLING:
            native = FILTERS[flt].native and not f.exact
            resampler = (f", {FILTERS[flt].name} resample by "
                         f"{'the decoder' if native else 'Pillow where not bit-exact natively'}")
        stage = " (on the uint8 tensor)" if op.stage == "tensor" else ""
        where[i] = f"decode{stage}{resampler}"
    for cop in f.color_ops:
        index = next(i for i, s in enumerate(f.steps) if s is cop.transform)
        where[index] = "colour, on the decoded pixels (Pillow's arithmetic, native)"
    if f.tail is not None:
        for step in f.tail.steps:
            index = next(i for i, s in enumerate(f.steps) if s is step)
            where[index] = ("tensor table (no pass: uint8 as decoded)" if f.tail.identity
                            else f"tensor table (one pass -> {f.tail.dtype})")
    lines = [f"fuse: {len(f.steps)} step(s), exact={f.exact}"]
    for i, step in enumerate(f.steps):
        lines.append(f"  {i}. {short_name(step)}\n       -> {where.get(i, 'unfused, in order')}")
    report = fusion_report(f)
    lines.append(f"output_shape={f.output_shape} (batch decode_into/finish: "
                 f"{'yes' if f.output_shape is not None else 'no'})")
    done = "the leading geometric run" + (" and the colour steps after it" if f.color_ops else "")
    lines.append("report: " + (str(report) if report else f"{done} fused"))
    return "\n".join(lines)
