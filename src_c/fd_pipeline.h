/* One entry point per step for every native format: sniff (which format),
 * read_header, plan (header -> output shape) and decode (into the caller's
 * buffer), each dispatched through the rows of fd_formats.h. When a size is
 * requested the decode goes to per-thread scratch first and the resampler
 * writes the final pixels, all in one call. A format the core lacks
 * (FD_FORMAT_UNKNOWN) is FD_ERR_UNSUPPORTED. See docs/decisions/core.md. */
#ifndef FD_PIPELINE_H
#define FD_PIPELINE_H

#include "fd_common.h"

/* The first format (fd_formats.h's order) whose signature starts `data`;
 * FD_FORMAT_UNKNOWN when none does. */
fd_format fd_sniff(const uint8_t *data, size_t size);

/* The format's name ("jpeg"); NULL for FD_FORMAT_UNKNOWN or any other value. */
const char *fd_format_name(fd_format fmt);

/* The index-th format of fd_formats.h (0 first); FD_FORMAT_UNKNOWN past the last. */
fd_format fd_format_at(size_t index);

fd_status fd_read_header(fd_format fmt, const uint8_t *data, size_t size, fd_info *info,
                         fd_error *err);

fd_status fd_plan(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                  fd_shape *shape, fd_error *err);

fd_status fd_decode(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                    uint8_t *out, size_t out_size, fd_error *err);

/* fd_plan without the file: the geometry and output shape for an image of
 * h x w pixels (oriented frame), with the same checks (max_pixels, crop,
 * scale) and the same rules (min_size, the resize's own scale pick). */
fd_status fd_plan_dims(uint32_t h, uint32_t w, const fd_options *opt, fd_geometry *geo,
                       fd_shape *shape, fd_error *err);

#endif
