# JPEG entry points; included by _native.pyx. See docs/decisions/jpeg.md.


def decode_jpeg(data, *, mode=_D["mode"], scale=_D["scale"], min_size=_D["min_size"],
                crop=_D["crop"], size=_D["size"], interpolation=_D["interpolation"],
                flip=_D["flip"], layout=_D["layout"], out=_D["out"], exif=_D["exif"],
                fast=_D["fast"], strict=_D["strict"], max_pixels=_D["max_pixels"],
                max_work_per_byte=_D["max_work_per_byte"]):
    """Decodes a JPEG into a uint8 array, with its crop, scale, resize and flip done in the same call.

    With the default options the pixels are those of
    ``PIL.Image.open(f).convert(mode)``: the same libjpeg-turbo IDCT and
    upsampling, bit for bit. The options run in one pass, in this order: EXIF
    orientation (``exif``), ``crop``, the DCT scale (``scale`` / ``min_size``,
    or picked for ``size``), the resample to ``size``, ``flip``, written in
    ``layout``. Only the rows the crop covers are decoded, and the decode stops
    after its last one. The GIL is released while pixels are decoded, so threads
    decode in parallel.

    Parameters
    ----------
    data : bytes-like
        The encoded file: bytes, bytearray, memoryview, mmap or a 1-D uint8
        numpy array (any C-contiguous buffer), read in place without a copy.
    mode : {'RGB', 'L'}, default 'RGB'
        'RGB' gives 3 channels; 'L' one channel of Pillow's luma
        (ITU-R 601-2), as ``convert('L')``. Grayscale, CMYK and YCCK files are
        converted as Pillow converts them. :class:`Mode` members work too.
    scale : float, optional
        Decode at M/8 of the full size, M in 1..8 (1, 0.5, 0.25, 0.125, 0.375,
        ...): libjpeg's DCT scaling, far cheaper than a full decode and a
        resize. The image is then ceil(H * M / 8) x ceil(W * M / 8) pixels.
        None (default) is 1, or with ``size`` the scale picked for it. Give
        ``scale`` or ``min_size``, not both.
    min_size : (int, int), optional
        (height, width): picks the smallest M/8 whose output (the crop's, with
        ``crop``) is still at least this large in both dimensions; full size
        when none is.
    crop : (int, int, int, int), optional
        (top, left, height, width) of the region to keep, in pixels of the
        full-resolution image (upright, with ``exif``): the same numbers for
        every scale. At a scale below 1 the output is the crop's footprint in
        the scaled image (start rounded down, end rounded up). It must lie
        inside the image.
    size : (int, int), optional
        (height, width) of the output: the crop (or the whole image) is
        resampled to exactly this size, as Pillow's ``Image.resize(size,
        box=crop)`` resamples (antialiased when shrinking). Without ``scale``
        or ``min_size`` the decode first takes the smallest of the 1/8, 1/4,
        1/2 and 1 scales that still covers ``size``.
    interpolation : {'bilinear', 'bicubic', 'nearest'}, default 'bilinear'
        The resample filter for ``size`` (torchvision's ``InterpolationMode``
        works too); unused without ``size``.
    flip : bool, default False
        Mirror the output left to right (what RandomHorizontalFlip does),
        written as the rows are, with no extra pass.
    layout : {'HWC', 'CHW'}, default 'HWC'
        'HWC' gives (height, width, channels), Pillow's and numpy's order;
        'CHW' gives (channels, height, width), torch's, written directly.
        :class:`Layout` members work too.
    out : numpy.ndarray or torch.Tensor, optional
        Where to write the pixels instead of a new array: a writable
        C-contiguous uint8 numpy array of the output's shape, a contiguous CPU
        ``torch.uint8`` tensor of that shape (for instance ``batch[i]`` of a
        preallocated (N, C, H, W) batch with ``layout='CHW'``), or any writable
        flat buffer of exactly the output's size in bytes.
    exif : bool, default False
        Apply the EXIF orientation tag (the upright image, as
        ``PIL.ImageOps.exif_transpose`` gives it); ``crop`` is then in the
        upright frame. Off by default, as in torchvision's ImageFolder loader.
    fast : bool, default False
        Use libjpeg-turbo's fast integer IDCT and plain chroma upsampling:
        faster, slightly less accurate, and no longer Pillow's exact pixels.
    strict : bool, default False
        Make every libjpeg warning (damage it would otherwise recover from,
        such as a corrupt Huffman code or extraneous bytes) a DecodeError. By
        default such a file decodes as Pillow decodes it. A truncated file is
        an error either way.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        Refuse an image whose declared width x height is above this, before
        anything is allocated. The default is Pillow's decompression-bomb
        limit (178956970); None disables it.
    max_work_per_byte : int or None, default 2048
        Refuse a file whose decoding work, in 8x8 blocks (a block of each
        component once per scan that codes it), is above this many per byte of
        data, before the work is done. The default passes every real photo and
        refuses files of a few hundred bytes that declare a huge image; None
        disables it.

    Returns
    -------
    numpy.ndarray
        uint8 pixels of shape (H, W, C) for 'HWC' or (C, H, W) for 'CHW', with
        C = 3 for 'RGB' and 1 for 'L'. When ``out`` is given, ``out`` itself
        (the same numpy array or tensor), filled.

    Raises
    ------
    DecodeError
        The data is corrupt or truncated (with ``strict``, damaged at all).
    UnsupportedFormatError
        The data is not a JPEG, or a variant libjpeg-turbo was built without
        (lossless or 12-bit); :func:`decode_image` tries Pillow for those.
    ImageTooLargeError
        The image is above ``max_pixels`` or ``max_work_per_byte``.
    ValueError
        An option out of range: an unknown mode, layout or interpolation, a
        scale that is not M/8, both ``scale`` and ``min_size``, a crop outside
        the image, a non-positive size; or an ``out`` of the wrong size, shape
        or dtype, read-only, not C-contiguous, or a tensor on another device.
    TypeError
        ``data`` is not bytes-like, ``out`` is neither a buffer nor a tensor,
        or ``crop`` / ``size`` / ``min_size`` is not a tuple of ints.
    MemoryError
        The output or the decoder's working memory could not be allocated.
    """
    cdef fd_options opt

    parse_common(&opt, mode, crop, flip, layout, max_pixels)
    parse_size(&opt, size, interpolation)
    parse_scaling(&opt, scale, min_size)
    opt.exif = 1 if exif else 0
    opt.fast = 1 if fast else 0
    opt.strict = 1 if strict else 0
    parse_max_work(&opt, max_work_per_byte)

    return run_decode(data, out, &opt, FD_FORMAT_JPEG)
