/* Pillow's auto-augment pixel operations on uint8 RGB in place (see fd_augment.h). */
#include "fd_augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fd_sse.h" /* SSE2 on every x86-64 */

/* No a * b + c contracted into an FMA: GCC in ISO C mode (setup.py's
 * -std=c99) does not contract; clang does unless told so. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Each kernel is written once for a pixel stride `ps` and a channel stride
 * `cs` (channel c of pixel i at p[i * ps + c * cs]: HWC ps 3, cs 1; CHW ps 1,
 * cs h * w) and inlined into one copy per layout, so that the constant
 * strides let the compiler unroll and vectorize. Vector lanes compute each
 * value with the same IEEE operations in the same order as the scalar code. */
#if defined(__GNUC__)
#define KERNEL static inline __attribute__((always_inline))
#else
#define KERNEL static inline
#endif

typedef struct {
    uint8_t *p;
    int32_t w, h;
    size_t ps, cs;
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

/* Calls kernel(args..., ps, cs) with the layout's strides as constants. */
#define BY_LAYOUT(im, kernel, ...)                                                           \
    do {                                                                                     \
        if ((im)->ps == 3)                                                                   \
            kernel(__VA_ARGS__, 3, 1);                                                       \
        else                                                                                 \
            kernel(__VA_ARGS__, 1, (im)->cs);                                                \
    } while (0)

KERNEL void put3(uint8_t *out, const uint8_t *in, size_t ocs, size_t ics)
{
    out[0] = in[0];
    out[ocs] = in[ics];
    out[2 * ocs] = in[2 * ics];
}

/* The fill colour into pixels from..to-1 of a row. */
KERNEL void fill_span(uint8_t *row, int32_t from, int32_t to, const uint8_t fill[3], size_t ps,
                      size_t cs)
{
    for (int32_t x = from; x < to; x++)
        put3(row + (size_t)x * ps, fill, cs, 1);
}

/* n consecutive pixels of a source row into a row (a channel at a time). */
KERNEL void copy_span(uint8_t *out, const uint8_t *in, int32_t n, size_t ps, size_t cs)
{
    for (int b = 0; b < (ps == 3 ? 1 : 3); b++)
        memcpy(out + (size_t)b * cs, in + (size_t)b * cs, (size_t)n * ps);
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

static inline int inside(int32_t x, int32_t y, int32_t w, int32_t h)
{
    return (uint32_t)x < (uint32_t)w && (uint32_t)y < (uint32_t)h;
}

/* ImagingScaleAffine (a[1] == a[3] == 0, nearest): the source column of
 * each output column tabulated once from a running double sum; a row copies
 * the columns between the first and last that landed inside (a column in
 * between that did not keeps calloc's 0: Pillow reads column 0 there). */
KERNEL void affine_scale(uint8_t *dst, const uint8_t *src, int32_t w, int32_t h,
                         const double a[6], const uint8_t fill[3], int32_t *xintab, size_t ps,
                         size_t cs)
{
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    int32_t xmin = w, xmax = 0;
    memset(xintab, 0, (size_t)w * sizeof(*xintab));
    for (int32_t x = 0; x < w; x++) {
        const int32_t xin = coord(xo);
        if (xin >= 0 && xin < w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
            xintab[x] = xin;
        }
        xo += a[0];
    }
    /* a translation's columns are one run: copied a channel's row at a time */
    int contiguous = xmin < xmax;
    for (int32_t x = xmin + 1; x < xmax && contiguous; x++)
        contiguous = xintab[x] == xintab[x - 1] + 1;
    for (int32_t y = 0; y < h; y++, yo += a[4]) {
        uint8_t *out = dst + (size_t)y * (size_t)w * ps;
        const int32_t yi = coord(yo);
        if (!(yi >= 0 && yi < h) || xmin >= xmax) {
            fill_span(out, 0, w, fill, ps, cs);
            continue;
        }
        const uint8_t *in = src + (size_t)yi * (size_t)w * ps;
        fill_span(out, 0, xmin, fill, ps, cs);
        if (contiguous)
            copy_span(out + (size_t)xmin * ps, in + (size_t)xintab[xmin] * ps, xmax - xmin, ps,
                      cs);
        else
            for (int32_t x = xmin; x < xmax; x++)
                put3(out + (size_t)x * ps, in + (size_t)xintab[x] * ps, cs, cs);
        fill_span(out, xmax, w, fill, ps, cs);
    }
}

/* affine_fixed: nearest neighbour in 16.16 fixed point. */
KERNEL void affine_fixed(uint8_t *dst, const uint8_t *src, int32_t w, int32_t h,
                         const double a[6], const uint8_t fill[3], size_t ps, size_t cs)
{
    const uint32_t a0 = fix16(a[0]), a1 = fix16(a[1]), a3 = fix16(a[3]), a4 = fix16(a[4]);
    uint32_t a2 = fix16(a[2] + a[0] * 0.5 + a[1] * 0.5);
    uint32_t a5 = fix16(a[5] + a[3] * 0.5 + a[4] * 0.5);
    uint8_t *out = dst;
    if (a0 == 65536u && a3 == 0 && w < 32768) {
        /* a row of a shear along x: yin is the row's, and xin = x + xin(0)
         * (whole multiples of 65536 added to sums that do not wrap: the
         * check_fixed corners keep them within +-2^31 up to the corners'
         * half-pixel offsets, beyond any column of a row under 32768), so
         * the pixels inside are one run */
        for (int32_t y = 0; y < h; y++, a2 += a1, a5 += a4, out += (size_t)w * ps) {
            const int32_t yin = fixed_int(a5), off = fixed_int(a2);
            if (yin < 0 || yin >= h || off >= w || off <= -w) {
                fill_span(out, 0, w, fill, ps, cs);
                continue;
            }
            const int32_t from = off < 0 ? -off : 0, to = off > 0 ? w - off : w;
            fill_span(out, 0, from, fill, ps, cs);
            copy_span(out + (size_t)from * ps,
                      src + ((size_t)yin * (size_t)w + (size_t)(from + off)) * ps, to - from, ps,
                      cs);
            fill_span(out, to, w, fill, ps, cs);
        }
        return;
    }
    for (int32_t y = 0; y < h; y++, a2 += a1, a5 += a4) {
        uint32_t xx = a2, yy = a5;
        for (int32_t x = 0; x < w; x++, out += ps, xx += a0, yy += a3) {
            const int32_t xin = fixed_int(xx), yin = fixed_int(yy);
            if (inside(xin, yin, w, h))
                put3(out, src + ((size_t)yin * (size_t)w + (size_t)xin) * ps, cs, cs);
            else
                put3(out, fill, cs, 1);
        }
    }
}

/* ImagingTransformAffine's last nearest path: running double sums. */
KERNEL void affine_double(uint8_t *dst, const uint8_t *src, int32_t w, int32_t h,
                          const double a[6], const uint8_t fill[3], size_t ps, size_t cs)
{
    const double a0 = a[0], a1 = a[1], a3 = a[3], a4 = a[4]; /* not reloaded per store */
    double xo = a[2] + a1 * 0.5 + a0 * 0.5, yo = a[5] + a4 * 0.5 + a3 * 0.5;
    uint8_t *out = dst;
    for (int32_t y = 0; y < h; y++, xo += a1, yo += a4) {
        double xx = xo, yy = yo;
        for (int32_t x = 0; x < w; x++, out += ps, xx += a0, yy += a3) {
            const int32_t xin = coord(xx), yin = coord(yy);
            if (inside(xin, yin, w, h))
                put3(out, src + ((size_t)yin * (size_t)w + (size_t)xin) * ps, cs, cs);
            else
                put3(out, fill, cs, 1);
        }
    }
}

static inline int32_t clip_index(int32_t v, int32_t size)
{
    return v < 0 ? 0 : v < size ? v : size - 1;
}

/* Geometry.c's BILINEAR: a + (b - a) * d, in double. */
static inline double lerp(double a, double b, double d)
{
    return a + (b - a) * d;
}

/* bilinear_filter32RGB at (x + dx, y + dy) (the sample point less 0.5):
 * columns and the first row clamped into the image, a second row outside
 * it repeating the first (BILINEAR_BODY's v2 = v1). */
KERNEL void bilinear_px(uint8_t *out, const uint8_t *src, int32_t w, int32_t h, int32_t x,
                        int32_t y, double dx, double dy, size_t ps, size_t cs)
{
    const size_t row = (size_t)w * ps;
    if (x >= 0 && x + 1 < w && y >= 0 && y + 1 < h) { /* the 2 x 2 taps inside */
        const uint8_t *p0 = src + (size_t)y * row + (size_t)x * ps, *p1 = p0 + row;
        for (int b = 0; b < 3; b++) {
            const size_t c = (size_t)b * cs;
            const double v1 = lerp(p0[c], p0[c + ps], dx), v2 = lerp(p1[c], p1[c + ps], dx);
            out[c] = (uint8_t)lerp(v1, v2, dy);
        }
        return;
    }
    const size_t x0 = (size_t)clip_index(x, w) * ps, x1 = (size_t)clip_index(x + 1, w) * ps;
    const uint8_t *r0 = src + (size_t)clip_index(y, h) * row;
    const uint8_t *r1 = y + 1 >= 0 && y + 1 < h ? src + (size_t)(y + 1) * row : NULL;
    for (int b = 0; b < 3; b++) {
        const size_t c = (size_t)b * cs;
        const double v1 = lerp(r0[c + x0], r0[c + x1], dx);
        const double v2 = r1 ? lerp(r1[c + x0], r1[c + x1], dx) : v1;
        out[c] = (uint8_t)lerp(v1, v2, dy);
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

static inline uint8_t clamp_cubic(double v)
{
    return v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)v;
}

/* bicubic_filter32RGB at (x + 1 + dx, y + 1 + dy): taps x .. x + 3 clamped
 * into the image; rows y .. y + 3, the first clamped, each later one outside
 * the image repeating the row before (BICUBIC_BODY's v2 = v1 ...). */
#if defined(__SSE2__)
/* The four rows' horizontal cubics at once: column k of the taps as int32
 * lanes (one per row), the cubic's coefficients in integers (exact, as
 * BICUBIC computes them from UINT8 operands in int), then the evaluation in
 * two double lanes, each lane the scalar expression in its order. */
static inline void cubic_rows(const uint8_t *q, size_t row, size_t ps, double dx, double v[4])
{
    __m128i t[4];
    for (int k = 0; k < 4; k++)
        t[k] = _mm_set_epi32(q[3 * row + (size_t)k * ps], q[2 * row + (size_t)k * ps],
                             q[row + (size_t)k * ps], q[(size_t)k * ps]);
    const __m128i p2 = _mm_sub_epi32(t[2], t[0]);
    const __m128i d01 = _mm_sub_epi32(t[0], t[1]);
    const __m128i p3 = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(d01, d01), t[2]), t[3]);
    const __m128i p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(t[1], t[0]), t[2]), t[3]);
    const __m128d d = _mm_set1_pd(dx);
    for (int half = 0; half < 2; half++) {
        /* lanes 2, 3 (moved down) or 0, 1: a shuffle's control must be an
         * immediate (clang, gcc -O0), so the upper half by unpackhi */
#define FD_HALF(x) (half ? _mm_unpackhi_epi64((x), (x)) : (x))
        const __m128d c1 = _mm_cvtepi32_pd(FD_HALF(t[1]));
        const __m128d c2 = _mm_cvtepi32_pd(FD_HALF(p2));
        const __m128d c3 = _mm_cvtepi32_pd(FD_HALF(p3));
        const __m128d c4 = _mm_cvtepi32_pd(FD_HALF(p4));
#undef FD_HALF
        const __m128d r = _mm_add_pd(
            c1, _mm_mul_pd(d, _mm_add_pd(c2, _mm_mul_pd(d, _mm_add_pd(c3, _mm_mul_pd(d, c4))))));
        _mm_storeu_pd(v + 2 * half, r);
    }
}

