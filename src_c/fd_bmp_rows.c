#include "fd_bmp_rows.h"

#include "fd_common.h"

/* GCC >= 6 on x86-64 glibc: one clone per ISA level, chosen once at load
 * time by an ifunc resolver (glibc only: musl has no ifunc). Baseline x86-64
 * (SSE2) has no byte shuffle, so without the clones these loops stay scalar;
 * with SSSE3/AVX2 GCC vectorizes all four (gcc -O3 -fopt-info-vec: "loop
 * vectorized using 32/16 byte vectors"). Other compilers and targets (e.g.
 * aarch64, whose NEON has vld3/vst3) compile the plain loop.
 *
 * The four loops repeat one shape on purpose: each is a separate loop with
 * constant strides (3 or 4 bytes in, 3 or 1 out) because that is what GCC
 * vectorizes in each clone; one loop with the strides as parameters does not
 * vectorize, and the clones exist only to be vectorized. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6 && defined(__x86_64__) && \
    defined(__GLIBC__) && !defined(FD_BMP_NO_CLONES)
#define FD_BMP_CLONES __attribute__((target_clones("avx2", "ssse3", "default")))
#else
#define FD_BMP_CLONES
#endif

FD_BMP_CLONES
void fd_bmp_bgr_to_rgb(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[3 * i + 0] = src[3 * i + 2];
        dst[3 * i + 1] = src[3 * i + 1];
        dst[3 * i + 2] = src[3 * i + 0];
    }
}

FD_BMP_CLONES
void fd_bmp_bgr_to_l(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = fd_luma(src[3 * i + 2], src[3 * i + 1], src[3 * i + 0]);
}

FD_BMP_CLONES
void fd_bmp_bgrx_to_rgb(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[3 * i + 0] = src[4 * i + 2];
        dst[3 * i + 1] = src[4 * i + 1];
        dst[3 * i + 2] = src[4 * i + 0];
    }
}

FD_BMP_CLONES
void fd_bmp_bgrx_to_l(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = fd_luma(src[4 * i + 2], src[4 * i + 1], src[4 * i + 0]);
}
