"""Shim, for one release: the old private path of :mod:`fastdecode.transforms.geometry`."""

from fastdecode.transforms.filters import PIL_FILTER_NAMES
from fastdecode.transforms.geometry import (
    Geometry,
    GeoOp,
    Stop,
    resized_output_size,
    round_box,
    static_output_size,
)
from fastdecode.transforms.geometry import draw_geometry as run_geometry

__all__ = ["PIL_FILTER_NAMES", "GeoOp", "Geometry", "Stop", "resized_output_size", "round_box",
           "run_geometry", "static_output_size"]
