# The auto-augment policies' Pillow pixel operations on a rendered uint8
# image, in place; included by _native.pyx. fastdecode.augment draws the
# steps; src_c/fd_augment.c computes them (docs/decisions/augment.md).

from libc.math cimport isfinite
from libc.string cimport memset

AUG_COLOR = FD_AUG_COLOR
AUG_AFFINE = FD_AUG_AFFINE
AUG_LUT = FD_AUG_LUT
AUG_AUTOCONTRAST = FD_AUG_AUTOCONTRAST
AUG_EQUALIZE = FD_AUG_EQUALIZE
AUG_SHARPNESS = FD_AUG_SHARPNESS
AUG_BLUR = FD_AUG_BLUR
AUG_MAX_STEPS = FD_AUG_MAX_STEPS

_AUG_NAMES = {FD_AUG_COLOR: "AUG_COLOR", FD_AUG_AFFINE: "AUG_AFFINE", FD_AUG_LUT: "AUG_LUT",
              FD_AUG_AUTOCONTRAST: "AUG_AUTOCONTRAST", FD_AUG_EQUALIZE: "AUG_EQUALIZE",
              FD_AUG_SHARPNESS: "AUG_SHARPNESS", FD_AUG_BLUR: "AUG_BLUR"}
# each kind's tuple length, the kind included
_AUG_ARITY = {FD_AUG_COLOR: 3, FD_AUG_AFFINE: 4, FD_AUG_LUT: 2, FD_AUG_AUTOCONTRAST: 1,
              FD_AUG_EQUALIZE: 1, FD_AUG_SHARPNESS: 2, FD_AUG_BLUR: 5}
_AUG_RESAMPLE = (FD_AUG_NEAREST, FD_AUG_BILINEAR, FD_AUG_BICUBIC)


# The checks name the value as "augment step {k}: {what}[ {i}]", the message
# built only when one fails (a fused image passes a few steps per call).
cdef str _aug_name(Py_ssize_t k, str what, Py_ssize_t i):
    return f"augment step {k}: {what}" if i < 0 else f"augment step {k}: {what} {i}"


cdef object _aug_int(object value, Py_ssize_t k, str what, Py_ssize_t i=-1):
    if type(value) is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{_aug_name(k, what, i)} must be an int, got {value!r}") from None


cdef double _aug_real(object value, Py_ssize_t k, str what, Py_ssize_t i=-1) except? -1.0:
    cdef double x
    if type(value) is float:
        x = value
    else:
        if isinstance(value, (str, bytes)):
            raise TypeError(f"{_aug_name(k, what, i)} must be a real number, got {value!r}")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{_aug_name(k, what, i)} must be a real number, "
                            f"got {value!r}") from None
        except OverflowError:  # an int past the doubles
            raise ValueError(f"{_aug_name(k, what, i)} must be finite, got {value!r}") from None
    if not isfinite(x):
        raise ValueError(f"{_aug_name(k, what, i)} must be finite, got {value!r}")
    return x


cdef int _aug_step(fd_aug_step *s, object step, Py_ssize_t k, list keep) except -1:
    """Fills *s from the tuple `step` (number k), or raises naming what is wrong."""
    if not isinstance(step, tuple) or len(step) == 0:
        raise TypeError(f"augment step {k} must be a tuple (kind, ...), got {step!r}")
    kind = _aug_int(step[0], k, "the kind")
    if kind not in _AUG_ARITY:
        raise ValueError(f"augment step {k}: unknown kind {step[0]!r}")
    name = _AUG_NAMES[kind]
    if len(step) != _AUG_ARITY[kind]:
        raise ValueError(f"augment step {k}: {name} takes a tuple of {_AUG_ARITY[kind]}, "
                         f"got {len(step)}: {step!r}")
    memset(s, 0, sizeof(fd_aug_step))
    s.kind = <fd_aug_kind>kind
    if kind == FD_AUG_COLOR:
        op = _aug_int(step[1], k, "the colour op")
        if not 0 <= op <= FD_COLOR_HUE:
            raise ValueError(f"augment step {k}: unknown colour op {step[1]!r}")
        factor = _aug_real(step[2], k, "the colour factor")
        if op == FD_COLOR_HUE and not (0 <= factor <= 255 and factor == int(factor)):
            raise ValueError(f"augment step {k}: the hue shift must be an integer in 0..255, "
                             f"got {step[2]!r}")
        s.color.op = <fd_color_op>op
        s.color.factor = <float>factor
    elif kind == FD_AUG_AFFINE:
        try:
            matrix = tuple(step[1])
        except TypeError:
            raise TypeError(f"augment step {k}: the matrix must be 6 numbers, "
                            f"got {step[1]!r}") from None
        if len(matrix) != 6:
            raise ValueError(f"augment step {k}: the matrix must be 6 numbers, "
                             f"got {len(matrix)}")
        for i in range(6):
            s.matrix[i] = _aug_real(matrix[i], k, "matrix entry", i)
        resample = _aug_int(step[2], k, "resample")
        if resample not in _AUG_RESAMPLE:
            raise ValueError(f"augment step {k}: resample must be 0 (NEAREST), 2 (BILINEAR) "
                             f"or 3 (BICUBIC), got {step[2]!r}")
        s.resample = resample
        fill = (0, 0, 0) if step[3] is None else step[3]
        try:
            fill = tuple(fill)
        except TypeError:
            raise TypeError(f"augment step {k}: fill must be None or (r, g, b), "
                            f"got {step[3]!r}") from None
        if len(fill) != 3:
            raise ValueError(f"augment step {k}: fill must be None or (r, g, b), got {step[3]!r}")
        for i in range(3):
            v = _aug_int(fill[i], k, "fill value", i)
            if not 0 <= v <= 255:
                raise ValueError(f"augment step {k}: fill value {i} ({v}) is not in 0..255")
            s.fill[i] = <uint8_t>v
    elif kind == FD_AUG_LUT:
        try:
            view = memoryview(step[1])
        except TypeError:
            raise TypeError(f"augment step {k}: the table must be bytes-like, "
                            f"got {type(step[1]).__name__}") from None
        table = view.tobytes()
        if len(table) == 256:
            table = table * 3
        elif len(table) != 768:
            raise ValueError(f"augment step {k}: the table must have 256 or 768 bytes, "
                             f"got {len(table)}")
        keep.append(table)
        s.table = <const uint8_t *><const char *>table
    elif kind == FD_AUG_SHARPNESS:
        s.factor = <float>_aug_real(step[1], k, "the sharpness factor")
    elif kind == FD_AUG_BLUR:
        for i, axis in enumerate("xy"):
            n = _aug_int(step[1 + i], k, f"kernel_size_{axis}")
            if not (0 < n < 2 ** 31 and n % 2 == 1):
                raise ValueError(f"augment step {k}: kernel_size_{axis} must be odd and "
                                 f"positive, got {n}")
            sigma = _aug_real(step[3 + i], k, f"sigma_{axis}")
            if not sigma > 0:
                raise ValueError(f"augment step {k}: sigma_{axis} must be > 0, got {sigma}")
            s.ksize[i] = n
            s.sigma[i] = <float>sigma
    return 0


