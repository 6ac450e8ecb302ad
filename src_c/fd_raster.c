/* COCO masks at sampled rows and columns (fd_raster.h). The boundary walk is
 * pycocotools' rleFrPoly step for step (its 5x upsampling, its rounding and
 * truncations in the same double and int arithmetic), streamed instead of
 * stored; the toggles it keeps are sorted and read per sampled column. */
#include "fd_raster.h"

#include <math.h>
#include <stdlib.h>

#define SCALE 5.0

static fd_status check_grid(const fd_grid *g, uint32_t h, uint32_t w, fd_error *err) {
    int64_t last = -1;
    if (!g || (g->n_rows && !g->rows) || (g->n_cols && !g->cols))
        return fd_fail(err, FD_ERR_ARGUMENT, "raster: no sampling grid");
    for (uint32_t r = 0; r < g->n_rows; r++) {
        int64_t y = g->rows[r];
        if (y < 0)
            continue;
        if (y >= (int64_t)h || y < last)
            return fd_fail(err, FD_ERR_ARGUMENT,
                           "raster: row %lld out of range or decreasing (height %u)",
                           (long long)y, h);
        last = y;
    }
    for (uint32_t c = 0; c < g->n_cols; c++)
        if (g->cols[c] >= (int64_t)w)
            return fd_fail(err, FD_ERR_ARGUMENT, "raster: column %lld out of range (width %u)",
                           (long long)g->cols[c], w);
    return FD_OK;
}

/* ORs into out the parity of the sorted toggle positions t[0..k) at each grid pixel. */
static void sample(const uint64_t *t, size_t k, uint32_t h, const fd_grid *g, uint8_t *out) {
    for (uint32_t c = 0; c < g->n_cols; c++) {
        if (g->cols[c] < 0)
            continue;
        uint64_t base = (uint64_t)g->cols[c] * h;
        size_t lo = 0, hi = k; /* first toggle >= base */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (t[mid] < base)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t end = lo; /* first toggle of the next column */
        while (end < k && t[end] < base + h)
            end++;
        if (end == lo && !(lo & 1))
            continue; /* no toggle in this column and an even count before: all zero */
        size_t j = lo;
        for (uint32_t r = 0; r < g->n_rows; r++) {
            int64_t y = g->rows[r];
            if (y < 0)
                continue;
            while (j < end && t[j] <= base + (uint64_t)y)
                j++;
            if (j == end && !(j & 1))
                break; /* past the column's last toggle, even: the rest is zero */
            out[(size_t)r * g->n_cols + c] |= (uint8_t)(j & 1);
        }
    }
}

typedef struct {
    int have;
    int pu, pv;
    uint32_t h, w;
    uint64_t *t; /* NULL: count only */
    size_t n;
} walk;

/* One boundary point of rleFrPoly's dense walk: where u changes, its
 * y-boundary toggle (the "downsample" loop). */
static void visit(walk *W, int u, int v) {
    if (W->have && u != W->pu) {
        double xd = (double)(u < W->pu ? u : u - 1);
        xd = (xd + .5) / SCALE - .5;
        if (!(floor(xd) != xd || xd < 0 || xd > (double)W->w - 1)) {
            double yd = (double)(v < W->pv ? v : W->pv);
            yd = (yd + .5) / SCALE - .5;
            if (yd < 0)
                yd = 0;
            else if (yd > W->h)
                yd = W->h;
            yd = ceil(yd);
            if (W->t)
                W->t[W->n] = (uint64_t)xd * W->h + (uint64_t)yd;
            W->n++;
        }
    }
    W->pu = u;
    W->pv = v;
    W->have = 1;
}