/* cubic() in two double lanes: the same operations in the same order
 * (-a + b is b - a, 2 * x exact either way). */
static inline __m128d cubic2(__m128d v1, __m128d v2, __m128d v3, __m128d v4, __m128d d)
{
    const __m128d p2 = _mm_sub_pd(v3, v1);
    const __m128d p3 =
        _mm_sub_pd(_mm_add_pd(_mm_mul_pd(_mm_set1_pd(2.0), _mm_sub_pd(v1, v2)), v3), v4);
    const __m128d p4 = _mm_add_pd(_mm_sub_pd(_mm_sub_pd(v2, v1), v3), v4);
    return _mm_add_pd(
        v2, _mm_mul_pd(d, _mm_add_pd(p2, _mm_mul_pd(d, _mm_add_pd(p3, _mm_mul_pd(d, p4))))));
}

/* clamp_cubic on two lanes: max/min are its comparisons (no NaN here). */
static inline __m128i clamp_cubic2(__m128d v)
{
    return _mm_cvttpd_epi32(_mm_min_pd(_mm_max_pd(v, _mm_setzero_pd()), _mm_set1_pd(255.0)));
}
#endif

KERNEL void bicubic_px(uint8_t *out, const uint8_t *src, int32_t w, int32_t h, int32_t x,
                       int32_t y, double dx, double dy, size_t ps, size_t cs)
{
    const size_t row = (size_t)w * ps;
    if (x >= 0 && x + 3 < w && y >= 0 && y + 3 < h) { /* the 4 x 4 taps inside */
        const uint8_t *p = src + (size_t)y * row + (size_t)x * ps;
#if defined(__SSE2__)
        double v[3][4]; /* per channel, the four rows' horizontal cubics */
        for (int b = 0; b < 3; b++)
            cubic_rows(p + (size_t)b * cs, row, ps, dx, v[b]);
        const __m128d d = _mm_set1_pd(dy);
        const __m128i rg = clamp_cubic2(cubic2(
            _mm_set_pd(v[1][0], v[0][0]), _mm_set_pd(v[1][1], v[0][1]),
            _mm_set_pd(v[1][2], v[0][2]), _mm_set_pd(v[1][3], v[0][3]), d));
        out[0] = (uint8_t)_mm_cvtsi128_si32(rg);
        out[cs] = (uint8_t)_mm_cvtsi128_si32(_mm_shuffle_epi32(rg, 1));
        out[2 * cs] = clamp_cubic(cubic(v[2][0], v[2][1], v[2][2], v[2][3], dy));
#else
        for (int b = 0; b < 3; b++) {
            const uint8_t *q = p + (size_t)b * cs;
            double v[4];
            for (int k = 0; k < 4; k++, q += row)
                v[k] = cubic(q[0], q[ps], q[2 * ps], q[3 * ps], dx);
            out[(size_t)b * cs] = clamp_cubic(cubic(v[0], v[1], v[2], v[3], dy));
        }
#endif
        return;
    }
    size_t xs[4];
    for (int k = 0; k < 4; k++)
        xs[k] = (size_t)clip_index(x + k, w) * ps;
    const uint8_t *rows[4];
    rows[0] = src + (size_t)clip_index(y, h) * row;
    for (int k = 1; k < 4; k++)
        rows[k] = y + k >= 0 && y + k < h ? src + (size_t)(y + k) * row : NULL;
    for (int b = 0; b < 3; b++) {
        const size_t c = (size_t)b * cs;
        double v[4];
        v[0] = cubic(rows[0][c + xs[0]], rows[0][c + xs[1]], rows[0][c + xs[2]],
                     rows[0][c + xs[3]], dx);
        for (int k = 1; k < 4; k++) {
            const uint8_t *r = rows[k];
            v[k] = r ? cubic(r[c + xs[0]], r[c + xs[1]], r[c + xs[2]], r[c + xs[3]], dx)
                     : v[k - 1];
        }
        out[c] = clamp_cubic(cubic(v[0], v[1], v[2], v[3], dy));
    }
}

