"""Small value types of the public API."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Optional, Tuple

__all__ = ["Mode", "Layout", "ImageInfo"]


class Mode(str, Enum):
    """Output colour mode. Plain strings ('RGB', 'L') are accepted too.

    A ``str`` enum: each member equals its string (``Mode.RGB == "RGB"``).

    Attributes
    ----------
    RGB
        Three channels, red, green, blue.
    L
        One channel, luminance (greyscale).
    """

    RGB = "RGB"
    L = "L"

    @property
    def channels(self) -> int:
        """The number of channels the mode has: 3 for RGB, 1 for L."""
        return 3 if self is Mode.RGB else 1


class Layout(str, Enum):
    """Output memory layout. Plain strings ('HWC', 'CHW') are accepted too.

    A ``str`` enum: each member equals its string (``Layout.HWC == "HWC"``).

    Attributes
    ----------
    HWC
        Height, width, channels: channels last (numpy's and Pillow's order).
    CHW
        Channels, height, width: channels first (torchvision's tensor order).
    """

    HWC = "HWC"
    CHW = "CHW"


class ImageInfo(NamedTuple):
    """What a header says, read without decoding any pixel.

    What :func:`fastdecode.read_header` returns; a named tuple.

    Attributes
    ----------
    format : str
        'jpeg', 'bmp', or, for a file Pillow reads, Pillow's format name in
        lower case ('unknown' when there is none).
    width, height : int
        The size as stored, before any EXIF orientation is applied.
    channels : int
        The number of colour components the file stores.
    color_space : str
        'gray', 'ycbcr', 'rgb', 'cmyk', 'ycck', 'palette' (Pillow files
        only) or 'other'.
    subsampling : str or None
        The JPEG chroma subsampling: '4:4:4', '4:2:2', '4:2:0', '4:4:0',
        '4:1:1', 'gray' or 'other'; None for other formats.
    progressive : bool
        Whether the file is progressive (JPEG) or interlaced (Pillow formats).
    orientation : int
        The EXIF orientation tag, 1 to 8; 1 when absent or out of range.
    """

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
