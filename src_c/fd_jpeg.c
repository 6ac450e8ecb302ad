#define _GNU_SOURCE /* dladdr */
#include "fd_jpeg.h"

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

/* ------------------------------------------------------------------------ */
/* Per-thread decoder state                                                  */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    fd_error *err; /* where the current call wants its failure */
    int strict;
    int finishing; /* past the last row: a missing EOI is not truncation */
} fd_jpeg_errmgr;

/* The work budget of one call (fd_check_work): what the scans read so far
 * cost, counted while jpeg_start_decompress reads a multi-scan file. */
typedef struct {
    uint64_t blocks;       /* 8x8 blocks the entropy decoder has been through */
    uint32_t per_byte;     /* max_work_per_byte, 0 = no limit */
    size_t input_size;
    int counting;
    int last_scan;         /* (scan, iMCU row) last counted */
    JDIMENSION last_row;
} fd_jpeg_work;

typedef struct {
    struct jpeg_decompress_struct cinfo; /* first: on_progress finds the context from it */
    fd_jpeg_errmgr jerr;
    struct jpeg_progress_mgr progress;
    fd_jpeg_work work;
    uint8_t *scratch; /* rows or whole images for the indirect paths */
    size_t scratch_cap;
    JSAMPROW *rows;   /* row pointers into the caller's buffer */
    size_t rows_cap;
} fd_jpeg_ctx;

/* Scratch above this is released after the call instead of kept. */
#define FD_KEEP_SCRATCH (16u << 20)

/* Rows per jpeg_read_scanlines on the indirect path (one iMCU row of 4:2:0). */
#define FD_ROW_BLOCK 16u

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static int ctx_key_ok;

static void ctx_destroy(void *p)
{
    fd_jpeg_ctx *ctx = p;
    if (!ctx)
        return;
    jpeg_destroy_decompress(&ctx->cinfo);
    free(ctx->scratch);
    free(ctx->rows);
    free(ctx);
}

static void ctx_key_create(void)
{
    ctx_key_ok = pthread_key_create(&ctx_key, ctx_destroy) == 0;
}

static fd_status translate_libjpeg_error(j_common_ptr cinfo, fd_error *err)
{
    char msg[JMSG_LENGTH_MAX];
    int code = cinfo->err->msg_code;
    fd_status st = FD_ERR_DECODE;
    (*cinfo->err->format_message)(cinfo, msg);
    if (code == JERR_OUT_OF_MEMORY)
        st = FD_ERR_NOMEM;
    else if (code == JERR_NO_SOI || code == JERR_BAD_PRECISION || code == JERR_NOT_COMPILED ||
             code == JERR_NOTIMPL || code == JERR_SOF_UNSUPPORTED)
        st = FD_ERR_UNSUPPORTED;
    return fd_fail(err, st, "%s", msg);
}

static void on_error_exit(j_common_ptr cinfo)
{
    fd_jpeg_errmgr *m = (fd_jpeg_errmgr *)cinfo->err;
    translate_libjpeg_error(cinfo, m->err);
    longjmp(m->jump, 1);
}

/* Warnings pass like Pillow passes them, except running out of data, which
 * Pillow reports as a truncated file; strict mode makes every warning fatal.
 * Nothing is ever printed. */
static void on_emit_message(j_common_ptr cinfo, int level)
{
    fd_jpeg_errmgr *m = (fd_jpeg_errmgr *)cinfo->err;
    if (level >= 0)
        return; /* trace messages */
    m->pub.num_warnings++;
    if (m->strict || (m->pub.msg_code == JWRN_JPEG_EOF && !m->finishing)) {
        char msg[JMSG_LENGTH_MAX];
        (*cinfo->err->format_message)(cinfo, msg);
        if (m->pub.msg_code == JWRN_JPEG_EOF)
            fd_fail(m->err, FD_ERR_DECODE, "truncated JPEG: %s", msg);
        else
            fd_fail(m->err, FD_ERR_DECODE, "%s (strict mode)", msg);
        longjmp(m->jump, 1);
    }
}

static void on_output_message(j_common_ptr cinfo)
{
    (void)cinfo;
}

/* Called before each iMCU row a scan decodes (and before each marker
 * read): adds that row's blocks of the current scan to the call's work. */
static int count_scan_row(j_decompress_ptr d, fd_jpeg_work *w, fd_error *err)
{
    if (d->comps_in_scan <= 0 || d->input_iMCU_row >= d->total_iMCU_rows)
        return 1;
    if (d->input_scan_number == w->last_scan && d->input_iMCU_row == w->last_row)
        return 1;
    w->last_scan = d->input_scan_number;
    w->last_row = d->input_iMCU_row;
    const jpeg_component_info *one = d->cur_comp_info[0];
    w->blocks += d->comps_in_scan == 1
                     ? (uint64_t)one->width_in_blocks * (uint64_t)one->v_samp_factor
                     : (uint64_t)d->MCUs_per_row * (uint64_t)d->blocks_in_MCU;
    return fd_check_work(w->blocks, w->input_size, w->per_byte, "JPEG scans", err) == FD_OK;
}

