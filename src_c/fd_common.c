#include "fd_common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fd_options_init(fd_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->mode = FD_MODE_RGB;
    opt->layout = FD_LAYOUT_HWC;
    opt->scale_num = 8;
    opt->max_pixels = FD_DEFAULT_MAX_PIXELS;
    opt->max_work_per_byte = FD_DEFAULT_MAX_WORK_PER_BYTE;
}

fd_status fd_fail(fd_error *err, fd_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->status = status;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return status;
}

int fd_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

void fd_put_row(const fd_dest *d, uint32_t y, const uint8_t *src)
{
    const uint32_t w = d->width, c = d->channels;
    if (d->layout == FD_LAYOUT_HWC) {
        uint8_t *dst = d->base + (size_t)y * w * c;
        if (!d->flip) {
            memcpy(dst, src, (size_t)w * c);
        } else if (c == 3) {
            const uint8_t *s = src + (size_t)(w - 1) * 3;
            for (uint32_t x = 0; x < w; x++, s -= 3, dst += 3) {
                dst[0] = s[0];
                dst[1] = s[1];
                dst[2] = s[2];
            }
        } else {
            for (uint32_t x = 0; x < w; x++)
                dst[x] = src[w - 1 - x];
        }
        return;
    }
    /* CHW: one plane per channel. */
    const size_t plane = (size_t)d->height * w;
    uint8_t *row = d->base + (size_t)y * w;
    if (c == 1) {
        if (!d->flip)
            memcpy(row, src, w);
        else
            for (uint32_t x = 0; x < w; x++)
                row[x] = src[w - 1 - x];
        return;
    }
    uint8_t *r = row, *g = row + plane, *b = row + 2 * plane;
    if (!d->flip) {
        for (uint32_t x = 0; x < w; x++) {
            r[x] = src[3 * x];
            g[x] = src[3 * x + 1];
            b[x] = src[3 * x + 2];
        }
    } else {
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *s = src + 3 * (size_t)(w - 1 - x);
            r[x] = s[0];
            g[x] = s[1];
            b[x] = s[2];
        }
    }
}

int fd_orientation_swaps_axes(int orientation)
{
    return orientation >= 5 && orientation <= 8;
}

void fd_orient_dims(int orientation, uint32_t h, uint32_t w, uint32_t *oh, uint32_t *ow)
{
    if (fd_orientation_swaps_axes(orientation)) {
        *oh = w;
        *ow = h;
    } else {
        *oh = h;
        *ow = w;
    }
}

/* Source coordinates of oriented pixel (r, c); matches Pillow's
 * ImageOps.exif_transpose for every orientation. */
static inline void orient_map(int o, uint32_t h, uint32_t w, uint32_t r, uint32_t c,
                              uint32_t *sr, uint32_t *sc)
{
    switch (o) {
    case 2: *sr = r; *sc = w - 1 - c; break;
    case 3: *sr = h - 1 - r; *sc = w - 1 - c; break;
    case 4: *sr = h - 1 - r; *sc = c; break;
    case 5: *sr = c; *sc = r; break;
    case 6: *sr = h - 1 - c; *sc = r; break;
    case 7: *sr = h - 1 - c; *sc = w - 1 - r; break;
    case 8: *sr = c; *sc = w - 1 - r; break;
    default: *sr = r; *sc = c; break;
    }
}

fd_rect fd_orient_rect_to_source(int o, uint32_t h, uint32_t w, fd_rect r)
{
    /* Map two opposite corners (inclusive) and take the bounding box. */
    uint32_t ar, ac, br, bc;
    orient_map(o, h, w, (uint32_t)r.top, (uint32_t)r.left, &ar, &ac);
    orient_map(o, h, w, (uint32_t)(r.top + r.height - 1), (uint32_t)(r.left + r.width - 1),
               &br, &bc);
    fd_rect s;
    s.top = ar < br ? ar : br;
    s.left = ac < bc ? ac : bc;
    s.height = (int64_t)(ar < br ? br - ar : ar - br) + 1;
    s.width = (int64_t)(ac < bc ? bc - ac : ac - bc) + 1;
    return s;
}

