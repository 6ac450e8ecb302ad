/* Raw BMP reading: every header version and bit depth of the BMP Suite,
 * with all size arithmetic checked before anything is allocated or read.
 * See docs/decisions/bmp.md. */
#ifndef FD_BMP_H
#define FD_BMP_H

#include "fd_common.h"

/* Parses and validates the headers (not the pixel data, not max_pixels).
 * info: width/height absolute (top-down files too); channels = components
 * stored: 1 for palette-based files (1/2/4/8 bpp, RLE4/RLE8), 4 for 64 bpp
 * and for bit-mask files with a nonzero alpha mask, else 3; color_space
 * PALETTE or RGB; bits_per_pixel as stored (0 for BI_JPEG); subsampling
 * FD_SS_NONE; progressive 0; orientation 1. Errors: FD_ERR_UNSUPPORTED when
 * the data does not start with "BM" or uses a variant not read (BI_PNG,
 * CMYK, OS/2 Huffman 1D), FD_ERR_DECODE for an invalid header. */
fd_status fd_bmp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err);

/* Output shape for `opt` (mode, crop, layout; scale/exif do not apply).
 * Checks width*height against opt->max_pixels (0 = no limit) right after
 * reading the dimensions (FD_ERR_TOO_LARGE), the crop (FD_ERR_ARGUMENT) and,
 * for uncompressed files, that the pixel data is all there (FD_ERR_DECODE),
 * so nothing is allocated for a file that cannot decode. */
fd_status fd_bmp_plan(const uint8_t *data, size_t size, const fd_options *opt,
                      fd_shape *shape, fd_error *err);

/* Decodes into `out` (out_size must equal the planned nbytes). Allocates
 * at most two rows (output width, and image width for RLE); BI_JPEG goes
 * to fd_jpeg_decode with the same options. */
fd_status fd_bmp_decode(const uint8_t *data, size_t size, const fd_options *opt,
                        uint8_t *out, size_t out_size, fd_error *err);

#endif
