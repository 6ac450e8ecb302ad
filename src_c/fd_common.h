/* Shared types of the fastdecode native core.
 *
 * Plain C99, no Python: every entry point returns an fd_status and, on
 * failure, fills an fd_error that the Cython layer turns into an exception.
 * A file that cannot be read is reported by its errno instead (fd_file_*,
 * fd_ra_result.error): the Cython layer raises the OSError naming the file.
 */
#ifndef FD_COMMON_H
#define FD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "fd_formats.h"

typedef enum {
    FD_OK = 0,
    FD_ERR_DECODE,      /* corrupt, truncated or undecodable data */
    FD_ERR_UNSUPPORTED, /* not this format, or a variant we cannot decode */
    FD_ERR_TOO_LARGE,   /* declared size above max_pixels */
    FD_ERR_ARGUMENT,    /* an option that does not fit this image */
    FD_ERR_NOMEM        /* allocation failed */
} fd_status;

#define FD_MESSAGE_LEN 240

typedef struct {
    fd_status status;
    char message[FD_MESSAGE_LEN];
} fd_error;

typedef enum { FD_MODE_RGB = 0, FD_MODE_L = 1 } fd_mode;
typedef enum { FD_LAYOUT_HWC = 0, FD_LAYOUT_CHW = 1 } fd_layout;

typedef enum {
    FD_CS_GRAY = 0,
    FD_CS_YCBCR,
    FD_CS_RGB,
    FD_CS_CMYK,
    FD_CS_YCCK,
    FD_CS_OTHER,
    FD_CS_PALETTE /* BMP: indexed colour */
} fd_color_space;

typedef enum {
    FD_SS_NONE = -1, /* not a JPEG */
    FD_SS_444 = 0,
    FD_SS_422,
    FD_SS_420,
    FD_SS_440,
    FD_SS_411,
    FD_SS_GRAY,
    FD_SS_OTHER
} fd_subsampling;

typedef struct {
    fd_format format;
    uint32_t width;  /* as stored, before EXIF orientation */
    uint32_t height;
    int channels;    /* components in the file (BMP: 1 paletted/gray, 3, 4) */
    fd_color_space color_space;
    fd_subsampling subsampling;
    int progressive;
    int orientation; /* EXIF 1..8, 1 when absent */
    int bits_per_pixel; /* BMP only, 0 for JPEG */
} fd_info;

typedef struct {
    int64_t top, left, height, width;
} fd_rect;

#define FD_DEFAULT_MAX_PIXELS 178956970ULL
/* Decoding work allowed per byte of input, in 8x8 blocks (see fd_check_work). */
#define FD_DEFAULT_MAX_WORK_PER_BYTE 2048u

typedef struct {
    fd_mode mode;
    fd_layout layout;
    int scale_num;      /* M of M/8, 1..8; ignored when min_height/min_width set */
    uint32_t min_height; /* 0 = no min_size: use scale_num */
    uint32_t min_width;
    int simd_scales_only; /* min_* search among 1/8, 1/4, 1/2, 1 only */
    int has_crop;
    fd_rect crop;       /* full-resolution pixels, in the oriented frame */
    int flip;
    int exif;
    int fast;
    int strict;
    uint64_t max_pixels;
    uint32_t max_work_per_byte; /* 0 = no limit */
    uint32_t size_height; /* 0 = no resize; else the crop is resampled to this */
    uint32_t size_width;
    int interpolation;    /* fd_interp (fd_resample.h) */
} fd_options;

/* Output geometry, known before any pixel is decoded. */
typedef struct {
    uint32_t height, width, channels;
    size_t nbytes;
    int scale_num;      /* the M/8 actually used */
} fd_shape;

void fd_options_init(fd_options *opt);

/* A native format's entry points: what its row in fd_formats.h names, and
 * all that fd_pipeline.c knows of it.
 * sniff:       1 when `data` starts with the format's signature (the prefix
 *              Pillow checks), else 0; never reads past `size`.
 * read_header: the header's fd_info, without decoding pixels.
 * plan:        the output shape for `opt` (crop, scale, mode, layout; never
 *              a resize: fd_plan adds it), with every check made before
 *              anything is allocated.
 * decode:      the planned pixels into `out` (out_size = the planned nbytes). */
typedef struct {
    int (*sniff)(const uint8_t *data, size_t size);
    fd_status (*read_header)(const uint8_t *data, size_t size, fd_info *info, fd_error *err);
    fd_status (*plan)(const uint8_t *data, size_t size, const fd_options *opt,
                      fd_shape *shape, fd_error *err);
    fd_status (*decode)(const uint8_t *data, size_t size, const fd_options *opt,
                        uint8_t *out, size_t out_size, fd_error *err);
} fd_codec;

