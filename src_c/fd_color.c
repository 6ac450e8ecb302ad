/* Pillow's ImageEnhance blends on uint8 RGB in place (see fd_color.h). */
#include "fd_color.h"

#include <math.h>

/* Blend.c's expression and clamp, for one value: `(int)in1 + alpha *
 * ((int)in2 - (int)in1)` in float, then `<= 0 -> 0, >= 255 -> 255, else
 * (UINT8)`. Both of Pillow's branches (interpolation, extrapolation) are this
 * expression; the clamp only bites when extrapolating. Written without
 * branches (clamp, then truncate: the same values, 0 and 255 included) so
 * that the planar loops below vectorize: float lanes round as scalars do. */
static inline uint8_t blend1(int32_t degenerate, int32_t value, float alpha)
{
    float t = (float)degenerate + alpha * (float)(value - degenerate);
    t = t < 0.0f ? 0.0f : t;
    t = t > 255.0f ? 255.0f : t;
    return (uint8_t)(int32_t)t;
}

static inline uint32_t luma32(uint32_t r, uint32_t g, uint32_t b)
{
    return fd_luma(r, g, b); /* Pillow's L, kept in 32-bit lanes */
}

#if defined(__SSE2__)
/* SSE2 (every x86-64): four float lanes computing blend1's expression in
 * blend1's order, IEEE single like the scalar code, so bit for bit the same.
 * Pillow's L in float is exact too: every product and partial sum of
 * r * 19595 + g * 38470 + b * 7471 + 0x8000 is an integer below 2^24, and
 * >> 16 is a multiplication by 2^-16 then truncation. */
#include "fd_sse.h"

/* blend1 on four lanes: d + alpha * (v - d) (v - d exact), clamped to [0, 255] */
static inline __m128i blend4(__m128 d, __m128 v, __m128 alpha)
{
    const __m128 t = _mm_add_ps(d, _mm_mul_ps(alpha, _mm_sub_ps(v, d)));
    return _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(t, _mm_setzero_ps()), _mm_set1_ps(255.0f)));
}

static inline void store16(uint8_t *p, __m128i a, __m128i b, __m128i c, __m128i d)
{
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
}

static inline __m128 luma4(__m128 r, __m128 g, __m128 b)
{
    __m128 s = _mm_add_ps(_mm_mul_ps(r, _mm_set1_ps(19595.0f)), _mm_mul_ps(g, _mm_set1_ps(38470.0f)));
    s = _mm_add_ps(_mm_add_ps(s, _mm_mul_ps(b, _mm_set1_ps(7471.0f))), _mm_set1_ps(32768.0f));
    return _mm_cvtepi32_ps(_mm_cvttps_epi32(_mm_mul_ps(s, _mm_set1_ps(1.0f / 65536.0f))));
}
#define FD_COLOR_SIMD 16
#else
#define FD_COLOR_SIMD 0
#endif

/* Brightness and contrast blend every value with one constant. */
static void blend_constant(uint8_t *p, size_t size, int32_t degenerate, float alpha)
{
    size_t i = 0;
#if FD_COLOR_SIMD
    const __m128 d = _mm_set1_ps((float)degenerate), a = _mm_set1_ps(alpha);
    for (; i + 16 <= size; i += 16) {
        const f32x16 v = load16(p + i);
        store16(p + i, blend4(d, v.v[0], a), blend4(d, v.v[1], a), blend4(d, v.v[2], a),
                blend4(d, v.v[3], a));
    }
#endif
    for (; i < size; i++)
        p[i] = blend1(degenerate, p[i], alpha);
}

/* Sum of Pillow's L over the image: ImageStat's integer sum of the histogram.
 * Planar: 32-bit partial sums over blocks of at most 2^23 pixels (<= 255 *
 * 2^23 < 2^32), so the inner loop vectorizes. */
static uint64_t luma_sum(const uint8_t *pixels, size_t npixels, fd_layout layout)
{
    uint64_t sum = 0;
    if (layout == FD_LAYOUT_HWC) {
        for (size_t i = 0; i < npixels; i++, pixels += 3)
            sum += luma32(pixels[0], pixels[1], pixels[2]);
        return sum;
    }
    const uint8_t *r = pixels, *g = pixels + npixels, *b = pixels + 2 * npixels;
    size_t i = 0;
#if FD_COLOR_SIMD
    /* 32-bit lanes, emptied into the 64-bit sum every 2^20 pixels (each lane
     * gains at most 4 * 255 per 16 pixels: < 2^26 per block) */
    while (i + 16 <= npixels) {
        __m128i part = _mm_setzero_si128();
        for (size_t n = 0; n < ((size_t)1 << 16) && i + 16 <= npixels; n++, i += 16) {
            const f32x16 vr = load16(r + i), vg = load16(g + i), vb = load16(b + i);
            for (int k = 0; k < 4; k++)
                part = _mm_add_epi32(part, _mm_cvttps_epi32(luma4(vr.v[k], vg.v[k], vb.v[k])));
        }
        uint32_t lanes[4];
        _mm_storeu_si128((__m128i *)lanes, part);
        sum += (uint64_t)lanes[0] + lanes[1] + lanes[2] + lanes[3];
    }
#endif
    for (; i < npixels; i++)
        sum += luma32(r[i], g[i], b[i]);
    return sum;
}

