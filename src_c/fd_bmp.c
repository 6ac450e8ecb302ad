/* Raw BMP reader.
 *
 * Reads every header of the BMP Suite (OS/2 1.x 12-byte, OS/2 2.x 16- and
 * 64-byte, Windows 40/52/56/108/124-byte) and every pixel layout: 1/2/4/8 bpp
 * palettes, 16/24/32 bpp with default or BI_BITFIELDS / BI_ALPHABITFIELDS
 * masks, 64 bpp (linear s2.13), RLE4, RLE8, OS/2 RLE24, and BI_JPEG (the
 * embedded stream goes to the JPEG decoder).
 *
 * Pillow parity: wherever Pillow decodes a file we produce its pixels,
 * including its quirks (see "Pillow quirks" below); where it refuses, we
 * follow the format, or fail with a clear message.
 *
 * Safety: the header is parsed completely before any pixel is touched; all
 * size arithmetic is 64-bit and checked; width*height is compared to
 * max_pixels right after the dimensions are read; the only allocations are
 * row buffers bounded by the image width. Truncated data fails with
 * FD_ERR_DECODE (like Pillow without LOAD_TRUNCATED_IMAGES). No global
 * mutable state, nothing printed.
 *
 * Pillow quirks reproduced (Pillow 13, BmpImagePlugin):
 *  - bfOffBits == 14 + header size on a paletted file is taken to ignore the
 *    palette, and the palette size is added; bfOffBits == 0 means "right
 *    after the headers (and palette)".
 *  - palette indices beyond the palette read as black, except that a
 *    palette that is exactly the grey ramp 0,1,2,... (8-bit or RLE) reads
 *    every index i as grey i, and a palette {black} or {black, white}
 *    (1-bit or RLE) reads every nonzero index as white (Pillow turns those
 *    into L and 1 images).
 *  - RLE4/RLE8 are read whatever the bit count (1..8) says; a 64-byte
 *    header with compression 3 and 16/24/32 bpp holds bit masks.
 *  - an alpha mask that is not a valid, separate field is ignored.
 *  - 5-5-5 / 5-6-5 16-bit samples are widened with floor(v * 255 / max) as
 *    Pillow's unpackers do; every other mask layout (which Pillow refuses)
 *    rounds to nearest, as the BMP Suite's reference renderings do.
 *  - RLE: Pillow's exact run semantics (encoded runs clipped at the row end
 *    as Pillow tracks it, absolute runs that run on into the next row, delta
 *    as a linear skip, padding by absolute file offset, undefined pixels =
 *    index 0). A stream that ends with end-of-bitmap before the last pixel
 *    (Pillow: "not enough image data") has the rest filled with index 0.
 */
#include "fd_bmp.h"

#include "fd_bmp_rows.h"
#include "fd_jpeg.h"

#include <stdlib.h>
#include <string.h>

enum {
    BI_RGB = 0,
    BI_RLE8 = 1,
    BI_RLE4 = 2,
    BI_BITFIELDS = 3, /* OS/2 2.x: Huffman 1D */
    BI_JPEG = 4,      /* OS/2 2.x: RLE24 */
    BI_PNG = 5,
    BI_ALPHABITFIELDS = 6,
    BI_CMYK = 11,
    BI_CMYKRLE4 = 13
};

typedef enum {
    K_PALETTE, /* 1, 2, 4, 8 bpp uncompressed */
    K_MASKS,   /* 16, 24, 32 bpp, any contiguous masks */
    K_BGR24,   /* 24 bpp B,G,R */
    K_BGRX32,  /* 32 bpp B,G,R,X (also BITFIELDS with those masks) */
    K_RGBA64,  /* 64 bpp B,G,R,A, signed s2.13 linear light */
    K_RLE8,
    K_RLE4,
    K_RLE24, /* OS/2 2.x */
    K_JPEG
} bmp_kind;

typedef struct {
    uint32_t width, height;
    int topdown;
    unsigned bpp;
    uint32_t header_size;
    uint32_t compression;
    bmp_kind kind;
    uint64_t offset;      /* pixel data, from the start of the file */
    uint64_t stride;      /* uncompressed kinds: bytes per stored row */
    uint64_t row_bytes;   /* bytes a row's pixels need (no padding) */
    uint32_t colors;      /* palette entries declared (0 replaced by 2^bpp) */
    uint32_t pal_entry;   /* 3 (OS/2 1.x) or 4 bytes */
    uint64_t pal_offset;
    uint32_t mask[4];     /* R, G, B, A for K_MASKS */
    uint32_t data_size;   /* biSizeImage (only BI_JPEG uses it) */
} bmp_header;

static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return rd16(p) | (rd16(p + 2) << 16);
}

static int64_t as_int32(uint32_t v)
{
    return v >= 0x80000000u ? (int64_t)v - 0x100000000LL : (int64_t)v;
}

static int is_paletted(bmp_kind k)
{
    return k == K_PALETTE || k == K_RLE8 || k == K_RLE4;
}

static int is_rle(bmp_kind k)
{
    return k == K_RLE8 || k == K_RLE4 || k == K_RLE24;
}

static const char *const channel_name[4] = {"red", "green", "blue", "alpha"};

/* 0 when mask `v` is one run of set bits within `bpp` bits. */
static int mask_problem(uint32_t v, unsigned bpp)
{
    if (v == 0)
        return 0;
    if (bpp < 32 && (v >> bpp) != 0)
        return 1; /* does not fit */
    const uint32_t low = v & (~v + 1u);
    const uint32_t run = v / low; /* mask shifted down: must be 2^k - 1 */
    return (run & (run + 1u)) != 0 ? 2 : 0;
}