void fd_put_oriented(const fd_dest *d, int o, const uint8_t *src, uint32_t src_h, uint32_t src_w)
{
    const uint32_t c = d->channels;
    /* A gather per pixel: rotations read the source column-wise, and this
     * path only runs for EXIF-rotated files. */
    for (uint32_t r = 0; r < d->height; r++) {
        for (uint32_t x = 0; x < d->width; x++) {
            const uint32_t ox = d->flip ? d->width - 1 - x : x;
            uint32_t sr, sc;
            orient_map(o, src_h, src_w, r, ox, &sr, &sc);
            const uint8_t *s = src + ((size_t)sr * src_w + sc) * c;
            if (d->layout == FD_LAYOUT_HWC) {
                uint8_t *dst = d->base + ((size_t)r * d->width + x) * c;
                for (uint32_t k = 0; k < c; k++)
                    dst[k] = s[k];
            } else {
                const size_t plane = (size_t)d->height * d->width;
                uint8_t *dst = d->base + (size_t)r * d->width + x;
                for (uint32_t k = 0; k < c; k++)
                    dst[k * plane] = s[k];
            }
        }
    }
}

void fd_scaled_span(int64_t start, int64_t len, int scale_num, uint32_t scaled_extent,
                    uint32_t *lo, uint32_t *hi)
{
    uint64_t a = ((uint64_t)start * (uint64_t)scale_num) / 8u;
    uint64_t b = ((uint64_t)(start + len) * (uint64_t)scale_num + 7u) / 8u;
    if (b > scaled_extent)
        b = scaled_extent;
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
}

fd_status fd_check_crop(const fd_rect *c, uint32_t h, uint32_t w, fd_error *err)
{
    if (c->top < 0 || c->left < 0 || c->height <= 0 || c->width <= 0 ||
        c->top + c->height > (int64_t)h || c->left + c->width > (int64_t)w)
        return fd_fail(err, FD_ERR_ARGUMENT,
                       "crop (top=%lld, left=%lld, height=%lld, width=%lld) is outside the "
                       "%ux%u image",
                       (long long)c->top, (long long)c->left, (long long)c->height,
                       (long long)c->width, (unsigned)w, (unsigned)h);
    return FD_OK;
}

fd_status fd_check_pixels(uint32_t h, uint32_t w, uint64_t max_pixels, fd_error *err)
{
    const uint64_t pixels = (uint64_t)h * w;
    if (max_pixels && pixels > max_pixels)
        return fd_fail(err, FD_ERR_TOO_LARGE,
                       "image is %ux%u = %llu pixels, above max_pixels=%llu", w, h,
                       (unsigned long long)pixels, (unsigned long long)max_pixels);
    return FD_OK;
}

fd_status fd_check_work(uint64_t blocks, size_t size, uint32_t max_work_per_byte,
                        const char *what, fd_error *err)
{
    if (!max_work_per_byte)
        return FD_OK;
    const uint64_t bytes = size ? (uint64_t)size : 1u;
    if (blocks / max_work_per_byte < bytes ||
        (blocks / max_work_per_byte == bytes && blocks % max_work_per_byte == 0))
        return FD_OK; /* blocks <= max_work_per_byte * bytes, without overflow */
    return fd_fail(err, FD_ERR_TOO_LARGE,
                   "%s needs %llu 8x8 blocks of decoding work from %zu bytes (%llu per byte), "
                   "above max_work_per_byte=%u: a likely decompression bomb",
                   what, (unsigned long long)blocks, size,
                   (unsigned long long)((blocks + bytes - 1) / bytes), max_work_per_byte);
}