/* The filtered paths' map of an output pixel, its matrix and the image's
 * sides held as locals (the pixel stores, uint8_t, may alias anything: a
 * pointer to the step's matrix would be reloaded for every pixel). */
typedef struct {
    double a0, a1, a2, a3, a4, a5, fw, fh;
} affine_map;

static inline affine_map affine_map_of(const double a[6], int32_t w, int32_t h)
{
    const affine_map m = {a[0], a[1], a[2], a[3], a[4], a[5], w, h};
    return m;
}

/* Pixel (x, y)'s centre mapped in double, as ImagingGenericTransform maps
 * it: 0 outside [0, w) x [0, h) (NaN too), else 1 with the pixel it falls
 * in, moved by half a pixel (ix, iy: the bilinear taps' first) and the
 * fractions. */
static inline int affine_source(const affine_map *m, int32_t x, int32_t y, int32_t *ix,
                                int32_t *iy, double *dx, double *dy)
{
    const double xin = x + 0.5, yin = y + 0.5;
    double xx = m->a0 * xin + m->a1 * yin + m->a2;
    double yy = m->a3 * xin + m->a4 * yin + m->a5;
    if (!(xx >= 0.0 && xx < m->fw && yy >= 0.0 && yy < m->fh))
        return 0;
    xx -= 0.5;
    yy -= 0.5;
    *ix = floor_small(xx);
    *iy = floor_small(yy);
    *dx = xx - *ix;
    *dy = yy - *iy;
    return 1;
}

/* ImagingGenericTransform with affine_transform and the RGB filters: each
 * output pixel's centre mapped in double; outside [0, w) x [0, h) (NaN too:
 * Pillow's filters would read a clamped pixel there, reachable only with
 * coefficients near DBL_MAX) the fill colour. */
KERNEL void affine_filtered(uint8_t *dst, const uint8_t *src, int32_t w, int32_t h,
                            const double a[6], int resample, const uint8_t fill[3], size_t ps,
                            size_t cs)
{
    const affine_map map = affine_map_of(a, w, h);
    const uint8_t f[3] = {fill[0], fill[1], fill[2]};
    uint8_t *out = dst;
    for (int32_t y = 0; y < h; y++) {
        for (int32_t x = 0; x < w; x++, out += ps) {
            int32_t ix, iy;
            double dx, dy;
            if (!affine_source(&map, x, y, &ix, &iy, &dx, &dy)) {
                put3(out, f, cs, 1);
                continue;
            }
            if (resample == FD_AUG_BILINEAR)
                bilinear_px(out, src, w, h, ix, iy, dx, dy, ps, cs);
            else
                bicubic_px(out, src, w, h, ix - 1, iy - 1, dx, dy, ps, cs);
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FD_BMP_NO_CLONES)
/* The filtered affine paths again, for CPUs with AVX2 (checked at run time),
 * each double of Pillow's arithmetic computed by the same IEEE operations in
 * the same order as the scalar code, lane by lane (no FMA: AVX2 does not
 * enable it). Four output pixels' positions at a time; then, in CHW where
 * the four pixels' taps are all inside, the pixels are the lanes of one
 * vector of four doubles a channel; elsewhere, where one pixel's taps are
 * inside, its three channels are the lanes (R, G, B, unused), a tap one
 * widening shuffle of the row's bytes. A zero dx or dy (a shear's or a
 * translation's constant row or column) skips the taps it weighs by zero:
 * lerp(a, b, 0) and cubic(v1, v2, v3, v4, 0) are exactly a and v2 (the
 * product is a zero). Other pixels take the scalar code. On the 2-core EPYC
 * here: bilinear 2.9-4.1x and bicubic 2.9-6.3x Pillow's CPU time, from
 * 1.3-1.8x (docs/decisions/augment.md, "The per-core gap"). */
#define FD_AUG_AVX2 1
#include <immintrin.h>

#define AVX2_INLINE static inline __attribute__((target("avx2"), always_inline))
#define NO_BYTE (-128) /* a pshufb index that writes 0 */

/* Whether the CPU runs AVX2 (cached), unless FASTDECODE_AUGMENT_SCALAR is
 * set (read per call: the tests compare both paths with Pillow). */
static int use_avx2(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached && getenv("FASTDECODE_AUGMENT_SCALAR") == NULL;
}

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint32_t load_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* n (2 or 4) pixels of a row from p in the low 12 bytes: HWC as stored
 * (R0 G0 B0 R1 ...), CHW four bytes a channel (R0 R1 R2 R3 G0 ...). */
AVX2_INLINE __m128i row_taps(const uint8_t *p, int n, size_t ps, size_t cs)
{
    if (ps == 3) {
        if (n == 4)
            return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p),
                                      _mm_cvtsi32_si128((int)load_u32(p + 8)));
        return _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)load_u32(p)),
                                  _mm_cvtsi32_si128((int)load_u16(p + 4)));
    }
    if (n == 4)
        return _mm_setr_epi32((int)load_u32(p), (int)load_u32(p + cs), (int)load_u32(p + 2 * cs),
                              0);
    return _mm_setr_epi32((int)load_u16(p), (int)load_u16(p + cs), (int)load_u16(p + 2 * cs), 0);
}

