"""Resampling filters: one table from each interpolation to Pillow's id and resampler.

Every spelling (InterpolationMode, Pillow constant, string) maps to one
:class:`Filter`: Pillow's filter id (named constants, never bare numbers), its
support radius and which resampler runs it (native for nearest / bilinear /
bicubic, Pillow for box / hamming / lanczos). See
docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from PIL import Image

if TYPE_CHECKING:
    from torchvision.transforms import InterpolationMode

__all__ = ["FILTERS", "Filter", "PIL_BICUBIC", "PIL_BILINEAR", "PIL_BOX", "PIL_FILTER_NAMES",
           "PIL_HAMMING", "PIL_LANCZOS", "PIL_NEAREST", "interpolation_mode", "pil_filter"]

# Pillow's filter ids (what torchvision's pil_modes_mapping gives), by name.
PIL_NEAREST = int(Image.Resampling.NEAREST)
PIL_LANCZOS = int(Image.Resampling.LANCZOS)
PIL_BILINEAR = int(Image.Resampling.BILINEAR)
PIL_BICUBIC = int(Image.Resampling.BICUBIC)
PIL_BOX = int(Image.Resampling.BOX)
PIL_HAMMING = int(Image.Resampling.HAMMING)


@dataclass(frozen=True)
class Filter:
    """One resampling filter.

    pil:     Pillow's filter id.
    name:    the lower-case name (also the native resampler's, when it has it).
    mode:    torchvision's InterpolationMode for it (a property: torchvision is
             imported when asked, so that a Ray worker running an unpickled
             plan never imports it).
    native:  True when fastdecode's own resampler runs it (bit-exact with
             Pillow's fixed-point arithmetic); False: Pillow resamples.
    radius:  support radius in source pixels at 1:1 (Pillow's; nearest reads
             one pixel, counted as 1 for widening a decoded box).
    """

    pil: int
    name: str
    native: bool
    radius: float

    @property
    def mode(self) -> InterpolationMode:
        """torchvision's InterpolationMode for this filter (torchvision is
        imported only when this is asked)."""
        from torchvision.transforms import InterpolationMode

        return InterpolationMode(self.name)


FILTERS: dict[int, Filter] = {f.pil: f for f in (
    Filter(PIL_NEAREST, "nearest", True, 1.0),
    Filter(PIL_BILINEAR, "bilinear", True, 1.0),
    Filter(PIL_BICUBIC, "bicubic", True, 2.0),
    Filter(PIL_BOX, "box", False, 0.5),
    Filter(PIL_HAMMING, "hamming", False, 1.0),
    Filter(PIL_LANCZOS, "lanczos", False, 3.0),
)}
PIL_FILTER_NAMES = {pil: f.name for pil, f in FILTERS.items()}


@functools.cache
def _modes() -> tuple[dict[str, InterpolationMode], dict[int, InterpolationMode]]:
    """torchvision's modes by value ('bilinear') and by Pillow constant, made once."""
    from torchvision.transforms import InterpolationMode

    return ({m.value: m for m in InterpolationMode},
            {pil: f.mode for pil, f in FILTERS.items()})


def interpolation_mode(value: Any) -> InterpolationMode:
    """InterpolationMode from a mode, a Pillow constant or a string."""
    from torchvision.transforms import InterpolationMode

    strings, by_pil = _modes()
    if isinstance(value, InterpolationMode):
        return value
    if isinstance(value, str):
        key = value.lower().replace("_", "-")
        if key not in strings:
            raise ValueError(
                f"interpolation must be one of {sorted(strings)}, an InterpolationMode or a "
                f"Pillow constant, got {value!r}"
            )
        return strings[key]
    if isinstance(value, int) and not isinstance(value, bool) and value in by_pil:
        return by_pil[value]
    raise ValueError(
        f"interpolation must be an InterpolationMode, a Pillow constant (0-5) or one of "
        f"{sorted(strings)}, got {value!r}"
    )


def pil_filter(value: Any) -> int:
    """The Pillow filter id torchvision uses for an interpolation on PIL images."""
    from torchvision.transforms.functional import pil_modes_mapping

    return int(pil_modes_mapping[interpolation_mode(value)])


def filter_of(value: Any) -> Optional[Filter]:
    """The :class:`Filter` torchvision resamples PIL images with for ``value``."""
    return FILTERS.get(pil_filter(value))
