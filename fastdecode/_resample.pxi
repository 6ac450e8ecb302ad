# The resampler on arrays; included by _native.pyx. Decoders reach it through
# `size=`; this entry point serves tests and already-decoded images.


def resize(image, size, *, interpolation="bilinear", box=None, flip=False, layout="HWC",
           out=None):
    """Resizes an (H, W, C) uint8 array (C = 1 or 3) like PIL's Image.resize.

    box=(x0, y0, x1, y1) in source pixels, sub-pixel allowed (PIL's order).
    """
    cdef fd_options opt
    cdef fd_shape shape
    cdef fd_error err
    cdef fd_status st
    cdef fd_box b
    cdef fd_dest dest
    cdef Py_buffer inview
    cdef Py_buffer outview
    cdef uint32_t src_h, src_w, channels
    arr = np.ascontiguousarray(image, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[2] not in (1, 3):
        raise ValueError(f"image must be (H, W, 1) or (H, W, 3) uint8, got shape {arr.shape}")
    parse_common(&opt, "RGB", None, flip, layout, None)
    parse_size(&opt, size, interpolation)
    if not opt.size_height:
        raise ValueError("size is required")
    src_h, src_w, channels = arr.shape
    b.x0, b.y0, b.x1, b.y1 = (0.0, 0.0, float(src_w), float(src_h)) if box is None else box
    shape.height, shape.width, shape.channels = opt.size_height, opt.size_width, channels
    shape.nbytes = opt.size_height * opt.size_width * channels
    get_input(arr, &inview)
    try:
        result = prepare_out(out, &shape, opt.layout, &outview)
        dest.base = <uint8_t *>outview.buf
        dest.height, dest.width, dest.channels = shape.height, shape.width, shape.channels
        dest.layout, dest.flip = opt.layout, opt.flip
        try:
            with nogil:
                st = fd_resample(<const uint8_t *>inview.buf, <size_t>src_w * channels, src_h,
                                 src_w, b, <fd_interp>opt.interpolation, &dest, &err)
        finally:
            PyBuffer_Release(&outview)
    finally:
        PyBuffer_Release(&inview)
    if st != FD_OK:
        raise_error(&err)
    return result