/* The colour masks must be nonzero, contiguous, within the pixel and
 * disjoint. An alpha mask that is not (Pillow ignores it on 16-bit files,
 * and alpha is dropped anyway) is treated as absent. */
static fd_status check_masks(uint32_t *m, unsigned bpp, fd_error *err)
{
    if (m[3] && (mask_problem(m[3], bpp) || (m[3] & (m[0] | m[1] | m[2]))))
        m[3] = 0;
    for (int c = 0; c < 3; c++) {
        const uint32_t v = m[c];
        if (v == 0)
            return fd_fail(err, FD_ERR_DECODE,
                           "invalid BMP bit masks: the %s mask is zero (R=0x%08x G=0x%08x "
                           "B=0x%08x)",
                           channel_name[c], m[0], m[1], m[2]);
        const int problem = mask_problem(v, bpp);
        if (problem == 1)
            return fd_fail(err, FD_ERR_DECODE,
                           "invalid BMP bit masks: the %s mask 0x%08x does not fit in %u bits "
                           "per pixel",
                           channel_name[c], v, bpp);
        if (problem == 2)
            return fd_fail(err, FD_ERR_DECODE,
                           "invalid BMP bit masks: the %s mask 0x%08x is not contiguous",
                           channel_name[c], v);
    }
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (m[a] & m[b])
                return fd_fail(err, FD_ERR_DECODE,
                               "invalid BMP bit masks: %s 0x%08x and %s 0x%08x overlap",
                               channel_name[a], m[a], channel_name[b], m[b]);
    return FD_OK;
}

static int is_os2(uint32_t header_size)
{
    return header_size == 12 || header_size == 16 || header_size == 64;
}

/* The file header and the info header's fields: size, bit depth,
 * compression, palette entries; then the dimensions against max_pixels. */
/* The file header's "BM" (the other OS/2 types are not read). */
static int sniff(const uint8_t *data, size_t size)
{
    return size >= 2 && data[0] == 'B' && data[1] == 'M';
}

static fd_status read_info_header(const uint8_t *data, size_t size, uint64_t max_pixels,
                                  bmp_header *h, fd_error *err)
{
    if (!sniff(data, size))
        return fd_fail(err, FD_ERR_UNSUPPORTED, "not a BMP file (no 'BM' signature)");
    if (size < 18)
        return fd_fail(err, FD_ERR_DECODE,
                       "truncated BMP: %zu bytes, less than the 18-byte file header and "
                       "header size",
                       size);
    const uint32_t hs = rd32(data + 14);
    if (hs != 12 && hs != 16 && hs != 40 && hs != 52 && hs != 56 && hs != 64 && hs != 108 &&
        hs != 124)
        return fd_fail(err, FD_ERR_DECODE,
                       "unsupported BMP info header size %u (known: 12, 16, 40, 52, 56, 64, "
                       "108, 124)",
                       hs);
    if (size < 14u + (size_t)hs)
        return fd_fail(err, FD_ERR_DECODE,
                       "truncated BMP: the %u-byte info header needs %u bytes, the file has %zu",
                       hs, 14u + hs, size);
    const uint8_t *ih = data + 14;
    h->header_size = hs;
    int64_t w, ht;
    if (hs == 12) { /* BITMAPCOREHEADER: unsigned 16-bit sizes, no compression */
        w = rd16(ih + 4);
        ht = rd16(ih + 6);
        h->bpp = rd16(ih + 10);
        h->pal_entry = 3;
    } else {
        w = as_int32(rd32(ih + 4));
        ht = as_int32(rd32(ih + 8));
        h->bpp = rd16(ih + 14);
        h->compression = hs >= 20 ? rd32(ih + 16) : BI_RGB;
        h->data_size = hs >= 24 ? rd32(ih + 20) : 0;
        h->colors = hs >= 36 ? rd32(ih + 32) : 0;
        h->pal_entry = 4;
    }
    if (w <= 0)
        return fd_fail(err, FD_ERR_DECODE, "invalid BMP width %lld", (long long)w);
    if (ht == 0 || ht == INT32_MIN)
        return fd_fail(err, FD_ERR_DECODE, "invalid BMP height %lld", (long long)ht);
    h->topdown = ht < 0;
    h->width = (uint32_t)w;
    h->height = (uint32_t)(ht < 0 ? -ht : ht);
    return fd_check_pixels(h->height, h->width, max_pixels, err);
}

/* BI_RGB: the bit depth alone says how pixels are stored. */
static fd_status classify_rgb(bmp_header *h, fd_error *err)
{
    switch (h->bpp) {
    case 1: case 2: case 4: case 8: h->kind = K_PALETTE; break;
    case 16:
        h->kind = K_MASKS;
        h->mask[0] = 0x7C00;
        h->mask[1] = 0x03E0;
        h->mask[2] = 0x001F;
        break;
    case 24: h->kind = K_BGR24; break;
    case 32: h->kind = K_BGRX32; break;
    case 64: h->kind = K_RGBA64; break;
    default:
        return fd_fail(err, FD_ERR_DECODE, "unsupported BMP bit depth %u", h->bpp);
    }
    return FD_OK;
}

/* BI_BITFIELDS / BI_ALPHABITFIELDS: the masks (after a 40-byte header, else
 * inside it), validated; the two plain layouts get their fast kinds.
 * *masks_in_file: bytes of masks that follow a 40-byte header. */
