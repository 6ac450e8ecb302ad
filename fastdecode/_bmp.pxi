# BMP entry points; included by _native.pyx.


def decode_bmp(data, *, mode=_D["mode"], crop=_D["crop"], size=_D["size"],
               interpolation=_D["interpolation"], flip=_D["flip"], layout=_D["layout"],
               out=_D["out"], max_pixels=_D["max_pixels"],
               max_work_per_byte=_D["max_work_per_byte"]):
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_max_work(&opt, max_work_per_byte)
    return run_decode(data, out, &opt, FD_FORMAT_BMP)
