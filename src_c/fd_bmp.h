/* Raw BMP reading: every header version and bit depth of the BMP Suite,
 * with all size arithmetic checked before anything is allocated or read. */
#ifndef FD_BMP_H
#define FD_BMP_H

#include "fd_common.h"

fd_status fd_bmp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err);

/* Output shape for `opt` (mode, crop, layout; scale/exif do not apply). */
fd_status fd_bmp_plan(const uint8_t *data, size_t size, const fd_options *opt,
                      fd_shape *shape, fd_error *err);

/* Decodes into `out` (out_size must equal the planned nbytes). */
fd_status fd_bmp_decode(const uint8_t *data, size_t size, const fd_options *opt,
                        uint8_t *out, size_t out_size, fd_error *err);

#endif
