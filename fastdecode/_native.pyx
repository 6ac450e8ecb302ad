# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, embedsignature=False
"""The binding: buffers in and out, the GIL, and C status -> exception.

This is the only module that holds the GIL-related and buffer-related
knowledge; C never sees Python, and the Python layer never sees a pointer.
Each decoder (_jpeg.pxi, _bmp.pxi) is included here so that they share one
error translator and one option parser; which formats the core decodes, and
which format a buffer is, come from the C core (NATIVE_FORMATS, sniff). See
docs/decisions/core.md.
"""
# Over ~400 lines on purpose: the one extension's shared part (the error translator,
# option parsing, buffer handling, probe-allocate-decode) that every .pxi uses.


from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.memoryview cimport PyMemoryView_FromObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport strlen
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from fastdecode._capi cimport *

import operator
import sys

import numpy as np

from fastdecode.errors import DecodeError, ImageTooLargeError, UnsupportedFormatError
from fastdecode._options import DEFAULT_MAX_PIXELS, DEFAULT_MAX_WORK_PER_BYTE, DEFAULTS as _D
from fastdecode._types import ImageInfo, PlannedShape

# The C defaults serve C callers; they must be the Python ones.
if (DEFAULT_MAX_PIXELS, DEFAULT_MAX_WORK_PER_BYTE) != (FD_DEFAULT_MAX_PIXELS,
                                                      FD_DEFAULT_MAX_WORK_PER_BYTE):
    raise ImportError("fastdecode: the defaults in _options.py differ from the C core's")

_COLOR_SPACES = {
    FD_CS_GRAY: "gray",
    FD_CS_YCBCR: "ycbcr",
    FD_CS_RGB: "rgb",
    FD_CS_CMYK: "cmyk",
    FD_CS_YCCK: "ycck",
    FD_CS_OTHER: "other",
    FD_CS_PALETTE: "palette",
}
_SUBSAMPLINGS = {
    FD_SS_NONE: None,
    FD_SS_444: "4:4:4",
    FD_SS_422: "4:2:2",
    FD_SS_420: "4:2:0",
    FD_SS_440: "4:4:0",
    FD_SS_411: "4:1:1",
    FD_SS_GRAY: "gray",
    FD_SS_OTHER: "other",
}


cdef object format_name(fd_format fmt):
    """The C core's name of `fmt` ('jpeg'); None for FD_FORMAT_UNKNOWN."""
    cdef const char *name = fd_format_name(fmt)
    return None if name == NULL else name.decode("ascii")


cdef tuple native_formats():
    cdef size_t i = 0
    names = []
    while fd_format_at(i) != FD_FORMAT_UNKNOWN:
        names.append(format_name(fd_format_at(i)))
        i += 1
    return tuple(names)


# The formats the C core decodes, in its sniff order (src_c/fd_formats.h).
NATIVE_FORMATS = native_formats()


# --------------------------------------------------------------------------
# The one translator from C status to exception.

cdef int raise_error(const fd_error *err) except -1:
    message = PyUnicode_DecodeUTF8(err.message, strlen(err.message), "replace")
    cdef fd_status st = err.status
    if st == FD_ERR_TOO_LARGE:
        raise ImageTooLargeError(message)
    if st == FD_ERR_UNSUPPORTED:
        raise UnsupportedFormatError(message)
    if st == FD_ERR_ARGUMENT:
        raise ValueError(message)
    if st == FD_ERR_NOMEM:
        raise MemoryError(message)
    raise DecodeError(message)


# --------------------------------------------------------------------------
# Options.

cdef int parse_pair(object value, str what, str first, int first_code, str second,
                    int second_code) except -1:
    """The code of the name `value` equals (compared as `value == name`)."""
    if value == first:
        return first_code
    if value == second:
        return second_code
    raise ValueError(f"{what} must be {first!r} or {second!r}, got {value!r}")


cdef int parse_mode(object mode) except -1:
    return parse_pair(mode, "mode", "RGB", FD_MODE_RGB, "L", FD_MODE_L)


cdef int parse_layout(object layout) except -1:
    return parse_pair(layout, "layout", "HWC", FD_LAYOUT_HWC, "CHW", FD_LAYOUT_CHW)


cdef int parse_scale(object scale) except -1:
    if scale is None:
        return 8
    try:
        m = scale * 8
        ok = m == int(m) and 1 <= m <= 8
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(
            f"scale must be M/8 for M in 1..8 (1, 0.5, 0.25, 0.125, 0.375, ...), got {scale!r}"
        )
    return int(m)


_INTERPOLATIONS = {"nearest": FD_INTERP_NEAREST, "bilinear": FD_INTERP_BILINEAR,
                   "bicubic": FD_INTERP_BICUBIC}