/* ImageEnhance.Contrast's grey: int(mean of the L image + 0.5); the sum
 * (<= 255 * npixels) and the count are exact in a double below 2^53 / 255
 * pixels, so this is Python's correctly rounded int / int. */
static int32_t mean_grey(const uint8_t *pixels, size_t npixels, fd_layout layout)
{
    const double mean = (double)luma_sum(pixels, npixels, layout) / (double)npixels;
    return (int32_t)(mean + 0.5);
}

static void saturate(uint8_t *pixels, size_t npixels, fd_layout layout, float alpha)
{
    if (layout == FD_LAYOUT_HWC) {
        for (size_t i = 0; i < npixels; i++, pixels += 3) {
            const int32_t l = (int32_t)luma32(pixels[0], pixels[1], pixels[2]);
            pixels[0] = blend1(l, pixels[0], alpha);
            pixels[1] = blend1(l, pixels[1], alpha);
            pixels[2] = blend1(l, pixels[2], alpha);
        }
        return;
    }
    uint8_t *r = pixels, *g = pixels + npixels, *b = pixels + 2 * npixels;
    size_t i = 0;
#if FD_COLOR_SIMD
    const __m128 a = _mm_set1_ps(alpha);
    for (; i + 16 <= npixels; i += 16) {
        const f32x16 vr = load16(r + i), vg = load16(g + i), vb = load16(b + i);
        __m128i outr[4], outg[4], outb[4];
        for (int k = 0; k < 4; k++) {
            const __m128 l = luma4(vr.v[k], vg.v[k], vb.v[k]);
            outr[k] = blend4(l, vr.v[k], a);
            outg[k] = blend4(l, vg.v[k], a);
            outb[k] = blend4(l, vb.v[k], a);
        }
        store16(r + i, outr[0], outr[1], outr[2], outr[3]);
        store16(g + i, outg[0], outg[1], outg[2], outg[3]);
        store16(b + i, outb[0], outb[1], outb[2], outb[3]);
    }
#endif
    for (; i < npixels; i++) {
        const int32_t l = (int32_t)luma32(r[i], g[i], b[i]);
        r[i] = blend1(l, r[i], alpha);
        g[i] = blend1(l, g[i], alpha);
        b[i] = blend1(l, b[i], alpha);
    }
}

/* Pillow's RGB -> HSV for one pixel (V is max(r, g, b)): its float
 * quotients, the double steps where it mixes in double constants, rounded
 * back to float where it stores a float. */
static void to_hsv(int32_t r, int32_t g, int32_t b, uint8_t *h, uint8_t *s)
{
    const int32_t maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    const int32_t minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    if (maxc == minc) {
        *h = 0;
        *s = 0;
        return;
    }
    const float range = (float)(maxc - minc);
    const float sat = range / (float)maxc;
    const float rc = (float)(maxc - r) / range;
    const float gc = (float)(maxc - g) / range;
    const float bc = (float)(maxc - b) / range;
    float hue;
    if (r == maxc)
        hue = bc - gc;
    else if (g == maxc)
        hue = (float)(2.0 + (double)rc - (double)bc);
    else
        hue = (float)(4.0 + (double)gc - (double)rc);
    /* fmod(x, 1.0) for x = hue / 6 + 1 in [5/6, 11/6]: x - 1 (exact) from 1 on */
    const double x = (double)hue / 6.0 + 1.0;
    hue = (float)(x >= 1.0 ? x - 1.0 : x);
    const int32_t hi = (int32_t)((double)hue * 255.0), si = (int32_t)((double)sat * 255.0);
    *h = (uint8_t)(hi <= 0 ? 0 : hi < 256 ? hi : 255);
    *s = (uint8_t)(si <= 0 ? 0 : si < 256 ? si : 255);
}

static inline uint8_t clip_round(double x)
{
    const int32_t v = (int32_t)round(x);
    return (uint8_t)(v <= 0 ? 0 : v < 256 ? v : 255);
}

