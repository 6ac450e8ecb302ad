# BMP entry points; included by _native.pyx.


def decode_bmp(data, *, mode="RGB", crop=None, size=None, interpolation="bilinear", flip=False,
               layout="HWC", out=None, max_pixels=DEFAULT_MAX_PIXELS):
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    return run_decode(data, out, &opt, FD_FORMAT_BMP)