static void on_progress(j_common_ptr cinfo)
{
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    fd_jpeg_ctx *ctx = (fd_jpeg_ctx *)(void *)d;
    fd_jpeg_errmgr *m = &ctx->jerr;
    if (d->input_scan_number > FD_JPEG_MAX_SCANS) {
        fd_fail(m->err, FD_ERR_DECODE,
                "JPEG has more than %d scans; refusing a likely decompression bomb",
                FD_JPEG_MAX_SCANS);
        longjmp(m->jump, 1);
    }
    if (ctx->work.counting && !count_scan_row(d, &ctx->work, m->err))
        longjmp(m->jump, 1);
}

/* A reused decompress object keeps the Huffman and quantization tables of
 * the previous file (libjpeg allows tables to carry over between images).
 * Before each file they are marked stale; after the header, a table the file
 * did not define gets libjpeg's Annex K default (slots 0-1, what a fresh
 * object would use) or is made invalid so that using it fails, exactly as an
 * undefined table would on a fresh object. bits[0] is never read by libjpeg. */
#define FD_STALE_TABLE 0xA5

static JHUFF_TBL std_dc[2], std_ac[2];
static int std_ok;
static pthread_once_t std_once = PTHREAD_ONCE_INIT;

static void std_error_exit(j_common_ptr cinfo)
{
    longjmp(*(jmp_buf *)cinfo->client_data, 1);
}

/* Copies libjpeg's own default tables out of a compressor's defaults. */
static void std_tables_load(void)
{
    struct jpeg_compress_struct cc;
    struct jpeg_error_mgr jerr;
    jmp_buf jump;
    memset(&cc, 0, sizeof(cc));
    cc.err = jpeg_std_error(&jerr);
    jerr.error_exit = std_error_exit;
    jerr.output_message = on_output_message;
    cc.client_data = &jump;
    if (setjmp(jump)) {
        jpeg_destroy_compress(&cc);
        return;
    }
    jpeg_create_compress(&cc);
    cc.in_color_space = JCS_RGB;
    cc.input_components = 3;
    jpeg_set_defaults(&cc);
    for (int i = 0; i < 2; i++) {
        if (!cc.dc_huff_tbl_ptrs[i] || !cc.ac_huff_tbl_ptrs[i]) {
            jpeg_destroy_compress(&cc);
            return;
        }
        std_dc[i] = *cc.dc_huff_tbl_ptrs[i];
        std_ac[i] = *cc.ac_huff_tbl_ptrs[i];
    }
    jpeg_destroy_compress(&cc);
    std_ok = 1;
}

static void mark_tables_stale(j_decompress_ptr c)
{
    for (int i = 0; i < NUM_HUFF_TBLS; i++) {
        if (c->dc_huff_tbl_ptrs[i])
            c->dc_huff_tbl_ptrs[i]->bits[0] = FD_STALE_TABLE;
        if (c->ac_huff_tbl_ptrs[i])
            c->ac_huff_tbl_ptrs[i]->bits[0] = FD_STALE_TABLE;
    }
    for (int i = 0; i < NUM_QUANT_TBLS; i++)
        if (c->quant_tbl_ptrs[i])
            memset(c->quant_tbl_ptrs[i]->quantval, 0, sizeof(c->quant_tbl_ptrs[i]->quantval));
}

static void repair_huffman(JHUFF_TBL *t, const JHUFF_TBL *std)
{
    if (!t || t->bits[0] != FD_STALE_TABLE)
        return;
    if (std && std_ok) {
        memcpy(t->bits, std->bits, sizeof(t->bits));
        memcpy(t->huffval, std->huffval, sizeof(t->huffval));
    } else {
        memset(t->bits + 1, 0xFF, sizeof(t->bits) - 1); /* > 256 codes: "Bogus Huffman table" */
    }
    t->bits[0] = FD_STALE_TABLE;
}

static void repair_stale_tables(j_decompress_ptr c)
{
    pthread_once(&std_once, std_tables_load);
    for (int i = 0; i < NUM_HUFF_TBLS; i++) {
        repair_huffman(c->dc_huff_tbl_ptrs[i], i < 2 ? &std_dc[i] : NULL);
        repair_huffman(c->ac_huff_tbl_ptrs[i], i < 2 ? &std_ac[i] : NULL);
    }
}

/* After start_decompress every component has latched its table; an
 * all-zero one was never defined by this file. */
static void check_quant_tables(j_decompress_ptr c)
{
    for (int ci = 0; ci < c->num_components; ci++) {
        const JQUANT_TBL *q = c->comp_info[ci].quant_table;
        if (!q)
            continue;
        int any = 0;
        for (int k = 0; k < DCTSIZE2; k++)
            any |= q->quantval[k];
        if (!any)
            ERREXIT1(c, JERR_NO_QUANT_TABLE, c->comp_info[ci].quant_tbl_no);
    }
}

/* A fresh decompressor in place of this thread's reused one. libjpeg-turbo
 * 2.1.5's jpeg_skip_scanlines with merged upsampling (fast=1) reads a block of
 * an earlier image's pool (freed by its jpeg_abort) through state a reused
 * decompressor keeps: a use-after-free that valgrind shows on an
 * order-dependent sequence of crops (crash or garbage rows). So a decode
 * that may skip rows with merged upsampling starts from a fresh one. Also
 * the first creation (ctx_get: no object to destroy yet). */
