/* torchvision's ColorJitter arithmetic on PIL images, on uint8 RGB in place:
 * Pillow's ImageEnhance Brightness, Contrast and Color (saturation), each
 * Image.blend(degenerate, image, factor) computed in float32 as Pillow's
 * Blend.c computes it, so the result is Pillow's bit for bit.
 *
 *   out = clamp_trunc((float)d + factor * (float)(v - d))
 *     (<= 0 -> 0, >= 255 -> 255, else truncated toward zero)
 *   brightness: d = 0
 *   contrast:   d = (int)(mean(L) + 0.5), L = Pillow's integer RGB -> L
 *               (fd_luma) over the whole image, the mean in double
 *               (ImageStat: integer sum / count, both exact in a double)
 *   saturation: d = L of the pixel itself
 *
 * Each step's result is uint8 before the next (torchvision makes a PIL image
 * of each). Exact as long as the compiler does not contract a * b + c into
 * an FMA (C99 mode, as setup.py builds, does not; nor do Pillow's x86-64
 * wheels). A saturation step with factor 0 is RandomGrayscale's result (L
 * in all three channels).
 *
 * Hue (torchvision's adjust_hue on PIL): Pillow's convert('HSV') (uint8 H,
 * S, V from its float/double arithmetic), H += shift modulo 256, then
 * Pillow's HSV -> RGB; the same expressions with the same float and double
 * roundings, checked against the installed Pillow over all 2^24 colours. */
#ifndef FD_COLOR_H
#define FD_COLOR_H

#include "fd_common.h"

typedef enum {
    FD_COLOR_BRIGHTNESS = 0,
    FD_COLOR_CONTRAST = 1,
    FD_COLOR_SATURATION = 2,
    FD_COLOR_HUE = 3
} fd_color_op;

typedef struct {
    fd_color_op op;
    float factor; /* Pillow's alpha: the Python float rounded to float32; for
                   * FD_COLOR_HUE the shift 0..255 added to Pillow's uint8 H */
} fd_color_step;

#define FD_COLOR_MAX_STEPS 64

/* Applies `steps` in order to the height x width RGB image `pixels` (size
 * bytes, exactly height * width * 3), interleaved (HWC) or planar (CHW).
 * FD_ERR_ARGUMENT for a size that does not match, an empty image, more than
 * FD_COLOR_MAX_STEPS steps, an unknown op, a factor that is not finite or
 * a hue shift that is not an integer in 0..255;
 * checked before any pixel is written. */
fd_status fd_color_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                         fd_layout layout, const fd_color_step *steps, size_t nsteps,
                         fd_error *err);

/* fd_color_apply's checks of the steps alone (op, finite factor, hue shift),
 * for a caller that validates a whole plan before writing any pixel. */
fd_status fd_color_check_steps(const fd_color_step *steps, size_t nsteps, fd_error *err);

#endif