/* The shuffle that widens tap k of row_taps' bytes to int32 lanes R, G, B, 0. */
AVX2_INLINE __m128i tap_mask(int k, size_t ps)
{
    const int r = ps == 3 ? 3 * k : k, g = ps == 3 ? r + 1 : k + 4, b = ps == 3 ? r + 2 : k + 8;
    return _mm_setr_epi8((char)r, NO_BYTE, NO_BYTE, NO_BYTE, (char)g, NO_BYTE, NO_BYTE, NO_BYTE,
                         (char)b, NO_BYTE, NO_BYTE, NO_BYTE, NO_BYTE, NO_BYTE, NO_BYTE, NO_BYTE);
}

AVX2_INLINE __m256d tap(__m128i row, __m128i mask)
{
    return _mm256_cvtepi32_pd(_mm_shuffle_epi8(row, mask));
}

/* The lanes' values (each in 0..255) into the pixel's three channels. */
AVX2_INLINE void put_lanes(uint8_t *out, __m128i v, size_t cs)
{
    out[0] = (uint8_t)_mm_cvtsi128_si32(v);
    out[cs] = (uint8_t)_mm_extract_epi32(v, 1);
    out[2 * cs] = (uint8_t)_mm_extract_epi32(v, 2);
}

AVX2_INLINE __m256d lerp4(__m256d a, __m256d b, __m256d d)
{
    return _mm256_add_pd(a, _mm256_mul_pd(_mm256_sub_pd(b, a), d));
}

/* bilinear_px with the 2 x 2 taps inside, at (x + dx, y + dy). */
AVX2_INLINE void bilinear_in(uint8_t *out, const uint8_t *p, size_t row, double dx, double dy,
                             const __m128i m[2], size_t ps, size_t cs)
{
    const __m128i r0 = row_taps(p, 2, ps, cs);
    __m256d v;
    if (dx == 0.0) {
        v = tap(r0, m[0]);
        if (dy != 0.0)
            v = lerp4(v, tap(row_taps(p + row, 2, ps, cs), m[0]), _mm256_set1_pd(dy));
    } else {
        const __m256d d = _mm256_set1_pd(dx);
        v = lerp4(tap(r0, m[0]), tap(r0, m[1]), d);
        if (dy != 0.0) {
            const __m128i r1 = row_taps(p + row, 2, ps, cs);
            v = lerp4(v, lerp4(tap(r1, m[0]), tap(r1, m[1]), d), _mm256_set1_pd(dy));
        }
    }
    put_lanes(out, _mm256_cvttpd_epi32(v), cs);
}

/* cubic_rows for one row of three channels: the coefficients in int32 (exact
 * from uint8, as BICUBIC computes them), then the double evaluation. */
AVX2_INLINE __m256d hcubic(__m128i r, const __m128i m[4], __m256d d)
{
    const __m128i t0 = _mm_shuffle_epi8(r, m[0]), t1 = _mm_shuffle_epi8(r, m[1]);
    const __m128i t2 = _mm_shuffle_epi8(r, m[2]), t3 = _mm_shuffle_epi8(r, m[3]);
    const __m128i p2 = _mm_sub_epi32(t2, t0), d01 = _mm_sub_epi32(t0, t1);
    const __m128i p3 = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(d01, d01), t2), t3);
    const __m128i p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(t1, t0), t2), t3);
    const __m256d c3 = _mm256_add_pd(_mm256_cvtepi32_pd(p3),
                                     _mm256_mul_pd(d, _mm256_cvtepi32_pd(p4)));
    const __m256d c2 = _mm256_add_pd(_mm256_cvtepi32_pd(p2), _mm256_mul_pd(d, c3));
    return _mm256_add_pd(_mm256_cvtepi32_pd(t1), _mm256_mul_pd(d, c2));
}

/* cubic() on four lanes, as cubic2. */
AVX2_INLINE __m256d cubic4(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d)
{
    const __m256d p2 = _mm256_sub_pd(v3, v1);
    const __m256d p3 = _mm256_sub_pd(
        _mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)), v3), v4);
    const __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
    const __m256d c3 = _mm256_add_pd(p3, _mm256_mul_pd(d, p4));
    return _mm256_add_pd(v2, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, c3))));
}

/* bicubic_px with the 4 x 4 taps inside (p: the top left one). Each case
 * spelled out, no array of rows: an indexed array of vectors lives on the
 * stack (2x the CHW kernel's time at dy 0, 3.5x the HWC one's, when these
 * kernels looped over one; docs/decisions/augment.md). */
AVX2_INLINE __m256d hrow(const uint8_t *p, const __m128i m[4], __m256d d, int dx0, size_t ps,
                         size_t cs)
{
    const __m128i r = row_taps(p, 4, ps, cs);
    return dx0 ? tap(r, m[1]) : hcubic(r, m, d);
}

AVX2_INLINE void bicubic_in(uint8_t *out, const uint8_t *p, size_t row, double dx, double dy,
                            const __m128i m[4], size_t ps, size_t cs)
{
    const __m256d d = _mm256_set1_pd(dx);
    const int dx0 = dx == 0.0;
    __m256d c;
    if (dy == 0.0) { /* v2 alone */
        c = hrow(p + row, m, d, dx0, ps, cs);
    } else {
        c = cubic4(hrow(p, m, d, dx0, ps, cs), hrow(p + row, m, d, dx0, ps, cs),
                   hrow(p + 2 * row, m, d, dx0, ps, cs), hrow(p + 3 * row, m, d, dx0, ps, cs),
                   _mm256_set1_pd(dy));
    }
    const __m256d clamped = _mm256_min_pd(_mm256_max_pd(c, _mm256_setzero_pd()),
                                          _mm256_set1_pd(255.0));
    put_lanes(out, _mm256_cvttpd_epi32(clamped), cs);
}

/* One output pixel from its sample point less 0.5 (xx, yy; inside the
 * image), split into (ix + dx, iy + dy): the vector kernel where the taps
 * are inside, else the scalar one. */
AVX2_INLINE void filtered_px(uint8_t *out, const uint8_t *src, int32_t w, int32_t h, int32_t ix,
                             int32_t iy, double dx, double dy, int bicubic, const __m128i m[4],
                             size_t ps, size_t cs)
{
    const int32_t x0 = ix - bicubic, y0 = iy - bicubic, reach = bicubic ? 3 : 1; /* first tap */
    if (x0 >= 0 && x0 + reach < w && y0 >= 0 && y0 + reach < h) {
        const size_t row = (size_t)w * ps;
        const uint8_t *p = src + (size_t)y0 * row + (size_t)x0 * ps;
        if (bicubic)
            bicubic_in(out, p, row, dx, dy, m, ps, cs);
        else
            bilinear_in(out, p, row, dx, dy, m, ps, cs);
    } else if (bicubic) {
        bicubic_px(out, src, w, h, x0, y0, dx, dy, ps, cs);
    } else {
        bilinear_px(out, src, w, h, ix, iy, dx, dy, ps, cs);
    }
}

