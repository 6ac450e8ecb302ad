/* The resampler's AVX2 kernels (fd_resample_avx2.c), internal to
 * fd_resample.c. Each computes exactly the integers of the scalar loops in
 * fd_resample.c (the same products and int32 sums, the same rounding and
 * clipping), only several pixels at a time; each does the part of a row it
 * can do without reading outside the buffers it is given and returns how
 * far it got, and the caller finishes the row with the scalar loop. */
#ifndef FD_RESAMPLE_SIMD_H
#define FD_RESAMPLE_SIMD_H

#include "fd_common.h"

#define FD_PRECISION_BITS (32 - 8 - 2) /* Pillow's 8-bit resampling precision */

/* One axis of coefficients (Pillow's precompute_coeffs). */
typedef struct {
    int ksize;
    int *bounds;  /* per output: first input, count */
    int32_t *kk;  /* per output: ksize fixed-point weights */
} fd_coeffs;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FD_BMP_NO_CLONES)
#define FD_RESAMPLE_AVX2 1

/* Whether the CPU runs AVX2 (cached). */
int fd_resample_have_avx2(void);

/* int32s the RGB horizontal kernel needs: out_w byte offsets, then out_w /
 * 2 pixel pairs x `taps` x 8 lanes of weights. */
size_t fd_hpack3_count(uint32_t out_w, int taps);

/* Lays c out for fd_hrow3_avx2: each output pixel's first input byte
 * (3 x its first input), then for pixel pair q and tap t the 8 lanes
 * (k[2q][t] x3, 0, k[2q+1][t] x3, 0); taps past a pixel's count are 0.
 * `taps` is the largest count of c (>= 1); offsets fit int32 because the
 * caller checks 3 x the source width does. */
void fd_hpack3(const fd_coeffs *c, uint32_t out_w, int taps, int32_t *packed);

/* RGB horizontal pass over one row: output pixels [0, returned) (a
 * multiple of 4), stopping where its 16-byte loads would reach `limit` (one
 * past the last byte that may be read). */
uint32_t fd_hrow3_avx2(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *packed,
                       int taps, const uint8_t *limit);

/* The same for one channel: out_w first inputs, then per output pixel
 * its weights in groups of 8 lanes (0 past its count), for fd_hrow1_avx2. */
size_t fd_hpack1_count(uint32_t out_w, int taps);
void fd_hpack1(const fd_coeffs *c, uint32_t out_w, int taps, int32_t *packed);

/* Gray horizontal pass over one row: output pixels [0, returned) (a
 * multiple of 8), as fd_hrow3_avx2. */
uint32_t fd_hrow1_avx2(const uint8_t *in, uint8_t *out, uint32_t out_w, const int32_t *packed,
                       int taps, const uint8_t *limit);

/* Vertical pass for one output row: bytes [0, returned) (a multiple of 8)
 * of `row_bytes`, from rows first .. first + n of `in`. */
size_t fd_vrow_avx2(const uint8_t *in, size_t stride, uint8_t *out, size_t row_bytes, int first,
                    int n, const int32_t *k);

/* pshufb tables for fd_put_row3_avx2, made once per destination. */
typedef struct {
    uint8_t t[3][3][16];
} fd_shuffle48;
void fd_put3_prepare(fd_shuffle48 *s, const fd_dest *d);

/* fd_put_row for an RGB row into a CHW or flipped HWC destination
 * (d->channels == 3): the same bytes, 16 pixels per 48-byte shuffle. */
void fd_put_row3_avx2(const fd_dest *d, uint32_t y, const uint8_t *src, const fd_shuffle48 *s);
#endif

#endif
