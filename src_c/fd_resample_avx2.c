/* AVX2 kernels of the resampler: the horizontal RGB pass, the vertical
 * pass and the CHW / flipped row writer, bit-identical to the scalar loops
 * of fd_resample.c (see fd_resample_simd.h). Products stay 8-bit x 22-bit
 * in int32 lanes (no 16-bit weights as in Pillow-SIMD: those change the
 * result). Unaligned loads are checked against the bounds the caller gives;
 * whatever is left over goes back to the scalar code. */
#include "fd_resample_simd.h"

#ifdef FD_RESAMPLE_AVX2
#include <immintrin.h>
#include <string.h>

#define Z (-128) /* a pshufb index that writes 0 */

int fd_resample_have_avx2(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached;
}

/* Pixels one 16-byte load serves: 5 RGB pixels are 15 bytes. */
#define TAPS_PER_LOAD 5

size_t fd_hpack3_count(uint32_t out_w, int taps)
{
    return out_w + (size_t)(out_w / 2) * (size_t)taps * 8;
}

void fd_hpack3(const fd_coeffs *c, uint32_t out_w, int taps, int32_t *packed)
{
    for (uint32_t xx = 0; xx < out_w; xx++)
        *packed++ = c->bounds[xx * 2] * 3;
    for (uint32_t q = 0; q < out_w / 2; q++) {
        for (int half = 0; half < 2; half++) {
            const uint32_t xx = 2 * q + (uint32_t)half;
            const int n = c->bounds[xx * 2 + 1];
            const int32_t *k = c->kk + (size_t)xx * c->ksize;
            for (int t = 0; t < taps; t++) {
                int32_t *lane = packed + ((size_t)q * taps + t) * 8 + half * 4;
                const int32_t w = t < n ? k[t] : 0;
                lane[0] = lane[1] = lane[2] = w;
                lane[3] = 0;
            }
        }
    }
}

/* Two pixels' 16 source bytes, one per 128-bit lane. */
static inline __attribute__((target("avx2"), always_inline)) __m256i
load_two(const uint8_t *a, const uint8_t *b)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

/* The sums of one pixel pair, shifted: lanes (R, G, B, 0) of pixel a, then
 * of pixel b. Tap t's pixel is widened to int32 lanes by a pshufb from the
 * load of its group of five. Inlined with a constant `taps` where it is
 * called, so the loops unroll. */
static inline __attribute__((target("avx2"), always_inline)) __m256i
pair_sums(const uint8_t *pa, const uint8_t *pb, const int32_t *k, int taps, const __m256i *masks)
{
    __m256i acc = _mm256_set1_epi32(1 << (FD_PRECISION_BITS - 1));
    for (int g = 0; g * TAPS_PER_LOAD < taps; g++) {
        const __m256i px = load_two(pa + 15 * g, pb + 15 * g);
        for (int t = 0; t < TAPS_PER_LOAD && g * TAPS_PER_LOAD + t < taps; t++) {
            const __m256i v = _mm256_shuffle_epi8(px, masks[t]);
            const __m256i w =
                _mm256_loadu_si256((const __m256i *)(k + (size_t)(g * TAPS_PER_LOAD + t) * 8));
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, w));
        }
    }
    return _mm256_srai_epi32(acc, FD_PRECISION_BITS);
}

/* Saturates four pixels' shifted sums (pairs ab, cd) to bytes, as clip8
 * does, and stores their 12 bytes. */
static inline __attribute__((target("avx2"), always_inline)) void
store_four(uint8_t *out, __m256i ab, __m256i cd, __m128i compress)
{
    __m256i s = _mm256_packs_epi32(ab, cd); /* lanes: (a, c), (b, d) */
    s = _mm256_packus_epi16(s, s);
    __m128i abcd = _mm_unpacklo_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    abcd = _mm_shuffle_epi8(abcd, compress); /* drop every fourth byte */
    _mm_storel_epi64((__m128i *)out, abcd);
    const uint32_t last = (uint32_t)_mm_extract_epi32(abcd, 2);
    memcpy(out + 8, &last, 4);
}

/* The same for eight pixels (pairs ab, cd, ef, gh), with two 16-byte
 * stores: the second writes 4 bytes past the 24 of these pixels, so only
 * while more pixels follow, whose stores overwrite them. */