/* Pillow's HSV -> RGB for one pixel, into rgb[0..2] (at `step` apart). */
static void from_hsv(uint8_t h, uint8_t s, uint8_t v, uint8_t *rgb, size_t step)
{
    if (s == 0) {
        rgb[0] = rgb[step] = rgb[2 * step] = v;
        return;
    }
    const double h6 = (double)(float)h * 6.0 / 255.0;
    const int32_t sector = (int32_t)floor(h6);
    const float f = (float)(h6 - (double)(float)sector);
    const float fs = (float)((double)(float)s / 255.0);
    const double fv = (double)(float)v;
    const uint8_t p = clip_round(fv * (1.0 - (double)fs));
    const uint8_t q = clip_round(fv * (1.0 - (double)(fs * f))); /* fs * f in float */
    const uint8_t t = clip_round(fv * (1.0 - (double)fs * (1.0 - (double)f)));
    static const uint8_t order[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                        {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    const uint8_t value[4] = {v, p, q, t}; /* order's indices: v, p, q, t */
    for (int c = 0; c < 3; c++)
        rgb[c * step] = value[order[sector % 6][c]];
}

static void shift_hue(uint8_t *pixels, size_t npixels, fd_layout layout, uint8_t shift)
{
    const size_t channel = layout == FD_LAYOUT_CHW ? npixels : 1;
    const size_t pixel = layout == FD_LAYOUT_CHW ? 1 : 3;
    for (size_t i = 0; i < npixels; i++, pixels += pixel) {
        const int32_t r = pixels[0], g = pixels[channel], b = pixels[2 * channel];
        uint8_t h, s;
        to_hsv(r, g, b, &h, &s);
        const int32_t v = r > g ? (r > b ? r : b) : (g > b ? g : b);
        from_hsv((uint8_t)(h + shift), s, (uint8_t)v, pixels, channel);
    }
}

static fd_status check(size_t size, uint32_t height, uint32_t width, fd_layout layout,
                       const fd_color_step *steps, size_t nsteps, fd_error *err)
{
    size_t npixels, nbytes;
    if (height == 0 || width == 0)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: empty image (%u x %u)", height, width);
    if (!fd_mul_size(height, width, &npixels) || !fd_mul_size(npixels, 3, &nbytes))
        return fd_fail(err, FD_ERR_ARGUMENT, "color: %u x %u x 3 overflows", height, width);
    if (nbytes != size)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: %u x %u x 3 pixels are %zu bytes, got %zu",
                       height, width, nbytes, size);
    if (layout != FD_LAYOUT_HWC && layout != FD_LAYOUT_CHW)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: unknown layout %d", (int)layout);
    if (nsteps > FD_COLOR_MAX_STEPS)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: %zu steps, at most %d", nsteps,
                       FD_COLOR_MAX_STEPS);
    if (nsteps > 0 && steps == NULL)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: no steps given");
    return fd_color_check_steps(steps, nsteps, err);
}

fd_status fd_color_check_steps(const fd_color_step *steps, size_t nsteps, fd_error *err)
{
    for (size_t k = 0; k < nsteps; k++) {
        const int op = (int)steps[k].op;
        const float f = steps[k].factor;
        if (op < FD_COLOR_BRIGHTNESS || op > FD_COLOR_HUE)
            return fd_fail(err, FD_ERR_ARGUMENT, "color: step %zu: unknown op %d", k, op);
        if (!isfinite(f))
            return fd_fail(err, FD_ERR_ARGUMENT, "color: step %zu: factor %g is not finite", k,
                           (double)f);
        if (op == FD_COLOR_HUE && !(f >= 0.0f && f <= 255.0f && f == (float)(int32_t)f))
            return fd_fail(err, FD_ERR_ARGUMENT,
                           "color: step %zu: hue shift %g is not an integer in 0..255", k,
                           (double)f);
    }
    return FD_OK;
}

fd_status fd_color_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                         fd_layout layout, const fd_color_step *steps, size_t nsteps,
                         fd_error *err)
{
    const fd_status st = check(size, height, width, layout, steps, nsteps, err);
    if (st != FD_OK)
        return st;
    if (pixels == NULL)
        return fd_fail(err, FD_ERR_ARGUMENT, "color: no pixels given");
    const size_t npixels = (size_t)height * width;
    for (size_t k = 0; k < nsteps; k++) {
        const float alpha = steps[k].factor;
        switch (steps[k].op) {
        case FD_COLOR_BRIGHTNESS:
            blend_constant(pixels, size, 0, alpha);
            break;
        case FD_COLOR_CONTRAST:
            blend_constant(pixels, size, mean_grey(pixels, npixels, layout), alpha);
            break;
        case FD_COLOR_SATURATION:
            saturate(pixels, npixels, layout, alpha);
            break;
        case FD_COLOR_HUE:
            shift_hue(pixels, npixels, layout, (uint8_t)(int32_t)alpha);
            break;
        }
    }
    return FD_OK;
}
