"""Shim, for one release: the old private path of :mod:`fastdecode.transforms.fused` and friends."""

from fastdecode.transforms.filters import PIL_FILTER_NAMES, interpolation_mode, pil_filter
from fastdecode.transforms.fused import FusedTransform, fuse
from fastdecode.transforms.kinds import flatten, geo_op, register
from fastdecode.transforms.render import DCT_MARGIN, Renderer
from fastdecode.transforms.tensor import TensorTail

__all__ = ["DCT_MARGIN", "PIL_FILTER_NAMES", "FusedTransform", "Renderer", "TensorTail", "flatten",
           "fuse", "geo_op", "interpolation_mode", "pil_filter", "register"]
