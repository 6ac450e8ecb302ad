/* COCO instance masks made at sampled rows and columns: pycocotools' polygon
 * rasterization (rleFrPoly, merge of the polygons) and its RLE (counts and the
 * compressed string), evaluated only at the source pixels an output pixel
 * reads, so a mask is never made at full resolution
 * (docs/decisions/detection.md).
 *
 * A mask in pycocotools is a sorted list of toggle positions in column-major
 * order (x * h + y): a pixel is 1 when an odd number of toggles is at or
 * before it. out[r * n_cols + c] is the mask at (rows[r], cols[c]); a
 * negative row or column (padding) leaves its pixels as they are. Valid rows
 * must not decrease (the presets never mirror vertically). */
#ifndef FD_RASTER_H
#define FD_RASTER_H

#include <stddef.h>
#include <stdint.h>

#include "fd_common.h"

/* The most steps one polygon's boundary walk may take (pycocotools walks every
 * point at 5x, so wild coordinates would otherwise be unbounded work). */
#define FD_RASTER_MAX_STEPS (1u << 26)

typedef struct {
    const int64_t *rows; /* source row of each output row, or < 0 */
    uint32_t n_rows;
    const int64_t *cols; /* source column of each output column, or < 0 */
    uint32_t n_cols;
} fd_grid;

/* The union of n_polys polygons (xy: x0, y0, x1, y1, ... with lens[i]
 * numbers for polygon i; lens[i] / 2 points) on an h x w image, ORed into
 * out (n_rows x n_cols). */
fd_status fd_raster_polygons(const double *xy, const uint32_t *lens, uint32_t n_polys,
                             uint32_t h, uint32_t w, const fd_grid *grid, uint8_t *out,
                             fd_error *err);

/* An RLE (run lengths, zeros first, column-major) on an h x w image, ORed
 * into out. */
fd_status fd_raster_rle(const uint32_t *counts, size_t n_counts, uint32_t h, uint32_t w,
                        const fd_grid *grid, uint8_t *out, fd_error *err);

/* pycocotools' compressed RLE string (rleFrString) to run lengths: at most
 * cap counts into counts, their number into *n. */
fd_status fd_rle_from_string(const char *s, size_t len, uint32_t *counts, size_t cap, size_t *n,
                             fd_error *err);

#endif