static inline __attribute__((target("avx2"), always_inline)) void
store_eight_overlapping(uint8_t *out, __m256i ab, __m256i cd, __m256i ef, __m256i gh,
                        __m256i order, __m256i compress)
{
    /* lanes after the packs: (a c e g | b d f h); order makes it a..h */
    const __m256i s = _mm256_packus_epi16(_mm256_packs_epi32(ab, cd), _mm256_packs_epi32(ef, gh));
    const __m256i v = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(s, order), compress);
    _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(v));
    _mm_storeu_si128((__m128i *)(out + 12), _mm256_extracti128_si256(v, 1));
}

/* The loop of fd_hrow3_avx2 for one tap count (a constant after inlining). */
static inline __attribute__((target("avx2"), always_inline)) uint32_t
hrow3(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *offs,
      const int32_t *packed, int taps, const uint8_t *limit)
{
    __m256i masks[TAPS_PER_LOAD];
    for (int t = 0; t < TAPS_PER_LOAD; t++) {
        const char b = (char)(3 * t);
        masks[t] = _mm256_setr_epi8(b, Z, Z, Z, b + 1, Z, Z, Z, b + 2, Z, Z, Z, Z, Z, Z, Z,
                                    b, Z, Z, Z, b + 1, Z, Z, Z, b + 2, Z, Z, Z, Z, Z, Z, Z);
    }
    const __m128i compress = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, Z, Z, Z, Z);
    /* A pixel's loads end at byte 15 * groups past its first input; first
     * inputs never decrease along the row, so the pixels whose loads stay
     * below `limit` are a prefix of it (all of it but near the buffer end). */
    const size_t reach = (size_t)15 * ((taps + TAPS_PER_LOAD - 1) / TAPS_PER_LOAD) + 1;
    const size_t avail = (size_t)(limit - in);
    uint32_t quads = out_w / 4;
    while (quads && (size_t)offs[quads * 4 - 1] + reach > avail)
        quads--;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i compress8 = _mm256_broadcastsi128_si256(compress);
    const int32_t *k = packed;
    uint32_t q = 0;
    /* eight pixels a step while at least four more follow (see the store) */
    for (; q + 2 < quads; q += 2, offs += 8, out += 24, k += 32 * taps) {
        const __m256i ab = pair_sums(in + offs[0], in + offs[1], k, taps, masks);
        const __m256i cd = pair_sums(in + offs[2], in + offs[3], k + 8 * taps, taps, masks);
        const __m256i ef = pair_sums(in + offs[4], in + offs[5], k + 16 * taps, taps, masks);
        const __m256i gh = pair_sums(in + offs[6], in + offs[7], k + 24 * taps, taps, masks);
        store_eight_overlapping(out, ab, cd, ef, gh, order, compress8);
    }
    for (; q < quads; q++, offs += 4, out += 12, k += 16 * taps) {
        const __m256i ab = pair_sums(in + offs[0], in + offs[1], k, taps, masks);
        const __m256i cd = pair_sums(in + offs[2], in + offs[3], k + 8 * taps, taps, masks);
        store_four(out, ab, cd, compress);
    }
    return quads * 4;
}

/* One clone per common tap count (bilinear and bicubic downscales up to
 * ~2.5x), so that each unrolls; the generic one loops. */
__attribute__((target("avx2")))
uint32_t fd_hrow3_avx2(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *packed,
                       int taps, const uint8_t *limit)
{
    const int32_t *b = packed; /* the byte offsets, then the weights */
    packed += out_w;
    switch (taps) {
    case 2: return hrow3(in, out, out_w, b, packed, 2, limit);
    case 3: return hrow3(in, out, out_w, b, packed, 3, limit);
    case 4: return hrow3(in, out, out_w, b, packed, 4, limit);
    case 5: return hrow3(in, out, out_w, b, packed, 5, limit);
    case 6: return hrow3(in, out, out_w, b, packed, 6, limit);
    case 7: return hrow3(in, out, out_w, b, packed, 7, limit);
    default: return hrow3(in, out, out_w, b, packed, taps, limit);
    }
}