cdef int parse_interpolation(object interpolation) except -1:
    name = getattr(interpolation, "value", interpolation)  # torchvision InterpolationMode
    try:
        return _INTERPOLATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"interpolation must be 'bilinear', 'bicubic' or 'nearest', got {interpolation!r}"
        ) from None


cdef int parse_size(fd_options *opt, object size, object interpolation) except -1:
    opt.interpolation = parse_interpolation(interpolation)
    if size is None:
        return 0
    height, width = int_tuple(size, 2, "size")
    if height <= 0 or width <= 0 or height > 1 << 24 or width > 1 << 24:
        raise ValueError(f"size must be two positive ints (height, width), got {size!r}")
    opt.size_height = height
    opt.size_width = width
    return 0


cdef int parse_scaling(fd_options *opt, object scale, object min_size) except -1:
    """scale or min_size; with neither, a requested size picks the scale."""
    if min_size is None and scale is None and opt.size_height:
        # The resampler finishes the job, so only the SIMD-accelerated scales
        # are worth it: faster, and sharper than 3/8..7/8 (docs/decisions/resampler.md).
        opt.min_height = opt.size_height
        opt.min_width = opt.size_width
        opt.simd_scales_only = 1
        return 0
    if min_size is None:
        opt.scale_num = parse_scale(scale)
        return 0
    if scale is not None:
        raise ValueError("give scale or min_size, not both")
    min_h, min_w = int_tuple(min_size, 2, "min_size")
    if min_h <= 0 or min_w <= 0:
        raise ValueError(f"min_size must be positive, got {min_size!r}")
    opt.min_height = min(min_h, 0xFFFFFFFF)
    opt.min_width = min(min_w, 0xFFFFFFFF)
    return 0


cdef tuple int_tuple(object value, int n, str name):
    try:
        items = tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of {n} ints, got {value!r}") from None
    if len(items) != n:
        raise ValueError(f"{name} must have {n} values, got {value!r}")
    return items


cdef int parse_crop(fd_options *opt, object crop) except -1:
    if crop is None:
        opt.has_crop = 0
        return 0
    top, left, height, width = int_tuple(crop, 4, "crop")
    if top < 0 or left < 0 or height <= 0 or width <= 0:
        raise ValueError(
            f"crop=(top, left, height, width) needs top, left >= 0 and a positive size, got {crop!r}"
        )
    opt.has_crop = 1
    opt.crop.top = top
    opt.crop.left = left
    opt.crop.height = height
    opt.crop.width = width
    return 0


cdef object parse_limit(object value, object lowest, object cap, str refusal):
    """A limit option as C takes it: 0 (no limit) for None, else the int,
    clipped to `cap`; ValueError(refusal.format(value)) below `lowest`."""
    if value is None:
        return 0
    n = operator.index(value)
    if n < lowest:
        raise ValueError(refusal.format(value))
    return min(n, cap)


cdef int parse_max_pixels(fd_options *opt, object max_pixels) except -1:
    opt.max_pixels = <uint64_t>parse_limit(max_pixels, 0, 2 ** 64 - 1,
                                           "max_pixels must be >= 0 or None, got {!r}")
    return 0


cdef int parse_max_work(fd_options *opt, object max_work_per_byte) except -1:
    opt.max_work_per_byte = <uint32_t>parse_limit(
        max_work_per_byte, 1, 0xFFFFFFFF,
        "max_work_per_byte must be a positive int, or None for no limit, got {!r}")
    return 0


cdef int parse_common(fd_options *opt, object mode, object crop, object flip, object layout,
                      object max_pixels) except -1:
    fd_options_init(opt)
    opt.mode = <fd_mode>parse_mode(mode)
    opt.layout = <fd_layout>parse_layout(layout)
    parse_crop(opt, crop)
    opt.flip = 1 if flip else 0
    parse_max_pixels(opt, max_pixels)
    return 0


# --------------------------------------------------------------------------
# Buffers.

cdef int get_input(object data, Py_buffer *view) except -1:
    """Borrows `data` as contiguous bytes, without copying."""
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except BufferError as exc:
        raise ValueError(f"data must be a C-contiguous bytes-like object: {exc}") from None
    except TypeError:
        raise TypeError(
            f"data must be a bytes-like object (bytes, bytearray, memoryview, mmap, "
            f"numpy uint8 array), got {type(data).__name__}"
        ) from None
    return 0


cdef tuple shape_tuple(const fd_shape *shape, fd_layout layout):
    if layout == FD_LAYOUT_CHW:
        return (shape.channels, shape.height, shape.width)
    return (shape.height, shape.width, shape.channels)


