/* Separable resampling of uint8 images as Pillow's Image.resize: the
 * coefficients, the pass order and the scalar loops (the reference the AVX2
 * kernels of fd_resample_avx2.c must match bit for bit). */
#include "fd_resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fd_resample_simd.h"

#define PRECISION_BITS FD_PRECISION_BITS

/* Scratch slots this file uses (fd_scratch in fd_common.c). */
enum { SLOT_COEFFS = 0, SLOT_TEMP = 1, SLOT_ROW = 2 };

static inline double bilinear_filter(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static inline double bicubic_filter(double x)
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

typedef fd_coeffs coeffs;

static int coeff_ksize(uint32_t in_size, double in0, double in1, uint32_t out_size, double support)
{
    (void)in_size;
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(support * filterscale) * 2 + 1;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc. `pre` has room for
 * out_size * ksize doubles. */
static inline __attribute__((always_inline)) void compute_coeffs(uint32_t in_size, double in0, double in1, uint32_t out_size,
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

/* compute_coeffs with the filter inlined (the same double arithmetic). */
static void axis_coeffs(uint32_t in_size, double in0, double in1, uint32_t out_size,
                        fd_interp interp, coeffs *c, double *pre)
{
    if (interp == FD_INTERP_BICUBIC)
        compute_coeffs(in_size, in0, in1, out_size, bicubic_filter, 2.0, c, pre);
    else
        compute_coeffs(in_size, in0, in1, out_size, bilinear_filter, 1.0, c, pre);
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Output pixels [from, out_w) of one horizontal pass over a row. */
static void horizontal_row(const uint8_t *in, uint8_t *out, uint32_t from, uint32_t out_w,
                           uint32_t ch, const coeffs *c)
{
    const int32_t half = 1 << (PRECISION_BITS - 1);
    out += (size_t)from * ch;
    if (ch == 3) {
        for (uint32_t xx = from; xx < out_w; xx++) {
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
    for (uint32_t xx = from; xx < out_w; xx++) {
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

/* Same target-clone rule as fd_bmp_rows.c: AVX2 has a 32-bit multiply that
 * vectorizes the accumulation below; the baseline ISA does not. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6 && defined(__x86_64__) && \
    defined(__GLIBC__) && !defined(FD_BMP_NO_CLONES)
#define FD_RESAMPLE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FD_RESAMPLE_CLONES
#endif

/* Bytes [from, row_bytes) of one output row from the rows `first` ..
 * `first + n` of `in`: taps outer, pixels inner, so the inner loop is a
 * straight vectorizable multiply-add over the row (acc holds row_bytes
 * int32 sums). */
FD_RESAMPLE_CLONES
static void vertical_row(const uint8_t *in, size_t stride, uint8_t *out, size_t from,
                         size_t row_bytes, int first, int n, const int32_t *k, int32_t *acc)
{
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (size_t i = from; i < row_bytes; i++)
        acc[i] = half;
    for (int y = 0; y < n; y++) {
        const uint8_t *p = in + (size_t)(first + y) * stride;
        const int32_t w = k[y];
        for (size_t i = from; i < row_bytes; i++)
            acc[i] += (int32_t)p[i] * w;
    }
    for (size_t i = from; i < row_bytes; i++)
        out[i] = clip8(acc[i]);
}

/* What one fd_resample call works with: the coefficients of both axes,
 * its scratch rows and which kernels run (AVX2 ones where the CPU has
 * them, unless FASTDECODE_RESAMPLE_SCALAR is set: the tests compare both). */
typedef struct {
    const fd_dest *dst;
    uint32_t ch;
    coeffs hc, vc;
    int need_h, need_v;
    uint8_t *row;     /* one output row */
    int32_t *acc;     /* the scalar vertical pass's sums */
    int simd;         /* AVX2 kernels */
    int32_t *hpack;   /* fd_hrow3/1_avx2's weights, NULL: scalar horizontal pass */
    int htaps;        /* the largest tap count of hc */
    int put3;         /* rows go out through fd_put_row3_avx2 */
#ifdef FD_RESAMPLE_AVX2
    fd_shuffle48 shuffle;
#endif
} job;

static void horizontal_pass(const job *j, const uint8_t *in, uint8_t *out, const uint8_t *limit)
{
    uint32_t done = 0;
#ifdef FD_RESAMPLE_AVX2
    if (j->hpack && j->ch == 3)
        done = fd_hrow3_avx2(in, out, j->dst->width, j->hpack, j->htaps, limit);
    else if (j->hpack)
        done = fd_hrow1_avx2(in, out, j->dst->width, j->hpack, j->htaps, limit);
#else
    (void)limit;
#endif
    horizontal_row(in, out, done, j->dst->width, j->ch, &j->hc);
}

static void vertical_pass(const job *j, const uint8_t *in, size_t stride, uint8_t *out,
                          size_t row_bytes, uint32_t y, int y_first)
{
    const int first = j->vc.bounds[y * 2] - y_first, n = j->vc.bounds[y * 2 + 1];
    const int32_t *k = j->vc.kk + (size_t)y * j->vc.ksize;
    size_t done = 0;
#ifdef FD_RESAMPLE_AVX2
    if (j->simd)
        done = fd_vrow_avx2(in, stride, out, row_bytes, first, n, k);
#endif
    if (done < row_bytes)
        vertical_row(in, stride, out, done, row_bytes, first, n, k, j->acc);
}

static void put_row(const job *j, uint32_t y, const uint8_t *row)
{
#ifdef FD_RESAMPLE_AVX2
    if (j->put3) {
        fd_put_row3_avx2(j->dst, y, row, &j->shuffle);
        return;
    }
#endif
    fd_put_row(j->dst, y, row);
}

/* The vertical pass for every output row of rows [y_first, ...) of `in`,
 * written straight into the destination where its layout allows. */
static void vertical_out(const job *j, const uint8_t *in, size_t stride, int y_first)
{
    const size_t out_row = (size_t)j->dst->width * j->ch;
    for (uint32_t y = 0; y < j->dst->height; y++) {
        uint8_t *direct = fd_direct_row(j->dst, y);
        vertical_pass(j, in, stride, direct ? direct : j->row, out_row, y, y_first);
        if (!direct)
            put_row(j, y, j->row);
    }
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

/* Both axes' coefficients in one scratch block: the double weights, then
 * bounds, fixed-point weights and (AVX2, RGB or gray) the packed horizontal ones. */
static fd_status prepare(job *j, uint32_t src_h, uint32_t src_w, fd_box box, fd_interp interp,
                         fd_error *err)
{
    const uint32_t ow = j->dst->width, oh = j->dst->height;
    const double support = interp == FD_INTERP_BICUBIC ? 2.0 : 1.0;
    j->hc.ksize = coeff_ksize(src_w, box.x0, box.x1, ow, support);
    j->vc.ksize = coeff_ksize(src_h, box.y0, box.y1, oh, support);
    const size_t hn = (size_t)ow * j->hc.ksize, vn = (size_t)oh * j->vc.ksize;
    const size_t pre_n = hn > vn ? hn : vn;
    size_t pack_n = 0;
#ifdef FD_RESAMPLE_AVX2
    /* an upper bound of the tap count until the coefficients are known */
    if (j->simd && j->ch == 3 && j->need_h && src_w <= INT32_MAX / 3)
        pack_n = fd_hpack3_count(ow, j->hc.ksize);
    else if (j->simd && j->ch == 1 && j->need_h)
        pack_n = fd_hpack1_count(ow, j->hc.ksize);
#endif
    const size_t bytes = pre_n * sizeof(double) + ((size_t)ow + oh) * 2 * sizeof(int) +
                         (hn + vn + pack_n) * sizeof(int32_t) + 16;
    uint8_t *block = fd_scratch(SLOT_COEFFS, bytes);
    if (!block)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling coefficients");
    double *pre = (double *)block;
    j->hc.bounds = (int *)(pre + pre_n);
    j->vc.bounds = j->hc.bounds + (size_t)ow * 2;
    j->hc.kk = (int32_t *)(j->vc.bounds + (size_t)oh * 2);
    j->vc.kk = j->hc.kk + hn;
    axis_coeffs(src_w, box.x0, box.x1, ow, interp, &j->hc, pre);
    axis_coeffs(src_h, box.y0, box.y1, oh, interp, &j->vc, pre);
#ifdef FD_RESAMPLE_AVX2
    if (pack_n) {
        int taps = 0;
        for (uint32_t xx = 0; xx < ow; xx++)
            taps = j->hc.bounds[xx * 2 + 1] > taps ? j->hc.bounds[xx * 2 + 1] : taps;
        if (taps > 0) {
            j->hpack = j->vc.kk + vn;
            j->htaps = taps;
            if (j->ch == 3)
                fd_hpack3(&j->hc, ow, taps, j->hpack);
            else
                fd_hpack1(&j->hc, ow, taps, j->hpack);
        }
    }
#endif
    return FD_OK;
}

/* Vertical pass first, into `temp` (oh rows of `wide_row` bytes), then the
 * horizontal pass out of it. */
static void vertical_first(const job *j, const uint8_t *src, size_t stride, uint8_t *temp,
                           size_t wide_row)
{
    for (uint32_t y = 0; y < j->dst->height; y++)
        vertical_pass(j, src, stride, temp + (size_t)y * wide_row, wide_row, y, 0);
    const uint8_t *temp_end = temp + (size_t)j->dst->height * wide_row;
    for (uint32_t y = 0; y < j->dst->height; y++) {
        uint8_t *direct = fd_direct_row(j->dst, y);
        horizontal_pass(j, temp + (size_t)y * wide_row, direct ? direct : j->row, temp_end);
        if (!direct)
            put_row(j, y, j->row);
    }
}

static int use_simd(void)
{
#ifdef FD_RESAMPLE_AVX2
    const char *off = getenv("FASTDECODE_RESAMPLE_SCALAR");
    return fd_resample_have_avx2() && !(off && off[0] && off[0] != '0');
#else
    return 0;
#endif
}

static fd_status check_args(uint32_t src_h, uint32_t src_w, fd_box box, const fd_dest *dst,
                            fd_error *err)
{
    if (dst->width == 0 || dst->height == 0 || src_w == 0 || src_h == 0)
        return fd_fail(err, FD_ERR_ARGUMENT, "cannot resample an empty image");
    if (!(box.x0 >= 0 && box.y0 >= 0 && box.x1 <= src_w && box.y1 <= src_h &&
          box.x1 > box.x0 && box.y1 > box.y0))
        return fd_fail(err, FD_ERR_ARGUMENT,
                       "resample box (%g, %g, %g, %g) is not inside the %ux%u source", box.x0,
                       box.y0, box.x1, box.y1, src_w, src_h);
    if (dst->width > (1u << 24) || dst->height > (1u << 24))
        return fd_fail(err, FD_ERR_TOO_LARGE, "output size %ux%u is too large", dst->width,
                       dst->height);
    return FD_OK;
}

/* Horizontal pass first (Pillow's order) over the rows [y_first, y_last)
 * into scratch, then the vertical pass out of it; or one of the two. */
static fd_status horizontal_first(const job *j, const uint8_t *src, size_t stride,
                                  uint32_t src_h, uint32_t src_w, fd_box box, int y_first,
                                  int y_last, fd_error *err)
{
    const uint32_t ch = j->ch, oh = j->dst->height;
    const size_t out_row = (size_t)j->dst->width * ch;
    const uint8_t *vin = src + (size_t)y_first * stride;
    size_t vstride = stride;
    if (j->need_h) {
        const size_t rows = (size_t)(y_last - y_first);
        uint8_t *temp = j->need_v ? fd_scratch(SLOT_TEMP, rows * out_row) : NULL;
        if (j->need_v && !temp)
            return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
        const uint8_t *src_end = src + (size_t)(src_h - 1) * stride + (size_t)src_w * ch;
        for (size_t r = 0; r < rows; r++) {
            const uint8_t *in = src + ((size_t)y_first + r) * stride;
            if (temp) {
                horizontal_pass(j, in, temp + r * out_row, src_end);
                continue;
            }
            /* one pass: straight into the destination where it can be */
            uint8_t *direct = fd_direct_row(j->dst, (uint32_t)r);
            horizontal_pass(j, in, direct ? direct : j->row, src_end);
            if (!direct)
                put_row(j, (uint32_t)r, j->row);
        }
        if (!temp)
            return FD_OK;
        vin = temp;
        vstride = out_row;
    } else {
        vin += (size_t)box.x0 * ch;
    }
    if (j->need_v) {
        vertical_out(j, vin, vstride, y_first);
        return FD_OK;
    }
    for (uint32_t y = 0; y < oh; y++) /* neither: a copy of the box */
        put_row(j, y, vin + (size_t)y * vstride);
    return FD_OK;
}

/* Two-pass resampling: coefficients, pass order, then the passes (one of
 * them when the other axis keeps its size). */
fd_status fd_resample(const uint8_t *src, size_t stride, uint32_t src_h, uint32_t src_w,
                      fd_box box, fd_interp interp, const fd_dest *dst, fd_error *err)
{
    fd_status st = check_args(src_h, src_w, box, dst, err);
    if (st != FD_OK)
        return st;
    if (interp == FD_INTERP_NEAREST)
        return resample_nearest(src, stride, src_h, src_w, box, dst, err);
    const uint32_t ow = dst->width, oh = dst->height, ch = dst->channels;
    job j = {0};
    j.dst = dst;
    j.ch = ch;
    j.need_h = ow != src_w || box.x0 != 0 || box.x1 != ow;
    j.need_v = oh != src_h || box.y0 != 0 || box.y1 != oh;
    j.simd = use_simd();
    if ((st = prepare(&j, src_h, src_w, box, interp, err)) != FD_OK)
        return st;
#ifdef FD_RESAMPLE_AVX2
    j.put3 = j.simd && ch == 3 && (dst->layout == FD_LAYOUT_CHW || dst->flip);
    if (j.put3)
        fd_put3_prepare(&j.shuffle, dst);
#endif
    const size_t out_row = (size_t)ow * ch;
    /* Columns of the source the horizontal pass reads. */
    const size_t x_last = j.need_h ? (size_t)j.hc.bounds[(ow - 1) * 2] + j.hc.bounds[(ow - 1) * 2 + 1]
                                   : (size_t)src_w;
    const size_t wide_row = x_last * ch;
    /* the output row, then the vertical pass's int32 sums (aligned) */
    const size_t row_room = (out_row + 63) & ~(size_t)63;
    const size_t acc_n = wide_row > out_row ? wide_row : out_row;
    j.row = fd_scratch(SLOT_ROW, row_room + acc_n * sizeof(int32_t));
    if (!j.row)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
    j.acc = (int32_t *)(j.row + row_room);

    /* Rows of the source the vertical pass reads. */
    const int y_first = j.need_v ? j.vc.bounds[0] : (int)box.y0;
    const int y_last = j.need_v ? j.vc.bounds[(oh - 1) * 2] + j.vc.bounds[(oh - 1) * 2 + 1]
                                : (int)box.y0 + (int)oh;
    /* Pillow runs the horizontal pass first in the common cases (which
     * keeps fused chains bit-exact); only when the other order is far
     * cheaper (a tall strip resized to a small square would first widen
     * every one of its rows) run vertical first, one rounding step away. */
    if (j.need_h && j.need_v) {
        const double hv = (double)(y_last - y_first) * ow * j.hc.ksize + (double)oh * ow * j.vc.ksize;
        const double vh = (double)oh * x_last * j.vc.ksize + (double)oh * ow * j.hc.ksize;
        if (4 * vh < hv) {
            uint8_t *temp = fd_scratch(SLOT_TEMP, (size_t)oh * wide_row);
            if (!temp)
                return fd_fail(err, FD_ERR_NOMEM, "out of memory for resampling");
            vertical_first(&j, src, stride, temp, wide_row);
            return FD_OK;
        }
    }
    return horizontal_first(&j, src, stride, src_h, src_w, box, y_first, y_last, err);
}