static fd_status classify_masks(bmp_header *h, const uint8_t *data, size_t size,
                                uint32_t *masks_in_file, fd_error *err)
{
    const unsigned bpp = h->bpp;
    const uint32_t hs = h->header_size;
    if (bpp != 16 && bpp != 24 && bpp != 32)
        return fd_fail(err, FD_ERR_DECODE,
                       "BMP bit masks need 16, 24 or 32 bits per pixel, the header says %u", bpp);
    const int n = h->compression == BI_ALPHABITFIELDS ? 4 : 3;
    if (hs == 40) {
        if (size < 54u + 4u * (size_t)n)
            return fd_fail(err, FD_ERR_DECODE,
                           "truncated BMP: the bit masks after the header are cut off");
        for (int c = 0; c < n; c++)
            h->mask[c] = rd32(data + 54 + 4 * c);
        *masks_in_file = 4u * (uint32_t)n;
    } else {
        const uint8_t *ih = data + 14;
        for (int c = 0; c < 3; c++)
            h->mask[c] = rd32(ih + 40 + 4 * c);
        h->mask[3] = hs >= 56 ? rd32(ih + 52) : 0;
    }
    fd_status st = check_masks(h->mask, bpp, err);
    if (st != FD_OK)
        return st;
    if (bpp == 32 && h->mask[0] == 0xFF0000 && h->mask[1] == 0xFF00 && h->mask[2] == 0xFF)
        h->kind = K_BGRX32;
    else if (bpp == 24 && h->mask[0] == 0xFF0000 && h->mask[1] == 0xFF00 && h->mask[2] == 0xFF &&
             h->mask[3] == 0)
        h->kind = K_BGR24;
    else
        h->kind = K_MASKS;
    return FD_OK;
}

/* Compression and bit depth -> how the pixels are stored (h->kind). */
static fd_status classify(bmp_header *h, const uint8_t *data, size_t size,
                          uint32_t *masks_in_file, fd_error *err)
{
    const unsigned bpp = h->bpp;
    const uint32_t comp = h->compression;
    const int os2 = is_os2(h->header_size);
    if (os2 && comp == BI_BITFIELDS && bpp == 1)
        return fd_fail(err, FD_ERR_UNSUPPORTED,
                       "OS/2 BMP with Huffman 1D (fax) compression is not supported");
    if (comp == BI_RGB)
        return classify_rgb(h, err);
    if (comp == BI_RLE8 || comp == BI_RLE4) {
        /* Like Pillow: the compression picks the RLE flavour; the bit count
         * only sizes the default palette. */
        if (bpp != 1 && bpp != 2 && bpp != 4 && bpp != 8)
            return fd_fail(err, FD_ERR_DECODE,
                           "BMP RLE%u compression needs a palette (at most 8 bits per pixel), "
                           "the header says %u",
                           comp == BI_RLE8 ? 8u : 4u, bpp);
        h->kind = comp == BI_RLE8 ? K_RLE8 : K_RLE4;
        return FD_OK;
    }
    if (os2 && comp == 4) {
        if (bpp != 24)
            return fd_fail(err, FD_ERR_DECODE,
                           "OS/2 BMP RLE24 compression needs 24 bits per pixel, the header "
                           "says %u",
                           bpp);
        h->kind = K_RLE24;
        return FD_OK;
    }
    /* (A 64-byte header with masks is read as Pillow reads it.) */
    if ((comp == BI_BITFIELDS && (!os2 || h->header_size == 64)) ||
        (!os2 && comp == BI_ALPHABITFIELDS))
        return classify_masks(h, data, size, masks_in_file, err);
    if (!os2 && comp == BI_JPEG) {
        h->kind = K_JPEG;
        return FD_OK;
    }
    if (!os2 && comp == BI_PNG)
        return fd_fail(err, FD_ERR_UNSUPPORTED,
                       "BMP with an embedded PNG stream (BI_PNG) is not supported");
    if (!os2 && comp >= BI_CMYK && comp <= BI_CMYKRLE4)
        return fd_fail(err, FD_ERR_UNSUPPORTED, "CMYK BMP (compression %u) is not supported",
                       comp);
    return fd_fail(err, FD_ERR_DECODE, "unknown BMP compression %u", comp);
}

/* Palette size and place, where the pixels start (Pillow's reading of
 * bfOffBits) and, for uncompressed kinds, the row stride. */
static fd_status locate_pixels(bmp_header *h, const uint8_t *data, uint32_t masks_in_file,
                               fd_error *err)
{
    const uint64_t hs = h->header_size;
    /* Palette: as many entries as declared (0 or an OS/2 1.x header: 2^bpp). */
    uint64_t pal_bytes = 0;
    if (is_paletted(h->kind)) {
        if (h->colors == 0)
            h->colors = 1u << h->bpp;
        if (h->colors > 65536)
            return fd_fail(err, FD_ERR_DECODE,
                           "invalid BMP palette size %u (at most 65536 entries)", h->colors);
        h->pal_offset = 14u + hs;
        pal_bytes = (uint64_t)h->pal_entry * h->colors;
    }
    const uint64_t off = rd32(data + 10);
    if (off == 0)
        h->offset = 14u + hs + masks_in_file + pal_bytes;
    else if (is_paletted(h->kind) && off == 14u + hs)
        h->offset = off + pal_bytes;
    else
        h->offset = off;
    if (!is_rle(h->kind) && h->kind != K_JPEG) {
        const uint64_t bits = (uint64_t)h->width * h->bpp; /* < 2^37 */
        h->stride = ((bits + 31u) >> 5) << 2;
        h->row_bytes = (bits + 7u) >> 3;
    }
    return FD_OK;
}

/* Parses and validates everything but the pixel data. max_pixels == 0: no
 * limit (read_header). */