cdef object tensor_target(object out):
    """`out` as the object whose buffer a decode fills: a torch tensor gives
    its numpy view (a CPU, strided, C-contiguous uint8 tensor only; anything
    else is a ValueError naming the reason), any other object itself.

    torch is never imported here: a tensor can only exist once it is."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(out, torch.Tensor):
        return out
    if out.device.type != "cpu":
        raise ValueError(
            f"out is a tensor on {out.device}: decoders write CPU memory; pass a CPU "
            f"uint8 tensor (then .to('{out.device}', non_blocking=True))"
        )
    if out.layout != torch.strided:
        raise ValueError(f"out is a {out.layout} tensor; it must be a dense (strided) tensor")
    if out.dtype != torch.uint8:
        raise ValueError(f"out is a {out.dtype} tensor; it must be torch.uint8")
    if not out.is_contiguous():
        raise ValueError(
            f"out is a non-contiguous tensor (shape {tuple(out.shape)}, strides "
            f"{tuple(out.stride())}); it must be C-contiguous: a batch[i] of a contiguous "
            f"batch is, a transposed, channels_last or sliced-columns view is not"
        )
    try:
        return out.numpy()
    except (RuntimeError, TypeError) as exc:  # conjugate/negative bits, tensor subclasses...
        raise ValueError(f"out is a tensor without a writable numpy view: {exc}") from None


cdef object prepare_out(object out, const fd_shape *shape, fd_layout layout, Py_buffer *view):
    """Returns the array to fill (`out` itself when given) and borrows its
    memory into `view`."""
    expected = shape_tuple(shape, layout)
    if out is None:
        result = np.empty(expected, dtype=np.uint8)
        PyObject_GetBuffer(result, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)
        return result
    target = tensor_target(out)
    try:
        PyObject_GetBuffer(target, view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)
    except (BufferError, ValueError) as exc:  # numpy says ValueError for read-only
        raise ValueError(
            f"out must be a writable C-contiguous uint8 buffer of shape {expected}: {exc}"
        ) from None
    except TypeError:
        raise TypeError(
            f"out must be a numpy array, a CPU uint8 torch tensor or another object with the "
            f"writable buffer protocol (bytearray, memoryview...), got {type(out).__name__}"
        ) from None
    try:
        fmt = view.format.decode("ascii", "replace") if view.format != NULL else "B"
        if view.itemsize != 1 or fmt not in ("B", "=B", "<B", ">B", "@B"):
            raise ValueError(f"out must have dtype uint8 (format 'B'), got format {fmt!r}")
        if <size_t>view.len != shape.nbytes:
            raise ValueError(
                f"out has {view.len} bytes, expected {shape.nbytes} bytes (shape {expected}, uint8)"
            )
        # A flat buffer only needs the size; anything shaped must have the shape,
        # so a transposed slot cannot be filled with silently scrambled pixels.
        if view.ndim > 1:
            got_shape = tuple(view.shape[i] for i in range(view.ndim))
            if got_shape != expected:
                raise ValueError(f"out has shape {got_shape}, expected {expected} (uint8)")
    except BaseException:
        PyBuffer_Release(view)
        raise
    return out


cdef object info_tuple(const fd_info *info):
    return ImageInfo(
        format_name(info.format) or "unknown",
        info.width,
        info.height,
        info.channels,
        _COLOR_SPACES.get(info.color_space, "other"),
        _SUBSAMPLINGS.get(info.subsampling),
        bool(info.progressive),
        info.orientation,
    )


# --------------------------------------------------------------------------
# Probe, allocate, decode: the same three steps for every native format.

cdef object run_decode(object data, object out, const fd_options *opt, fd_format fmt):
    cdef fd_shape shape
    cdef fd_error err
    cdef fd_status st
    cdef Py_buffer inview
    cdef Py_buffer outview
    get_input(data, &inview)
    try:
        with nogil:
            st = fd_plan(fmt, <const uint8_t *>inview.buf, <size_t>inview.len, opt, &shape, &err)
        if st != FD_OK:
            raise_error(&err)
        result = prepare_out(out, &shape, opt.layout, &outview)
        try:
            with nogil:
                st = fd_decode(fmt, <const uint8_t *>inview.buf, <size_t>inview.len, opt,
                               <uint8_t *>outview.buf, <size_t>outview.len, &err)
        finally:
            PyBuffer_Release(&outview)
        if st == FD_ERR_ARGUMENT:
            # The options and the buffer passed the plan just now, so the decode
            # can only disagree with it when the data changed in between (another
            # thread writing the buffer): that is bad data, not a bad argument.
            raise DecodeError("the data changed while it was decoded: "
                              + PyUnicode_DecodeUTF8(err.message, strlen(err.message), "replace"))
        if st != FD_OK:
            raise_error(&err)
        return result
    finally:
        PyBuffer_Release(&inview)


# --------------------------------------------------------------------------
# Format-independent entry points.

def sniff(data):
    """The native format's name (one of NATIVE_FORMATS) from the magic bytes, or None."""
    cdef Py_buffer view
    cdef fd_format fmt
    get_input(data, &view)
    fmt = fd_sniff(<const uint8_t *>view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return format_name(fmt)


def read_native_header(data):
    """ImageInfo for the formats decoded natively; None for any other."""
    cdef Py_buffer view
    cdef fd_info info
    cdef fd_error err
    cdef fd_status st = FD_OK
    cdef fd_format fmt
    get_input(data, &view)
    try:
        fmt = fd_sniff(<const uint8_t *>view.buf, <size_t>view.len)
        if fmt == FD_FORMAT_UNKNOWN:
            return None
        with nogil:
            st = fd_read_header(fmt, <const uint8_t *>view.buf, <size_t>view.len, &info, &err)
    finally:
        PyBuffer_Release(&view)
    if st != FD_OK:
        raise_error(&err)
    return info_tuple(&info)


def plan_shape(height, width, *, mode=_D["mode"], scale=_D["scale"], min_size=_D["min_size"],
               crop=_D["crop"], size=_D["size"], interpolation=_D["interpolation"],
               layout=_D["layout"], max_pixels=_D["max_pixels"]):
    """The C planner's geometry for an image of height x width pixels (after
    EXIF orientation, when the decode applies it): the scale, the crop in the
    scaled frame and the output shape, with the decoders' own checks and
    errors (ValueError for options that do not fit, ImageTooLargeError above
    max_pixels). Options mean what they mean for decode_jpeg."""
    cdef fd_options opt
    cdef fd_geometry geo
    cdef fd_shape shape
    cdef fd_error err
    cdef uint32_t h, w
    parse_common(&opt, mode, crop, False, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_scaling(&opt, scale, min_size)
    h_in, w_in = operator.index(height), operator.index(width)
    if not (0 < h_in <= 0xFFFFFFFF and 0 < w_in <= 0xFFFFFFFF):
        raise ValueError(f"height and width must be positive 32-bit sizes, got {height}x{width}")
    h, w = h_in, w_in
    if fd_plan_dims(h, w, &opt, &geo, &shape, &err) != FD_OK:
        raise_error(&err)
    return PlannedShape(
        geo.scale_num,
        (geo.scaled_height, geo.scaled_width),
        (geo.region.top, geo.region.left, geo.region.height, geo.region.width),
        shape_tuple(&shape, opt.layout),
    )


def check_work(blocks, nbytes, max_work_per_byte=_D["max_work_per_byte"], what="image"):
    """The decoders' work budget for decoders outside the C core: raises
    ImageTooLargeError when `blocks` 8x8 blocks of work (64 pixels each, for
    formats without blocks) from `nbytes` of data is above the budget."""
    cdef fd_options opt
    cdef fd_error err
    fd_options_init(&opt)
    parse_max_work(&opt, max_work_per_byte)
    what_bytes = str(what).encode("utf-8", "replace")
    if fd_check_work(min(operator.index(blocks), 2 ** 64 - 1), operator.index(nbytes),
                     opt.max_work_per_byte, what_bytes, &err) != FD_OK:
        raise_error(&err)


def fill_out(arr, out, layout="HWC"):
    """Copies a finished uint8 array of shape (H, W, C) (layout 'HWC') or
    (C, H, W) ('CHW') into `out`, validating `out` exactly as the native
    decoders do; returns `out`."""
    cdef fd_shape shape
    cdef Py_buffer view
    cdef fd_layout lay = <fd_layout>parse_layout(layout)
    if lay == FD_LAYOUT_CHW:
        shape.channels, shape.height, shape.width = arr.shape
    else:
        shape.height, shape.width, shape.channels = arr.shape
    shape.nbytes = arr.size
    prepare_out(out, &shape, lay, &view)
    try:
        target = tensor_target(out)
        np.frombuffer(<object>PyMemoryView_FromObject(target), dtype=np.uint8)[:] = arr.reshape(-1)
    finally:
        PyBuffer_Release(&view)
    return out


def library_info():
    cdef char version[64]
    cdef int simd = 0
    with nogil:
        fd_jpeg_library_info(version, sizeof(version), &simd)
    return version.decode("ascii", "replace"), bool(simd)


include "_jpeg.pxi"
include "_bmp.pxi"
include "_png.pxi"
include "_resample.pxi"
include "_tensor.pxi"
include "_color.pxi"
include "_augment.pxi"
include "_readpool.pxi"
include "_raster.pxi"
