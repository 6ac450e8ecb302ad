/* WebP decoding through libwebp (lossy and lossless), with libwebp's own
 * crop (use_cropping) and, at a reduced scale, its rescaler (use_scaling).
 * Built when libwebp is found (FD_HAVE_WEBP, setup.py); without it WebP goes
 * to Pillow. See docs/decisions/png-webp.md.
 */
#ifndef FD_WEBP_H
#define FD_WEBP_H

#include "fd_common.h"

/* The header (WebPGetFeatures): canvas width and height, channels 4 with
 * alpha else 3, color_space RGB. FD_ERR_UNSUPPORTED for a file with an EXIF
 * chunk (Pillow reads its orientation: the caller asks Pillow). */
fd_status fd_webp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err);

/* Output shape for `opt`: the crop, and the M/8 scale (scale_num or
 * min_height/min_width, as for JPEG) of libwebp's rescaler. */
fd_status fd_webp_plan(const uint8_t *data, size_t size, const fd_options *opt,
                       fd_shape *shape, fd_error *err);

/* Decodes into `out` (out_size = the planned nbytes). An animation is
 * FD_ERR_UNSUPPORTED (Pillow gives its first frame). */
fd_status fd_webp_decode(const uint8_t *data, size_t size, const fd_options *opt,
                         uint8_t *out, size_t out_size, fd_error *err);

/* libwebp's decoder version ("1.2.4"), or "" when built without it. */
const char *fd_webp_library_version(void);

#endif
