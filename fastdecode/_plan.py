"""Shim, for one release: the old private path of :mod:`fastdecode.transforms.geometry`."""

from fastdecode.transforms.geometry import Geometry, GeoOp, Stop, resized_output_size

__all__ = ["GeoOp", "Geometry", "Stop", "resized_output_size"]