static fd_status parse_header(const uint8_t *data, size_t size, uint64_t max_pixels,
                              bmp_header *h, fd_error *err)
{
    memset(h, 0, sizeof(*h));
    fd_status st = read_info_header(data, size, max_pixels, h, err);
    uint32_t masks_in_file = 0;
    if (st == FD_OK)
        st = classify(h, data, size, &masks_in_file, err);
    if (st != FD_OK)
        return st;
    const uint32_t comp = h->compression;
    if (h->topdown && comp != BI_RGB && comp != BI_BITFIELDS && comp != BI_ALPHABITFIELDS)
        return fd_fail(err, FD_ERR_DECODE,
                       "invalid BMP: a top-down bitmap (negative height) cannot be compressed "
                       "(compression %u)",
                       comp);
    return locate_pixels(h, data, masks_in_file, err);
}

/* Uncompressed pixel data must hold every row; the last one without its
 * padding, like Pillow's raw decoder. */
static fd_status check_data(const bmp_header *h, size_t size, fd_error *err)
{
    if (is_rle(h->kind) || h->kind == K_JPEG)
        return FD_OK;
    const uint64_t avail = h->offset <= size ? (uint64_t)size - h->offset : 0;
    const uint64_t rows_before_last = (uint64_t)h->height - 1u;
    int ok = h->offset <= size && rows_before_last <= avail / h->stride;
    if (ok)
        ok = rows_before_last * h->stride + h->row_bytes <= avail;
    if (!ok) {
        const uint64_t rows = avail >= h->row_bytes ? (avail - h->row_bytes) / h->stride + 1u : 0;
        return fd_fail(err, FD_ERR_DECODE,
                       "truncated BMP: the pixel data at offset %llu holds %llu of %u rows "
                       "(file is %zu bytes)",
                       (unsigned long long)h->offset, (unsigned long long)rows, h->height, size);
    }
    return FD_OK;
}

/* ------------------------------------------------------------------------ */
/* Header info                                                               */

fd_status fd_bmp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err)
{
    bmp_header h;
    fd_status st = parse_header(data, size, 0, &h, err);
    if (st != FD_OK)
        return st;
    memset(info, 0, sizeof(*info));
    info->format = FD_FORMAT_BMP;
    info->width = h.width;
    info->height = h.height;
    info->subsampling = FD_SS_NONE;
    info->progressive = 0;
    info->orientation = 1;
    info->bits_per_pixel = (int)h.bpp;
    if (is_paletted(h.kind)) {
        info->channels = 1;
        info->color_space = FD_CS_PALETTE;
    } else {
        /* Components stored: 4 when the file has an alpha channel. */
        const int alpha =
            h.kind == K_RGBA64 ||
            ((h.compression == BI_BITFIELDS || h.compression == BI_ALPHABITFIELDS) &&
             h.mask[3] != 0);
        info->channels = alpha ? 4 : 3;
        info->color_space = FD_CS_RGB;
    }
    return FD_OK;
}

/* ------------------------------------------------------------------------ */
/* Pixel conversion                                                          */

typedef struct {
    const bmp_header *h;
    int gray;                /* output L instead of RGB */
    uint8_t pal[256 * 3];    /* RGB */
    uint8_t pal_l[256];
    /* K_MASKS */
    unsigned shift[3], nbits[3];
    uint32_t maxv[3];
    uint8_t lut[3][256];     /* fields of at most 8 bits */
    /* K_RGBA64 */
    const uint8_t *lut64;    /* 8193 entries, linear 0..8192 -> sRGB 8-bit */
} bmp_ctx;

typedef void (*row_fn)(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n,
                       uint8_t *dst);

static void build_palette(bmp_ctx *c, const uint8_t *data, size_t size)
{
    const bmp_header *h = c->h;
    const uint32_t entry = h->pal_entry;
    const uint32_t used = h->colors < 256 ? h->colors : 256;
    uint64_t avail = 0;
    if (h->pal_offset < size)
        avail = ((uint64_t)size - h->pal_offset) / entry;
    const uint32_t n = avail < used ? (uint32_t)avail : used;
    memset(c->pal, 0, sizeof(c->pal)); /* entries not in the file: black */
    const uint8_t *p = data + h->pal_offset;
    int grey_ramp = n == used; /* Pillow's grayscale test, over entries read */
    for (uint32_t i = 0; i < n; i++, p += entry) {
        c->pal[3 * i + 0] = p[2];
        c->pal[3 * i + 1] = p[1];
        c->pal[3 * i + 2] = p[0];
        const unsigned want = h->colors == 2 ? (i ? 255u : 0u) : i;
        if (p[0] != want || p[1] != want || p[2] != want)
            grey_ramp = 0;
    }
    /* Pillow opens such files as mode "1" or "L" and then reads each index
     * as a value, for 1-bit ("1") and 8-bit ("L") raw data and for all RLE
     * data. (Raw 2/4-bit data, and 8-bit data with a black/white palette,
     * Pillow misreads; there we keep the palette.) */
    const int rle = is_rle(h->kind);
    if (grey_ramp && h->colors <= 2 && (rle || h->bpp == 1)) { /* "1": nonzero = white */
        memset(c->pal + 3, 255, sizeof(c->pal) - 3);
    } else if (grey_ramp && h->colors > 2 && (rle || h->bpp == 8)) { /* "L": index = grey */
        for (unsigned i = 0; i < 256; i++)
            c->pal[3 * i] = c->pal[3 * i + 1] = c->pal[3 * i + 2] = (uint8_t)i;
    }
    for (unsigned i = 0; i < 256; i++)
        c->pal_l[i] = fd_luma(c->pal[3 * i], c->pal[3 * i + 1], c->pal[3 * i + 2]);
}

