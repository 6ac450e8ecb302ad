/* PNG through libspng (and libdeflate): Pillow's convert("RGB") / convert("L") pixels.
 *
 * A non-interlaced file's IDAT stream is inflated by libdeflate in one call
 * and unfiltered here, down to the crop's last row (deflate_rows: about
 * twice the speed of libspng over the system zlib, docs/decisions/png-webp.md);
 * libspng reads the chunks before the pixels (their CRCs, PLTE), and
 * decodes interlaced files and the streams libdeflate does not finish
 * (longer or shorter than the image, corrupt). There libspng decodes each
 * row raw (SPNG_FMT_RAW: the file's samples, 16-bit big-endian, low depths
 * packed); this file turns the crop's columns of it
 * into RGB or L as Pillow 13 does, and writes them into the caller's buffer
 * (fd_put_row: layout and flip on the way). Rows below the crop's last one
 * are never decoded; an interlaced file is decoded whole (its last pass
 * holds every odd row) into per-thread scratch.
 *
 * Pillow's rules reproduced (PngImagePlugin, Convert.c):
 *  - gray of 1, 2, 4 bits is widened to 0..255 (v * 255 / max); 16-bit
 *    gray is Pillow's I;16, whose conversion clips: min(v, 255);
 *  - 16-bit RGB, RGBA and gray+alpha keep the high byte;
 *  - alpha and tRNS are dropped (convert("RGB") drops them);
 *  - L from colour is the ITU-R 601-2 luma (fd_luma), from a palette the
 *    luma of the entry;
 *  - a palette index past the palette's entries, which Pillow reads as its
 *    own default entry, is not decoded here (FD_ERR_UNSUPPORTED: Pillow's
 *    decoder decodes it).
 *  - CRCs: every chunk before the pixels is checked (Pillow checks them
 *    too: a bad one is FD_ERR_DECODE); Pillow does not check IDAT CRCs, nor
 *    does deflate_rows (on libspng's path a bad one it reads is
 *    FD_ERR_UNSUPPORTED, and the caller asks Pillow).
 * Safety: IHDR is read and max_pixels, the crop and the work budget (64
 * pixels a block) checked before libspng is started; libspng's ancillary
 * chunk memory is capped (spng_set_chunk_limits); the only buffers are a
 * row (or, interlaced, the raw image, within max_pixels) in fd_scratch.
 * See docs/decisions/png-webp.md.
 */
#include "fd_png.h"

#include <stdlib.h>
#include <string.h>

#ifdef FD_HAVE_SPNG
#include <spng.h>

/* libspng's ancillary chunk limits: one chunk, and all kept chunks. */
#define PNG_CHUNK_LIMIT (8u << 20)
#define PNG_CACHE_LIMIT (32u << 20)

/* fd_scratch slots: the raw row (or raw image) and the converted row. The
 * pipeline's own slot (3) holds the output while this decodes into it. */
enum { SLOT_RAW = 0, SLOT_ROW = 1 };

