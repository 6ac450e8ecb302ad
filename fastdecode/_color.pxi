# ColorJitter's Pillow arithmetic on a rendered uint8 image, in place; included
# by _native.pyx. fastdecode.transforms.color draws the steps; src_c/fd_color.c
# computes them.

COLOR_BRIGHTNESS = FD_COLOR_BRIGHTNESS
COLOR_CONTRAST = FD_COLOR_CONTRAST
COLOR_SATURATION = FD_COLOR_SATURATION
COLOR_HUE = FD_COLOR_HUE
COLOR_MAX_STEPS = FD_COLOR_MAX_STEPS


def adjust_colors(image, steps, layout="CHW"):
    """Applies ``steps`` (a sequence of (op, factor): COLOR_BRIGHTNESS,
    COLOR_CONTRAST or COLOR_SATURATION and the factor torchvision passes to
    Pillow, or COLOR_HUE and the uint8 shift adjust_hue adds to Pillow's H)
    in order to ``image`` in place, as torchvision's PIL functions
    adjust_brightness / adjust_contrast / adjust_saturation / adjust_hue do,
    bit for bit.

    image: a writable C-contiguous uint8 array (3, H, W) (layout 'CHW') or
    (H, W, 3) ('HWC'). Returns image. ValueError / TypeError for anything
    else, an unknown op, a factor that is not finite, or too many steps.
    """
    cdef fd_layout lay = <fd_layout>parse_layout(layout)
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise TypeError(f"image must be a uint8 numpy array, got {type(image).__name__} "
                        f"{getattr(image, 'dtype', '')}")
    expected = "(3, H, W)" if lay == FD_LAYOUT_CHW else "(H, W, 3)"
    if image.ndim != 3 or image.shape[0 if lay == FD_LAYOUT_CHW else 2] != 3:
        raise ValueError(f"image must have shape {expected} for layout {layout!r}, "
                         f"got {image.shape}")
    if not image.flags.c_contiguous or not image.flags.writeable:
        raise ValueError("image must be writable and C-contiguous")
    items = list(steps)
    if len(items) > FD_COLOR_MAX_STEPS:
        raise ValueError(f"at most {FD_COLOR_MAX_STEPS} colour steps, got {len(items)}")
    cdef fd_color_step buf[FD_COLOR_MAX_STEPS]
    cdef size_t n = len(items), k
    for k in range(n):
        try:
            op, factor = items[k]
        except (TypeError, ValueError):
            raise ValueError(f"colour step {k} must be an (op, factor) pair, got {items[k]!r}") from None
        code = operator.index(op)
        # fd_color_apply checks the op too (for C callers); here it must fit the enum first
        if not 0 <= code <= FD_COLOR_HUE:
            raise ValueError(f"colour step {k}: unknown op {op!r}")
        buf[k].op = <fd_color_op>code
        buf[k].factor = <float>float(factor)
    height = image.shape[1] if lay == FD_LAYOUT_CHW else image.shape[0]
    width = image.shape[2] if lay == FD_LAYOUT_CHW else image.shape[1]
    if height > 0xFFFFFFFF or width > 0xFFFFFFFF:
        raise ValueError(f"image is too large: {image.shape}")
    cdef uint32_t h = height, w = width
    cdef uint8_t[::1] pixels = image.reshape(-1)
    cdef uint8_t *base = &pixels[0] if pixels.shape[0] else NULL
    cdef size_t size = pixels.shape[0]
    cdef fd_error err
    cdef fd_status st
    with nogil:
        st = fd_color_apply(base, size, h, w, lay, buf, n, &err)
    if st != FD_OK:
        raise_error(&err)
    return image
