# JPEG entry points; included by _native.pyx.


def decode_jpeg(data, *, mode=_D["mode"], scale=_D["scale"], min_size=_D["min_size"],
                crop=_D["crop"], size=_D["size"], interpolation=_D["interpolation"],
                flip=_D["flip"], layout=_D["layout"], out=_D["out"], exif=_D["exif"],
                fast=_D["fast"], strict=_D["strict"], max_pixels=_D["max_pixels"],
                max_work_per_byte=_D["max_work_per_byte"]):
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_scaling(&opt, scale, min_size)
    opt.exif = 1 if exif else 0
    opt.fast = 1 if fast else 0
    opt.strict = 1 if strict else 0
    parse_max_work(&opt, max_work_per_byte)

    return run_decode(data, out, &opt, FD_FORMAT_JPEG)