static const uint8_t SIGNATURE[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

enum { CT_GRAY = 0, CT_RGB = 2, CT_PALETTE = 3, CT_GRAY_ALPHA = 4, CT_RGBA = 6 };

typedef struct {
    uint32_t width, height;
    int depth, color_type, interlaced;
    int has_exif; /* an eXIf chunk before the first IDAT */
    int idat_overruns; /* the first IDAT's length runs past the end of the data */
} png_head;

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static int samples_of(int color_type)
{
    switch (color_type) {
    case CT_RGB: return 3;
    case CT_GRAY_ALPHA: return 2;
    case CT_RGBA: return 4;
    default: return 1;
    }
}

static int valid_depth(int color_type, int depth)
{
    switch (color_type) {
    case CT_GRAY: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case CT_PALETTE: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case CT_RGB:
    case CT_GRAY_ALPHA:
    case CT_RGBA: return depth == 8 || depth == 16;
    default: return 0;
    }
}

/* IHDR (with its CRC, as Pillow checks it) and a walk of the chunks before
 * the first IDAT for eXIf and impossible lengths. */
static fd_status parse_head(const uint8_t *data, size_t size, png_head *h, fd_error *err)
{
    if (size < 8 || memcmp(data, SIGNATURE, 8) != 0)
        return fd_fail(err, FD_ERR_UNSUPPORTED, "not a PNG");
    /* the messages name what Pillow says of the same file */
    if (size < 33 || (be32(data + 8) < 13 && memcmp(data + 12, "IHDR", 4) == 0))
        return fd_fail(err, FD_ERR_DECODE, "Truncated IHDR chunk (a PNG of %zu bytes)", size);
    if (be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4) != 0)
        return fd_fail(err, FD_ERR_DECODE, "PNG does not start with a 13-byte IHDR chunk");
    if (crc32_of(data + 12, 17) != be32(data + 29))
        return fd_fail(err, FD_ERR_DECODE, "PNG IHDR CRC mismatch");
    const uint8_t *ihdr = data + 16;
    h->width = be32(ihdr);
    h->height = be32(ihdr + 4);
    h->depth = ihdr[8];
    h->color_type = ihdr[9];
    h->interlaced = ihdr[12];
    h->has_exif = 0;
    h->idat_overruns = 0;
    if (h->width == 0 || h->height == 0 || h->width > 0x7FFFFFFFu || h->height > 0x7FFFFFFFu)
        return fd_fail(err, FD_ERR_DECODE, "PNG of %ux%u pixels", h->width, h->height);
    if (!valid_depth(h->color_type, h->depth))
        return fd_fail(err, FD_ERR_DECODE, "PNG colour type %d with bit depth %d",
                       h->color_type, h->depth);
    if (ihdr[10] != 0 || ihdr[11] != 0 || h->interlaced > 1)
        return fd_fail(err, FD_ERR_DECODE, "PNG with an unknown compression, filter or "
                       "interlace method (%d, %d, %d)", ihdr[10], ihdr[11], ihdr[12]);
    size_t p = 33;
    while (size - p >= 8) {
        uint32_t len = be32(data + p);
        if (len > 0x7FFFFFFFu)
            return fd_fail(err, FD_ERR_DECODE, "PNG chunk length %u above 2^31-1", len);
        if (memcmp(data + p + 4, "IDAT", 4) == 0) {
            h->idat_overruns = (size_t)len + 12u > size - p;
            break;
        }
        if (memcmp(data + p + 4, "eXIf", 4) == 0)
            h->has_exif = 1;
        if ((size_t)len + 12u > size - p)
            return fd_fail(err, FD_ERR_DECODE, "Truncated File Read: PNG chunk '%.4s' runs "
                           "past the end of the data", (const char *)(data + p + 4));
        p += (size_t)len + 12u;
    }
    return FD_OK;
}

static void head_info(const png_head *h, fd_info *info)
{
    memset(info, 0, sizeof(*info));
    info->format = FD_FORMAT_PNG;
    info->width = h->width;
    info->height = h->height;
    info->orientation = 1;
    info->subsampling = FD_SS_NONE;
    info->progressive = h->interlaced;
    info->bits_per_pixel = h->depth * samples_of(h->color_type);
    switch (h->color_type) {
    case CT_GRAY: info->channels = 1; info->color_space = FD_CS_GRAY; break;
    case CT_PALETTE: info->channels = 1; info->color_space = FD_CS_PALETTE; break;
    case CT_GRAY_ALPHA: /* Pillow: LA, or RGBA for 16 bits */
        info->channels = h->depth == 16 ? 4 : 2;
        info->color_space = h->depth == 16 ? FD_CS_RGB : FD_CS_GRAY;
        break;
    case CT_RGB: info->channels = 3; info->color_space = FD_CS_RGB; break;
    default: info->channels = 4; info->color_space = FD_CS_RGB; break;
    }
}