/* CHW, four output pixels whose taps are all inside: the pixels are the
 * lanes. Each row's taps come from one 4-byte load a pixel and channel (at
 * the first tap's offset, off: int32, since the caller keeps the image
 * under 2^31 values; a bilinear row's last two bytes are unused and may lie
 * past the image, within the scratch block's slack), each tap widened from
 * its byte of the loaded int32. The four results are one 4-byte store a
 * channel, out holding the pixels' first value in plane 0. */
AVX2_INLINE __m256d byte_pd(__m128i g, int k)
{
    return _mm256_cvtepi32_pd(_mm_and_si128(_mm_srli_epi32(g, 8 * k), _mm_set1_epi32(0xFF)));
}

/* The 4 bytes at each lane's tap pointer plus `at` (four loads: on the
 * AMD EPYC here 15-25 % faster than a vpgatherdd of the offsets). */
AVX2_INLINE __m128i gather_row(const uint8_t *const p[4], size_t at)
{
    return _mm_setr_epi32((int)load_u32(p[0] + at), (int)load_u32(p[1] + at),
                          (int)load_u32(p[2] + at), (int)load_u32(p[3] + at));
}

AVX2_INLINE void store4(uint8_t *out, __m128i v)
{
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    const uint32_t four = (uint32_t)_mm_cvtsi128_si32(packed);
    memcpy(out, &four, 4);
}

AVX2_INLINE void bilinear4_chw(uint8_t *out, const uint8_t *const p[4], size_t row,
                               size_t plane, __m256d dx, __m256d dy, int dx0, int dy0)
{
    for (int c = 0; c < 3; c++) {
        const size_t at = (size_t)c * plane;
        const __m128i g0 = gather_row(p, at);
        __m256d v = dx0 ? byte_pd(g0, 0) : lerp4(byte_pd(g0, 0), byte_pd(g0, 1), dx);
        if (!dy0) {
            const __m128i g1 = gather_row(p, at + row);
            const __m256d v2 = dx0 ? byte_pd(g1, 0) : lerp4(byte_pd(g1, 0), byte_pd(g1, 1), dx);
            v = lerp4(v, v2, dy);
        }
        store4(out + at, _mm256_cvttpd_epi32(v));
    }
}

/* hcubic with the pixels as lanes: the four taps from the loaded bytes. */
AVX2_INLINE __m256d hcubic4(__m128i g, __m256d d)
{
    const __m128i lo = _mm_set1_epi32(0xFF);
    const __m128i t0 = _mm_and_si128(g, lo), t1 = _mm_and_si128(_mm_srli_epi32(g, 8), lo);
    const __m128i t2 = _mm_and_si128(_mm_srli_epi32(g, 16), lo), t3 = _mm_srli_epi32(g, 24);
    const __m128i p2 = _mm_sub_epi32(t2, t0), d01 = _mm_sub_epi32(t0, t1);
    const __m128i p3 = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(d01, d01), t2), t3);
    const __m128i p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(t1, t0), t2), t3);
    const __m256d c3 = _mm256_add_pd(_mm256_cvtepi32_pd(p3),
                                     _mm256_mul_pd(d, _mm256_cvtepi32_pd(p4)));
    const __m256d c2 = _mm256_add_pd(_mm256_cvtepi32_pd(p2), _mm256_mul_pd(d, c3));
    return _mm256_add_pd(_mm256_cvtepi32_pd(t1), _mm256_mul_pd(d, c2));
}

AVX2_INLINE void bicubic4_chw(uint8_t *out, const uint8_t *const p[4], size_t row,
                              size_t plane, __m256d dx, __m256d dy, int dx0, int dy0)
{
    for (int c = 0; c < 3; c++) {
        const size_t at = (size_t)c * plane;
        __m256d r;
        if (dy0) { /* v2 alone at dy 0 */
            const __m128i g = gather_row(p, at + row);
            r = dx0 ? byte_pd(g, 1) : hcubic4(g, dx);
        } else {
            const __m128i g0 = gather_row(p, at), g1 = gather_row(p, at + row);
            const __m128i g2 = gather_row(p, at + 2 * row), g3 = gather_row(p, at + 3 * row);
            if (dx0)
                r = cubic4(byte_pd(g0, 1), byte_pd(g1, 1), byte_pd(g2, 1), byte_pd(g3, 1), dy);
            else
                r = cubic4(hcubic4(g0, dx), hcubic4(g1, dx), hcubic4(g2, dx), hcubic4(g3, dx), dy);
        }
        const __m256d clamped = _mm256_min_pd(_mm256_max_pd(r, _mm256_setzero_pd()),
                                              _mm256_set1_pd(255.0));
        store4(out + at, _mm256_cvttpd_epi32(clamped));
    }
}

/* affine_filtered with four output pixels' positions at a time: each
 * coordinate ((a0 * xin + a1 * yin) + a2, the row's a1 * yin the same
 * product as the pixel's), the range check (ordered compares: NaN is
 * outside), the 0.5 shift, the floor (for the values in [-0.5, size) that
 * pass: floor_small's) and the fraction are Pillow's operations lane by
 * lane; then each pixel by filtered_px. The row's last w % 4 pixels: the
 * scalar coordinates. */
