/* Pillow's auto-augment pixel operations on uint8 RGB in place (see fd_augment.h). */
#include "fd_augment.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* No a * b + c contracted into an FMA: GCC in ISO C mode (setup.py's
 * -std=c99) does not contract; clang does unless told so. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Where a pixel's three values are: channel c of pixel i at p[i * ps + c * cs]. */
typedef struct {
    uint8_t *p;
    size_t ps, cs;
    int32_t w, h;
} image;

static image view(uint8_t *p, uint32_t height, uint32_t width, fd_layout layout)
{
    image im;
    im.p = p;
    im.w = (int32_t)width;
    im.h = (int32_t)height;
    im.ps = layout == FD_LAYOUT_CHW ? 1 : 3;
    im.cs = layout == FD_LAYOUT_CHW ? (size_t)height * width : 1;
    return im;
}

static inline size_t at(const image *im, int32_t x, int32_t y)
{
    return ((size_t)y * (size_t)im->w + (size_t)x) * im->ps;
}

static inline void copy_pixel(const image *dst, size_t di, const image *src, size_t si)
{
    dst->p[di] = src->p[si];
    dst->p[di + dst->cs] = src->p[si + src->cs];
    dst->p[di + 2 * dst->cs] = src->p[si + 2 * src->cs];
}

static inline void put_fill(const image *dst, size_t di, const uint8_t fill[3])
{
    dst->p[di] = fill[0];
    dst->p[di + dst->cs] = fill[1];
    dst->p[di + 2 * dst->cs] = fill[2];
}

/* ------------------------------------------------------------------------ */
/* Affine (Geometry.c's ImagingTransformAffine on an RGB image)             */

/* Geometry.c's COORD: v < 0 -> -1, else (int)v. Where (int)v is out of int's
 * range (or v is NaN) x86's conversion gives INT_MIN, outside the image like
 * -1; both are -1 here, which every caller only compares with the size. */
static inline int32_t coord(double v)
{
    if (!(v >= 0.0) || v >= 2147483648.0)
        return -1;
    return (int32_t)v;
}

/* Geometry.c's FLOOR, on values the range checks keep in [-0.5, size). */
static inline int32_t floor_small(double v)
{
    return v < 0.0 ? (int32_t)floor(v) : (int32_t)v;
}

/* 16.16 fixed point of Geometry.c's affine_fixed: FLOOR(v * 65536 + 0.5),
 * INT_MIN where that is outside int's range (x86's conversion result; a
 * check_fixed matrix only gets there with a coefficient over 32768). The
 * fixed-point sums wrap as the x86 int additions do; kept unsigned here. */
static inline uint32_t fix16(double v)
{
    const double t = v * 65536.0 + 0.5;
    const double f = t < 0.0 ? floor(t) : t;
    if (!(f > -2147483649.0 && f < 2147483648.0))
        return (uint32_t)INT32_MIN;
    return (uint32_t)(int32_t)f;
}

/* Arithmetic >> 16 of a two's-complement int32 held unsigned. */
static inline int32_t fixed_int(uint32_t v)
{
    return (v & 0x80000000u) ? -(int32_t)(~v >> 16) - 1 : (int32_t)(v >> 16);
}

