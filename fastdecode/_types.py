"""Small value types of the public API."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Optional, Tuple

__all__ = ["Mode", "Layout", "ImageInfo"]


class Mode(str, Enum):
    """Output colour mode. Plain strings ('RGB', 'L') are accepted too."""

    RGB = "RGB"
    L = "L"

    @property
    def channels(self) -> int:
        return 3 if self is Mode.RGB else 1


class Layout(str, Enum):
    """Output memory layout. Plain strings ('HWC', 'CHW') are accepted too."""

    HWC = "HWC"
    CHW = "CHW"


class ImageInfo(NamedTuple):
    """What a header says, read without decoding any pixel."""

    format: str
    width: int
    height: int
    channels: int
    color_space: str
    subsampling: Optional[str]
    progressive: bool
    orientation: int


class PlannedShape(NamedTuple):
    """What a decode of an image of a given size will produce (private:
    ``_native.plan_shape`` returns it from the C planner)."""

    scale_num: int  # M of the M/8 DCT scale the decode runs at
    scaled_size: Tuple[int, int]  # (h, w) of the whole image at M/8
    region: Tuple[int, int, int, int]  # (top, left, h, w) of the crop in the scaled frame
    shape: Tuple[int, ...]  # the output array's shape in the requested layout