fd_status fd_png_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err)
{
    png_head h;
    fd_status st = parse_head(data, size, &h, err);
    if (st != FD_OK)
        return st;
    if (h.has_exif)
        return fd_fail(err, FD_ERR_UNSUPPORTED, "PNG with an eXIf chunk: its orientation is "
                       "Pillow's to read");
    head_info(&h, info);
    return FD_OK;
}

static fd_status plan(const uint8_t *data, size_t size, const fd_options *opt, png_head *h,
                      fd_geometry *geo, fd_shape *shape, fd_error *err)
{
    fd_status st = parse_head(data, size, h, err);
    if (st == FD_OK && h->has_exif && opt->exif)
        st = fd_fail(err, FD_ERR_UNSUPPORTED, "PNG with an eXIf chunk and exif=True: "
                     "Pillow applies its orientation");
    if (st == FD_OK)
        st = fd_check_pixels(h->height, h->width, opt->max_pixels, err);
    if (st != FD_OK)
        return st;
    fd_options full = *opt; /* no scaling: the geometry of the crop alone */
    full.scale_num = 8;
    full.min_height = full.min_width = 0;
    st = fd_plan_geometry(h->height, h->width, &full, geo, err);
    if (st == FD_OK)
        st = fd_check_work(((uint64_t)h->width * h->height + 63u) / 64u, size,
                           opt->max_work_per_byte, "PNG", err);
    return st == FD_OK ? fd_geometry_shape(geo, opt, shape, err) : st;
}

fd_status fd_png_plan(const uint8_t *data, size_t size, const fd_options *opt, fd_shape *shape,
                      fd_error *err)
{
    png_head h;
    fd_geometry geo;
    return plan(data, size, opt, &h, &geo, shape, err);
}

/* --- libspng ------------------------------------------------------------- */

/* `during_rows`: the error came while IDAT was read, where Pillow checks no
 * CRC; `overrun`: the first IDAT's length runs past the end of the data (a
 * truncated file, as Pillow names it; Pillow decodes such a file when its
 * zlib stream ends before the data does: the one file where we refuse what
 * it decodes, docs/decisions/png-webp.md). */
static fd_status spng_status(int ret, int during_rows, int overrun, fd_error *err)
{
    const char *why = spng_strerror(ret);
    if (during_rows && (ret == SPNG_IO_EOF || (overrun && ret == SPNG_EIDAT_TOO_SHORT)))
        return fd_fail(err, FD_ERR_DECODE, "image file is truncated (PNG IDAT chunk runs past "
                       "the end of the data)");
    switch (ret) {
    case SPNG_EMEM:
        return fd_fail(err, FD_ERR_NOMEM, "PNG: %s", why);
    case SPNG_ECHUNK_CRC:
        if (during_rows)
            return fd_fail(err, FD_ERR_UNSUPPORTED, "PNG IDAT CRC mismatch (Pillow does not "
                           "check IDAT CRCs and decodes it)");
        return fd_fail(err, FD_ERR_DECODE, "PNG chunk CRC mismatch");
    case SPNG_EUSER_WIDTH:
    case SPNG_EUSER_HEIGHT:
    case SPNG_ECHUNK_LIMITS:
        return fd_fail(err, FD_ERR_TOO_LARGE, "PNG: %s", why);
    default:
        return fd_fail(err, FD_ERR_DECODE, "broken PNG file: %s", why);
    }
}

typedef struct {
    const png_head *h;
    uint8_t pal[256][3];
    unsigned n_pal;
    int gray_out; /* mode L */
} png_conv;

static inline unsigned packed_sample(const uint8_t *raw, uint64_t i, int depth)
{
    uint64_t bit = i * (uint64_t)depth;
    unsigned shift = 8u - (unsigned)depth - (unsigned)(bit & 7u);
    return (raw[bit >> 3] >> shift) & ((1u << depth) - 1u);
}

/* Pixels [x0, x0 + n) of a raw row as n RGB (or L) pixels; 0 when a
 * palette index is past the palette. */
