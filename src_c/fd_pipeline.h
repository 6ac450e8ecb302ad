/* One entry point per step for every native format: plan (header -> output
 * shape) and decode (into the caller's buffer). When a size is requested the
 * decode goes to per-thread scratch first and the resampler writes the
 * final pixels, all in one call. */
#ifndef FD_PIPELINE_H
#define FD_PIPELINE_H

#include "fd_common.h"

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
