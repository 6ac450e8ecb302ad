# PNG and WebP entry points (libspng, libwebp); included by _native.pyx.
# Each format is native only where setup.py found its library: otherwise its
# decoder raises UnsupportedFormatError and decode_image asks Pillow. See
# docs/decisions/png-webp.md.


cdef fd_format format_named(str name):
    """The C core's format called `name`; FD_FORMAT_UNKNOWN when it has none."""
    cdef size_t i = 0
    while fd_format_at(i) != FD_FORMAT_UNKNOWN:
        if format_name(fd_format_at(i)) == name:
            return fd_format_at(i)
        i += 1
    return FD_FORMAT_UNKNOWN


cdef fd_format FORMAT_PNG = format_named("png")
cdef fd_format FORMAT_WEBP = format_named("webp")


def codec_versions():
    """The optional codecs' library versions: {'png': libspng's, 'webp':
    libwebp's}, None for one the extension was built without."""
    png = fd_png_library_version().decode("ascii", "replace")
    webp = fd_webp_library_version().decode("ascii", "replace")
    return {"png": png or None, "webp": webp or None}


def decode_png(data, *, mode=_D["mode"], crop=_D["crop"], size=_D["size"],
               interpolation=_D["interpolation"], flip=_D["flip"], layout=_D["layout"],
               out=_D["out"], exif=_D["exif"], max_pixels=_D["max_pixels"],
               max_work_per_byte=_D["max_work_per_byte"]):
    """Decodes a PNG (libspng) into a uint8 array, crop, resize and flip in the same call.

    Every colour type and bit depth, interlaced or not, with the pixels of
    ``PIL.Image.open(f).convert(mode)``: alpha and tRNS dropped, 16-bit
    samples reduced as Pillow reduces them. Rows below the crop are never
    decoded. The options mean what they mean for :func:`decode_bmp`;
    ``exif=True`` sends a file with an eXIf chunk to Pillow
    (UnsupportedFormatError here), which applies its orientation.

    Raises DecodeError (corrupt, truncated, a bad CRC before the pixels),
    UnsupportedFormatError (not a PNG, a variant left to Pillow: a bad IDAT
    CRC, a palette index past the palette, eXIf with exif=True; or the
    extension was built without libspng), ImageTooLargeError (max_pixels,
    max_work_per_byte), ValueError / TypeError / MemoryError as decode_bmp.
    """
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_max_work(&opt, max_work_per_byte)
    opt.exif = 1 if exif else 0
    return run_decode(data, out, &opt, FORMAT_PNG)


def decode_webp(data, *, mode=_D["mode"], scale=_D["scale"], min_size=_D["min_size"],
                crop=_D["crop"], size=_D["size"], interpolation=_D["interpolation"],
                flip=_D["flip"], layout=_D["layout"], out=_D["out"], exif=_D["exif"],
                max_pixels=_D["max_pixels"], max_work_per_byte=_D["max_work_per_byte"]):
    """Decodes a WebP (libwebp) into a uint8 array, crop, scale, resize and flip in one call.

    Lossy and lossless, alpha dropped as ``convert('RGB')`` drops it; at
    full scale the pixels are Pillow's. The crop is libwebp's own
    (``use_cropping``: only the rows down to it are decoded), and ``scale``
    / ``min_size`` (M/8, as for :func:`decode_jpeg`) are libwebp's rescaler
    (``use_scaling``) of that crop, so a reduced scale is not Pillow's
    pixels. An animation, or a file with EXIF when ``exif=True``, is
    UnsupportedFormatError here: decode_image asks Pillow (its first frame).

    Raises DecodeError (corrupt or truncated), UnsupportedFormatError (not a
    WebP, an animation, EXIF with exif=True, or the extension was built
    without libwebp), ImageTooLargeError, ValueError / TypeError /
    MemoryError as decode_jpeg.
    """
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_scaling(&opt, scale, min_size)
    parse_max_work(&opt, max_work_per_byte)
    opt.exif = 1 if exif else 0
    return run_decode(data, out, &opt, FORMAT_WEBP)