static void renew(fd_jpeg_ctx *ctx)
{
    if (ctx->cinfo.mem)
        jpeg_destroy_decompress(&ctx->cinfo);
    ctx->cinfo.err = &ctx->jerr.pub;
    jpeg_create_decompress(&ctx->cinfo);
    ctx->cinfo.progress = &ctx->progress;
}

static fd_jpeg_ctx *ctx_get(fd_error *err)
{
    pthread_once(&ctx_once, ctx_key_create);
    if (!ctx_key_ok) {
        fd_fail(err, FD_ERR_NOMEM, "cannot create thread-local decoder key");
        return NULL;
    }
    fd_jpeg_ctx *ctx = pthread_getspecific(ctx_key);
    if (ctx)
        return ctx;
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        fd_fail(err, FD_ERR_NOMEM, "out of memory creating a JPEG decoder");
        return NULL;
    }
    jpeg_std_error(&ctx->jerr.pub);
    ctx->jerr.pub.error_exit = on_error_exit;
    ctx->jerr.pub.emit_message = on_emit_message;
    ctx->jerr.pub.output_message = on_output_message;
    ctx->jerr.err = err;
    if (setjmp(ctx->jerr.jump)) {
        free(ctx);
        return NULL;
    }
    ctx->progress.progress_monitor = on_progress;
    renew(ctx);
    if (pthread_setspecific(ctx_key, ctx) != 0) {
        ctx_destroy(ctx);
        fd_fail(err, FD_ERR_NOMEM, "cannot store thread-local JPEG decoder");
        return NULL;
    }
    return ctx;
}

static int ctx_reserve(fd_jpeg_ctx *ctx, size_t scratch, size_t rows)
{
    if (scratch > ctx->scratch_cap) {
        uint8_t *p = realloc(ctx->scratch, scratch);
        if (!p)
            return 0;
        ctx->scratch = p;
        ctx->scratch_cap = scratch;
    }
    if (rows > ctx->rows_cap) {
        JSAMPROW *r = realloc(ctx->rows, rows * sizeof(*r));
        if (!r)
            return 0;
        ctx->rows = r;
        ctx->rows_cap = rows;
    }
    return 1;
}