AVX2_INLINE void affine_filtered_avx2(uint8_t *dst, const uint8_t *src, int32_t w, int32_t h,
                                      const double a[6], int resample, const uint8_t fill[3],
                                      size_t ps, size_t cs)
{
    const affine_map map = affine_map_of(a, w, h);
    const uint8_t f[3] = {fill[0], fill[1], fill[2]};
    const int bicubic = resample == FD_AUG_BICUBIC, reach = bicubic ? 3 : 1;
    /* CHW: whole blocks of four with the pixels as lanes, where every tap
     * offset fits int32 (a bilinear row's load reads 2 bytes past its taps) */
    const int lanes = ps == 1 && (size_t)w * (size_t)h < ((size_t)1 << 31) - 4;
    __m128i m[4];
    for (int k = 0; k < 4; k++)
        m[k] = tap_mask(k, ps);
    const __m256d va0 = _mm256_set1_pd(map.a0), va2 = _mm256_set1_pd(map.a2);
    const __m256d va3 = _mm256_set1_pd(map.a3), va5 = _mm256_set1_pd(map.a5);
    const __m256d zero = _mm256_setzero_pd(), half = _mm256_set1_pd(0.5);
    const __m256d vw = _mm256_set1_pd(map.fw), vh = _mm256_set1_pd(map.fh);
    uint8_t *out = dst;
    for (int32_t y = 0; y < h; y++) {
        const double yin = y + 0.5;
        const __m256d by = _mm256_set1_pd(map.a1 * yin), ey = _mm256_set1_pd(map.a4 * yin);
        int32_t x = 0;
        for (; x + 4 <= w; x += 4) {
            const __m256d xin = _mm256_add_pd(_mm256_cvtepi32_pd(_mm_setr_epi32(x, x + 1, x + 2,
                                                                                 x + 3)),
                                              half);
            __m256d xx = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(va0, xin), by), va2);
            __m256d yy = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(va3, xin), ey), va5);
            const __m256d in_x = _mm256_and_pd(_mm256_cmp_pd(xx, zero, _CMP_GE_OQ),
                                               _mm256_cmp_pd(xx, vw, _CMP_LT_OQ));
            const __m256d in_y = _mm256_and_pd(_mm256_cmp_pd(yy, zero, _CMP_GE_OQ),
                                               _mm256_cmp_pd(yy, vh, _CMP_LT_OQ));
            const __m256d in = _mm256_and_pd(in_x, in_y);
            const int inside_mask = _mm256_movemask_pd(in);
            if (!inside_mask) {
                for (int k = 0; k < 4; k++, out += ps)
                    put3(out, f, cs, 1);
                continue;
            }
            xx = _mm256_sub_pd(xx, half);
            yy = _mm256_sub_pd(yy, half);
            /* lanes outside may hold anything (NaN, huge): zeroed before the conversion */
            const __m256d fx = _mm256_and_pd(_mm256_floor_pd(xx), in);
            const __m256d fy = _mm256_and_pd(_mm256_floor_pd(yy), in);
            const __m256d vdx = _mm256_sub_pd(xx, fx), vdy = _mm256_sub_pd(yy, fy);
            const __m128i vix = _mm256_cvttpd_epi32(fx), viy = _mm256_cvttpd_epi32(fy);
            if (lanes && inside_mask == 15) {
                /* every first tap x0, y0 with x0 >= 0, x0 + reach < w (and so for y) */
                const __m128i x0 = _mm_sub_epi32(vix, _mm_set1_epi32(bicubic));
                const __m128i y0 = _mm_sub_epi32(viy, _mm_set1_epi32(bicubic));
                const __m128i none = _mm_set1_epi32(-1);
                const __m128i ok = _mm_and_si128(
                    _mm_and_si128(_mm_cmpgt_epi32(x0, none),
                                  _mm_cmplt_epi32(x0, _mm_set1_epi32(w - reach))),
                    _mm_and_si128(_mm_cmpgt_epi32(y0, none),
                                  _mm_cmplt_epi32(y0, _mm_set1_epi32(h - reach))));
                if (_mm_movemask_ps(_mm_castsi128_ps(ok)) == 15) {
                    int32_t off[4];
                    _mm_storeu_si128((__m128i *)(void *)off,
                                     _mm_add_epi32(_mm_mullo_epi32(y0, _mm_set1_epi32(w)), x0));
                    const uint8_t *const p[4] = {src + off[0], src + off[1], src + off[2],
                                                 src + off[3]};
                    const int dx0 = _mm256_movemask_pd(_mm256_cmp_pd(vdx, zero, _CMP_EQ_OQ)) == 15;
                    const int dy0 = _mm256_movemask_pd(_mm256_cmp_pd(vdy, zero, _CMP_EQ_OQ)) == 15;
                    if (bicubic)
                        bicubic4_chw(out, p, (size_t)w, cs, vdx, vdy, dx0, dy0);
                    else
                        bilinear4_chw(out, p, (size_t)w, cs, vdx, vdy, dx0, dy0);
                    out += 4;
                    continue;
                }
            }
            double dxs[4], dys[4];
            int32_t ixs[4], iys[4];
            _mm256_storeu_pd(dxs, vdx);
            _mm256_storeu_pd(dys, vdy);
            _mm_storeu_si128((__m128i *)(void *)ixs, vix);
            _mm_storeu_si128((__m128i *)(void *)iys, viy);
            for (int k = 0; k < 4; k++, out += ps) {
                if (inside_mask >> k & 1)
                    filtered_px(out, src, w, h, ixs[k], iys[k], dxs[k], dys[k], bicubic, m, ps,
                                cs);
                else
                    put3(out, f, cs, 1);
            }
        }
        for (; x < w; x++, out += ps) {
            int32_t ix, iy;
            double dx, dy;
            if (affine_source(&map, x, y, &ix, &iy, &dx, &dy))
                filtered_px(out, src, w, h, ix, iy, dx, dy, bicubic, m, ps, cs);
            else
                put3(out, f, cs, 1);
        }
    }
}

__attribute__((target("avx2"))) static void affine_filtered_vector(const image *im,
                                                                  const uint8_t *src,
                                                                  const fd_aug_step *s)
{
    BY_LAYOUT(im, affine_filtered_avx2, im->p, src, im->w, im->h, s->matrix, s->resample,
              s->fill);
}
#endif