def augment(pixels, layout, steps):
    """Applies ``steps`` in order to ``pixels`` in place, each (but the
    blur) bit for bit as Pillow computes it on the same RGB image; returns
    ``pixels``.

    pixels: a writable C-contiguous uint8 array (H, W, 3) (layout 'HWC') or
    (3, H, W) ('CHW'). steps: tuples (AUG_COLOR, COLOR_* op, factor),
    (AUG_AFFINE, (a, b, c, d, e, f), resample 0/2/3, fill None or (r, g, b)),
    (AUG_LUT, 256 or 768 table bytes), (AUG_AUTOCONTRAST,), (AUG_EQUALIZE,),
    (AUG_SHARPNESS, factor), (AUG_BLUR, kernel_size_x, kernel_size_y, sigma_x,
    sigma_y) (torchvision's gaussian_blur within 1, not bit for bit); at most
    AUG_MAX_STEPS. TypeError / ValueError naming the step for anything else
    (a blur kernel's radius must be below the image's side), raised before
    any pixel is written.
    """
    cdef fd_layout lay = <fd_layout>parse_layout(layout)
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
        raise TypeError(f"pixels must be a uint8 numpy array, got {type(pixels).__name__} "
                        f"{getattr(pixels, 'dtype', '')}")
    expected = "(3, H, W)" if lay == FD_LAYOUT_CHW else "(H, W, 3)"
    if pixels.ndim != 3 or pixels.shape[0 if lay == FD_LAYOUT_CHW else 2] != 3:
        raise ValueError(f"pixels must have shape {expected} for layout {layout!r}, "
                         f"got {pixels.shape}")
    if not pixels.flags.c_contiguous or not pixels.flags.writeable:
        raise ValueError("pixels must be writable and C-contiguous")
    if pixels.size == 0:
        raise ValueError(f"pixels are empty: {pixels.shape}")
    if isinstance(steps, (str, bytes)):
        raise TypeError(f"steps must be a sequence of tuples, got {steps!r}")
    items = list(steps)
    if len(items) > FD_AUG_MAX_STEPS:
        raise ValueError(f"at most {FD_AUG_MAX_STEPS} augment steps, got {len(items)}")
    cdef fd_aug_step buf[FD_AUG_MAX_STEPS]
    cdef list keep = []  # the tables, alive until the C call returns
    cdef Py_ssize_t n = len(items), k
    for k in range(n):
        _aug_step(&buf[k], items[k], k, keep)
    height = pixels.shape[1] if lay == FD_LAYOUT_CHW else pixels.shape[0]
    width = pixels.shape[2] if lay == FD_LAYOUT_CHW else pixels.shape[1]
    if height > 0x7FFFFFFF or width > 0x7FFFFFFF:
        raise ValueError(f"pixels are too large: {pixels.shape}")
    cdef uint32_t h = height, w = width
    cdef uint8_t[::1] flat = pixels.reshape(-1)
    cdef size_t size = flat.shape[0]
    cdef fd_error err
    cdef fd_status st
    with nogil:
        st = fd_augment_apply(&flat[0], size, h, w, lay, buf, <size_t>n, &err)
    if st != FD_OK:
        raise_error(&err)
    return pixels
