/* PNG decoding through libspng, with Pillow's convert("RGB") / convert("L")
 * pixels for every colour type and bit depth. Built when libspng is found
 * (FD_HAVE_SPNG, setup.py); without it the format is not native and PNG
 * goes to Pillow. See docs/decisions/png-webp.md.
 */
#ifndef FD_PNG_H
#define FD_PNG_H

#include "fd_common.h"

/* The header (IHDR, CRC checked as Pillow checks it) without decoding:
 * width, height; channels and color_space as Pillow's mode has them
 * (1 gray / 2 gray+alpha / 3 RGB / 4 RGBA / 1 palette; 16-bit gray+alpha is
 * Pillow's RGBA, 4); progressive = interlaced; bits_per_pixel = bit depth x
 * samples. FD_ERR_UNSUPPORTED for a file with an eXIf chunk before its
 * pixels (Pillow reads its orientation: the caller asks Pillow). */
fd_status fd_png_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err);

/* Output shape for `opt` (mode, crop, layout; no scale), with max_pixels,
 * the crop and the work budget checked before anything is allocated. */
fd_status fd_png_plan(const uint8_t *data, size_t size, const fd_options *opt, fd_shape *shape,
                      fd_error *err);

/* Decodes into `out` (out_size = the planned nbytes), rows only down to the
 * crop's last one (all of them when interlaced). */
fd_status fd_png_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                        size_t out_size, fd_error *err);

/* libspng's version ("0.7.3"), or "" when built without it. */
const char *fd_png_library_version(void);

#endif