/* Eight bytes widened to int32 lanes. */
static inline __attribute__((target("avx2"), always_inline)) __m256i load8(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* Gray: 8 taps per 8-byte load, one pixel per vector. */
#define TAPS_PER_LANE8 8

size_t fd_hpack1_count(uint32_t out_w, int taps)
{
    const int groups = (taps + TAPS_PER_LANE8 - 1) / TAPS_PER_LANE8;
    return out_w + (size_t)out_w * (size_t)groups * 8;
}

void fd_hpack1(const fd_coeffs *c, uint32_t out_w, int taps, int32_t *packed)
{
    const int lanes = (taps + TAPS_PER_LANE8 - 1) / TAPS_PER_LANE8 * 8;
    for (uint32_t xx = 0; xx < out_w; xx++)
        *packed++ = c->bounds[xx * 2];
    for (uint32_t xx = 0; xx < out_w; xx++) {
        const int n = c->bounds[xx * 2 + 1];
        const int32_t *k = c->kk + (size_t)xx * c->ksize;
        for (int t = 0; t < lanes; t++)
            *packed++ = t < n ? k[t] : 0;
    }
}

/* Lane i: the sum of the 8 lanes of v[i]. */
static inline __attribute__((target("avx2"), always_inline)) __m256i sum8x8(const __m256i *v)
{
    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
                                         _mm256_hadd_epi32(v[2], v[3]));
    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]),
                                         _mm256_hadd_epi32(v[6], v[7]));
    /* h0: lanes (0-3 of v0..v3 | 4-7 of v0..v3), h1 the same for v4..v7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                            _mm256_permute2x128_si256(h0, h1, 0x31));
}

/* The loop of fd_hrow1_avx2 for one tap-group count (constant after inlining). */
static inline __attribute__((target("avx2"), always_inline)) uint32_t
hrow1(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *offs,
      const int32_t *packed, int groups, const uint8_t *limit)
{
    const __m256i half = _mm256_set1_epi32(1 << (FD_PRECISION_BITS - 1));
    /* as in hrow3: the pixels whose loads stay below `limit` are a prefix */
    const size_t reach = (size_t)8 * groups, avail = (size_t)(limit - in);
    uint32_t octs = out_w / 8;
    while (octs && (size_t)offs[octs * 8 - 1] + reach > avail)
        octs--;
    const int32_t *k = packed;
    for (uint32_t o = 0; o < octs; o++, offs += 8, out += 8) {
        __m256i v[8];
        for (int i = 0; i < 8; i++, k += 8 * groups) {
            v[i] = _mm256_setzero_si256();
            for (int g = 0; g < groups; g++)
                v[i] = _mm256_add_epi32(v[i], _mm256_mullo_epi32(
                    load8(in + offs[i] + 8 * g),
                    _mm256_loadu_si256((const __m256i *)(k + 8 * g))));
        }
        __m256i s = _mm256_srai_epi32(_mm256_add_epi32(sum8x8(v), half), FD_PRECISION_BITS);
        s = _mm256_packus_epi16(_mm256_packs_epi32(s, s), _mm256_setzero_si256());
        _mm_storel_epi64((__m128i *)out, _mm_unpacklo_epi32(_mm256_castsi256_si128(s),
                                                            _mm256_extracti128_si256(s, 1)));
    }
    return octs * 8;
}

__attribute__((target("avx2")))
uint32_t fd_hrow1_avx2(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *packed,
                       int taps, const uint8_t *limit)
{
    const int groups = (taps + TAPS_PER_LANE8 - 1) / TAPS_PER_LANE8;
    const int32_t *offs = packed;
    packed += out_w;
    switch (groups) {
    case 1: return hrow1(in, out, out_w, offs, packed, 1, limit);
    case 2: return hrow1(in, out, out_w, offs, packed, 2, limit);
    default: return hrow1(in, out, out_w, offs, packed, groups, limit);
    }
}

/* a + 8 bytes at p x w, in int32 lanes */
static inline __attribute__((target("avx2"), always_inline)) __m256i
mac8(__m256i a, const uint8_t *p, __m256i w)
{
    return _mm256_add_epi32(a, _mm256_mullo_epi32(load8(p), w));
}

