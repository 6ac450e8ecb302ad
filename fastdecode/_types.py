"""Small value types of the public API."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Optional

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