static int convert_row(const png_conv *c, const uint8_t *raw, uint32_t x0, uint32_t n,
                       uint8_t *o)
{
    const int depth = c->h->depth;
    const int ch = c->gray_out ? 1 : 3;
    uint32_t x;
    switch (c->h->color_type) {
    case CT_GRAY:
    case CT_GRAY_ALPHA: {
        const unsigned step = c->h->color_type == CT_GRAY_ALPHA ? 2u : 1u;
        const unsigned scale = depth == 1 ? 255u : depth == 2 ? 85u : depth == 4 ? 17u : 1u;
        for (x = 0; x < n; x++) {
            const uint64_t i = (uint64_t)(x0 + x) * step;
            unsigned v;
            if (depth < 8)
                v = packed_sample(raw, i, depth) * scale;
            else if (depth == 8)
                v = raw[i];
            else if (c->h->color_type == CT_GRAY) /* Pillow's I;16 clips */
                v = raw[2 * i] ? 255u : raw[2 * i + 1];
            else
                v = raw[2 * i]; /* LA;16B: the high byte */
            for (int k = 0; k < ch; k++)
                o[(size_t)x * ch + k] = (uint8_t)v;
        }
        return 1;
    }
    case CT_PALETTE:
        for (x = 0; x < n; x++) {
            const unsigned v = depth == 8 ? raw[x0 + x] : packed_sample(raw, x0 + x, depth);
            if (v >= c->n_pal)
                return 0;
            if (ch == 1)
                o[x] = fd_luma(c->pal[v][0], c->pal[v][1], c->pal[v][2]);
            else
                memcpy(o + (size_t)x * 3, c->pal[v], 3);
        }
        return 1;
    default: { /* RGB, RGBA: 8 or 16 bits */
        const size_t bpp = (size_t)(c->h->color_type == CT_RGB ? 3 : 4) * (size_t)(depth / 8);
        const size_t hi = depth == 16 ? 2 : 1;
        const uint8_t *s = raw + (size_t)x0 * bpp;
        for (x = 0; x < n; x++, s += bpp) {
            const uint8_t r = s[0], g = s[hi], b = s[2 * hi];
            if (ch == 1) {
                o[x] = fd_luma(r, g, b);
            } else {
                o[3 * (size_t)x] = r;
                o[3 * (size_t)x + 1] = g;
                o[3 * (size_t)x + 2] = b;
            }
        }
        return 1;
    }
    }
}

/* Writes output row `y` of the crop from the raw row `raw`. */
static fd_status put_row(const png_conv *c, const fd_dest *dest, const fd_rect *crop, uint32_t y,
                         const uint8_t *raw, uint8_t *row, fd_error *err)
{
    if (!convert_row(c, raw, (uint32_t)crop->left, (uint32_t)crop->width, row))
        return fd_fail(err, FD_ERR_UNSUPPORTED, "PNG palette index past its %u entries "
                       "(Pillow's decoder reads it)", c->n_pal);
    fd_put_row(dest, y, row);
    return FD_OK;
}

typedef struct {
    spng_ctx *ctx;
    int ret;
} png_run;

#ifdef FD_HAVE_LIBDEFLATE
#include <libdeflate.h>

/* fd_scratch: the IDAT chunks joined, when there are several; a row of zeros.
 * (Slot 3 is the pipeline's, holding the output while this decodes into it.) */
enum { SLOT_IDAT = 2 };
#define NOT_HERE ((fd_status)-1) /* deflate_rows: libspng's row-by-row path decodes it */

/* The Paeth predictor, without branches: a when pa <= pb and pa <= pc, else
 * b when pb <= pc, else c (p = a + b - c; pa = |p - a| ...). */
static inline uint8_t paeth(int a, int b, int c)
{
    const int pa = abs(b - c), pb = abs(a - c), pc = abs(a + b - 2 * c);
    const int r = pb < pa ? b : a, m = pb < pa ? pb : pa;
    return (uint8_t)(pc < m ? c : r);
}

/* Undoes one row's filter in place, `bpp` bytes a pixel (a constant where it
 * is inlined, so each case unrolls); `prev` is the row above, unfiltered, or
 * a row of zeros for the first one. */
