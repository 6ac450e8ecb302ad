# JPEG entry points; included by _native.pyx.


def decode_jpeg(data, *, mode="RGB", scale=None, min_size=None, crop=None, size=None,
                interpolation="bilinear", flip=False, layout="HWC", out=None, exif=False,
                fast=False, strict=False, max_pixels=DEFAULT_MAX_PIXELS):
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_scaling(&opt, scale, min_size)
    opt.exif = 1 if exif else 0
    opt.fast = 1 if fast else 0
    opt.strict = 1 if strict else 0

    return run_decode(data, out, &opt, FD_FORMAT_JPEG)
