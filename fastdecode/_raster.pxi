# COCO masks at sampled rows and columns (src_c/fd_raster.h); included by
# _native.pyx. fastdecode.targets.masks calls these; docs/decisions/detection.md.

from libc.stdint cimport int64_t, uintptr_t

cdef extern from "fd_raster.h" nogil:
    ctypedef struct fd_grid:
        const int64_t *rows
        uint32_t n_rows
        const int64_t *cols
        uint32_t n_cols
    fd_status fd_raster_polygons(const double *xy, const uint32_t *lens, uint32_t n_polys,
                                 uint32_t h, uint32_t w, const fd_grid *grid, uint8_t *out,
                                 fd_error *err)
    fd_status fd_raster_rle(const uint32_t *counts, size_t n_counts, uint32_t h, uint32_t w,
                            const fd_grid *grid, uint8_t *out, fd_error *err)
    fd_status fd_rle_from_string(const char *s, size_t len, uint32_t *counts, size_t cap,
                                 size_t *n, fd_error *err)


cdef _grid_arrays(rows, cols, out, uint32_t h, uint32_t w):
    r = np.ascontiguousarray(rows, dtype=np.int64)
    c = np.ascontiguousarray(cols, dtype=np.int64)
    if r.ndim != 1 or c.ndim != 1:
        raise ValueError("rows and cols must be 1-D")
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or \
            out.shape != (r.shape[0], c.shape[0]) or not out.flags.c_contiguous or \
            not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous uint8 array of shape "
                         f"({r.shape[0]}, {c.shape[0]})")
    if h == 0 or w == 0:
        raise ValueError(f"empty image ({h} x {w})")
    return r, c


def raster_polygons(polygons, uint32_t h, uint32_t w, rows, cols, out):
    """ORs the union of COCO polygons on an h x w image, at (rows x cols), into out."""
    cdef fd_grid grid
    cdef fd_error err
    cdef fd_status st
    cdef uintptr_t pxy, plen, pr, pc, po
    r, c = _grid_arrays(rows, cols, out, h, w)
    polys = [np.asarray(p, dtype=np.float64).reshape(-1) for p in polygons]
    lens = np.array([p.shape[0] for p in polys], dtype=np.uint32)
    xy = np.ascontiguousarray(np.concatenate(polys) if polys else np.zeros(0), dtype=np.float64)
    grid.n_rows, grid.n_cols = r.shape[0], c.shape[0]
    pr, pc, po = r.ctypes.data, c.ctypes.data, out.ctypes.data
    pxy, plen = xy.ctypes.data, lens.ctypes.data
    grid.rows, grid.cols = <const int64_t *>pr, <const int64_t *>pc
    cdef uint32_t n = <uint32_t>len(polys)
    with nogil:
        st = fd_raster_polygons(<const double *>pxy, <const uint32_t *>plen, n, h, w, &grid,
                                <uint8_t *>po, &err)
    if st != FD_OK:
        raise_error(&err)


def raster_rle(counts, uint32_t h, uint32_t w, rows, cols, out):
    """ORs an RLE (run lengths, zeros first, column-major) at (rows x cols) into out."""
    cdef fd_grid grid
    cdef fd_error err
    cdef fd_status st
    cdef uintptr_t pk, pr, pc, po
    r, c = _grid_arrays(rows, cols, out, h, w)
    k = np.ascontiguousarray(counts, dtype=np.uint32)
    grid.n_rows, grid.n_cols = r.shape[0], c.shape[0]
    pr, pc, po, pk = r.ctypes.data, c.ctypes.data, out.ctypes.data, k.ctypes.data
    grid.rows, grid.cols = <const int64_t *>pr, <const int64_t *>pc
    cdef size_t n = k.shape[0]
    with nogil:
        st = fd_raster_rle(<const uint32_t *>pk, n, h, w, &grid, <uint8_t *>po, &err)
    if st != FD_OK:
        raise_error(&err)


def rle_from_string(s):
    """pycocotools' compressed RLE string (str or bytes) to its run lengths (uint32 array)."""
    cdef fd_error err
    cdef fd_status st
    cdef size_t n = 0
    cdef uintptr_t pk
    data = s.encode("ascii") if isinstance(s, str) else bytes(s)
    cdef const char *p = data
    cdef size_t length = len(data)
    counts = np.zeros(length if length > 0 else 1, dtype=np.uint32)
    pk = counts.ctypes.data
    with nogil:
        st = fd_rle_from_string(p, length, <uint32_t *>pk, length, &n, &err)
    if st != FD_OK:
        raise_error(&err)
    return counts[:n].copy()
