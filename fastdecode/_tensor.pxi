# Float conversion kernels (ToTensor + Normalize in one pass); included by _native.pyx.
#
# A uint8 pixel has 256 values, so any per-channel pointwise chain
# (ToTensor / ToDtype(float32, scale=True) / ConvertImageDtype, then Normalize)
# is a 256-entry table per channel. Building the table with the very float32
# operations torchvision runs makes the one-pass result bit-identical to
# torchvision's several passes; fastdecode.transforms builds it by running the
# real transforms on a 256-pixel ramp.


cdef void _lut_planes(const uint8_t *src, float *dst, const float *lut, Py_ssize_t outer,
                      Py_ssize_t channels, Py_ssize_t plane) noexcept nogil:
    cdef Py_ssize_t n, c, i
    cdef const float *table
    for n in range(outer):
        for c in range(channels):
            table = lut + c * 256
            i = 0
            while i + 4 <= plane:
                dst[i] = table[src[i]]
                dst[i + 1] = table[src[i + 1]]
                dst[i + 2] = table[src[i + 2]]
                dst[i + 3] = table[src[i + 3]]
                i += 4
            while i < plane:
                dst[i] = table[src[i]]
                i += 1
            src += plane
            dst += plane


cdef tuple _planar_geometry(object src, Py_ssize_t channels):
    """(outer, plane) of a C-contiguous (..., C, H, W) uint8 array."""
    if not isinstance(src, np.ndarray) or src.dtype != np.uint8:
        raise TypeError(
            f"src must be a uint8 numpy array of shape (..., C, H, W), got "
            f"{type(src).__name__} {getattr(src, 'dtype', '')}"
        )
    if src.ndim < 3:
        raise ValueError(f"src must have shape (..., C, H, W), got shape {src.shape}")
    if not src.flags.c_contiguous:
        raise ValueError("src must be C-contiguous")
    if src.shape[src.ndim - 3] != channels:
        raise ValueError(
            f"src has {src.shape[src.ndim - 3]} channels (shape {src.shape}), the table has {channels}"
        )
    plane = src.shape[src.ndim - 2] * src.shape[src.ndim - 1]
    outer = src.size // (channels * plane) if plane and channels else 0
    return outer, plane


cdef object _float_out(object out, object src):
    if out is None:
        return np.empty(src.shape, dtype=np.float32)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32:
        raise TypeError(
            f"out must be a float32 numpy array (tensor.numpy()), got "
            f"{type(out).__name__} {getattr(out, 'dtype', '')}"
        )
    if out.shape != src.shape:
        raise ValueError(f"out has shape {out.shape}, expected {src.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be writable and C-contiguous")
    return out


def lut_to_float(src, lut, out=None):
    """out[..., c, y, x] = lut[c, src[..., c, y, x]] in one pass, GIL released.

    src: uint8 C-contiguous array (..., C, H, W); lut: float32 (C, 256);
    out: optional float32 C-contiguous array of src's shape. Returns out.
    """
    table = np.ascontiguousarray(lut, dtype=np.float32)
    if table.ndim != 2 or table.shape[1] != 256:
        raise ValueError(f"lut must have shape (C, 256), got {table.shape}")
    outer, plane = _planar_geometry(src, table.shape[0])
    result = _float_out(out, src)
    if np.may_share_memory(result, src):
        raise ValueError("out must not overlap src")
    cdef const uint8_t[::1] s = src.reshape(-1)
    cdef float[::1] d = result.reshape(-1)
    cdef const float[:, ::1] t = table
    cdef Py_ssize_t n_outer = outer, n_plane = plane, channels = table.shape[0]
    if s.shape[0] == 0:
        return result
    with nogil:
        _lut_planes(&s[0], &d[0], &t[0, 0], n_outer, channels, n_plane)
    return result
