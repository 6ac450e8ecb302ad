/* Row kernels of the BMP reader: BGR(X) -> RGB or L over `n` pixels.
 *
 * Private to fd_bmp.c. They live in their own file so that, on x86-64 with
 * GCC, each is compiled for AVX2, SSSE3 and baseline SSE2 and picked at load
 * time (target_clones): the 3-byte shuffles only vectorize with PSHUFB, and
 * the build uses no -march flag.
 */
#ifndef FD_BMP_ROWS_H
#define FD_BMP_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* 24-bit B,G,R -> R,G,B */
void fd_bmp_bgr_to_rgb(uint8_t *restrict dst, const uint8_t *restrict src, size_t n);
/* 24-bit B,G,R -> L (Pillow's luma) */
void fd_bmp_bgr_to_l(uint8_t *restrict dst, const uint8_t *restrict src, size_t n);
/* 32-bit B,G,R,X -> R,G,B (the fourth byte is dropped) */
void fd_bmp_bgrx_to_rgb(uint8_t *restrict dst, const uint8_t *restrict src, size_t n);
/* 32-bit B,G,R,X -> L */
void fd_bmp_bgrx_to_l(uint8_t *restrict dst, const uint8_t *restrict src, size_t n);

#endif
