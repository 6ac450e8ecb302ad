/* Separable antialiased resampling of uint8 images, replicating Pillow's
 * Image.resize: the same filters, support widened by the downscale factor,
 * 22-bit fixed-point coefficients, horizontal pass first with a rounded
 * 8-bit intermediate. So a fused decode matches the PIL pipeline it replaces.
 */
#ifndef FD_RESAMPLE_H
#define FD_RESAMPLE_H

#include "fd_common.h"

typedef enum {
    FD_INTERP_NEAREST = 0,
    FD_INTERP_BILINEAR = 1,
    FD_INTERP_BICUBIC = 2
} fd_interp;

/* A source region in pixel units, sub-pixel allowed: [x0, x1) x [y0, y1). */
typedef struct {
    double x0, y0, x1, y1;
} fd_box;

/* Resamples `box` of the interleaved image `src` (rows `stride` bytes apart,
 * `channels` == dst->channels) to the whole of `dst` (its height/width are
 * the output size; flip and layout are applied while writing).
 * Scratch memory is per thread and reused across calls. */
fd_status fd_resample(const uint8_t *src, size_t stride, uint32_t src_h, uint32_t src_w,
                      fd_box box, fd_interp interp, const fd_dest *dst, fd_error *err);

#endif