/* Records a failure; always returns `status` so callers can `return fd_fail(...)`. */
fd_status fd_fail(fd_error *err, fd_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Per-thread reusable buffers, one per slot, at least n bytes (NULL on
 * out-of-memory). Contents do not survive a later call with the same slot.
 * Slots: 0-2 the resampler, 3 the decode-then-resize pipeline. */
#define FD_SCRATCH_SLOTS 4
#define FD_SCRATCH_KEEP (16u << 20) /* larger buffers are released by trim */
void *fd_scratch(int slot, size_t n);
void fd_scratch_trim(void);

/* Checked size arithmetic: 0 on overflow. */
int fd_mul_size(size_t a, size_t b, size_t *out);

/* Pillow's RGB -> L luma (ITU-R 601-2, 16-bit fixed point). */
static inline uint8_t fd_luma(unsigned r, unsigned g, unsigned b)
{
    return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* Where decoded rows go: the caller's buffer, with crop offset, flip and
 * layout applied while writing, so no pixel is touched twice. */
typedef struct {
    uint8_t *base;
    uint32_t height, width, channels;
    fd_layout layout;
    int flip;
} fd_dest;

/* Writes one output row from `src`, `width` interleaved pixels of
 * `channels` (== dest channels) bytes. */
void fd_put_row(const fd_dest *d, uint32_t y, const uint8_t *src);

/* Pointer to row y when the destination is HWC and unflipped (decoders may
 * then write straight into it); NULL otherwise. */
static inline uint8_t *fd_direct_row(const fd_dest *d, uint32_t y)
{
    if (d->layout != FD_LAYOUT_HWC || d->flip)
        return NULL;
    return d->base + (size_t)y * d->width * d->channels;
}

/* EXIF orientation as index maps: oriented (r, c) -> source (sr, sc). */
int fd_orientation_swaps_axes(int orientation);
void fd_orient_dims(int orientation, uint32_t h, uint32_t w, uint32_t *oh, uint32_t *ow);
/* Maps a rect given in the oriented frame of an h x w (source) image to the
 * source frame. */
fd_rect fd_orient_rect_to_source(int orientation, uint32_t h, uint32_t w, fd_rect r);
/* Writes the whole oriented image from an interleaved source image. */
void fd_put_oriented(const fd_dest *d, int orientation, const uint8_t *src,
                     uint32_t src_h, uint32_t src_w);

/* The rows/columns [y0, y1) x [x0, x1) of an image scaled by M/8 that a
 * full-resolution rect covers: floor of the start, ceil of the end, clipped. */
void fd_scaled_span(int64_t start, int64_t len, int scale_num, uint32_t scaled_extent,
                    uint32_t *lo, uint32_t *hi);

/* Scaled extent libjpeg gives for a full extent at M/8. */
static inline uint32_t fd_scaled_extent(uint32_t full, int scale_num)
{
    return (uint32_t)(((uint64_t)full * (uint64_t)scale_num + 7u) / 8u);
}

/* Validates a crop against an oriented h x w image. */
fd_status fd_check_crop(const fd_rect *crop, uint32_t h, uint32_t w, fd_error *err);

/* FD_ERR_TOO_LARGE when h * w is above max_pixels (0 = no limit). */
fd_status fd_check_pixels(uint32_t h, uint32_t w, uint64_t max_pixels, fd_error *err);

/* The work budget: FD_ERR_TOO_LARGE when decoding `blocks` 8x8 blocks (a
 * block of each component once per scan that codes it; 64 pixels for
 * formats without blocks) out of `size` bytes of data is above
 * max_work_per_byte * size (0 = no limit). `what` names the data. */
fd_status fd_check_work(uint64_t blocks, size_t size, uint32_t max_work_per_byte,
                        const char *what, fd_error *err);

/* Where a decode's pixels come from, known from the image size alone. */
typedef struct {
    int scale_num;                        /* the M of M/8 the decode runs at */
    uint32_t scaled_height, scaled_width; /* the whole (oriented) image at M/8 */
    fd_rect region;                       /* the crop in that scaled frame */
} fd_geometry;

/* The planner's geometry for an oriented h x w image: checks the crop
 * (FD_ERR_ARGUMENT), picks M/8 from scale_num or min_height/min_width (the
 * smallest M whose cropped output still covers min_size, among 1, 2, 4 and 8
 * only when simd_scales_only) and maps the crop to the scaled frame. Does
 * not check max_pixels (fd_check_pixels) and ignores size_*. */
fd_status fd_plan_geometry(uint32_t h, uint32_t w, const fd_options *opt, fd_geometry *g,
                           fd_error *err);

/* The shape of g's region in opt's mode (before any resize). */
fd_status fd_geometry_shape(const fd_geometry *g, const fd_options *opt, fd_shape *shape,
                            fd_error *err);

#endif