/* 32 bytes a step, two taps (rows) an iteration; then 8 bytes a step. */
__attribute__((target("avx2")))
size_t fd_vrow_avx2(const uint8_t *in, size_t stride, uint8_t *out, size_t row_bytes, int first,
                    int n, const int32_t *k)
{
    const __m256i half = _mm256_set1_epi32(1 << (FD_PRECISION_BITS - 1));
    /* packs/packus work per 128-bit lane: this puts the dwords back in order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const uint8_t *base = in + (size_t)first * stride;
    size_t i = 0;
    for (; i + 32 <= row_bytes; i += 32) {
        __m256i a0 = half, a1 = half, a2 = half, a3 = half;
        const uint8_t *p = base + i;
        int y = 0;
        for (; y + 2 <= n; y += 2, p += 2 * stride) {
            const __m256i w = _mm256_set1_epi32(k[y]), v = _mm256_set1_epi32(k[y + 1]);
            const uint8_t *q = p + stride;
            a0 = mac8(mac8(a0, p, w), q, v);
            a1 = mac8(mac8(a1, p + 8, w), q + 8, v);
            a2 = mac8(mac8(a2, p + 16, w), q + 16, v);
            a3 = mac8(mac8(a3, p + 24, w), q + 24, v);
        }
        if (y < n) {
            const __m256i w = _mm256_set1_epi32(k[y]);
            a0 = mac8(a0, p, w);
            a1 = mac8(a1, p + 8, w);
            a2 = mac8(a2, p + 16, w);
            a3 = mac8(a3, p + 24, w);
        }
        a0 = _mm256_srai_epi32(a0, FD_PRECISION_BITS);
        a1 = _mm256_srai_epi32(a1, FD_PRECISION_BITS);
        a2 = _mm256_srai_epi32(a2, FD_PRECISION_BITS);
        a3 = _mm256_srai_epi32(a3, FD_PRECISION_BITS);
        const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1),
                                                  _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    for (; i + 8 <= row_bytes; i += 8) {
        __m256i a = half;
        const uint8_t *p = base + i;
        for (int y = 0; y < n; y++, p += stride)
            a = mac8(a, p, _mm256_set1_epi32(k[y]));
        a = _mm256_srai_epi32(a, FD_PRECISION_BITS);
        __m256i s = _mm256_packs_epi32(a, a);
        s = _mm256_packus_epi16(s, s); /* lanes: bytes 0-3, then 4-7 */
        const __m128i v = _mm_unpacklo_epi32(_mm256_castsi256_si128(s),
                                             _mm256_extracti128_si256(s, 1));
        _mm_storel_epi64((__m128i *)(out + i), v);
    }
    return i;
}

/* Output byte j of vector v takes byte t[v][u][j] of source vector u (Z:
 * none of it), for 16 RGB pixels, 48 bytes, in three vectors. */
void fd_put3_prepare(fd_shuffle48 *s, const fd_dest *d)
{
    const int chw = d->layout == FD_LAYOUT_CHW, flip = d->flip;
    for (int v = 0; v < 3; v++)
        for (int u = 0; u < 3; u++)
            for (int j = 0; j < 16; j++) {
                int pixel = j, channel = v; /* CHW: plane v, pixel j */
                if (!chw) {                 /* HWC: interleaved byte 16v + j */
                    pixel = (16 * v + j) / 3;
                    channel = (16 * v + j) % 3;
                }
                if (flip)
                    pixel = 15 - pixel;
                const int src = 3 * pixel + channel;
                s->t[v][u][j] = (uint8_t)(src / 16 == u ? src % 16 : 0x80);
            }
}

static inline __attribute__((target("avx2"), always_inline)) __m128i
shuffle_one(const __m128i *t, __m128i a, __m128i b, __m128i c)
{
    return _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, t[0]), _mm_shuffle_epi8(b, t[1])),
                        _mm_shuffle_epi8(c, t[2]));
}

/* The same-bytes rule as fd_put_row (fd_common.c), which this repeats for
 * its two slow cases on purpose: it is the resampler's output writer, once
 * per output row, and the scalar byte loops there cost as much as the
 * vertical pass. Groups of 16 pixels here, the tail a pixel at a time. */
__attribute__((target("avx2")))
void fd_put_row3_avx2(const fd_dest *d, uint32_t y, const uint8_t *src, const fd_shuffle48 *s)
{
    const uint32_t w = d->width;
    const int chw = d->layout == FD_LAYOUT_CHW, flip = d->flip;
    __m128i t[3][3];
    for (int v = 0; v < 3; v++)
        for (int u = 0; u < 3; u++)
            t[v][u] = _mm_loadu_si128((const __m128i *)s->t[v][u]);
    const size_t plane = chw ? (size_t)d->height * w : 16;
    uint8_t *row = d->base + (size_t)y * w * (chw ? 1 : 3);
    uint8_t *dst[3] = {row, row + plane, row + 2 * plane}; /* HWC: 16 bytes apart */
    const size_t step = chw ? 16 : 48;
    uint32_t x = 0;
    for (; x + 16 <= w; x += 16) {
        const uint8_t *p = src + 3 * (size_t)(flip ? w - 16 - x : x);
        const __m128i a = _mm_loadu_si128((const __m128i *)p);
        const __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
        const size_t at = (size_t)(x / 16) * step;
        for (int v = 0; v < 3; v++)
            _mm_storeu_si128((__m128i *)(dst[v] + at), shuffle_one(t[v], a, b, c));
    }
    for (; x < w; x++) {
        const uint8_t *p = src + 3 * (size_t)(flip ? w - 1 - x : x);
        for (int v = 0; v < 3; v++) {
            if (chw)
                dst[v][x] = p[v];
            else
                row[3 * (size_t)x + v] = p[v];
        }
    }
}
#endif
