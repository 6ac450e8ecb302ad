/* JPEG decoding through libjpeg-turbo's libjpeg API.
 *
 * Each thread owns one reusable decompress object (created on first use,
 * destroyed when the thread exits), so calls from many threads never share
 * state and pay no per-call set-up. See docs/decisions/jpeg.md.
 */
#ifndef FD_JPEG_H
#define FD_JPEG_H

#include "fd_common.h"

/* Scans a progressive file may have before it is treated as hostile. */
#define FD_JPEG_MAX_SCANS 1000

fd_status fd_jpeg_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err);

/* Reads the header and computes the output shape for `opt`. */
fd_status fd_jpeg_plan(const uint8_t *data, size_t size, const fd_options *opt,
                       fd_shape *shape, fd_error *err);

/* Decodes into `out` (out_size must equal the planned nbytes). */
fd_status fd_jpeg_decode(const uint8_t *data, size_t size, const fd_options *opt,
                         uint8_t *out, size_t out_size, fd_error *err);

/* EXIF orientation from the first APP1 "Exif" segment, 1 when absent.
 * Walks the marker segments of `data` without copying. */
int fd_jpeg_exif_orientation(const uint8_t *data, size_t size);

/* Describes the libjpeg actually loaded in this process (not the headers we
 * compiled against): its version string ("2.1.5", or "unknown") and whether
 * its SIMD dispatcher is present and not disabled by JSIMD_FORCENONE. */
void fd_jpeg_library_info(char *version, size_t version_len, int *simd);

#endif