static inline int unfilter_bpp(uint8_t *row, const uint8_t *prev, size_t len, const size_t bpp)
{
    size_t i;
    switch (row[-1]) {
    case 0:
        return 1;
    case 1:
        for (i = bpp; i < len; i++)
            row[i] = (uint8_t)(row[i] + row[i - bpp]);
        return 1;
    case 2:
        for (i = 0; i < len; i++)
            row[i] = (uint8_t)(row[i] + prev[i]);
        return 1;
    case 3:
        for (i = 0; i < bpp && i < len; i++)
            row[i] = (uint8_t)(row[i] + (prev[i] >> 1));
        for (; i < len; i++)
            row[i] = (uint8_t)(row[i] + ((row[i - bpp] + prev[i]) >> 1));
        return 1;
    case 4:
        for (i = 0; i < bpp && i < len; i++)
            row[i] = (uint8_t)(row[i] + prev[i]); /* paeth(0, b, 0) = b */
        for (; i < len; i++)
            row[i] = (uint8_t)(row[i] + paeth(row[i - bpp], prev[i], prev[i - bpp]));
        return 1;
    default:
        return 0;
    }
}

static int unfilter(uint8_t *row, const uint8_t *prev, size_t len, size_t bpp)
{
    switch (bpp) {
    case 1: return unfilter_bpp(row, prev, len, 1);
    case 2: return unfilter_bpp(row, prev, len, 2);
    case 3: return unfilter_bpp(row, prev, len, 3);
    case 4: return unfilter_bpp(row, prev, len, 4);
    case 6: return unfilter_bpp(row, prev, len, 6);
    default: return unfilter_bpp(row, prev, len, 8);
    }
}

/* The non-interlaced rows through libdeflate (one call for the whole zlib
 * stream, about twice zlib's speed) and our own unfiltering: the IDAT
 * chunks that follow one another (their CRCs unchecked, as Pillow has them;
 * the last one's length clipped at the end of the data) inflated into
 * scratch, then the crop's rows unfiltered and converted. A stream longer
 * or shorter than the image, or a corrupt one, is NOT_HERE. */