fd_status fd_plan_geometry(uint32_t h, uint32_t w, const fd_options *opt, fd_geometry *g,
                           fd_error *err)
{
    fd_rect crop = {0, 0, h, w};
    if (opt->has_crop) {
        fd_status st = fd_check_crop(&opt->crop, h, w, err);
        if (st != FD_OK)
            return st;
        crop = opt->crop;
    }
    int m = opt->scale_num;
    if (opt->min_height || opt->min_width) {
        /* Smallest M/8 whose crop output still covers min_size. */
        for (m = 1; m < 8; m++) {
            uint32_t y0, y1, x0, x1;
            if (opt->simd_scales_only && (m & (m - 1)) != 0)
                continue; /* 3/8, 5/8, 6/8, 7/8 run libjpeg-turbo's scalar IDCT */
            fd_scaled_span(crop.top, crop.height, m, fd_scaled_extent(h, m), &y0, &y1);
            fd_scaled_span(crop.left, crop.width, m, fd_scaled_extent(w, m), &x0, &x1);
            if (y1 - y0 >= opt->min_height && x1 - x0 >= opt->min_width)
                break;
        }
    }
    if (m < 1 || m > 8)
        return fd_fail(err, FD_ERR_ARGUMENT, "scale must be M/8 with M in 1..8, got %d/8", m);
    g->scale_num = m;
    g->scaled_height = fd_scaled_extent(h, m);
    g->scaled_width = fd_scaled_extent(w, m);
    uint32_t y0, y1, x0, x1;
    fd_scaled_span(crop.top, crop.height, m, g->scaled_height, &y0, &y1);
    fd_scaled_span(crop.left, crop.width, m, g->scaled_width, &x0, &x1);
    g->region.top = y0;
    g->region.left = x0;
    g->region.height = (int64_t)y1 - y0;
    g->region.width = (int64_t)x1 - x0;
    return FD_OK;
}

fd_status fd_geometry_shape(const fd_geometry *g, const fd_options *opt, fd_shape *shape,
                            fd_error *err)
{
    size_t px;
    shape->height = (uint32_t)g->region.height;
    shape->width = (uint32_t)g->region.width;
    shape->channels = opt->mode == FD_MODE_L ? 1 : 3;
    shape->scale_num = g->scale_num;
    if (!fd_mul_size(shape->height, shape->width, &px) ||
        !fd_mul_size(px, shape->channels, &shape->nbytes))
        return fd_fail(err, FD_ERR_TOO_LARGE, "output size overflows");
    return FD_OK;
}

/* ------------------------------------------------------------------------ */
/* Per-thread scratch: grown on demand, reused by every call on the thread,
 * released when the thread exits (or trimmed when one call needed a lot). */


typedef struct {
    void *ptr[FD_SCRATCH_SLOTS];
    size_t cap[FD_SCRATCH_SLOTS];
} fd_scratch_set;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_destroy(void *p)
{
    fd_scratch_set *s = p;
    for (int i = 0; i < FD_SCRATCH_SLOTS; i++)
        free(s->ptr[i]);
    free(s);
}

static void scratch_key_create(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_destroy) == 0;
}

static fd_scratch_set *scratch_set(void)
{
    pthread_once(&scratch_once, scratch_key_create);
    if (!scratch_key_ok)
        return NULL;
    fd_scratch_set *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    return s;
}

void *fd_scratch(int slot, size_t n)
{
    fd_scratch_set *s = scratch_set();
    if (!s || slot < 0 || slot >= FD_SCRATCH_SLOTS)
        return NULL;
    if (n == 0)
        n = 1;
    if (n > s->cap[slot]) {
        void *p = realloc(s->ptr[slot], n);
        if (!p)
            return NULL;
        s->ptr[slot] = p;
        s->cap[slot] = n;
    }
    return s->ptr[slot];
}

void fd_scratch_trim(void)
{
    pthread_once(&scratch_once, scratch_key_create);
    fd_scratch_set *s = scratch_key_ok ? pthread_getspecific(scratch_key) : NULL;
    if (!s)
        return;
    for (int i = 0; i < FD_SCRATCH_SLOTS; i++) {
        if (s->cap[i] > FD_SCRATCH_KEEP) {
            free(s->ptr[i]);
            s->ptr[i] = NULL;
            s->cap[i] = 0;
        }
    }
}