static void ctx_trim(fd_jpeg_ctx *ctx)
{
    if (ctx->scratch_cap > FD_KEEP_SCRATCH) {
        free(ctx->scratch);
        ctx->scratch = NULL;
        ctx->scratch_cap = 0;
    }
    if (ctx->rows_cap > (FD_KEEP_SCRATCH / sizeof(JSAMPROW))) {
        free(ctx->rows);
        ctx->rows = NULL;
        ctx->rows_cap = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* EXIF orientation                                                          */

static uint32_t rd16(const uint8_t *p, int le)
{
    return le ? (uint32_t)p[0] | ((uint32_t)p[1] << 8) : ((uint32_t)p[0] << 8) | p[1];
}

static uint32_t rd32(const uint8_t *p, int le)
{
    return le ? rd16(p, 1) | (rd16(p + 2, 1) << 16) : (rd16(p, 0) << 16) | rd16(p + 2, 0);
}

static int tiff_orientation(const uint8_t *t, size_t n)
{
    if (n < 8)
        return 1;
    int le;
    if (t[0] == 'I' && t[1] == 'I')
        le = 1;
    else if (t[0] == 'M' && t[1] == 'M')
        le = 0;
    else
        return 1;
    if (rd16(t + 2, le) != 42)
        return 1;
    uint32_t ifd = rd32(t + 4, le);
    if (ifd > n - 2)
        return 1;
    uint32_t count = rd16(t + ifd, le);
    for (uint32_t i = 0; i < count; i++) {
        size_t e = (size_t)ifd + 2 + (size_t)i * 12;
        if (e + 12 > n)
            return 1;
        if (rd16(t + e, le) != 0x0112)
            continue;
        uint32_t type = rd16(t + e + 2, le);
        uint32_t v;
        if (type == 3) /* SHORT */
            v = rd16(t + e + 8, le);
        else if (type == 4) /* LONG */
            v = rd32(t + e + 8, le);
        else
            return 1;
        return (v >= 1 && v <= 8) ? (int)v : 1;
    }
    return 1;
}

int fd_jpeg_exif_orientation(const uint8_t *data, size_t size)
{
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return 1;
    size_t pos = 2;
    while (pos + 4 <= size) {
        if (data[pos] != 0xFF)
            return 1;
        uint8_t marker = data[pos + 1];
        if (marker == 0xFF) { /* fill byte */
            pos++;
            continue;
        }
        if (marker == 0xDA || marker == 0xD9) /* SOS, EOI: no more headers */
            return 1;
        size_t len = rd16(data + pos + 2, 0);
        if (len < 2 || pos + 2 + len > size)
            return 1;
        const uint8_t *seg = data + pos + 4;
        size_t seg_len = len - 2;
        if (marker == 0xE1 && seg_len >= 6 && memcmp(seg, "Exif\0\0", 6) == 0)
            return tiff_orientation(seg + 6, seg_len - 6);
        pos += 2 + len;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Header                                                                    */

static fd_subsampling subsampling_of(j_decompress_ptr c)
{
    if (c->num_components == 1)
        return FD_SS_GRAY;
    if (c->num_components != 3 && c->num_components != 4)
        return FD_SS_OTHER;
    jpeg_component_info *ci = c->comp_info;
    if (ci[1].h_samp_factor != ci[2].h_samp_factor || ci[1].v_samp_factor != ci[2].v_samp_factor)
        return FD_SS_OTHER;
    if (c->num_components == 4 && (ci[3].h_samp_factor != ci[0].h_samp_factor ||
                                   ci[3].v_samp_factor != ci[0].v_samp_factor))
        return FD_SS_OTHER;
    int h0 = ci[0].h_samp_factor, v0 = ci[0].v_samp_factor;
    int h1 = ci[1].h_samp_factor, v1 = ci[1].v_samp_factor;
    if (h0 % h1 || v0 % v1)
        return FD_SS_OTHER;
    int h = h0 / h1, v = v0 / v1;
    if (h == 1 && v == 1)
        return FD_SS_444;
    if (h == 2 && v == 1)
        return FD_SS_422;
    if (h == 2 && v == 2)
        return FD_SS_420;
    if (h == 1 && v == 2)
        return FD_SS_440;
    if (h == 4 && v == 1)
        return FD_SS_411;
    return FD_SS_OTHER;
}

static fd_color_space color_space_of(J_COLOR_SPACE cs)
{
    switch (cs) {
    case JCS_GRAYSCALE: return FD_CS_GRAY;
    case JCS_YCbCr: return FD_CS_YCBCR;
    case JCS_RGB: return FD_CS_RGB;
    case JCS_CMYK: return FD_CS_CMYK;
    case JCS_YCCK: return FD_CS_YCCK;
    default: return FD_CS_OTHER;
    }
}

/* Starts a call: binds the error struct, points libjpeg at `data` and reads
 * the header (on a fresh decompressor when `fresh`). Must run inside the
 * caller's setjmp. */
static void begin(fd_jpeg_ctx *ctx, const uint8_t *data, size_t size, int strict,
                  uint32_t max_work_per_byte, int fresh)
{
    if (fresh || !ctx->cinfo.mem) /* !mem: a renew that failed to allocate */
        renew(ctx);
    jpeg_abort_decompress(&ctx->cinfo);
    mark_tables_stale(&ctx->cinfo);
    memset(&ctx->work, 0, sizeof(ctx->work));
    ctx->work.per_byte = max_work_per_byte;
    ctx->work.input_size = size;
    ctx->work.last_scan = -1;
    ctx->jerr.strict = strict;
    ctx->jerr.finishing = 0;
    ctx->jerr.pub.num_warnings = 0;
    if ((unsigned long)size != size) /* 32-bit unsigned long (Windows): never truncate */
        ERREXIT(&ctx->cinfo, JERR_INPUT_EOF);
    jpeg_mem_src(&ctx->cinfo, data, (unsigned long)size);
    jpeg_read_header(&ctx->cinfo, TRUE);
}

/* The entry sequence of every public JPEG function: this thread's context,
 * the call's error struct, and the landing point for libjpeg's errors. When
 * libjpeg fails (on_error_exit, on_emit_message, on_progress) control comes
 * back here, the object is reset and the recorded status returned. A macro
 * because setjmp must run in the frame that stays live for the whole call. */
#define FD_JPEG_ENTER(ctx, err)                                                                \
    fd_jpeg_ctx *ctx = ctx_get(err);                                                           \
    if (!ctx)                                                                                  \
        return (err)->status;                                                                  \
    ctx->jerr.err = (err);                                                                     \
    if (setjmp(ctx->jerr.jump)) {                                                              \
        jpeg_abort_decompress(&ctx->cinfo);                                                    \
        ctx_trim(ctx);                                                                         \
        return (err)->status;                                                                  \
    }

static void fill_info(j_decompress_ptr c, const uint8_t *data, size_t size, fd_info *info)
{
    memset(info, 0, sizeof(*info));
    info->format = FD_FORMAT_JPEG;
    info->width = c->image_width;
    info->height = c->image_height;
    info->channels = c->num_components;
    info->color_space = color_space_of(c->jpeg_color_space);
    info->subsampling = subsampling_of(c);
    info->progressive = c->progressive_mode ? 1 : 0;
    info->orientation = fd_jpeg_exif_orientation(data, size);
}

fd_status fd_jpeg_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err)
{
    FD_JPEG_ENTER(ctx, err);
    begin(ctx, data, size, 0, 0, 0);
    fill_info(&ctx->cinfo, data, size, info);
    jpeg_abort_decompress(&ctx->cinfo);
    return FD_OK;
}

/* ------------------------------------------------------------------------ */
/* Planning                                                                  */

typedef struct {
    int orientation;      /* applied orientation, 1 unless exif */
    fd_geometry geo;      /* scale and crop, in the oriented frame */
    fd_shape shape;       /* the output (before any resize) */
    fd_rect src;          /* needed source rect, scaled pixels */
    int cmyk;             /* decode as CMYK and convert ourselves */
    int luma;             /* decode as RGB, then Pillow's RGB -> L */
} fd_jpeg_plan_t;

/* One pass over every block the header declares must fit the work budget:
 * checked before libjpeg allocates anything (a multi-scan file's coefficient
 * buffer is 128 bytes a block), so a few hundred bytes declaring 13000 x
 * 13000 cost nothing. The scans are counted as they are read (on_progress). */
static fd_status check_declared_work(j_decompress_ptr c, size_t size, uint32_t per_byte,
                                     fd_error *err)
{
    uint64_t blocks = 0;
    for (int ci = 0; ci < c->num_components; ci++)
        blocks += (uint64_t)c->comp_info[ci].width_in_blocks * c->comp_info[ci].height_in_blocks;
    return fd_check_work(blocks, size, per_byte, "JPEG", err);
}

/* Chooses M/8 and the source rect. cinfo holds a freshly read header. */
static fd_status make_plan(j_decompress_ptr c, const uint8_t *data, size_t size,
                           const fd_options *opt, fd_jpeg_plan_t *p, fd_error *err)
{
    const uint32_t H = c->image_height, W = c->image_width;
    fd_status st = fd_check_pixels(H, W, opt->max_pixels, err);
    if (st == FD_OK)
        st = check_declared_work(c, size, opt->max_work_per_byte, err);
    if (st != FD_OK)
        return st;
    p->orientation = opt->exif ? fd_jpeg_exif_orientation(data, size) : 1;
    uint32_t OH, OW; /* oriented full-resolution size */
    fd_orient_dims(p->orientation, H, W, &OH, &OW);
    st = fd_plan_geometry(OH, OW, opt, &p->geo, err);
    if (st == FD_OK)
        st = fd_geometry_shape(&p->geo, opt, &p->shape, err);
    if (st != FD_OK)
        return st;

    c->scale_num = (unsigned)p->geo.scale_num;
    c->scale_denom = 8;
    jpeg_calc_output_dimensions(c);
    const uint32_t sh = c->output_height, sw = c->output_width; /* scaled source size */
    uint32_t soh, sow;
    fd_orient_dims(p->orientation, sh, sw, &soh, &sow);
    if (soh != p->geo.scaled_height || sow != p->geo.scaled_width)
        return fd_fail(err, FD_ERR_DECODE, "internal error: libjpeg scales %ux%u to %ux%u, "
                       "the planner expected %ux%u", W, H, sw, sh, p->geo.scaled_width,
                       p->geo.scaled_height);
    p->src = fd_orient_rect_to_source(p->orientation, sh, sw, p->geo.region);
    p->cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    p->luma = opt->mode == FD_MODE_L && !p->cmyk && c->jpeg_color_space != JCS_GRAYSCALE;
    return FD_OK;
}

fd_status fd_jpeg_plan(const uint8_t *data, size_t size, const fd_options *opt, fd_shape *shape,
                       fd_error *err)
{
    FD_JPEG_ENTER(ctx, err);
    begin(ctx, data, size, opt->strict, opt->max_work_per_byte, 0);
    fd_jpeg_plan_t plan;
    fd_status st = make_plan(&ctx->cinfo, data, size, opt, &plan, err);
    if (st == FD_OK)
        *shape = plan.shape;
    jpeg_abort_decompress(&ctx->cinfo);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */

static inline uint8_t muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* Adobe-style inverted CMYK (what Photoshop writes and Pillow assumes) to
 * RGB or L, with Pillow's exact integer arithmetic. */
static void cmyk_row(const uint8_t *in, uint8_t *out, uint32_t w, int gray)
{
    for (uint32_t x = 0; x < w; x++, in += 4) {
        unsigned nk = in[3];
        int r = (int)nk - muldiv255(255u - in[0], nk);
        int g = (int)nk - muldiv255(255u - in[1], nk);
        int b = (int)nk - muldiv255(255u - in[2], nk);
        r = r < 0 ? 0 : r;
        g = g < 0 ? 0 : g;
        b = b < 0 ? 0 : b;
        if (gray) {
            *out++ = fd_luma((unsigned)r, (unsigned)g, (unsigned)b);
        } else {
            out[0] = (uint8_t)r;
            out[1] = (uint8_t)g;
            out[2] = (uint8_t)b;
            out += 3;
        }
    }
}

/* The first marker at or after p, skipping what entropy-coded data holds
 * (stuffed FF 00, restart markers, fill bytes), or NULL. */
static const uint8_t *find_marker(const uint8_t *p, const uint8_t *end)
{
    while (end - p >= 2) {
        const uint8_t *ff = memchr(p, 0xFF, (size_t)(end - p - 1));
        if (!ff)
            return NULL;
        const uint8_t b = ff[1];
        if (b != 0x00 && b != 0xFF && (b < JPEG_RST0 || b > JPEG_RST0 + 7))
            return ff;
        p = ff + 1;
    }
    return NULL;
}

/* A single-scan file's verdict on its scan, whatever rows were decoded: the
 * scan must end at a marker inside the data. A full decode that runs past
 * the end of the data reports it as truncated (on_emit_message), which is
 * the case exactly when no marker follows the scan's data, so a crop that
 * stopped early (and a full decode whose last bytes happened to need no
 * read-ahead) gets the same warning, and with it the same error. */
static void require_scan_end(j_decompress_ptr c)
{
    const int pending = c->unread_marker && (c->unread_marker < JPEG_RST0 ||
                                             c->unread_marker > JPEG_RST0 + 7);
    if (pending || jpeg_input_complete(c))
        return; /* the entropy decoder stopped at the marker, or all input is read */
    /* Any marker after p ends the scan (entropy-coded data holds none); a
     * file that ends with EOI needs no search, or reads of the data a crop
     * skipped (callgrind: 0.05 % of 200 random crops over 40 photos). */
    const uint8_t *p = c->src->next_input_byte, *end = p + c->src->bytes_in_buffer;
    if (end - p >= 2 && end[-2] == 0xFF && end[-1] == (uint8_t)JPEG_EOI)
        return;
    if (!find_marker(p, end))
        WARNMS(c, JWRN_JPEG_EOF);
}

/* After the last output row the crop needs. A multi-scan file was read
 * whole (every scan and the EOI) when the decode started, as in a full
 * decode. A single-scan file's scan must end at a marker
 * (require_scan_end), so truncation below the crop and a missing EOI give a
 * crop the verdict of a full decode. A decode that read every row finishes
 * as Pillow does, so damage in the markers after the scan (a second SOF, a
 * bad table) is reported; with strict, a crop that stopped early decodes the
 * rest of the scan's data (entropy decoding only: libjpeg skips whole iMCU
 * rows without the IDCT) and finishes too, since any warning there is an
 * error; without strict, it stops. */
static void end_decode(fd_jpeg_ctx *ctx, int strict)
{
    j_decompress_ptr c = &ctx->cinfo;
    if (c->output_scanline < c->output_height && !jpeg_input_complete(c) && strict) {
        const JDIMENSION left = c->output_height - c->output_scanline;
        if (left > 1)
            jpeg_skip_scanlines(c, left - 1);
        JSAMPROW r = ctx->scratch; /* holds a decoded row on either path */
        while (c->output_scanline < c->output_height && jpeg_read_scanlines(c, &r, 1) == 1) {
        }
    }
    require_scan_end(c);
    if (c->output_scanline >= c->output_height) {
        ctx->jerr.finishing = 1;
        jpeg_finish_decompress(c);
    }
    jpeg_abort_decompress(c);
}

/* Output colour space, IDCT and upsampling for the plan; then starts the
 * decompressor (a progressive file is read whole here). 'L' is Pillow's
 * convert('L') of the RGB image, not libjpeg's Y channel (they differ by up
 * to ~13 where RGB clips). */
static void start_output(fd_jpeg_ctx *ctx, const fd_options *opt, const fd_jpeg_plan_t *p)
{
    j_decompress_ptr c = &ctx->cinfo;
    if (p->cmyk)
        c->out_color_space = JCS_CMYK;
    else if (opt->mode == FD_MODE_L && !p->luma)
        c->out_color_space = JCS_GRAYSCALE;
    else
        c->out_color_space = JCS_RGB;
    c->dct_method = opt->fast ? JDCT_IFAST : JDCT_ISLOW;
    c->do_fancy_upsampling = opt->fast ? FALSE : TRUE;
    repair_stale_tables(c);
    ctx->work.counting = 1;
    jpeg_start_decompress(c);
    ctx->work.counting = 0;
    check_quant_tables(c);
}

/* The part of the scaled source a decode reads, once libjpeg is started. */
typedef struct {
    uint32_t y;       /* next scanline libjpeg returns */
    uint32_t sy0, sy1; /* source rows wanted */
    uint32_t cw;      /* columns libjpeg decodes (whole iMCUs) */
    size_t in_skip;   /* bytes before the wanted columns in a decoded row */
    size_t row_in;    /* bytes of a decoded row */
} fd_jpeg_window;

/* Crops columns to whole iMCUs with one iMCU of margin on each side, so the
 * fancy upsampler sees the same neighbours as a full decode, and skips the
 * rows above the crop, again keeping one iMCU row of context. A progressive
 * image keeps two: libjpeg's block smoothing (coefficients a scan left
 * incomplete) reads a 5 x 5 block neighbourhood (issue 27's fuzz finding,
 * decode_jpeg-progressive-gray-smoothing-crop). */
static void open_window(j_decompress_ptr c, const fd_jpeg_plan_t *p, fd_jpeg_window *w)
{
    const uint32_t dec_c = (uint32_t)c->output_components;
    const uint32_t sx0 = (uint32_t)p->src.left, sx1 = (uint32_t)(p->src.left + p->src.width);
    w->sy0 = (uint32_t)p->src.top;
    w->sy1 = (uint32_t)(p->src.top + p->src.height);
    JDIMENSION xoff = 0, cw = c->output_width;
    if (sx0 > 0 || sx1 < c->output_width) {
        const uint32_t imcu_w = (uint32_t)(c->max_h_samp_factor * c->min_DCT_scaled_size) *
                                (c->progressive_mode ? 2u : 1u);
        uint32_t a = sx0 > imcu_w ? sx0 - imcu_w : 0;
        uint32_t b = sx1 + imcu_w < c->output_width ? sx1 + imcu_w : c->output_width;
        xoff = a;
        cw = b - a;
        /* libjpeg-turbo 2.1's jpeg_crop_scanline gives wrong (and, on a fresh
         * decoder, uninitialized) pixels for a scaled decode of 2x4 / 4x2
         * luma sampling (issue 27's fuzz finding, decode_jpeg-h2v4-scaled-crop):
         * there the whole width is decoded and the columns sliced. */
        const int scaled = c->output_width != c->image_width;
        if (scaled && c->max_h_samp_factor * c->max_v_samp_factor > 4) {
            xoff = 0;
            cw = c->output_width;
        } else if (a > 0 || b < c->output_width) {
            jpeg_crop_scanline(c, &xoff, &cw);
        }
    }
    w->cw = cw;
    w->in_skip = (size_t)(sx0 - xoff) * dec_c;
    w->row_in = (size_t)cw * dec_c;
    const uint32_t imcu_h = (uint32_t)(c->max_v_samp_factor * c->min_DCT_scaled_size) *
                            (c->progressive_mode ? 2u : 1u);
    w->y = 0;
    if (w->sy0 > imcu_h)
        w->y = (uint32_t)jpeg_skip_scanlines(c, w->sy0 - imcu_h);
}

/* Straight into the caller's rows, when nothing needs rearranging. */
static int can_read_direct(const fd_jpeg_plan_t *p, const fd_jpeg_window *w, const fd_dest *d)
{
    return p->orientation == 1 && !p->cmyk && !p->luma && w->in_skip == 0 &&
           w->cw == p->src.width && fd_direct_row(d, 0) != NULL;
}

static fd_status read_direct(fd_jpeg_ctx *ctx, fd_jpeg_window *w, const fd_dest *dest,
                             fd_error *err)
{
    j_decompress_ptr c = &ctx->cinfo;
    const uint32_t n = w->sy1 - w->sy0;
    if (!ctx_reserve(ctx, w->row_in * (size_t)c->rec_outbuf_height, n))
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for row buffers");
    for (uint32_t i = 0; i < n; i++)
        ctx->rows[i] = fd_direct_row(dest, i);
    while (w->y < w->sy0) { /* context rows above the crop */
        JSAMPROW r = ctx->scratch;
        w->y += jpeg_read_scanlines(c, &r, 1);
    }
    while (w->y < w->sy1)
        w->y += jpeg_read_scanlines(c, ctx->rows + (w->y - w->sy0), w->sy1 - w->y);
    return FD_OK;
}

/* Buffers of the blocked path, carved out of the context's scratch. */
typedef struct {
    uint8_t *conv_row; /* one converted row (CMYK or luma) */
    uint8_t *image;    /* the whole unrotated crop, when oriented */
    size_t row_out;    /* bytes of an output row */
} fd_jpeg_blocks;

static fd_status reserve_blocks(fd_jpeg_ctx *ctx, const fd_jpeg_plan_t *p,
                                const fd_jpeg_window *w, fd_jpeg_blocks *b, fd_error *err)
{
    b->row_out = (size_t)p->src.width * p->shape.channels;
    size_t image_bytes = 0, block_bytes = 0;
    if (p->orientation != 1 && !fd_mul_size(b->row_out, (size_t)p->src.height, &image_bytes))
        return fd_fail(err, FD_ERR_TOO_LARGE, "crop too large");
    if (!fd_mul_size(w->row_in, FD_ROW_BLOCK, &block_bytes) ||
        !ctx_reserve(ctx, block_bytes + b->row_out + image_bytes, FD_ROW_BLOCK))
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for row buffers");
    for (uint32_t i = 0; i < FD_ROW_BLOCK; i++)
        ctx->rows[i] = ctx->scratch + (size_t)i * w->row_in;
    b->conv_row = ctx->scratch + block_bytes;
    b->image = b->conv_row + b->row_out;
    return FD_OK;
}

/* Converts decoded row `src` (CMYK, luma or as is) and stores it as output
 * row `row`: into the rotation buffer when oriented, else the destination. */
static void place_row(const fd_jpeg_plan_t *p, const fd_jpeg_blocks *b, const fd_dest *dest,
                      uint32_t row, const uint8_t *src)
{
    if (p->cmyk) {
        cmyk_row(src, b->conv_row, (uint32_t)p->src.width, p->shape.channels == 1);
        src = b->conv_row;
    } else if (p->luma) {
        for (int64_t x = 0; x < p->src.width; x++)
            b->conv_row[x] = fd_luma(src[3 * x], src[3 * x + 1], src[3 * x + 2]);
        src = b->conv_row;
    }
    if (p->orientation != 1)
        memcpy(b->image + (size_t)row * b->row_out, src, b->row_out);
    else
        fd_put_row(dest, row, src);
}

/* Indirect: rows are decoded FD_ROW_BLOCK at a time to scratch, then
 * converted and placed: copying a row straight after libjpeg stored it
 * stalls on those stores (up to 0.6 us a row, depending on the buffers'
 * addresses). */
static fd_status read_blocked(fd_jpeg_ctx *ctx, const fd_jpeg_plan_t *p, fd_jpeg_window *w,
                              const fd_dest *dest, fd_error *err)
{
    j_decompress_ptr c = &ctx->cinfo;
    fd_jpeg_blocks b;
    fd_status st = reserve_blocks(ctx, p, w, &b, err);
    if (st != FD_OK)
        return st;
    while (w->y < w->sy1) {
        const uint32_t first = w->y;
        const uint32_t want = w->sy1 - first < FD_ROW_BLOCK ? w->sy1 - first : FD_ROW_BLOCK;
        uint32_t n = 0;
        while (n < want) {
            const uint32_t got = jpeg_read_scanlines(c, ctx->rows + n, want - n);
            if (got == 0)
                break; /* cannot happen with an in-memory source; never spin */
            n += got;
        }
        w->y += n;
        for (uint32_t i = first < w->sy0 ? w->sy0 - first : 0; i < n; i++)
            place_row(p, &b, dest, first + i - w->sy0, ctx->rows[i] + w->in_skip);
        if (n < want)
            return fd_fail(err, FD_ERR_DECODE, "decoder stopped at row %u of %u", w->y,
                           w->sy1);
    }
    if (p->orientation != 1)
        fd_put_oriented(dest, p->orientation, b.image, (uint32_t)p->src.height,
                        (uint32_t)p->src.width);
    return FD_OK;
}

fd_status fd_jpeg_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                         size_t out_size, fd_error *err)
{
    FD_JPEG_ENTER(ctx, err);
    j_decompress_ptr c = &ctx->cinfo;
    begin(ctx, data, size, opt->strict, opt->max_work_per_byte, opt->fast && opt->has_crop);
    fd_jpeg_plan_t p;
    fd_status st = make_plan(c, data, size, opt, &p, err);
    if (st == FD_OK && out_size != p.shape.nbytes)
        st = fd_fail(err, FD_ERR_ARGUMENT, "output buffer has %zu bytes, expected %zu",
                     out_size, p.shape.nbytes);
    if (st != FD_OK) {
        jpeg_abort_decompress(c);
        return st;
    }
    start_output(ctx, opt, &p);
    fd_jpeg_window w;
    open_window(c, &p, &w);
    const fd_dest dest = {out, p.shape.height, p.shape.width, p.shape.channels, opt->layout,
                          opt->flip};
    if (can_read_direct(&p, &w, &dest))
        st = read_direct(ctx, &w, &dest, err);
    else
        st = read_blocked(ctx, &p, &w, &dest, err);
    if (st == FD_OK)
        end_decode(ctx, opt->strict);
    else
        jpeg_abort_decompress(c);
    ctx_trim(ctx);
    return st;
}

/* The SOI marker and the first byte of the next marker. */
static int sniff(const uint8_t *data, size_t size)
{
    return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

const fd_codec fd_jpeg_codec = {sniff, fd_jpeg_read_header, fd_jpeg_plan, fd_jpeg_decode};

/* ------------------------------------------------------------------------ */
/* Library facts                                                             */

void fd_jpeg_library_info(char *version, size_t version_len, int *simd)
{
    static const char tag[] = "libjpeg-turbo version ";
    Dl_info dl;
    snprintf(version, version_len, "unknown");
    *simd = 0;
    if (!dladdr((void *)jpeg_std_error, &dl) || !dl.dli_fname)
        return;
    FILE *f = fopen(dl.dli_fname, "rb");
    if (!f)
        return;
    /* The library embeds its version banner and, when built with SIMD, the
     * names of the JSIMD_* environment switches its dispatcher reads. */
    const size_t cap = 1 << 16;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return;
    }
    size_t keep = 0, n;
    int found_simd = 0;
    while ((n = fread(buf + keep, 1, cap - keep - 1, f)) > 0) {
        size_t len = keep + n;
        buf[len] = 0;
        for (size_t i = 0; i + sizeof(tag) < len; i++) {
            if (buf[i] == 'l' && memcmp(buf + i, tag, sizeof(tag) - 1) == 0) {
                const char *v = buf + i + sizeof(tag) - 1;
                size_t k = 0;
                while (k + 1 < version_len && v + k < buf + len &&
                       ((v[k] >= '0' && v[k] <= '9') || v[k] == '.'))
                    k++;
                if (k > 0) {
                    memcpy(version, v, k);
                    version[k] = 0;
                }
            } else if (buf[i] == 'J' && memcmp(buf + i, "JSIMD_FORCENONE", 15) == 0) {
                found_simd = 1;
            }
        }
        keep = len < 64 ? len : 64; /* tags may straddle reads */
        memmove(buf, buf + len - keep, keep);
    }
    free(buf);
    fclose(f);
    const char *off = getenv("JSIMD_FORCENONE");
    *simd = found_simd && !(off && off[0] == '1');
}