static void affine(const image *im, const uint8_t *src, const fd_aug_step *s, int32_t *xintab)
{
    const double *a = s->matrix;
    const int32_t w = im->w, h = im->h;
    if (s->resample != FD_AUG_NEAREST) {
#if defined(FD_AUG_AVX2)
        if (use_avx2()) {
            affine_filtered_vector(im, src, s);
            return;
        }
#endif
        BY_LAYOUT(im, affine_filtered, im->p, src, w, h, a, s->resample, s->fill);
    } else if (a[1] == 0 && a[3] == 0)
        BY_LAYOUT(im, affine_scale, im->p, src, w, h, a, s->fill, xintab);
    else if (check_fixed(a, 0, 0) && check_fixed(a, w, h) && check_fixed(a, 0, h) &&
             check_fixed(a, w, 0))
        BY_LAYOUT(im, affine_fixed, im->p, src, w, h, a, s->fill);
    else
        BY_LAYOUT(im, affine_double, im->p, src, w, h, a, s->fill);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */

static void apply_lut(const image *im, const uint8_t *table)
{
    const size_t n = (size_t)im->w * (size_t)im->h;
    uint8_t *p = im->p;
    if (!memcmp(table, table + 256, 256) && !memcmp(table, table + 512, 256)) {
        for (size_t i = 0; i < 3 * n; i++) /* one table for every channel */
            p[i] = table[p[i]];
    } else if (im->ps == 3) {
        for (size_t i = 0; i < n; i++, p += 3) {
            p[0] = table[p[0]];
            p[1] = table[256 + p[1]];
            p[2] = table[512 + p[2]];
        }
    } else {
        for (int b = 0; b < 3; b++, p += n)
            for (size_t i = 0; i < n; i++)
                p[i] = table[256 * b + p[i]];
    }
}

/* Adds the counts of q[0], q[stride], ... (n values) to hist: four 32-bit
 * tables in turn, so that equal neighbours do not wait on each other's
 * increment, emptied every 2^30 values (no table reaches 2^32). */
KERNEL void count_values(const uint8_t *q, size_t n, size_t stride, uint64_t hist[256])
{
    uint32_t c[4][256];
    for (size_t start = 0; start < n; start += (size_t)1 << 30) {
        const size_t end = n - start > ((size_t)1 << 30) ? start + ((size_t)1 << 30) : n;
        memset(c, 0, sizeof c);
        size_t i = start;
        for (; i + 4 <= end; i += 4) {
            c[0][q[i * stride]]++;
            c[1][q[(i + 1) * stride]]++;
            c[2][q[(i + 2) * stride]]++;
            c[3][q[(i + 3) * stride]]++;
        }
        for (; i < end; i++)
            c[0][q[i * stride]]++;
        for (int v = 0; v < 256; v++)
            hist[v] += (uint64_t)c[0][v] + c[1][v] + c[2][v] + c[3][v];
    }
}

static void histograms(const image *im, uint64_t hist[3][256])
{
    const size_t n = (size_t)im->w * (size_t)im->h;
    memset(hist, 0, 3 * 256 * sizeof(uint64_t));
    for (int b = 0; b < 3; b++) {
        if (im->ps == 3)
            count_values(im->p + b, n, 3, hist[b]);
        else
            count_values(im->p + (size_t)b * im->cs, n, 1, hist[b]);
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

#if defined(__SSE2__)
/* SSE2: four float lanes computing the scalar expressions below in their
 * order, IEEE single like the scalar code, so bit for bit the same (max/min
 * are the clamps: no value here is NaN). */

static inline __m128 clamp255(__m128 t)
{
    return _mm_min_ps(_mm_max_ps(t, _mm_setzero_ps()), _mm_set1_ps(255.0f));
}

/* one row term: l * k + c * kc + r * k */
static inline __m128 taps(__m128 l, __m128 c, __m128 r, __m128 k, __m128 kc)
{
    return _mm_add_ps(_mm_add_ps(_mm_mul_ps(l, k), _mm_mul_ps(c, kc)), _mm_mul_ps(r, k));
}
#endif

/* One row of ImageEnhance.Sharpness inside the border: Filter.c's
 * ImagingFilter3x3 with SMOOTH (1 1 1 / 1 5 1 / 1 1 1, each / 13 in float),
 * a float sum from offset 0.5 in its order (row below, row, row above; left
 * to right), clamped and truncated (clip8), then blended with the pixel.
 * `d` is the distance to the left neighbour (3 interleaved, 1 planar); the
 * row's values from..to-1 are filtered (every channel's, interleaved). */
KERNEL void sharpen_row(uint8_t *out, const uint8_t *in_1, const uint8_t *in0,
                        const uint8_t *in1, size_t from, size_t to, float alpha, size_t d)
{
    const float k = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    size_t i = from;
#if defined(__SSE2__)
    const __m128 vk = _mm_set1_ps(k), vk5 = _mm_set1_ps(k5), half = _mm_set1_ps(0.5f);
    const __m128 va = _mm_set1_ps(alpha);
    for (; i + 16 <= to; i += 16) {
        const f32x16 bl = load16(in1 + i - d), bc = load16(in1 + i), br = load16(in1 + i + d);
        const f32x16 ml = load16(in0 + i - d), mc = load16(in0 + i), mr = load16(in0 + i + d);
        const f32x16 tl = load16(in_1 + i - d), tc = load16(in_1 + i), tr = load16(in_1 + i + d);
        __m128i res[4];
        for (int q = 0; q < 4; q++) {
            __m128 ss = _mm_add_ps(half, taps(bl.v[q], bc.v[q], br.v[q], vk, vk));
            ss = _mm_add_ps(ss, taps(ml.v[q], mc.v[q], mr.v[q], vk, vk5));
            ss = _mm_add_ps(ss, taps(tl.v[q], tc.v[q], tr.v[q], vk, vk));
            const __m128 deg = _mm_cvtepi32_ps(_mm_cvttps_epi32(clamp255(ss)));
            const __m128 t = _mm_add_ps(deg, _mm_mul_ps(va, _mm_sub_ps(mc.v[q], deg)));
            res[q] = _mm_cvttps_epi32(clamp255(t));
        }
        _mm_storeu_si128((__m128i *)(void *)(out + i),
                         _mm_packus_epi16(_mm_packs_epi32(res[0], res[1]),
                                          _mm_packs_epi32(res[2], res[3])));
    }
#endif
    for (; i < to; i++) {
        float ss = 0.5f;
        ss += (float)in1[i - d] * k + (float)in1[i] * k + (float)in1[i + d] * k;
        ss += (float)in0[i - d] * k + (float)in0[i] * k5 + (float)in0[i + d] * k;
        ss += (float)in_1[i - d] * k + (float)in_1[i] * k + (float)in_1[i + d] * k;
        ss = ss < 0.0f ? 0.0f : ss;
        ss = ss > 255.0f ? 255.0f : ss;
        out[i] = blend((int32_t)ss, in0[i], alpha);
    }
}

/* The border keeps its pixels (the degenerate is the image there, so the
 * blend gives the pixel back), and images under 3 x 3 stay as they are
 * (ImagingFilter copies them). `src` is a copy of the image. */
static void sharpen(const image *im, const uint8_t *src, float alpha)
{
    const int32_t w = im->w, h = im->h;
    if (w < 3 || h < 3)
        return;
    if (im->ps == 3) {
        const size_t row = 3 * (size_t)w;
        for (int32_t y = 1; y < h - 1; y++) {
            const uint8_t *in0 = src + (size_t)y * row;
            sharpen_row(im->p + (size_t)y * row, in0 - row, in0, in0 + row, 3, row - 3, alpha,
                        3);
        }
        return;
    }
    const size_t row = (size_t)w;
    for (int b = 0; b < 3; b++) {
        const size_t plane = (size_t)b * im->cs;
        for (int32_t y = 1; y < h - 1; y++) {
            const uint8_t *in0 = src + plane + (size_t)y * row;
            sharpen_row(im->p + plane + (size_t)y * row, in0 - row, in0, in0 + row, 1, row - 1,
                        alpha, 1);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Gaussian blur (torchvision's gaussian_blur on a PIL image; not bit-exact) */

/* _get_gaussian_kernel1d in float32: linspace(-(n-1)/2, (n-1)/2) (exact
 * values), exp(-0.5 * (x / sigma)^2), divided by its sum. torch's exp and
 * its summation order may differ from expf and this loop in the last bit. */
static void gaussian_kernel(int32_t n, float sigma, float *k)
{
    const float half = (float)(n - 1) * 0.5f;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        const float t = ((float)i - half) / sigma;
        k[i] = expf(-0.5f * (t * t));
        sum += k[i];
    }
    for (int32_t i = 0; i < n; i++)
        k[i] = k[i] / sum;
}

/* torch's reflect padding: -1 -> 1, n -> n - 2 (the radius is below n;
 * 64-bit: a side may be up to INT32_MAX). */
static inline size_t reflect(int64_t x, int64_t n)
{
    return (size_t)(x < 0 ? -x : x >= n ? 2 * n - 2 - x : x);
}

/* One row of w pixels of `ps` interleaved values, blurred along x into
 * `out` (w * ps floats): the row padded by reflection into `pad`, then
 * each value the float sum over the taps in order. */
KERNEL void blur_row(const uint8_t *row, int32_t w, const float *k, int32_t n, float *pad,
                     float *out, size_t ps)
{
    const int64_t r = n / 2;
    for (int64_t p = 0; p < (int64_t)w + 2 * r; p++) {
        const size_t x = reflect(p - r, w);
        for (size_t c = 0; c < ps; c++)
            pad[(size_t)p * ps + c] = (float)row[x * ps + c];
    }
    const size_t m = (size_t)w * ps;
    for (size_t i = 0; i < m; i++)
        out[i] = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        const float kj = k[j], *q = pad + (size_t)j * ps;
        for (size_t i = 0; i < m; i++)
            out[i] += q[i] * kj;
    }
}

/* torch.round (half to even, the default rounding mode) and the cast to
 * uint8 of values the normalized kernel keeps in [0, 255] (clamped). */
static void round_row(const float *acc, uint8_t *out, size_t m)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= m; i += 16) {
        const __m128i a = _mm_cvtps_epi32(_mm_loadu_ps(acc + i));
        const __m128i b = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 4));
        const __m128i c = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 8));
        const __m128i d = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 12));
        _mm_storeu_si128((__m128i *)(void *)(out + i),
                         _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
    }