/* rleFrPoly's upsampled edge walk over k points (x, y already scaled and rounded). */
static void walk_polygon(walk *W, const int *x, const int *y, uint32_t k) {
    for (uint32_t j = 0; j < k; j++) {
        int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
        int dx = abs(xe - xs), dy = abs(ys - ye), t;
        int flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if (flip) {
            t = xs; xs = xe; xe = t;
            t = ys; ys = ye; ye = t;
        }
        if (dx == 0 && dy == 0) { /* pycocotools divides 0 by 0 here; the point's v is never read */
            visit(W, xs, ys);
            continue;
        }
        double s = dx >= dy ? (double)(ye - ys) / dx : (double)(xe - xs) / dy;
        if (dx >= dy) {
            for (int d = 0; d <= dx; d++) {
                t = flip ? dx - d : d;
                visit(W, t + xs, (int)(ys + s * t + .5));
            }
        } else {
            for (int d = 0; d <= dy; d++) {
                t = flip ? dy - d : d;
                visit(W, (int)(xs + s * t + .5), t + ys);
            }
        }
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

fd_status fd_raster_polygons(const double *xy, const uint32_t *lens, uint32_t n_polys,
                             uint32_t h, uint32_t w, const fd_grid *grid, uint8_t *out,
                             fd_error *err) {
    fd_status st = check_grid(grid, h, w, err);
    if (st != FD_OK)
        return st;
    if (!xy && n_polys)
        return fd_fail(err, FD_ERR_ARGUMENT, "raster: no polygon coordinates");
    size_t offset = 0;
    for (uint32_t p = 0; p < n_polys; p++) {
        uint32_t k = lens[p] / 2;
        const double *c = xy + offset;
        offset += lens[p];
        if (k == 0)
            continue;
        uint64_t steps = 0;
        int *x = malloc(sizeof(int) * ((size_t)k + 1)), *y = malloc(sizeof(int) * ((size_t)k + 1));
        if (!x || !y) {
            free(x);
            free(y);
            return fd_fail(err, FD_ERR_NOMEM, "raster: out of memory (%u points)", k);
        }
        for (uint32_t j = 0; j < k; j++) {
            double cx = c[2 * j], cy = c[2 * j + 1];
            if (!(fabs(cx) <= 1e8) || !(fabs(cy) <= 1e8)) {
                free(x);
                free(y);
                return fd_fail(err, FD_ERR_ARGUMENT,
                               "raster: polygon coordinate (%g, %g) not finite or beyond 1e8", cx,
                               cy);
            }
            x[j] = (int)(SCALE * cx + .5);
            y[j] = (int)(SCALE * cy + .5);
        }
        x[k] = x[0];
        y[k] = y[0];
        for (uint32_t j = 0; j < k; j++) {
            uint64_t dx = (uint64_t)llabs((long long)x[j] - x[j + 1]);
            uint64_t dy = (uint64_t)llabs((long long)y[j] - y[j + 1]);
            steps += (dx > dy ? dx : dy) + 1;
        }
        if (steps > FD_RASTER_MAX_STEPS) {
            free(x);
            free(y);
            return fd_fail(err, FD_ERR_ARGUMENT,
                           "raster: polygon boundary of %llu steps, more than %u",
                           (unsigned long long)steps, FD_RASTER_MAX_STEPS);
        }
        walk W = {0, 0, 0, h, w, NULL, 0};
        walk_polygon(&W, x, y, k);
        uint64_t *t = malloc(sizeof(uint64_t) * (W.n + 1));
        if (!t) {
            free(x);
            free(y);
            return fd_fail(err, FD_ERR_NOMEM, "raster: out of memory (%zu toggles)", W.n);
        }
        walk V = {0, 0, 0, h, w, t, 0};
        walk_polygon(&V, x, y, k);
        free(x);
        free(y);
        qsort(t, V.n, sizeof(uint64_t), cmp_u64);
        sample(t, V.n, h, grid, out);
        free(t);
    }
    return FD_OK;
}

fd_status fd_raster_rle(const uint32_t *counts, size_t n_counts, uint32_t h, uint32_t w,
                        const fd_grid *grid, uint8_t *out, fd_error *err) {
    fd_status st = check_grid(grid, h, w, err);
    if (st != FD_OK)
        return st;
    if (!counts && n_counts)
        return fd_fail(err, FD_ERR_ARGUMENT, "raster: no RLE counts");
    if (n_counts > SIZE_MAX / sizeof(uint64_t) - 1)
        return fd_fail(err, FD_ERR_ARGUMENT, "raster: %zu RLE counts", n_counts);
    uint64_t *t = malloc(sizeof(uint64_t) * (n_counts + 1));
    if (!t)
        return fd_fail(err, FD_ERR_NOMEM, "raster: out of memory (%zu RLE counts)", n_counts);
    uint64_t pos = 0;
    size_t k = 0;
    for (size_t i = 0; i + 1 < n_counts; i++) { /* a toggle after each run but the last */
        pos += counts[i];
        t[k++] = pos;
    }
    sample(t, k, h, grid, out);
    free(t);
    return FD_OK;
}

fd_status fd_rle_from_string(const char *s, size_t len, uint32_t *counts, size_t cap, size_t *n,
                             fd_error *err) {
    size_t m = 0, p = 0;
    while (p < len && s[p]) {
        long long x = 0;
        int k = 0, more = 1;
        while (more) {
            if (p >= len || !s[p] || k > 6)
                return fd_fail(err, FD_ERR_DECODE, "raster: RLE string truncated at %zu", p);
            char c = (char)(s[p] - 48);
            x |= (long long)(c & 0x1f) << (5 * k);
            more = c & 0x20;
            p++;
            k++;
            if (!more && (c & 0x10))
                x |= (long long)((unsigned long long)-1 << (5 * k));
        }
        if (m >= cap)
            return fd_fail(err, FD_ERR_ARGUMENT, "raster: more than %zu RLE counts", cap);
        if (m > 2)
            x += (long long)counts[m - 2];
        counts[m++] = (uint32_t)x;
    }
    *n = m;
    return FD_OK;
}