static fd_status deflate_rows(const uint8_t *data, size_t size, const png_conv *conv,
                              const fd_dest *dest, const fd_rect *crop, size_t raw_len,
                              fd_error *err)
{
    const png_head *h = conv->h;
    size_t p = 33, first = 0, total = 0, count = 0, stride, image_len;
    while (size - p >= 8) { /* parse_head has checked every length before IDAT */
        const uint32_t len = be32(data + p);
        const int idat = memcmp(data + p + 4, "IDAT", 4) == 0;
        if (!idat && count)
            break;
        if (idat) {
            if (!count)
                first = p;
            size_t n = size - p - 8 < len ? size - p - 8 : len;
            total += n;
            count++;
            if (n < len)
                break;
        }
        if (len > 0x7FFFFFFFu || (size_t)len + 12u > size - p)
            break;
        p += (size_t)len + 12u;
    }
    if (!count)
        return fd_fail(err, FD_ERR_DECODE, "broken PNG file: no IDAT chunk");
    const uint8_t *stream = data + first + 8;
    if (count > 1) { /* join them */
        uint8_t *joined = fd_scratch(SLOT_IDAT, total);
        if (!joined)
            return fd_fail(err, FD_ERR_NOMEM, "out of memory for a PNG's IDAT data");
        size_t q = first, at = 0;
        for (size_t k = 0; k < count; k++) {
            const uint32_t len = be32(data + q);
            const size_t n = size - q - 8 < len ? size - q - 8 : len;
            memcpy(joined + at, data + q + 8, n);
            at += n;
            q += (size_t)len + 12u;
        }
        stream = joined;
    }
    if (!fd_mul_size(raw_len + 1u, h->height, &image_len))
        return fd_fail(err, FD_ERR_TOO_LARGE, "PNG image size overflows");
    stride = raw_len + 1u;
    uint8_t *image = fd_scratch(SLOT_RAW, image_len);
    const size_t row_len = (size_t)crop->width * 3u;
    uint8_t *row = fd_scratch(SLOT_ROW, row_len > raw_len ? row_len : raw_len);
    struct libdeflate_decompressor *z = libdeflate_alloc_decompressor();
    if (!image || !row || !z) {
        libdeflate_free_decompressor(z);
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %ux%u PNG", h->width, h->height);
    }
    enum libdeflate_result res = libdeflate_zlib_decompress(z, stream, total, image, image_len,
                                                            NULL);
    libdeflate_free_decompressor(z);
    /* A stream longer than the image, cut short or corrupt: libspng inflates
     * rows only down to the crop's last one (a file cut below the crop
     * decodes), and names the error. */
    if (res != LIBDEFLATE_SUCCESS)
        return NOT_HERE;
    const size_t bpp = ((size_t)h->depth * samples_of(h->color_type) + 7u) / 8u;
    const uint32_t top = (uint32_t)crop->top, bottom = top + (uint32_t)crop->height;
    const int plain = h->color_type == CT_RGB && h->depth == 8 && !conv->gray_out;
    /* the row above the first: zeros, in `row` (unused until row 0 is unfiltered) */
    uint8_t *zeros = row;
    memset(zeros, 0, raw_len);
    for (uint32_t y = 0; y < bottom; y++) {
        uint8_t *cur = image + (size_t)y * stride + 1u;
        if (!unfilter(cur, y ? cur - stride : zeros, raw_len, bpp))
            return fd_fail(err, FD_ERR_DECODE, "broken PNG file: row %u has filter type %u",
                           y, cur[-1]);
        if (y < top)
            continue;
        if (plain) {
            fd_put_row(dest, y - top, cur + (size_t)crop->left * 3u);
            continue;
        }
        fd_status st = put_row(conv, dest, crop, y - top, cur, row, err);
        if (st != FD_OK)
            return st;
    }
    return FD_OK;
}
#endif

static fd_status run_rows(png_run *r, const png_conv *conv, const fd_dest *dest,
                          const fd_rect *crop, size_t raw_len, fd_error *err)
{
    const png_head *h = conv->h;
    const uint32_t top = (uint32_t)crop->top, bottom = top + (uint32_t)crop->height;
    /* RGB 8-bit, whole rows, unflipped HWC RGB: libspng writes the output rows. */
    const int direct = h->color_type == CT_RGB && h->depth == 8 && !conv->gray_out &&
                       crop->left == 0 && crop->width == (int64_t)h->width &&
                       fd_direct_row(dest, 0) != NULL;
    uint8_t *raw = fd_scratch(SLOT_RAW, h->interlaced ? 1 : raw_len);
    uint8_t *row = fd_scratch(SLOT_ROW, (size_t)crop->width * 3u);
    if (!raw || !row)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a PNG row");

    if (h->interlaced) { /* the whole image: Adam7's last pass holds every odd row */
        size_t image_len;
        r->ret = spng_decoded_image_size(r->ctx, SPNG_FMT_RAW, &image_len);
        if (r->ret)
            return spng_status(r->ret, 0, 0, err);
        uint8_t *image = fd_scratch(SLOT_RAW, image_len);
        if (!image)
            return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %ux%u interlaced PNG",
                           h->width, h->height);
        /* libspng ORs the samples of a depth below 8 into place: start from zeros */
        memset(image, 0, image_len);
        r->ret = spng_decode_image(r->ctx, image, image_len, SPNG_FMT_RAW, 0);
        if (r->ret)
            return spng_status(r->ret, 1, h->idat_overruns, err);
        for (uint32_t y = top; y < bottom; y++) {
            fd_status st = put_row(conv, dest, crop, y - top, image + (size_t)y * raw_len, row,
                                   err);
            if (st != FD_OK)
                return st;
        }
        return FD_OK;
    }

    r->ret = spng_decode_image(r->ctx, NULL, 0, SPNG_FMT_RAW, SPNG_DECODE_PROGRESSIVE);
    if (r->ret)
        return spng_status(r->ret, 1, h->idat_overruns, err);
    for (uint32_t y = 0; y < bottom; y++) {
        uint8_t *target = direct && y >= top ? fd_direct_row(dest, y - top) : raw;
        r->ret = spng_decode_row(r->ctx, target, raw_len);
        if (r->ret != 0 && !(r->ret == SPNG_EOI && y + 1 == h->height))
            return spng_status(r->ret == SPNG_EOI ? SPNG_EIDAT_TOO_SHORT : r->ret, 1,
                               h->idat_overruns, err);
        if (y < top || direct)
            continue;
        fd_status st = put_row(conv, dest, crop, y - top, raw, row, err);
        if (st != FD_OK)
            return st;
    }
    return FD_OK;
}

