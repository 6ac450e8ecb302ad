"""Type stubs for the Cython binding (fastdecode/_native.pyx)."""

from typing import Any, Optional, Tuple

import numpy as np

from fastdecode._types import ImageInfo, Layout, Mode, PlannedShape

DEFAULT_MAX_PIXELS: int

def decode_jpeg(
    data: Any,
    *,
    mode: Mode | str = ...,
    scale: Optional[float] = ...,
    min_size: Optional[Tuple[int, int]] = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: str = ...,
    flip: bool = ...,
    layout: Layout | str = ...,
    out: Any = ...,
    exif: bool = ...,
    fast: bool = ...,
    strict: bool = ...,
    max_pixels: Optional[int] = ...,
) -> np.ndarray: ...
def decode_bmp(
    data: Any,
    *,
    mode: Mode | str = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: str = ...,
    flip: bool = ...,
    layout: Layout | str = ...,
    out: Any = ...,
    max_pixels: Optional[int] = ...,
) -> np.ndarray: ...
def sniff(data: Any) -> Optional[str]: ...
def read_native_header(data: Any) -> Optional[ImageInfo]: ...
def plan_shape(
    height: int,
    width: int,
    *,
    mode: Mode | str = ...,
    scale: Optional[float] = ...,
    min_size: Optional[Tuple[int, int]] = ...,
    crop: Optional[Tuple[int, int, int, int]] = ...,
    size: Optional[Tuple[int, int]] = ...,
    interpolation: str = ...,
    layout: Layout | str = ...,
    max_pixels: Optional[int] = ...,
) -> PlannedShape: ...
def fill_out(arr: np.ndarray, out: Any) -> Any: ...
def library_info() -> Tuple[str, bool]: ...
def resize(
    image: np.ndarray,
    size: Tuple[int, int],
    *,
    interpolation: str = ...,
    box: Optional[Tuple[float, float, float, float]] = ...,
    flip: bool = ...,
    layout: Layout | str = ...,
    out: Any = ...,
) -> np.ndarray: ...
def lut_to_float(src: np.ndarray, lut: np.ndarray, out: Optional[np.ndarray] = ...) -> np.ndarray: ...
def normalize_table(mean: Any, std: Any, channels: int = ...) -> np.ndarray: ...
def normalize_u8(
    src: np.ndarray, mean: Any = ..., std: Any = ..., out: Optional[np.ndarray] = ...
) -> np.ndarray: ...