static void build_masks(bmp_ctx *c)
{
    const bmp_header *h = c->h;
    /* Pillow reads only 5-5-5 and 5-6-5 16-bit layouts, with floor(). */
    const int pillow_floor = h->bpp == 16 && h->mask[2] == 0x1F &&
                             ((h->mask[0] == 0x7C00 && h->mask[1] == 0x3E0) ||
                              (h->mask[0] == 0xF800 && h->mask[1] == 0x7E0));
    for (int k = 0; k < 3; k++) {
        const uint32_t m = h->mask[k];
        unsigned s = 0;
        while (!((m >> s) & 1u))
            s++;
        const uint32_t v = m >> s;
        unsigned n = 0;
        while (n < 32 && ((v >> n) & 1u))
            n++;
        c->shift[k] = s;
        c->nbits[k] = n;
        c->maxv[k] = v;
        if (n <= 8)
            for (uint32_t i = 0; i <= v; i++)
                c->lut[k][i] = (uint8_t)(pillow_floor ? i * 255u / v : (i * 510u + v) / (2u * v));
    }
}

static inline uint8_t scale_field(const bmp_ctx *c, int k, uint32_t px)
{
    const uint32_t v = (px >> c->shift[k]) & c->maxv[k];
    if (c->nbits[k] <= 8)
        return c->lut[k][v];
    const uint64_t m = c->maxv[k];
    return (uint8_t)(((uint64_t)v * 510u + m) / (2u * m));
}

static void row_pal8(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n, uint8_t *dst)
{
    src += x0;
    if (c->gray) {
        for (uint32_t i = 0; i < n; i++)
            dst[i] = c->pal_l[src[i]];
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = c->pal + 3 * (size_t)src[i];
        dst[3 * i + 0] = p[0];
        dst[3 * i + 1] = p[1];
        dst[3 * i + 2] = p[2];
    }
}

static void row_pal_bits(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n,
                         uint8_t *dst)
{
    const unsigned bits = c->h->bpp, mask = (1u << bits) - 1u;
    uint64_t bit = (uint64_t)x0 * bits;
    for (uint32_t i = 0; i < n; i++, bit += bits) {
        const unsigned idx = (src[bit >> 3] >> (8u - bits - (unsigned)(bit & 7u))) & mask;
        if (c->gray) {
            dst[i] = c->pal_l[idx];
        } else {
            dst[3 * i + 0] = c->pal[3 * idx + 0];
            dst[3 * i + 1] = c->pal[3 * idx + 1];
            dst[3 * i + 2] = c->pal[3 * idx + 2];
        }
    }
}

/* Pixel i of an output row from its r, g, b: one luma byte for "L", three for RGB. */
static inline void put_rgb(const bmp_ctx *c, uint8_t *dst, uint32_t i, uint8_t r, uint8_t g,
                           uint8_t b)
{
    if (c->gray) {
        dst[i] = fd_luma(r, g, b);
    } else {
        dst[3 * i + 0] = r;
        dst[3 * i + 1] = g;
        dst[3 * i + 2] = b;
    }
}

static void row_masks(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n, uint8_t *dst)
{
    const unsigned bytes = c->h->bpp / 8;
    src += (size_t)x0 * bytes;
    for (uint32_t i = 0; i < n; i++, src += bytes) {
        uint32_t px = (uint32_t)src[0] | ((uint32_t)src[1] << 8);
        if (bytes >= 3)
            px |= (uint32_t)src[2] << 16;
        if (bytes == 4)
            px |= (uint32_t)src[3] << 24;
        const uint8_t r = scale_field(c, 0, px), g = scale_field(c, 1, px),
                      b = scale_field(c, 2, px);
        put_rgb(c, dst, i, r, g, b);
    }
}

static void row_bgr24(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n, uint8_t *dst)
{
    if (c->gray)
        fd_bmp_bgr_to_l(dst, src + 3 * (size_t)x0, n);
    else
        fd_bmp_bgr_to_rgb(dst, src + 3 * (size_t)x0, n);
}

static void row_bgrx32(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n,
                       uint8_t *dst)
{
    if (c->gray)
        fd_bmp_bgrx_to_l(dst, src + 4 * (size_t)x0, n);
    else
        fd_bmp_bgrx_to_rgb(dst, src + 4 * (size_t)x0, n);
}

/* 64 bpp: B, G, R, A as signed 16-bit fixed point with 13 fraction bits, in
 * linear light (what Windows' WIC writes). Clamped to [0, 1] and encoded to
 * sRGB; alpha is dropped. */
static const uint16_t srgb_threshold[255] = {
    /* srgb_threshold[k]: the smallest linear v (of 8192) whose sRGB value,
     * round(255 * (v <= 0.0031308 ? 12.92 v : 1.055 v^(1/2.4) - 0.055)),
     * is above k. Generated with Python's math module. */
    2, 4, 7, 9, 12, 14, 17, 19, 22, 24, 27, 29,
    32, 35, 38, 41, 45, 48, 52, 56, 60, 64, 68, 73,
    78, 83, 88, 93, 98, 104, 110, 116, 122, 128, 135, 142,
    149, 156, 163, 170, 178, 186, 194, 203, 211, 220, 229, 238,
    247, 257, 267, 277, 287, 297, 308, 319, 330, 341, 353, 365,
    377, 389, 401, 414, 427, 440, 454, 467, 481, 495, 509, 524,
    539, 554, 569, 585, 600, 617, 633, 649, 666, 683, 700, 718,
    736, 754, 772, 791, 809, 828, 848, 867, 887, 907, 928, 948,
    969, 990, 1012, 1034, 1055, 1078, 1100, 1123, 1146, 1169, 1193, 1217,
    1241, 1266, 1290, 1315, 1341, 1366, 1392, 1418, 1444, 1471, 1498, 1525,
    1553, 1581, 1609, 1637, 1666, 1695, 1724, 1754, 1784, 1814, 1844, 1875,
    1906, 1938, 1969, 2001, 2034, 2066, 2099, 2132, 2166, 2199, 2233, 2268,
    2303, 2338, 2373, 2409, 2444, 2481, 2517, 2554, 2591, 2629, 2667, 2705,
    2743, 2782, 2821, 2860, 2900, 2940, 2981, 3021, 3062, 3104, 3145, 3187,
    3229, 3272, 3315, 3358, 3402, 3446, 3490, 3535, 3580, 3625, 3670, 3716,
    3763, 3809, 3856, 3903, 3951, 3999, 4047, 4096, 4145, 4194, 4244, 4294,
    4344, 4394, 4445, 4497, 4548, 4600, 4653, 4706, 4759, 4812, 4866, 4920,
    4974, 5029, 5084, 5140, 5196, 5252, 5308, 5365, 5423, 5480, 5538, 5597,
    5655, 5714, 5774, 5833, 5894, 5954, 6015, 6076, 6138, 6200, 6262, 6325,
    6388, 6451, 6515, 6579, 6643, 6708, 6773, 6839, 6905, 6971, 7038, 7105,
    7173, 7240, 7309, 7377, 7446, 7515, 7585, 7655, 7725, 7796, 7867, 7939,
    8011, 8083, 8156,
};