fd_status fd_png_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                        size_t out_size, fd_error *err)
{
    png_head h;
    fd_geometry geo;
    fd_shape shape;
    fd_status st = plan(data, size, opt, &h, &geo, &shape, err);
    if (st != FD_OK)
        return st;
    if (out_size != shape.nbytes)
        return fd_fail(err, FD_ERR_ARGUMENT, "output buffer has %zu bytes, expected %zu",
                       out_size, shape.nbytes);
    size_t bits, raw_len;
    if (!fd_mul_size(h.width, (size_t)h.depth * samples_of(h.color_type), &bits))
        return fd_fail(err, FD_ERR_TOO_LARGE, "PNG row size overflows");
    raw_len = (bits + 7u) / 8u;

    png_conv conv;
    conv.h = &h;
    conv.n_pal = 0;
    conv.gray_out = opt->mode == FD_MODE_L;
    png_run r = {spng_ctx_new(0), 0};
    if (!r.ctx)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a PNG decoder");
    /* Pillow checks the CRC of every chunk before the pixels, ancillary too. */
    spng_set_crc_action(r.ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
    spng_set_chunk_limits(r.ctx, PNG_CHUNK_LIMIT, PNG_CACHE_LIMIT);
    r.ret = spng_set_png_buffer(r.ctx, data, size);
    if (r.ret) {
        st = spng_status(r.ret, 0, 0, err);
        goto done;
    }
    /* Reads every chunk before the first IDAT (their CRCs: Pillow's errors). */
    struct spng_plte plte;
    r.ret = spng_get_plte(r.ctx, &plte);
    if (r.ret && !(r.ret == SPNG_ECHUNKAVAIL && h.color_type != CT_PALETTE)) {
        st = spng_status(r.ret, 0, 0, err);
        goto done;
    }
    if (h.color_type == CT_PALETTE) {
        conv.n_pal = plte.n_entries > 256 ? 256 : plte.n_entries;
        for (unsigned i = 0; i < conv.n_pal; i++) {
            conv.pal[i][0] = plte.entries[i].red;
            conv.pal[i][1] = plte.entries[i].green;
            conv.pal[i][2] = plte.entries[i].blue;
        }
    }
    fd_dest dest = {out, shape.height, shape.width, shape.channels, opt->layout, opt->flip};
#ifdef FD_HAVE_LIBDEFLATE
    if (!h.interlaced) {
        st = deflate_rows(data, size, &conv, &dest, &geo.region, raw_len, err);
        if (st != NOT_HERE)
            goto done;
    }
#endif
    st = run_rows(&r, &conv, &dest, &geo.region, raw_len, err);
done:
    spng_ctx_free(r.ctx);
    return st;
}

static int sniff(const uint8_t *data, size_t size)
{
    return size >= 8 && memcmp(data, SIGNATURE, 8) == 0;
}

const char *fd_png_library_version(void)
{
    return spng_version_string();
}

const fd_codec fd_png_codec = {sniff, fd_png_read_header, fd_png_plan, fd_png_decode};

#else /* !FD_HAVE_SPNG: PNG is not a native format (fd_formats.h has no row) */

const char *fd_png_library_version(void)
{
    return "";
}

#endif
