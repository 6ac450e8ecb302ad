# BMP entry points; included by _native.pyx. See docs/decisions/bmp.md.


def decode_bmp(data, *, mode=_D["mode"], crop=_D["crop"], size=_D["size"],
               interpolation=_D["interpolation"], flip=_D["flip"], layout=_D["layout"],
               out=_D["out"], max_pixels=_D["max_pixels"],
               max_work_per_byte=_D["max_work_per_byte"]):
    """Decodes a BMP into a uint8 array, with its crop, resize and flip done in the same call.

    Every header version and pixel layout of the BMP Suite is read natively
    (1/2/4/8-bit palettes, 16/24/32/64-bit, bit fields, RLE4/RLE8/RLE24, an
    embedded JPEG), with the pixels ``PIL.Image.open(f).convert(mode)`` gives
    wherever Pillow decodes the file. Alpha is dropped, as ``convert('RGB')``
    drops it. The headers are checked in full before anything is allocated, and
    the GIL is released while pixels are decoded. BMP has no DCT scaling:
    ``scale``, ``min_size``, ``exif``, ``fast`` and ``strict`` are
    :func:`decode_jpeg`'s only (:func:`decode_image` emulates the scales).

    Parameters
    ----------
    data : bytes-like
        The encoded file, any C-contiguous buffer, as for :func:`decode_jpeg`.
    mode : {'RGB', 'L'}, default 'RGB'
        'RGB' gives 3 channels; 'L' one channel of Pillow's luma
        (ITU-R 601-2), as ``convert('L')``. :class:`Mode` members work too.
    crop : (int, int, int, int), optional
        (top, left, height, width) of the region to keep, in pixels from the
        top-left corner of the image as displayed (bottom-up files too). Only
        its rows are read. It must lie inside the image.
    size : (int, int), optional
        (height, width) of the output: the crop (or the whole image) is
        resampled to exactly this size, as Pillow's ``Image.resize(size,
        box=crop)`` resamples (antialiased when shrinking).
    interpolation : {'bilinear', 'bicubic', 'nearest'}, default 'bilinear'
        The resample filter for ``size`` (torchvision's ``InterpolationMode``
        works too); unused without ``size``.
    flip : bool, default False
        Mirror the output left to right, written as the rows are.
    layout : {'HWC', 'CHW'}, default 'HWC'
        'HWC' gives (height, width, channels); 'CHW' gives (channels, height,
        width), written directly. :class:`Layout` members work too.
    out : numpy.ndarray or torch.Tensor, optional
        Where to write the pixels instead of a new array: a writable
        C-contiguous uint8 numpy array of the output's shape, a contiguous CPU
        ``torch.uint8`` tensor of that shape, or any writable flat buffer of
        exactly the output's size in bytes.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        Refuse an image whose declared width x height is above this, right
        after the dimensions are read. The default is Pillow's
        decompression-bomb limit (178956970); None disables it.
    max_work_per_byte : int or None, default 2048
        Refuse a file whose decoding work (64 pixels counting as one 8x8
        block) is above this many blocks per byte of data: an RLE file of a
        few hundred bytes that declares a huge image. None disables it.

    Returns
    -------
    numpy.ndarray
        uint8 pixels, as :func:`decode_jpeg` returns them: (H, W, C) or
        (C, H, W), ``out`` itself when given.

    Raises
    ------
    DecodeError
        The data is corrupt or truncated (pixel data missing, a bad header).
    UnsupportedFormatError
        The data is not a BMP, or uses a variant not read natively (BI_PNG,
        CMYK, OS/2 Huffman); :func:`decode_image` tries Pillow for those.
    ImageTooLargeError
        The image is above ``max_pixels`` or ``max_work_per_byte``.
    ValueError
        An option out of range (an unknown mode, layout or interpolation, a
        crop outside the image, a non-positive size), or an ``out`` of the
        wrong size, shape or dtype, read-only, not C-contiguous, or a tensor on
        another device.
    TypeError
        ``data`` is not bytes-like, ``out`` is neither a buffer nor a tensor,
        or ``crop`` / ``size`` is not a tuple of ints.
    MemoryError
        The output could not be allocated.
    """
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_max_work(&opt, max_work_per_byte)
    return run_decode(data, out, &opt, FD_FORMAT_BMP)
