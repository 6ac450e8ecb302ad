/* The auto-augment policies' pixel operations (torchvision's and timm's on PIL
 * images) on uint8 RGB in place, each but the blur bit for bit what Pillow 13
 * computes on the same RGB pixels; docs/decisions/augment.md ("Kernels") has
 * the record.
 *
 *   FD_AUG_COLOR         one ImageEnhance/ColorJitter step: fd_color.c's own
 *   FD_AUG_AFFINE        Image.transform(size, AFFINE, a..f, resample,
 *                        fillcolor): Geometry.c's three nearest paths (scale,
 *                        16.16 fixed point, double) and its generic bilinear /
 *                        bicubic filters, their double arithmetic, clamps and
 *                        truncations; outside the source: the fill colour
 *   FD_AUG_LUT           Image.point(table), one 256-entry table per channel
 *   FD_AUG_AUTOCONTRAST  ImageOps.autocontrast(img): per-channel histogram
 *                        LUT, int(ix * scale + offset) in double
 *   FD_AUG_EQUALIZE      ImageOps.equalize(img): its integer LUT steps
 *   FD_AUG_SHARPNESS     ImageEnhance.Sharpness: Filter.c's 3x3 SMOOTH in
 *                        float (kernel 1/13, 5/13 rounded to float, + 0.5,
 *                        clamp, truncate; border rows and columns as they
 *                        were), then Blend.c's float blend
 *   FD_AUG_BLUR          torchvision's gaussian_blur on a PIL image (its
 *                        float32 kernel, reflect padding, round half to
 *                        even); NOT bit-exact: torch convolves in 2-D with
 *                        the CPU's own order and FMA, this runs the kernel's
 *                        two 1-D passes in float32 (within 1, see the record)
 *
 * Exact as long as the compiler does not contract a * b + c into an FMA
 * (setup.py builds C99 without -ffast-math, where GCC does not contract;
 * fd_augment.c asks clang for FP_CONTRACT OFF). The bilinear and bicubic
 * affine paths have AVX2 kernels, chosen at run time (the same IEEE
 * operations lane by lane; FASTDECODE_AUGMENT_SCALAR=1 in the environment
 * keeps the scalar ones: the tests compare both with Pillow). */
#ifndef FD_AUGMENT_H
#define FD_AUGMENT_H

#include "fd_color.h"
#include "fd_common.h"

typedef enum {
    FD_AUG_COLOR = 0,
    FD_AUG_AFFINE = 1,
    FD_AUG_LUT = 2,
    FD_AUG_AUTOCONTRAST = 3,
    FD_AUG_EQUALIZE = 4,
    FD_AUG_SHARPNESS = 5,
    FD_AUG_BLUR = 6
} fd_aug_kind;

/* Pillow's resampling filter numbers that Image.transform takes */
#define FD_AUG_NEAREST 0
#define FD_AUG_BILINEAR 2
#define FD_AUG_BICUBIC 3

#define FD_AUG_MAX_STEPS 64
#define FD_AUG_MAX_SIDE (1u << 30) /* a side must be below it */

typedef struct {
    fd_aug_kind kind;
    fd_color_step color;   /* FD_AUG_COLOR: as fd_color_apply takes it */
    double matrix[6];      /* FD_AUG_AFFINE: Pillow's (a, b, c, d, e, f), output
                            * (x, y) samples the input at (a x' + b y' + c,
                            * d x' + e y' + f), x' = x + 0.5, y' = y + 0.5 */
    int resample;          /* FD_AUG_AFFINE: FD_AUG_NEAREST/BILINEAR/BICUBIC */
    uint8_t fill[3];       /* FD_AUG_AFFINE: the colour outside the source
                            * (Pillow's fillcolor=None is 0, 0, 0) */
    const uint8_t *table;  /* FD_AUG_LUT: 768 bytes, R, G then B's 256 entries;
                            * the caller keeps it alive during the call */
    float factor;          /* FD_AUG_SHARPNESS: Pillow's blend alpha (the
                            * Python float rounded to float32) */
    int32_t ksize[2];      /* FD_AUG_BLUR: kernel width, height: odd, each
                            * half below the image's width / height */
    float sigma[2];        /* FD_AUG_BLUR: sigma x, y: finite, > 0 */
} fd_aug_step;

/* Applies `steps` in order to the height x width RGB image `pixels` (size
 * bytes, exactly height * width * 3), interleaved (HWC) or planar (CHW),
 * in place. FD_ERR_ARGUMENT for a size that does not match, an empty image,
 * a side of FD_AUG_MAX_SIDE or more,
 * more than FD_AUG_MAX_STEPS steps, an unknown kind, a colour step
 * fd_color_apply refuses, a matrix entry or factor that is not finite, a
 * resample other than 0/2/3, a missing table, or a blur kernel or sigma
 * out of range: all checked before any pixel is written. FD_ERR_NOMEM when
 * the scratch (a copy of the image plus a row of ints; for a blur, the
 * image in float32 plus two rows) cannot be allocated; the image is then
 * untouched too. */
fd_status fd_augment_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                           fd_layout layout, const fd_aug_step *steps, size_t nsteps,
                           fd_error *err);

#endif
