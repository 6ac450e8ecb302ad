#include "fd_resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

/* Scratch slots this file uses (fd_scratch in fd_common.c). */
enum { SLOT_COEFFS = 0, SLOT_TEMP = 1, SLOT_ROW = 2 };

static double bilinear_filter(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double bicubic_filter(double x)
{
    const double a = -0.5;
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

typedef struct {
    int ksize;
    int *bounds; /* per output: first input, count */
    int32_t *kk; /* per output: ksize fixed-point weights */
} coeffs;

static int coeff_ksize(uint32_t in_size, double in0, double in1, uint32_t out_size, double support)
{
    (void)in_size;
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(support * filterscale) * 2 + 1;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc. `pre` has room for
 * out_size * ksize doubles. */
static void compute_coeffs(uint32_t in_size, double in0, double in1, uint32_t out_size,
                           double (*filter)(double), double support, coeffs *c, double *pre)
{
    const double scale = (in1 - in0) / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double sup = support * filterscale;
    const double ss = 1.0 / filterscale;
    const int ksize = c->ksize;
    for (uint32_t xx = 0; xx < out_size; xx++) {
        const double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - sup + 0.5);
        int xmax = (int)(center + sup + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > (int)in_size)
            xmax = (int)in_size;
        xmax -= xmin;
        if (xmax < 0)
            xmax = 0;
        double *k = pre + (size_t)xx * ksize;
        double ww = 0.0;
        int x;
        for (x = 0; x < xmax; x++) {
            double w = filter((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        for (; x < ksize; x++)
            k[x] = 0;
        c->bounds[xx * 2] = xmin;
        c->bounds[xx * 2 + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out_size * ksize; i++)
        c->kk[i] = pre[i] < 0 ? (int32_t)(-0.5 + pre[i] * (1 << PRECISION_BITS))
                              : (int32_t)(0.5 + pre[i] * (1 << PRECISION_BITS));
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void horizontal_row(const uint8_t *in, uint8_t *out, uint32_t out_w, uint32_t ch,
                           const coeffs *c)
{
    const int32_t half = 1 << (PRECISION_BITS - 1);
    if (ch == 3) {
        for (uint32_t xx = 0; xx < out_w; xx++) {
            const int xmin = c->bounds[xx * 2], n = c->bounds[xx * 2 + 1];
            const int32_t *k = c->kk + (size_t)xx * c->ksize;
            const uint8_t *p = in + (size_t)xmin * 3;
            int32_t s0 = half, s1 = half, s2 = half;
            for (int x = 0; x < n; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            out[0] = clip8(s0);
            out[1] = clip8(s1);
            out[2] = clip8(s2);
            out += 3;
        }
        return;
    }
    for (uint32_t xx = 0; xx < out_w; xx++) {
        const int xmin = c->bounds[xx * 2], n = c->bounds[xx * 2 + 1];
        const int32_t *k = c->kk + (size_t)xx * c->ksize;
        const uint8_t *p = in + (size_t)xmin * ch;
        for (uint32_t b = 0; b < ch; b++) {
            int32_t s = half;
            for (int x = 0; x < n; x++)
                s += p[(size_t)x * ch + b] * k[x];
            *out++ = clip8(s);
        }
    }
}

/* RGB rows with AVX2: two taps per step, each pixel's three bytes widened
 * to int32 lanes (the fourth lane carries the next byte and is dropped).
 * The same integer sums as horizontal_row, so the result is identical. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FD_BMP_NO_CLONES)
#include <immintrin.h>
#define FD_RESAMPLE_AVX2 1

static inline __m128i load_pixel3(const uint8_t *p)
{
    return _mm_cvtsi32_si128((int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16));
}

static inline __m128i load_pixel4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
}

/* `limit` is one past the last byte that may be read: a window whose
 * four-byte loads would pass it takes the exact three-byte loads. */
__attribute__((target("avx2")))
static void horizontal_row3_avx2(const uint8_t *in, uint8_t *out, uint32_t out_w,
                                 const coeffs *c, const uint8_t *limit)
{
    const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    for (uint32_t xx = 0; xx < out_w; xx++, out += 3) {
        const int xmin = c->bounds[xx * 2], n = c->bounds[xx * 2 + 1];
        const int32_t *k = c->kk + (size_t)xx * c->ksize;
        const uint8_t *p = in + (size_t)xmin * 3;
        __m256i pairs = _mm256_setzero_si256();
        int x = 0;
        if (p + (size_t)n * 3 + 1 <= limit) {
            for (; x + 1 < n; x += 2) {
                const uint8_t *q = p + (size_t)x * 3;
                __m256i px = _mm256_cvtepu8_epi32(_mm_unpacklo_epi32(load_pixel4(q),
                                                                       load_pixel4(q + 3)));
                __m256i w = _mm256_set_m128i(_mm_set1_epi32(k[x + 1]), _mm_set1_epi32(k[x]));
                pairs = _mm256_add_epi32(pairs, _mm256_mullo_epi32(px, w));
            }
        }
        __m128i acc = _mm_add_epi32(half, _mm_add_epi32(_mm256_castsi256_si128(pairs),
                                                        _mm256_extracti128_si256(pairs, 1)));
        for (; x < n; x++)
            acc = _mm_add_epi32(acc, _mm_mullo_epi32(_mm_cvtepu8_epi32(load_pixel3(p + (size_t)x * 3)),
                                                     _mm_set1_epi32(k[x])));
        /* clip8: shift, then saturate to int16 and to uint8 */
        __m128i v = _mm_srai_epi32(acc, PRECISION_BITS);
        v = _mm_packs_epi32(v, v);
        v = _mm_packus_epi16(v, v);
        const uint32_t rgb = (uint32_t)_mm_cvtsi128_si32(v);
        out[0] = (uint8_t)rgb;
        out[1] = (uint8_t)(rgb >> 8);
        out[2] = (uint8_t)(rgb >> 16);
    }
}

static int have_avx2(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached;
}
#endif

/* One horizontal pass over a row; `limit` as for horizontal_row3_avx2. */
static void horizontal_pass(const uint8_t *in, uint8_t *out, uint32_t out_w, uint32_t ch,
                            const coeffs *c, const uint8_t *limit)
{
#ifdef FD_RESAMPLE_AVX2
    if (ch == 3 && have_avx2()) {
        horizontal_row3_avx2(in, out, out_w, c, limit);
        return;
    }
#endif
    (void)limit;
    horizontal_row(in, out, out_w, ch, c);
}

/* Same target-clone rule as fd_bmp_rows.c: AVX2 has a 32-bit multiply that
 * vectorizes the accumulation below; the baseline ISA does not. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6 && defined(__x86_64__) && \
    defined(__GLIBC__) && !defined(FD_BMP_NO_CLONES)
#define FD_RESAMPLE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FD_RESAMPLE_CLONES
#endif

/* One output row from the rows `first` .. `first + n` of `in`: taps outer,
 * pixels inner, so the inner loop is a straight vectorizable multiply-add
 * over the row (acc holds row_bytes int32 sums). */
FD_RESAMPLE_CLONES
static void vertical_row(const uint8_t *in, size_t stride, uint8_t *out, size_t row_bytes,
                         int first, int n, const int32_t *k, int32_t *acc)
{
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (size_t i = 0; i < row_bytes; i++)
        acc[i] = half;
    for (int y = 0; y < n; y++) {
        const uint8_t *p = in + (size_t)(first + y) * stride;
        const int32_t w = k[y];
        for (size_t i = 0; i < row_bytes; i++)
            acc[i] += (int32_t)p[i] * w;
    }
    for (size_t i = 0; i < row_bytes; i++)
        out[i] = clip8(acc[i]);
}

/* Pillow resizes with NEAREST through its affine scaler: positions are
 * accumulated in double from the pixel centre, then truncated. */
static fd_status resample_nearest(const uint8_t *src, size_t stride, uint32_t src_h,
                                  uint32_t src_w, fd_box box, const fd_dest *dst, fd_error *err)
{
    const uint32_t ow = dst->width, oh = dst->height, ch = dst->channels;
    size_t n;
    if (!fd_mul_size(ow, sizeof(int), &n))
        return fd_fail(err, FD_ERR_TOO_LARGE, "output too wide");
    int *xin = fd_scratch(SLOT_COEFFS, n);
    uint8_t *row = fd_scratch(SLOT_ROW, (size_t)ow * ch);
    if (!xin || !row)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
    const double ax = (box.x1 - box.x0) / ow, ay = (box.y1 - box.y0) / oh;
    double xo = box.x0 + ax * 0.5;
    for (uint32_t x = 0; x < ow; x++, xo += ax) {
        int v = xo < 0.0 ? 0 : (int)xo;
        xin[x] = v >= (int)src_w ? (int)src_w - 1 : v;
    }
    double yo = box.y0 + ay * 0.5;
    for (uint32_t y = 0; y < oh; y++, yo += ay) {
        int yi = yo < 0.0 ? 0 : (int)yo;
        if (yi >= (int)src_h)
            yi = (int)src_h - 1;
        const uint8_t *in = src + (size_t)yi * stride;
        for (uint32_t x = 0; x < ow; x++)
            memcpy(row + (size_t)x * ch, in + (size_t)xin[x] * ch, ch);
        fd_put_row(dst, y, row);
    }
    return FD_OK;
}

fd_status fd_resample(const uint8_t *src, size_t stride, uint32_t src_h, uint32_t src_w,
                      fd_box box, fd_interp interp, const fd_dest *dst, fd_error *err)
{
    const uint32_t ow = dst->width, oh = dst->height, ch = dst->channels;
    if (ow == 0 || oh == 0 || src_w == 0 || src_h == 0)
        return fd_fail(err, FD_ERR_ARGUMENT, "cannot resample an empty image");
    if (!(box.x0 >= 0 && box.y0 >= 0 && box.x1 <= src_w && box.y1 <= src_h &&
          box.x1 > box.x0 && box.y1 > box.y0))
        return fd_fail(err, FD_ERR_ARGUMENT,
                       "resample box (%g, %g, %g, %g) is not inside the %ux%u source", box.x0,
                       box.y0, box.x1, box.y1, src_w, src_h);
    if (ow > (1u << 24) || oh > (1u << 24))
        return fd_fail(err, FD_ERR_TOO_LARGE, "output size %ux%u is too large", ow, oh);
    if (interp == FD_INTERP_NEAREST)
        return resample_nearest(src, stride, src_h, src_w, box, dst, err);

    double (*filter)(double) = interp == FD_INTERP_BICUBIC ? bicubic_filter : bilinear_filter;
    const double support = interp == FD_INTERP_BICUBIC ? 2.0 : 1.0;
    const int need_h = ow != src_w || box.x0 != 0 || box.x1 != ow;
    const int need_v = oh != src_h || box.y0 != 0 || box.y1 != oh;

    coeffs hc, vc;
    hc.ksize = coeff_ksize(src_w, box.x0, box.x1, ow, support);
    vc.ksize = coeff_ksize(src_h, box.y0, box.y1, oh, support);
    /* One block: bounds, fixed-point weights, then the double weights. */
    const size_t hn = (size_t)ow * hc.ksize, vn = (size_t)oh * vc.ksize;
    const size_t pre_n = hn > vn ? hn : vn;
    const size_t bytes = ((size_t)ow + oh) * 2 * sizeof(int) + (hn + vn) * sizeof(int32_t) +
                         pre_n * sizeof(double) + 16;
    uint8_t *block = fd_scratch(SLOT_COEFFS, bytes);
    if (!block)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling coefficients");
    double *pre = (double *)block;
    hc.bounds = (int *)(pre + pre_n);
    vc.bounds = hc.bounds + (size_t)ow * 2;
    hc.kk = (int32_t *)(vc.bounds + (size_t)oh * 2);
    vc.kk = hc.kk + hn;
    compute_coeffs(src_w, box.x0, box.x1, ow, filter, support, &hc, pre);
    compute_coeffs(src_h, box.y0, box.y1, oh, filter, support, &vc, pre);

    const size_t out_row = (size_t)ow * ch;
    /* Columns of the source the horizontal pass reads. */
    const size_t x_last = need_h ? (size_t)hc.bounds[(ow - 1) * 2] + hc.bounds[(ow - 1) * 2 + 1]
                                 : (size_t)src_w;
    const size_t wide_row = x_last * ch;
    /* the output row, then the vertical pass's int32 sums (aligned) */
    const size_t row_room = (out_row + 63) & ~(size_t)63;
    const size_t acc_n = wide_row > out_row ? wide_row : out_row;
    uint8_t *row = fd_scratch(SLOT_ROW, row_room + acc_n * sizeof(int32_t));
    int32_t *acc = (int32_t *)(row + row_room);
    if (!row)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");

    /* Rows of the source the vertical pass reads. */
    const int y_first = need_v ? vc.bounds[0] : (int)box.y0;
    const int y_last = need_v ? vc.bounds[(oh - 1) * 2] + vc.bounds[(oh - 1) * 2 + 1]
                              : (int)box.y0 + (int)oh;
    /* Pillow runs the horizontal pass first in the common cases (which
     * keeps fused chains bit-exact); only when the other order is far
     * cheaper (a tall strip resized to a small square would first widen
     * every one of its rows) run vertical first, one rounding step away. */
    if (need_h && need_v) {
        const double hv = (double)(y_last - y_first) * ow * hc.ksize + (double)oh * ow * vc.ksize;
        const double vh = (double)oh * x_last * vc.ksize + (double)oh * ow * hc.ksize;
        if (4 * vh < hv) {
            uint8_t *temp = fd_scratch(SLOT_TEMP, (size_t)oh * wide_row);
            if (!temp)
                return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
            for (uint32_t y = 0; y < oh; y++)
                vertical_row(src, stride, temp + (size_t)y * wide_row, wide_row, vc.bounds[y * 2],
                             vc.bounds[y * 2 + 1], vc.kk + (size_t)y * vc.ksize, acc);
            const uint8_t *temp_end = temp + (size_t)oh * wide_row;
            for (uint32_t y = 0; y < oh; y++) {
                horizontal_pass(temp + (size_t)y * wide_row, row, ow, ch, &hc, temp_end);
                fd_put_row(dst, y, row);
            }
            return FD_OK;
        }
    }
    const uint8_t *vin = src + (size_t)y_first * stride;
    size_t vstride = stride;
    if (need_h) {
        const size_t rows = (size_t)(y_last - y_first);
        uint8_t *temp = fd_scratch(SLOT_TEMP, rows * out_row);
        if (!temp)
            return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
        const uint8_t *src_end = src + (size_t)(src_h - 1) * stride + (size_t)src_w * ch;
        for (size_t r = 0; r < rows; r++)
            horizontal_pass(src + ((size_t)y_first + r) * stride, temp + r * out_row, ow, ch, &hc,
                            src_end);
        vin = temp;
        vstride = out_row;
    } else {
        vin += (size_t)box.x0 * ch;
    }
    for (uint32_t y = 0; y < oh; y++) {
        if (need_v) {
            vertical_row(vin, vstride, row, out_row, vc.bounds[y * 2] - y_first,
                         vc.bounds[y * 2 + 1], vc.kk + (size_t)y * vc.ksize, acc);
            fd_put_row(dst, y, row);
        } else {
            fd_put_row(dst, y, vin + (size_t)y * vstride);
        }
    }
    return FD_OK;
}
