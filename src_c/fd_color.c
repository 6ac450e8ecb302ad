/* Pillow's ImageEnhance blends on uint8 RGB in place (see fd_color.h). */
#include "fd_color.h"

#include <math.h>

/* Blend.c's expression and clamp, for one value: `(int)in1 + alpha *
 * ((int)in2 - (int)in1)` in float, then clipped and truncated. Both of
 * Pillow's branches (interpolation, extrapolation) are this expression; the
 * clamp only bites when extrapolating. */
static inline uint8_t blend1(int degenerate, int value, float alpha)
{
    const float t = (float)degenerate + alpha * (float)(value - degenerate);
    if (t <= 0.0f)
        return 0;
    if (t >= 255.0f)
        return 255;
    return (uint8_t)t;
}

/* Where pixel i's channel c is: interleaved or planar. */
typedef struct {
    size_t pixels, channel_step, pixel_step;
} layout_steps;

static layout_steps steps_of(size_t npixels, fd_layout layout)
{
    layout_steps s;
    s.pixels = npixels;
    s.channel_step = layout == FD_LAYOUT_CHW ? npixels : 1;
    s.pixel_step = layout == FD_LAYOUT_CHW ? 1 : 3;
    return s;
}

static void apply_table(uint8_t *pixels, size_t size, const uint8_t table[256])
{
    for (size_t i = 0; i < size; i++)
        pixels[i] = table[pixels[i]];
}

/* Brightness and contrast blend every value with one constant: a table. */
static void blend_constant(uint8_t *pixels, size_t size, int degenerate, float alpha)
{
    uint8_t table[256];
    for (int v = 0; v < 256; v++)
        table[v] = blend1(degenerate, v, alpha);
    apply_table(pixels, size, table);
}

/* ImageEnhance.Contrast's grey: int(mean of the L image + 0.5). */
static int mean_grey(const uint8_t *pixels, layout_steps s)
{
    uint64_t hist[256] = {0};
    const uint8_t *r = pixels, *g = pixels + s.channel_step, *b = pixels + 2 * s.channel_step;
    for (size_t i = 0, o = 0; i < s.pixels; i++, o += s.pixel_step)
        hist[fd_luma(r[o], g[o], b[o])]++;
    uint64_t sum = 0;
    for (int v = 1; v < 256; v++)
        sum += (uint64_t)v * hist[v];
    /* sum <= 255 * count and count <= SIZE_MAX / 3: both exact in a double
     * below 2^53 pixels, so this is Python's correctly rounded sum / count. */
    const double mean = (double)sum / (double)s.pixels;
    return (int)(mean + 0.5);
}

static void saturate(uint8_t *pixels, layout_steps s, float alpha)
{
    uint8_t *r = pixels, *g = pixels + s.channel_step, *b = pixels + 2 * s.channel_step;
    for (size_t i = 0, o = 0; i < s.pixels; i++, o += s.pixel_step) {
        const int l = fd_luma(r[o], g[o], b[o]);
        r[o] = blend1(l, r[o], alpha);
        g[o] = blend1(l, g[o], alpha);
        b[o] = blend1(l, b[o], alpha);
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
    for (size_t k = 0; k < nsteps; k++) {
        const int op = (int)steps[k].op;
        if (op < FD_COLOR_BRIGHTNESS || op > FD_COLOR_SATURATION)
            return fd_fail(err, FD_ERR_ARGUMENT, "color: step %zu: unknown op %d", k, op);
        if (!isfinite(steps[k].factor))
            return fd_fail(err, FD_ERR_ARGUMENT, "color: step %zu: factor %g is not finite", k,
                           (double)steps[k].factor);
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
    const layout_steps s = steps_of((size_t)height * width, layout);
    for (size_t k = 0; k < nsteps; k++) {
        const float alpha = steps[k].factor;
        switch (steps[k].op) {
        case FD_COLOR_BRIGHTNESS:
            blend_constant(pixels, size, 0, alpha);
            break;
        case FD_COLOR_CONTRAST:
            blend_constant(pixels, size, mean_grey(pixels, s), alpha);
            break;
        case FD_COLOR_SATURATION:
            saturate(pixels, s, alpha);
            break;
        }
    }
    return FD_OK;
}
