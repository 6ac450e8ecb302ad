/* SSE2 helpers shared by the float kernels that reproduce Pillow's scalar
 * arithmetic lane by lane (fd_color.c's blends, fd_augment.c's sharpness and
 * bicubic): sixteen uint8 values widened to four float lanes each. Only where
 * the compiler targets SSE2 (every x86-64); each user keeps its scalar path. */
#ifndef FD_SSE_H
#define FD_SSE_H

#if defined(__SSE2__)
#include <emmintrin.h>
#include <stdint.h>

typedef struct {
    __m128 v[4];
} f32x16;

/* p[0..15] as floats, four to a lane, in order (exact: every uint8 is a float). */
static inline f32x16 load16(const uint8_t *p)
{
    const __m128i z = _mm_setzero_si128(), v = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
    f32x16 f;
    f.v[0] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z));
    f.v[1] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z));
    f.v[2] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z));
    f.v[3] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z));
    return f;
}
#endif

#endif