#endif
    for (; i < m; i++) {
        const long v = lrintf(acc[i]);
        out[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* Both passes over planes of w values a row (CHW: each channel; HWC: the
 * interleaved rows, ps 3). `hor` holds the plane blurred along x (h * w *
 * ps floats); `pad` and `acc` a padded and an output row. */
KERNEL void blur_plane(uint8_t *plane, int32_t w, int32_t h, const float *kx, int32_t nx,
                       const float *ky, int32_t ny, float *hor, float *pad, float *acc, size_t ps)
{
    const size_t m = (size_t)w * ps;
    for (int32_t y = 0; y < h; y++)
        blur_row(plane + (size_t)y * m, w, kx, nx, pad, hor + (size_t)y * m, ps);
    const int64_t r = ny / 2;
    for (int32_t y = 0; y < h; y++) {
        for (size_t i = 0; i < m; i++)
            acc[i] = 0.0f;
        for (int32_t j = 0; j < ny; j++) {
            const float kj = ky[j], *q = hor + reflect((int64_t)y + j - r, h) * m;
            for (size_t i = 0; i < m; i++)
                acc[i] += q[i] * kj;
        }
        round_row(acc, plane + (size_t)y * m, m);
    }
}

/* The blur step: both kernels, then each plane's two passes (check() has
 * kept each radius below the image's side, as torch's reflect padding). */
static void blur(const image *im, const fd_aug_step *s, float *scratch)
{
    const int32_t nx = s->ksize[0], ny = s->ksize[1], w = im->w, h = im->h;
    float *kx = scratch, *ky = kx + nx, *hor = ky + ny;
    gaussian_kernel(nx, s->sigma[0], kx);
    gaussian_kernel(ny, s->sigma[1], ky);
    const size_t values = (size_t)w * (size_t)h * 3;
    float *pad = hor + values, *acc = pad + ((size_t)w + 2 * (size_t)(nx / 2)) * 3;
    if (im->ps == 3) {
        blur_plane(im->p, w, h, kx, nx, ky, ny, hor, pad, acc, 3);
        return;
    }
    for (int b = 0; b < 3; b++)
        blur_plane(im->p + (size_t)b * im->cs, w, h, kx, nx, ky, ny, hor, pad, acc, 1);
}

/* Floats of scratch a blur step needs: both kernels, the image, a padded
 * row and an output row (3 values a pixel covers either layout). */
static int blur_floats(const fd_aug_step *s, uint32_t width, size_t size, size_t *out)
{
    const size_t kernels = (size_t)s->ksize[0] + (size_t)s->ksize[1];
    const size_t rows = 3 * ((size_t)width + 2 * (size_t)(s->ksize[0] / 2)) + 3 * (size_t)width;
    *out = kernels + size + rows;
    return *out >= size; /* a wrap-around would land below size (the other terms are < 2^36) */
}

/* ------------------------------------------------------------------------ */

static fd_status check(size_t size, uint32_t height, uint32_t width, fd_layout layout,
                       const fd_aug_step *steps, size_t nsteps, fd_error *err)
{
    size_t npixels, nbytes;
    if (height == 0 || width == 0)
        return fd_fail(err, FD_ERR_ARGUMENT, "augment: empty image (%u x %u)", height, width);
    /* sides under 2^30: every kernel's int32 position arithmetic (a tap a few
     * pixels past the side, twice a side) stays in range */
    if (height >= FD_AUG_MAX_SIDE || width >= FD_AUG_MAX_SIDE ||
        !fd_mul_size(height, width, &npixels) || !fd_mul_size(npixels, 3, &nbytes))
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
        case FD_AUG_BLUR:
            for (int i = 0; i < 2; i++) {
                const int32_t n = s->ksize[i];
                const uint32_t side = i == 0 ? width : height;
                if (n < 1 || n % 2 == 0 || (uint32_t)(n / 2) >= side)
                    return fd_fail(err, FD_ERR_ARGUMENT,
                                   "augment: step %zu: blur kernel %s %d is not odd with a "
                                   "radius below the image's %u",
                                   k, i == 0 ? "width" : "height", (int)n, side);
                if (!(isfinite(s->sigma[i]) && s->sigma[i] > 0.0f))
                    return fd_fail(err, FD_ERR_ARGUMENT,
                                   "augment: step %zu: blur sigma %g is not finite and > 0", k,
                                   (double)s->sigma[i]);
            }
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
    /* one scratch block, owned here, sized for the most any step needs: a
     * copy of the image then the scale path's column table (int32 per
     * output column, aligned after it, at least 16 bytes past the copy: the
     * slack a bilinear load may read past the image's last tap); or a
     * blur's floats */
    size_t total = 0, table_at = 0;
    for (size_t k = 0; k < nsteps; k++) {
        size_t need = 0, floats;
        if (needs_copy(steps[k].kind)) {
            size_t table_bytes;
            table_at = (size + 31) & ~(size_t)15;
            if (table_at < size || !fd_mul_size(width, sizeof(int32_t), &table_bytes) ||
                table_at + table_bytes < table_at)
                return fd_fail(err, FD_ERR_ARGUMENT, "augment: %u x %u scratch overflows",
                               height, width);
            need = table_at + table_bytes;
        } else if (steps[k].kind == FD_AUG_BLUR) {
            if (!blur_floats(&steps[k], width, size, &floats) ||
                !fd_mul_size(floats, sizeof(float), &need))
                return fd_fail(err, FD_ERR_ARGUMENT, "augment: %u x %u scratch overflows",
                               height, width);
        }
        total = need > total ? need : total;
    }
    uint8_t *scratch = NULL;
    int32_t *xintab = NULL;
    if (total > 0) {
        scratch = malloc(total);
        if (scratch == NULL)
            return fd_fail(err, FD_ERR_NOMEM, "augment: cannot allocate %zu scratch bytes",
                           total);
        xintab = (int32_t *)(void *)(scratch + table_at);
    }
    const image im = view(pixels, height, width, layout);
    for (size_t k = 0; k < nsteps && st == FD_OK; k++) {
        const fd_aug_step *s = &steps[k];
        if (needs_copy(s->kind))
            memcpy(scratch, pixels, size);
        switch (s->kind) {
        case FD_AUG_COLOR:
            st = fd_color_apply(pixels, size, height, width, layout, &s->color, 1, err);
            break;
        case FD_AUG_AFFINE:
            affine(&im, scratch, s, xintab);
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
            sharpen(&im, scratch, s->factor);
            break;
        case FD_AUG_BLUR:
            blur(&im, s, (float *)(void *)scratch);
            break;
        }
    }
    free(scratch);
    return st;
}