static inline int check_fixed(const double a[6], int32_t x, int32_t y)
{
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
           fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* ImagingScaleAffine (a[1] == a[3] == 0, nearest): the source column of
 * each output column tabulated once from a running double sum; a row copies
 * the columns between the first and last that landed inside. */
static void affine_scale(const image *dst, const image *src, const double a[6],
                         const uint8_t fill[3], int32_t *xintab)
{
    const int32_t w = dst->w, h = dst->h;
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    int32_t xmin = w, xmax = 0;
    memset(xintab, 0, (size_t)w * sizeof(*xintab));
    for (int32_t x = 0; x < w; x++) {
        const int32_t xin = coord(xo);
        if (xin >= 0 && xin < src->w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
            xintab[x] = xin;
        }
        xo += a[0];
    }
    for (int32_t y = 0; y < h; y++) {
        const int32_t yi = coord(yo);
        const int inside = yi >= 0 && yi < src->h;
        for (int32_t x = 0; x < w; x++) {
            if (inside && x >= xmin && x < xmax)
                copy_pixel(dst, at(dst, x, y), src, at(src, xintab[x], yi));
            else
                put_fill(dst, at(dst, x, y), fill);
        }
        yo += a[4];
    }
}

/* affine_fixed: nearest neighbour in 16.16 fixed point. */
static void affine_fixed(const image *dst, const image *src, const double a[6],
                         const uint8_t fill[3])
{
    const uint32_t a0 = fix16(a[0]), a1 = fix16(a[1]), a3 = fix16(a[3]), a4 = fix16(a[4]);
    uint32_t a2 = fix16(a[2] + a[0] * 0.5 + a[1] * 0.5);
    uint32_t a5 = fix16(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for (int32_t y = 0; y < dst->h; y++) {
        uint32_t xx = a2, yy = a5;
        for (int32_t x = 0; x < dst->w; x++) {
            const size_t di = at(dst, x, y);
            const int32_t xin = fixed_int(xx), yin = fixed_int(yy);
            if (xin >= 0 && xin < src->w && yin >= 0 && yin < src->h)
                copy_pixel(dst, di, src, at(src, xin, yin));
            else
                put_fill(dst, di, fill);
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

/* ImagingTransformAffine's last nearest path: running double sums. */
static void affine_double(const image *dst, const image *src, const double a[6],
                          const uint8_t fill[3])
{
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int32_t y = 0; y < dst->h; y++) {
        double xx = xo, yy = yo;
        for (int32_t x = 0; x < dst->w; x++) {
            const size_t di = at(dst, x, y);
            const int32_t xin = coord(xx), yin = coord(yy);
            if (xin >= 0 && xin < src->w && yin >= 0 && yin < src->h)
                copy_pixel(dst, di, src, at(src, xin, yin));
            else
                put_fill(dst, di, fill);
            xx += a[0];
            yy += a[3];
        }
        xo += a[1];
        yo += a[4];
    }
}

static inline int32_t clip_index(int32_t v, int32_t size)
{
    return v < 0 ? 0 : v < size ? v : size - 1;
}

/* bilinear_filter32RGB at (xin, yin), already inside [0, w) x [0, h). */
static void bilinear_at(const image *src, double xin, double yin, uint8_t out[3])
{
    xin -= 0.5;
    yin -= 0.5;
    const int32_t x = floor_small(xin), y = floor_small(yin);
    const double dx = xin - x, dy = yin - y;
    const size_t r0 = at(src, 0, clip_index(y, src->h));
    const int row1 = y + 1 >= 0 && y + 1 < src->h;
    const size_t r1 = row1 ? at(src, 0, y + 1) : 0;
    const size_t x0 = (size_t)clip_index(x, src->w) * src->ps;
    const size_t x1 = (size_t)clip_index(x + 1, src->w) * src->ps;
    for (int b = 0; b < 3; b++) {
        const uint8_t *in = src->p + (size_t)b * src->cs;
        double v1 = in[r0 + x0] + (int32_t)(in[r0 + x1] - in[r0 + x0]) * dx, v2;
        if (row1)
            v2 = in[r1 + x0] + (int32_t)(in[r1 + x1] - in[r1 + x0]) * dx;
        else
            v2 = v1;
        v1 = v1 + (v2 - v1) * dy;
        out[b] = (uint8_t)v1;
    }
}

/* Geometry.c's BICUBIC: the cubic through v1..v4 at d, its sums in its order. */
static inline double cubic(double v1, double v2, double v3, double v4, double d)
{
    const double p1 = v2;
    const double p2 = -v1 + v3;
    const double p3 = 2 * (v1 - v2) + v3 - v4;
    const double p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* bicubic_filter32RGB at (xin, yin), already inside [0, w) x [0, h). */
static void bicubic_at(const image *src, double xin, double yin, uint8_t out[3])
{
    xin -= 0.5;
    yin -= 0.5;
    int32_t x = floor_small(xin), y = floor_small(yin);
    const double dx = xin - x, dy = yin - y;
    x--;
    y--;
    size_t xs[4];
    for (int k = 0; k < 4; k++)
        xs[k] = (size_t)clip_index(x + k, src->w) * src->ps;
    /* rows y .. y + 3: the first clamped into the image, each later one
     * outside it repeats the row before (BICUBIC_BODY's v2 = v1 ...) */
    size_t rows[4];
    int valid[4];
    rows[0] = at(src, 0, clip_index(y, src->h));
    valid[0] = 1;
    for (int k = 1; k < 4; k++) {
        valid[k] = y + k >= 0 && y + k < src->h;
        rows[k] = valid[k] ? at(src, 0, y + k) : 0;
    }
    for (int b = 0; b < 3; b++) {
        const uint8_t *in = src->p + (size_t)b * src->cs;
        double v[4];
        for (int k = 0; k < 4; k++) {
            if (!valid[k]) {
                v[k] = v[k - 1];
                continue;
            }
            const uint8_t *row = in + rows[k];
            v[k] = cubic(row[xs[0]], row[xs[1]], row[xs[2]], row[xs[3]], dx);
        }
        const double r = cubic(v[0], v[1], v[2], v[3], dy);
        out[b] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)r;
    }
}

/* ImagingGenericTransform with affine_transform and the RGB filter: each
 * output pixel's centre mapped in double; outside [0, w) x [0, h) (NaN
 * too: Pillow's filters would read a clamped pixel there, reachable only
 * with coefficients near DBL_MAX) the fill colour. */
static void affine_generic(const image *dst, const image *src, const double a[6], int resample,
                           const uint8_t fill[3])
{
    for (int32_t y = 0; y < dst->h; y++) {
        const double yin = y + 0.5;
        for (int32_t x = 0; x < dst->w; x++) {
            const double xin = x + 0.5;
            const double xx = a[0] * xin + a[1] * yin + a[2];
            const double yy = a[3] * xin + a[4] * yin + a[5];
            const size_t di = at(dst, x, y);
            if (!(xx >= 0.0 && xx < src->w && yy >= 0.0 && yy < src->h)) {
                put_fill(dst, di, fill);
                continue;
            }
            uint8_t px[3];
            if (resample == FD_AUG_BILINEAR)
                bilinear_at(src, xx, yy, px);
            else
                bicubic_at(src, xx, yy, px);
            dst->p[di] = px[0];
            dst->p[di + dst->cs] = px[1];
            dst->p[di + 2 * dst->cs] = px[2];
        }
    }
}

static void affine(const image *dst, const image *src, const fd_aug_step *s, int32_t *xintab)
{
    const double *a = s->matrix;
    const int32_t w = dst->w, h = dst->h;
    if (s->resample != FD_AUG_NEAREST)
        affine_generic(dst, src, a, s->resample, s->fill);
    else if (a[1] == 0 && a[3] == 0)
        affine_scale(dst, src, a, s->fill, xintab);
    else if (check_fixed(a, 0, 0) && check_fixed(a, w, h) && check_fixed(a, 0, h) &&
             check_fixed(a, w, 0))
        affine_fixed(dst, src, a, s->fill);
    else
        affine_double(dst, src, a, s->fill);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */

static void apply_lut(const image *im, const uint8_t *table)
{
    const size_t n = (size_t)im->w * (size_t)im->h;
    for (int b = 0; b < 3; b++) {
        uint8_t *p = im->p + (size_t)b * im->cs;
        const uint8_t *t = table + 256 * b;
        if (im->ps == 1) {
            for (size_t i = 0; i < n; i++)
                p[i] = t[p[i]];
        } else {
            for (size_t i = 0; i < n; i++)
                p[i * 3] = t[p[i * 3]];
        }
    }
}

static void histograms(const image *im, uint64_t hist[3][256])
{
    const size_t n = (size_t)im->w * (size_t)im->h;
    memset(hist, 0, 3 * 256 * sizeof(uint64_t));
    for (int b = 0; b < 3; b++) {
        const uint8_t *p = im->p + (size_t)b * im->cs;
        for (size_t i = 0; i < n; i++)
            hist[b][p[i * im->ps]]++;
    }
}

/* ImageOps.autocontrast(img) (cutoff 0, no ignore, per channel): lo, hi the
 * lowest and highest values present; scale = 255.0 / (hi - lo), offset =
 * -lo * scale, lut[ix] = int(ix * scale + offset) clamped; identity if
 * hi <= lo. */
static void autocontrast_lut(const uint64_t hist[3][256], uint8_t table[768])
{
    for (int b = 0; b < 3; b++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[b][lo])
            lo++;
        while (hi > 0 && !hist[b][hi])
            hi--;
        for (int ix = 0; ix < 256; ix++) {
            if (hi <= lo) {
                table[256 * b + ix] = (uint8_t)ix;
                continue;
            }
            const double scale = 255.0 / (double)(hi - lo);
            const double offset = -(double)lo * scale;
            const double v = (double)ix * scale + offset;
            const int32_t t = (int32_t)v; /* |v| <= 255 * 256: in range */
            table[256 * b + ix] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
        }
    }
}

/* ImageOps.equalize(img) per channel: step = (count - count of the highest
 * value present) // 255; identity with fewer than two values present or a
 * zero step; else lut[i] = (step // 2 + count below i) // step, which
 * Image.point clips to 255. */
static void equalize_lut(const uint64_t hist[3][256], uint8_t table[768])
{
    for (int b = 0; b < 3; b++) {
        uint64_t total = 0, last = 0;
        int present = 0;
        for (int i = 0; i < 256; i++) {
            if (hist[b][i]) {
                present++;
                last = hist[b][i];
                total += hist[b][i];
            }
        }
        const uint64_t step = present <= 1 ? 0 : (total - last) / 255;
        uint64_t n = step / 2;
        for (int i = 0; i < 256; i++) {
            if (!step) {
                table[256 * b + i] = (uint8_t)i;
                continue;
            }
            const uint64_t v = n / step;
            table[256 * b + i] = (uint8_t)(v > 255 ? 255 : v);
            n += hist[b][i];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Sharpness                                                                */

/* Blend.c's expression (as fd_color.c's blend1): float d + alpha * (v - d),
 * clamped to [0, 255] and truncated (the clamp only bites when extrapolating). */
static inline uint8_t blend(int32_t degenerate, int32_t value, float alpha)
{
    float t = (float)degenerate + alpha * (float)(value - degenerate);
    t = t < 0.0f ? 0.0f : t;
    t = t > 255.0f ? 255.0f : t;
    return (uint8_t)(int32_t)t;
}

/* ImageEnhance.Sharpness: Filter.c's ImagingFilter3x3 with SMOOTH (1 1 1 /
 * 1 5 1 / 1 1 1, each / 13 in float), float sums from offset 0.5 in its
 * order (row below, row, row above; left to right), clamped and truncated;
 * the border keeps its pixels (degenerate == image there, so the blend
 * gives the pixel back), and images under 3 x 3 are left as they are
 * (ImagingFilter copies them). `src` is a copy of the image. */
static void sharpen(const image *dst, const image *src, float alpha)
{
    if (dst->w < 3 || dst->h < 3)
        return;
    const float k = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const size_t ps = src->ps, row = (size_t)src->w * ps;
    for (int b = 0; b < 3; b++) {
        const uint8_t *in = src->p + (size_t)b * src->cs;
        uint8_t *out = dst->p + (size_t)b * dst->cs;
        for (int32_t y = 1; y < dst->h - 1; y++) {
            const uint8_t *in0 = in + (size_t)y * row, *in_1 = in0 - row, *in1 = in0 + row;
            for (int32_t x = 1; x < dst->w - 1; x++) {
                const size_t i = (size_t)x * ps;
                float ss = 0.5f;
                ss += (float)in1[i - ps] * k + (float)in1[i] * k + (float)in1[i + ps] * k;
                ss += (float)in0[i - ps] * k + (float)in0[i] * k5 + (float)in0[i + ps] * k;
                ss += (float)in_1[i - ps] * k + (float)in_1[i] * k + (float)in_1[i + ps] * k;
                ss = ss < 0.0f ? 0.0f : ss;
                ss = ss > 255.0f ? 255.0f : ss;
                const int32_t degenerate = (int32_t)(uint8_t)ss;
                out[(size_t)y * row + i] = blend(degenerate, in0[i], alpha);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */

static fd_status check(size_t size, uint32_t height, uint32_t width, fd_layout layout,
                       const fd_aug_step *steps, size_t nsteps, fd_error *err)
{
    size_t npixels, nbytes;
    if (height == 0 || width == 0)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: empty image (%u x %u)", height, width);
    if (height > INT32_MAX || width > INT32_MAX || !fd_mul_size(height, width, &npixels) ||
        !fd_mul_size(npixels, 3, &nbytes))
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: %u x %u x 3 is too large", height,
                       width);
    if (nbytes != size)
        return fd_fail(err, FD_ERR_ARGUMENT,
                       "augment: %u x %u x 3 pixels are %zu bytes, got %zu", height, width,
                       nbytes, size);
    if (layout != FD_LAYOUT_HWC && layout != FD_LAYOUT_CHW)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: unknown layout %d", (int)layout);
    if (nsteps > FD_AUG_MAX_STEPS)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: %zu steps, at most %d", nsteps,
                       FD_AUG_MAX_STEPS);
    if (nsteps > 0 && steps == NULL)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: no steps given");
    for (size_t k = 0; k < nsteps; k++) {
        const fd_aug_step *s = &steps[k];
        switch ((int)s->kind) {
        case FD_AUG_COLOR:
            if (fd_color_check_steps(&s->color, 1, err) != FD_OK) {
                char why[FD_MESSAGE_LEN];
                snprintf(why, sizeof why, "%s", err->message);
                return fd_fail(err, FD_ERR_ARGUMENT, "augment: step %zu: %s", k, why);
            }
            break;
        case FD_AUG_AFFINE:
            for (int i = 0; i < 6; i++)
                if (!isfinite(s->matrix[i]))
                    return fd_fail(err, FD_ERR_ARGUMENT,
                                   "augment: step %zu: matrix entry %d (%g) is not finite", k,
                                   i, s->matrix[i]);
            if (s->resample != FD_AUG_NEAREST && s->resample != FD_AUG_BILINEAR &&
                s->resample != FD_AUG_BICUBIC)
                return fd_fail(err, FD_ERR_ARGUMENT,
                               "augment: step %zu: resample %d is not 0, 2 or 3", k,
                               s->resample);
            break;
        case FD_AUG_LUT:
            if (s->table == NULL)
                return fd_fail(err, FD_ERR_ARGUMENT, "augment: step %zu: no table given", k);
            break;
        case FD_AUG_AUTOCONTRAST:
        case FD_AUG_EQUALIZE:
            break;
        case FD_AUG_SHARPNESS:
            if (!isfinite(s->factor))
                return fd_fail(err, FD_ERR_ARGUMENT,
                               "augment: step %zu: factor %g is not finite", k,
                               (double)s->factor);
            break;
        default:
            return fd_fail(err, FD_ERR_ARGUMENT, "augment: step %zu: unknown kind %d", k,
                           (int)s->kind);
        }
    }
    return FD_OK;
}

static int needs_copy(fd_aug_kind kind)
{
    return kind == FD_AUG_AFFINE || kind == FD_AUG_SHARPNESS;
}

fd_status fd_augment_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                           fd_layout layout, const fd_aug_step *steps, size_t nsteps,
                           fd_error *err)
{
    fd_status st = check(size, height, width, layout, steps, nsteps, err);
    if (st != FD_OK)
        return st;
    if (pixels == NULL)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: no pixels given");
    /* one scratch block, owned here: a copy of the image, then the scale
     * path's column table (int32 per output column, aligned after it) */
    int scratch_needed = 0;
    for (size_t k = 0; k < nsteps; k++)
        scratch_needed |= needs_copy(steps[k].kind);
    uint8_t *scratch = NULL;
    int32_t *xintab = NULL;
    if (scratch_needed) {
        const size_t table_at = (size + 15) & ~(size_t)15;
        size_t table_bytes, total;
        if (table_at < size || !fd_mul_size(width, sizeof(int32_t), &table_bytes) ||
            table_at + table_bytes < table_at)
            return fd_fail(err, FD_ERR_ARGUMENT, "augment: %u x %u scratch overflows", height,
                           width);
        total = table_at + table_bytes;
        scratch = malloc(total);
        if (scratch == NULL)
            return fd_fail(err, FD_ERR_NOMEM, "augment: cannot allocate %zu scratch bytes",
                           total);
        xintab = (int32_t *)(void *)(scratch + table_at);
    }
    const image im = view(pixels, height, width, layout);
    const image copy = view(scratch, height, width, layout);
    for (size_t k = 0; k < nsteps && st == FD_OK; k++) {
        const fd_aug_step *s = &steps[k];
        if (needs_copy(s->kind))
            memcpy(scratch, pixels, size);
        switch (s->kind) {
        case FD_AUG_COLOR:
            st = fd_color_apply(pixels, size, height, width, layout, &s->color, 1, err);
            break;
        case FD_AUG_AFFINE:
            affine(&im, &copy, s, xintab);
            break;
        case FD_AUG_LUT:
            apply_lut(&im, s->table);
            break;
        case FD_AUG_AUTOCONTRAST:
        case FD_AUG_EQUALIZE: {
            uint64_t hist[3][256];
            uint8_t table[768];
            histograms(&im, hist);
            if (s->kind == FD_AUG_AUTOCONTRAST)
                autocontrast_lut(hist, table);
            else
                equalize_lut(hist, table);
            apply_lut(&im, table);
            break;
        }
        case FD_AUG_SHARPNESS:
            sharpen(&im, &copy, s->factor);
            break;
        }
    }
    free(scratch);
    return st;
}