static void build_lut64(uint8_t *lut)
{
    unsigned k = 0;
    for (unsigned v = 0; v <= 8192; v++) {
        while (k < 255 && v >= srgb_threshold[k])
            k++;
        lut[v] = (uint8_t)k;
    }
}

static inline uint8_t linear64(const bmp_ctx *c, const uint8_t *p)
{
    uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
    if (v & 0x8000u) /* negative */
        v = 0;
    else if (v > 8192u)
        v = 8192u;
    return c->lut64[v];
}

static void row_rgba64(const bmp_ctx *c, const uint8_t *src, uint32_t x0, uint32_t n,
                       uint8_t *dst)
{
    src += 8 * (size_t)x0;
    for (uint32_t i = 0; i < n; i++, src += 8) {
        const uint8_t r = linear64(c, src + 4), g = linear64(c, src + 2), b = linear64(c, src);
        put_rgb(c, dst, i, r, g, b);
    }
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */

typedef struct {
    fd_dest dest;
    fd_rect crop;      /* in image rows/columns */
    uint8_t *rowbuf;   /* crop.width * channels, when rows cannot go direct */
    const bmp_ctx *c;
    row_fn fn;
} bmp_out;

/* Converts image row y (already known to be in the crop) from `src`. */
static void put_image_row(const bmp_out *o, uint32_t y, const uint8_t *src)
{
    const uint32_t oy = y - (uint32_t)o->crop.top;
    uint8_t *dst = fd_direct_row(&o->dest, oy);
    if (!dst)
        dst = o->rowbuf;
    o->fn(o->c, src, (uint32_t)o->crop.left, (uint32_t)o->crop.width, dst);
    if (dst == o->rowbuf)
        fd_put_row(&o->dest, oy, o->rowbuf);
}

static void decode_uncompressed(const bmp_header *h, const uint8_t *data, const bmp_out *o)
{
    const uint8_t *pix = data + h->offset;
    const uint32_t y0 = (uint32_t)o->crop.top, y1 = y0 + (uint32_t)o->crop.height;
    /* Rows in file order, the source read as one forward stream, with the
     * next row prefetched while this one converts: the rows are too short
     * (1.5 KB at 500 px) for the hardware prefetcher to get going on its
     * own, and image order would walk a bottom-up file backwards. 24-bit
     * 500x375 from memory not in cache: 0.26 -> 0.22 (file order) -> 0.14 ms. */
    for (uint32_t i = y0; i < y1; i++) {
        const uint32_t y = h->topdown ? i : y0 + y1 - 1u - i;
        const uint64_t r = h->topdown ? y : (uint64_t)h->height - 1u - y;
#if defined(__GNUC__) || defined(__clang__)
        if (i + 1 < y1) {
            const uint8_t *ahead = pix + (r + 1) * h->stride;
            for (size_t b = 0; b < h->stride; b += 64)
                __builtin_prefetch(ahead + b);
        }
#endif
        put_image_row(o, y, pix + r * h->stride);
    }
}

/* ------------------------------------------------------------------------ */
/* RLE4 / RLE8 / RLE24                                                       */

/* Pixels are produced in file order (row 0 = bottom row) into a one-row
 * buffer that is handed to the output when it fills up. */
typedef struct {
    const bmp_header *h;
    const bmp_out *o;
    uint8_t *row;       /* width * unit bytes, zero = undefined pixel */
    unsigned unit;      /* bytes per buffered pixel: 1 (index) or 3 (B,G,R) */
    uint64_t pos, total;
    uint32_t col, file_row;
    uint32_t dirty;     /* columns [0, dirty) may be nonzero */
} rle_state;

static void rle_emit(rle_state *s)
{
    const bmp_header *h = s->h;
    const uint32_t y = h->height - 1u - s->file_row; /* RLE is always bottom-up */
    const fd_rect *cr = &s->o->crop;
    if ((int64_t)y >= cr->top && (int64_t)y < cr->top + cr->height)
        put_image_row(s->o, y, s->row);
    if (s->dirty)
        memset(s->row, 0, (size_t)s->dirty * s->unit);
    s->dirty = 0;
    s->col = 0;
    s->file_row++;
}

static inline void rle_advance(rle_state *s, uint32_t k)
{
    s->col += k;
    s->pos += k;
    if (s->col == s->h->width)
        rle_emit(s);
}

/* Leaves `n` pixels undefined (index 0 / black). */
static void rle_skip(rle_state *s, uint64_t n)
{
    while (n > 0) {
        const uint32_t room = s->h->width - s->col;
        const uint32_t k = n < room ? (uint32_t)n : room;
        rle_advance(s, k);
        n -= k;
    }
}

/* `n` copies of one value; never crosses the row end (callers clip). */
static void rle_fill(rle_state *s, uint32_t n, const uint8_t *v, int rle4)
{
    uint8_t *p = s->row + (size_t)s->col * s->unit;
    if (s->unit == 3) {
        for (uint32_t i = 0; i < n; i++, p += 3) {
            p[0] = v[0];
            p[1] = v[1];
            p[2] = v[2];
        }
    } else if (rle4) { /* two nibbles, alternating from the first pixel */
        const uint8_t hi = v[0] >> 4, lo = v[0] & 15u;
        for (uint32_t i = 0; i < n; i++)
            p[i] = (i & 1u) ? lo : hi;
    } else {
        memset(p, v[0], n);
    }
    if (n && s->col + n > s->dirty)
        s->dirty = s->col + n;
    rle_advance(s, n);
}

/* One literal pixel (may start a new row): an index, or B,G,R. */
static inline void rle_put1(rle_state *s, uint8_t v)
{
    s->row[s->col] = v;
    if (s->col + 1 > s->dirty)
        s->dirty = s->col + 1;
    rle_advance(s, 1);
}

static inline void rle_put3(rle_state *s, const uint8_t *v)
{
    uint8_t *p = s->row + (size_t)s->col * 3;
    p[0] = v[0];
    p[1] = v[1];
    p[2] = v[2];
    if (s->col + 1 > s->dirty)
        s->dirty = s->col + 1;
    rle_advance(s, 1);
}

static fd_status rle_truncated(const rle_state *s, fd_error *err)
{
    return fd_fail(err, FD_ERR_DECODE,
                   "truncated BMP: the RLE data ends after %llu of %llu pixels",
                   (unsigned long long)s->pos, (unsigned long long)s->total);
}

/* An absolute run of `code` literal pixels at *p (clipped to the image);
 * advances *p past what it read. 0 when the data ends inside the run. */
static int rle_absolute(rle_state *s, const uint8_t *data, size_t size, uint64_t *p,
                        unsigned code)
{
    const int rle4 = s->h->kind == K_RLE4, rle24 = s->h->kind == K_RLE24;
    uint64_t n = code;
    if (n > s->total - s->pos)
        n = s->total - s->pos;
    const uint64_t need = rle24 ? 3u * n : rle4 ? (n + 1u) / 2u : n;
    const uint64_t have = size - *p < need ? size - *p : need;
    const uint8_t *v = data + *p;
    if (rle24) {
        for (uint64_t i = 0; i + 3u <= have; i += 3)
            rle_put3(s, v + i);
    } else if (rle4) {
        for (uint64_t i = 0; i < have; i++) {
            rle_put1(s, v[i] >> 4);
            if (2u * i + 1u < n)
                rle_put1(s, v[i] & 15u);
        }
    } else {
        for (uint64_t i = 0; i < have; i++)
            rle_put1(s, v[i]);
    }
    *p += have;
    return have == need;
}

static fd_status decode_rle(const bmp_header *h, const uint8_t *data, size_t size,
                            const bmp_out *o, fd_error *err)
{
    rle_state s;
    memset(&s, 0, sizeof(s));
    s.h = h;
    s.o = o;
    s.unit = h->kind == K_RLE24 ? 3 : 1;
    s.total = (uint64_t)h->width * h->height;
    s.row = calloc(h->width, s.unit);
    if (!s.row)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %u-pixel RLE row", h->width);
    const int rle4 = h->kind == K_RLE4, rle24 = h->kind == K_RLE24;
    const uint64_t w = h->width;
    uint64_t p = h->offset;
    uint64_t x = 0; /* Pillow's idea of the column: clips encoded runs */
    fd_status st = FD_OK;
    while (s.pos < s.total) {
        /* Two bytes (RLE24: a count and three colour bytes, or two bytes). */
        if (p >= size) {
            st = rle_truncated(&s, err);
            break;
        }
        const unsigned count = data[p];
        const unsigned vlen = (rle24 && count) ? 3 : 1;
        if (size - p < 1u + vlen) {
            st = rle_truncated(&s, err);
            break;
        }
        const uint8_t *v = data + p + 1;
        p += 1u + vlen;
        if (count) { /* encoded run */
            uint32_t n = count;
            if (x + n > w)
                n = x < w ? (uint32_t)(w - x) : 0;
            rle_fill(&s, n, v, rle4);
            x += n;
            continue;
        }
        const unsigned code = v[0];
        if (code == 0) { /* end of line */
            if (s.col)
                rle_skip(&s, w - s.col);
            x = 0;
        } else if (code == 1) { /* end of bitmap: the rest stays undefined */
            break;
        } else if (code == 2) { /* delta: right, up, as a linear skip */
            if (size - p < 2) {
                st = rle_truncated(&s, err);
                break;
            }
            uint64_t k = data[p] + (uint64_t)data[p + 1] * w;
            p += 2;
            if (k > s.total - s.pos)
                k = s.total - s.pos;
            rle_skip(&s, k);
            x = s.col;
        } else { /* absolute run of `code` pixels, padded to 16 bits */
            if (!rle_absolute(&s, data, size, &p, code)) {
                st = rle_truncated(&s, err);
                break;
            }
            if (s.pos == s.total)
                break;
            x += code;
            if (p & 1u) /* Pillow pads by the absolute file offset */
                p++;
        }
    }
    if (st == FD_OK && s.pos < s.total)
        rle_skip(&s, s.total - s.pos);
    free(s.row);
    return st;
}

/* ------------------------------------------------------------------------ */
/* BI_JPEG: the pixel data is a JPEG stream                                  */

static fd_status jpeg_stream(const bmp_header *h, const uint8_t *data, size_t size,
                             const uint8_t **jpeg, size_t *len, fd_error *err)
{
    if (h->offset >= size)
        return fd_fail(err, FD_ERR_DECODE,
                       "truncated BMP: the embedded JPEG at offset %llu is past the end of "
                       "the %zu-byte file",
                       (unsigned long long)h->offset, size);
    const uint64_t avail = (uint64_t)size - h->offset;
    if (h->data_size > avail)
        return fd_fail(err, FD_ERR_DECODE,
                       "truncated BMP: the embedded JPEG has %llu of %u bytes",
                       (unsigned long long)avail, h->data_size);
    *jpeg = data + h->offset;
    *len = h->data_size ? h->data_size : (size_t)avail;
    fd_info ji;
    fd_error jerr;
    fd_status st = fd_jpeg_read_header(*jpeg, *len, &ji, &jerr);
    if (st != FD_OK)
        return fd_fail(err, st == FD_ERR_UNSUPPORTED ? FD_ERR_DECODE : st,
                       "BMP with an embedded JPEG: %s", jerr.message);
    if (ji.width != h->width || ji.height != h->height)
        return fd_fail(err, FD_ERR_DECODE,
                       "BMP with an embedded JPEG: the JPEG is %ux%u, the BMP header says "
                       "%ux%u",
                       ji.width, ji.height, h->width, h->height);
    return FD_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */

static fd_status plan(const uint8_t *data, size_t size, const fd_options *opt, bmp_header *h,
                      fd_rect *crop, fd_shape *shape, fd_error *err)
{
    fd_status st = parse_header(data, size, opt->max_pixels, h, err);
    if (st != FD_OK)
        return st;
    fd_options full = *opt; /* no DCT scaling: the geometry of the crop alone */
    full.scale_num = 8;
    full.min_height = full.min_width = 0;
    fd_geometry geo;
    st = fd_plan_geometry(h->height, h->width, &full, &geo, err);
    if (st != FD_OK)
        return st;
    *crop = geo.region;
    if (is_rle(h->kind)) /* uncompressed data is all there (check_data): < 1 block a byte */
        st = fd_check_work(((uint64_t)h->width * h->height + 63u) / 64u, size,
                           opt->max_work_per_byte, "RLE BMP", err);
    if (st == FD_OK)
        st = check_data(h, size, err);
    if (st != FD_OK)
        return st;
    return fd_geometry_shape(&geo, opt, shape, err);
}

fd_status fd_bmp_plan(const uint8_t *data, size_t size, const fd_options *opt, fd_shape *shape,
                      fd_error *err)
{
    bmp_header h;
    fd_rect crop;
    fd_status st = plan(data, size, opt, &h, &crop, shape, err);
    if (st != FD_OK || h.kind != K_JPEG)
        return st;
    const uint8_t *jpeg;
    size_t len;
    st = jpeg_stream(&h, data, size, &jpeg, &len, err);
    if (st != FD_OK)
        return st;
    return fd_jpeg_plan(jpeg, len, opt, shape, err);
}

fd_status fd_bmp_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                        size_t out_size, fd_error *err)
{
    bmp_header h;
    fd_rect crop;
    fd_shape shape;
    fd_status st = plan(data, size, opt, &h, &crop, &shape, err);
    if (st != FD_OK)
        return st;
    if (h.kind == K_JPEG) {
        const uint8_t *jpeg;
        size_t len;
        st = jpeg_stream(&h, data, size, &jpeg, &len, err);
        if (st != FD_OK)
            return st;
        return fd_jpeg_decode(jpeg, len, opt, out, out_size, err);
    }
    if (out_size != shape.nbytes)
        return fd_fail(err, FD_ERR_ARGUMENT, "output buffer has %zu bytes, expected %zu",
                       out_size, shape.nbytes);

    bmp_ctx c;
    uint8_t lut64[8193];
    c.h = &h;
    c.gray = opt->mode == FD_MODE_L;
    c.lut64 = NULL;
    bmp_out o;
    o.dest.base = out;
    o.dest.height = shape.height;
    o.dest.width = shape.width;
    o.dest.channels = shape.channels;
    o.dest.layout = opt->layout;
    o.dest.flip = opt->flip;
    o.crop = crop;
    o.c = &c;
    o.rowbuf = NULL;
    switch (h.kind) {
    case K_PALETTE:
    case K_RLE8:
    case K_RLE4:
        build_palette(&c, data, size);
        o.fn = h.bpp == 8 || h.kind != K_PALETTE ? row_pal8 : row_pal_bits;
        break;
    case K_MASKS:
        build_masks(&c);
        o.fn = row_masks;
        break;
    case K_RLE24:
    case K_BGR24:
        o.fn = row_bgr24;
        break;
    case K_BGRX32:
        o.fn = row_bgrx32;
        break;
    case K_RGBA64:
        build_lut64(lut64);
        c.lut64 = lut64;
        o.fn = row_rgba64;
        break;
    default:
        return fd_fail(err, FD_ERR_DECODE, "internal error: unexpected BMP kind %d", h.kind);
    }
    if (!fd_direct_row(&o.dest, 0)) {
        o.rowbuf = malloc((size_t)shape.width * shape.channels);
        if (!o.rowbuf)
            return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %u-pixel row", shape.width);
    }
    if (is_rle(h.kind)) {
        st = decode_rle(&h, data, size, &o, err);
    } else {
        decode_uncompressed(&h, data, &o);
        st = FD_OK;
    }
    free(o.rowbuf);
    return st;
}

const fd_codec fd_bmp_codec = {sniff, fd_bmp_read_header, fd_bmp_plan, fd_bmp_decode};
