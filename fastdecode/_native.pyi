"""Type stubs for the Cython binding (fastdecode/_native.pyx)."""

from typing import Any, Iterable, Optional, Tuple

import numpy as np

from fastdecode._options import Interpolation, LayoutName, ModeName
from fastdecode._types import ImageInfo, PlannedShape

DEFAULT_MAX_PIXELS: int
COLOR_BRIGHTNESS: int
COLOR_CONTRAST: int
COLOR_SATURATION: int
COLOR_HUE: int
COLOR_MAX_STEPS: int

def decode_jpeg(
    data: Any,
    *,
    mode: ModeName = ...,
    scale: Optional[float] = ...,
    min_size: Optional[Tuple[int, int]] = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: Interpolation = ...,
    flip: bool = ...,
    layout: LayoutName = ...,
    out: Any = ...,
    exif: bool = ...,
    fast: bool = ...,
    strict: bool = ...,
    max_pixels: Optional[int] = ...,
    max_work_per_byte: Optional[int] = ...,
) -> np.ndarray: ...
def decode_bmp(
    data: Any,
    *,
    mode: ModeName = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: Interpolation = ...,
    flip: bool = ...,
    layout: LayoutName = ...,
    out: Any = ...,
    max_pixels: Optional[int] = ...,
    max_work_per_byte: Optional[int] = ...,
) -> np.ndarray: ...
def sniff(data: Any) -> Optional[str]: ...
def read_native_header(data: Any) -> Optional[ImageInfo]: ...
def plan_shape(
    height: int,
    width: int,
    *,
    mode: ModeName = ...,
    scale: Optional[float] = ...,
    min_size: Optional[Tuple[int, int]] = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: Interpolation = ...,
    layout: LayoutName = ...,
    max_pixels: Optional[int] = ...,
) -> PlannedShape: ...
def check_work(
    blocks: int, nbytes: int, max_work_per_byte: Optional[int] = ..., what: str = ...
) -> None: ...
def fill_out(arr: np.ndarray, out: Any, layout: LayoutName = ...) -> Any: ...
def library_info() -> Tuple[str, bool]: ...
def resize(
    image: np.ndarray,
    size: Tuple[int, int],
    *,
    interpolation: Interpolation = ...,
    box: Optional[Tuple[float, float, float, float]] = ...,
    flip: bool = ...,
    layout: LayoutName = ...,
    out: Any = ...,
) -> np.ndarray: ...
def lut_to_float(src: np.ndarray, lut: np.ndarray, out: Optional[np.ndarray] = ...) -> np.ndarray: ...
def adjust_colors(
    image: np.ndarray, steps: Iterable[Tuple[int, float]], layout: LayoutName = ...
) -> np.ndarray: ...
