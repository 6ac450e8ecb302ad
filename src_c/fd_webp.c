/* WebP through libwebp: Pillow's convert("RGB") / convert("L") pixels at full
 * scale; libwebp's crop and rescaler at a reduced one.
 *
 * The crop is libwebp's (WebPDecoderConfig.options.use_cropping), so only
 * the macroblock rows down to it are decoded. libwebp moves an odd crop
 * origin to the even pixel before it (the chroma grid), and its fancy
 * upsampling treats a crop's edges as the picture's, so at full scale the
 * crop asked for is the region widened by CROP_MARGIN pixels (to an even
 * origin), and the margin is skipped when the rows are written. A reduced
 * scale (M/8, picked as for JPEG: scale_num, or the smallest M whose crop
 * still covers min_height x min_width) is libwebp's rescaler of the
 * full-resolution crop (use_scaling) to the crop's extent in the M/8 frame;
 * for M = 1, 2, 4 that crop starts on an even pixel, so the frame is exact
 * (at the picture's right and bottom edges only the whole scaled pixels are
 * rescaled and the last one repeated: source_span). Alpha is dropped
 * (MODE_RGB), as convert("RGB") drops it: Pillow's decoder (WebPAnimDecoder)
 * decodes a still image's only frame with the same libwebp calls, so the
 * colour channels are the same. An animation is refused
 * (FD_ERR_UNSUPPORTED): Pillow gives its first frame. Safety:
 * WebPGetFeatures, max_pixels, the crop and the work budget come before any
 * allocation; our only buffers are per-thread scratch: the decoded crop
 * when it cannot go straight to the caller's buffer, and a row.
 * See docs/decisions/png-webp.md.
 */
#include "fd_webp.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef FD_HAVE_WEBP
#include <webp/decode.h>

/* fd_scratch: the decoded crop, a gray row, a row with its last pixel repeated */
enum { SLOT_PIXELS = 0, SLOT_ROW = 1, SLOT_EDGE = 2 };

/* Pixels around a full-scale crop decoded and dropped (the chroma upsampler's reach). */
#define CROP_MARGIN 4

static int sniff(const uint8_t *data, size_t size)
{
    return size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0;
}

/* An extended file (VP8X) whose flags say it has an EXIF chunk. */
static int has_exif(const uint8_t *data, size_t size)
{
    return size >= 21 && memcmp(data + 12, "VP8X", 4) == 0 && (data[20] & 0x08);
}

static fd_status webp_status(VP8StatusCode code, fd_error *err)
{
    switch (code) {
    case VP8_STATUS_OK:
        return FD_OK;
    case VP8_STATUS_OUT_OF_MEMORY:
        return fd_fail(err, FD_ERR_NOMEM, "out of memory decoding a WebP");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return fd_fail(err, FD_ERR_UNSUPPORTED, "WebP feature libwebp does not decode");
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return fd_fail(err, FD_ERR_DECODE, "truncated WebP");
    case VP8_STATUS_INVALID_PARAM:
        return fd_fail(err, FD_ERR_DECODE, "WebP: invalid parameter (a bad crop or size)");
    default:
        return fd_fail(err, FD_ERR_DECODE, "corrupt WebP (libwebp status %d)", (int)code);
    }
}

static fd_status features(const uint8_t *data, size_t size, WebPBitstreamFeatures *f,
                          fd_error *err)
{
    if (!sniff(data, size))
        return fd_fail(err, FD_ERR_UNSUPPORTED, "not a WebP");
    fd_status st = webp_status(WebPGetFeatures(data, size, f), err);
    if (st == FD_OK && (f->width <= 0 || f->height <= 0))
        st = fd_fail(err, FD_ERR_DECODE, "WebP of %dx%d pixels", f->width, f->height);
    return st;
}

fd_status fd_webp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err)
{
    WebPBitstreamFeatures f;
    fd_status st = features(data, size, &f, err);
    if (st != FD_OK)
        return st;
    if (has_exif(data, size))
        return fd_fail(err, FD_ERR_UNSUPPORTED, "WebP with EXIF: its orientation is Pillow's "
                       "to read");
    memset(info, 0, sizeof(*info));
    info->format = FD_FORMAT_WEBP;
    info->width = (uint32_t)f.width;
    info->height = (uint32_t)f.height;
    info->channels = f.has_alpha ? 4 : 3;
    info->color_space = FD_CS_RGB;
    info->subsampling = FD_SS_NONE;
    info->orientation = 1;
    return FD_OK;
}

static fd_status plan(const uint8_t *data, size_t size, const fd_options *opt,
                      WebPBitstreamFeatures *f, fd_geometry *geo, fd_shape *shape, fd_error *err)
{
    fd_status st = features(data, size, f, err);
    if (st == FD_OK && has_exif(data, size) && opt->exif)
        st = fd_fail(err, FD_ERR_UNSUPPORTED, "WebP with EXIF and exif=True: Pillow applies "
                     "its orientation");
    if (st == FD_OK && f->has_animation)
        st = fd_fail(err, FD_ERR_UNSUPPORTED, "animated WebP: Pillow gives its first frame");
    const uint32_t h = (uint32_t)f->height, w = (uint32_t)f->width;
    if (st == FD_OK)
        st = fd_check_pixels(h, w, opt->max_pixels, err);
    if (st == FD_OK)
        st = fd_plan_geometry(h, w, opt, geo, err);
    if (st == FD_OK)
        st = fd_check_work(((uint64_t)w * h + 63u) / 64u, size, opt->max_work_per_byte, "WebP",
                           err);
    return st == FD_OK ? fd_geometry_shape(geo, opt, shape, err) : st;
}

fd_status fd_webp_plan(const uint8_t *data, size_t size, const fd_options *opt,
                       fd_shape *shape, fd_error *err)
{
    WebPBitstreamFeatures f;
    fd_geometry geo;
    return plan(data, size, opt, &f, &geo, shape, err);
}

/* [lo, lo + len) of the M/8 frame as full-resolution pixels [*a, *b) of an
 * extent `full`, and *n, the scaled pixels libwebp's rescaler makes of them.
 * A span that runs past the picture's edge (its last scaled pixel stands for
 * pixels past it, as libjpeg's edge padding has them) would be stretched by
 * the rescaler, every pixel off position by up to half a source pixel (a
 * 37 dB RandomResizedCrop(64) on a 375-wide photo); for M = 1, 2, 4 only
 * its whole scaled pixels are rescaled (exact in position) and the caller
 * repeats the last one over the other (len - *n). */
static void source_span(int64_t lo, int64_t len, int m, uint32_t full, int *a, int *b,
                        uint32_t *n)
{
    const int64_t hi = lo + len;
    int64_t s = lo * 8 / m, e = (hi * 8 + m - 1) / m;
    *n = (uint32_t)len;
    if (e > (int64_t)full) {
        e = full;
        const int64_t whole = 8 % m == 0 ? (e - s) * m / 8 : 0;
        if (whole >= 1 && whole < len) {
            *n = (uint32_t)whole;
            e = s + whole * 8 / m;
        }
    }
    if (e <= s)
        e = s + 1;
    *a = (int)s;
    *b = (int)e;
}

fd_status fd_webp_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                         size_t out_size, fd_error *err)
{
    WebPDecoderConfig cfg;
    fd_geometry geo;
    fd_shape shape;
    if (!WebPInitDecoderConfig(&cfg))
        return fd_fail(err, FD_ERR_UNSUPPORTED, "libwebp's decoder ABI differs from its headers");
    fd_status st = plan(data, size, opt, &cfg.input, &geo, &shape, err);
    if (st != FD_OK)
        return st;
    if (out_size != shape.nbytes)
        return fd_fail(err, FD_ERR_ARGUMENT, "output buffer has %zu bytes, expected %zu",
                       out_size, shape.nbytes);
    const uint32_t W = (uint32_t)cfg.input.width, H = (uint32_t)cfg.input.height;
    const int m = geo.scale_num ? geo.scale_num : 8;
    const fd_rect *r = &geo.region;
    int x0, x1, y0, y1;
    uint32_t sw = (uint32_t)r->width, sh = (uint32_t)r->height; /* scaled pixels decoded */
    if (m == 8) {
        x0 = (int)r->left, x1 = (int)(r->left + r->width);
        y0 = (int)r->top, y1 = (int)(r->top + r->height);
    } else {
        source_span(r->left, r->width, m, W, &x0, &x1, &sw);
        source_span(r->top, r->height, m, H, &y0, &y1, &sh);
    }
    if (m == 8) {
        /* At full scale the pixels are Pillow's: libwebp's fancy chroma
         * upsampling treats a crop's edges as the picture's, so the crop
         * asked for is the region and a margin (clipped at the picture's
         * edges), whose extra pixels are skipped. */
        x0 = x0 > CROP_MARGIN ? x0 - CROP_MARGIN : 0;
        y0 = y0 > CROP_MARGIN ? y0 - CROP_MARGIN : 0;
        x1 = x1 + CROP_MARGIN < (int)W ? x1 + CROP_MARGIN : (int)W;
        y1 = y1 + CROP_MARGIN < (int)H ? y1 + CROP_MARGIN : (int)H;
    }
    /* libwebp starts a crop on an even pixel: ask for that one, skip the rest. */
    const int cx = x0 & ~1, cy = y0 & ~1;
    const uint32_t dx = m == 8 ? (uint32_t)(r->left - cx) : 0;
    const uint32_t dy = m == 8 ? (uint32_t)(r->top - cy) : 0;
    WebPDecoderOptions *o = &cfg.options;
    o->use_threads = 0;
    if (cx != 0 || cy != 0 || x1 != (int)W || y1 != (int)H) {
        o->use_cropping = 1;
        o->crop_left = cx;
        o->crop_top = cy;
        o->crop_width = x1 - cx;
        o->crop_height = y1 - cy;
    }
    /* the decoded picture: the scaled region, or the full-scale crop asked for */
    const uint32_t dw = m == 8 ? (uint32_t)(x1 - cx) : sw;
    const uint32_t dh = m == 8 ? (uint32_t)(y1 - cy) : sh;
    if (m != 8) {
        o->use_scaling = 1;
        o->scaled_width = (int)dw;
        o->scaled_height = (int)dh;
    }
    fd_dest dest = {out, shape.height, shape.width, shape.channels, opt->layout, opt->flip};
    const int direct = dw == (uint32_t)r->width && dh == (uint32_t)r->height &&
                       opt->mode == FD_MODE_RGB && fd_direct_row(&dest, 0);
    size_t stride = (size_t)dw * 3u, nbytes;
    if (!fd_mul_size(stride, dh, &nbytes))
        return fd_fail(err, FD_ERR_TOO_LARGE, "WebP crop size overflows");
    uint8_t *pixels = direct ? out : fd_scratch(SLOT_PIXELS, nbytes);
    uint8_t *gray = opt->mode == FD_MODE_L ? fd_scratch(SLOT_ROW, r->width) : NULL;
    /* a scaled region wider than what was decoded (source_span): its last pixel repeated */
    const int padded = m != 8 && dw < (uint32_t)r->width;
    uint8_t *edge = padded ? fd_scratch(SLOT_EDGE, (size_t)r->width * 3u) : NULL;
    if (!pixels || (opt->mode == FD_MODE_L && !gray) || (padded && !edge))
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %ux%u WebP crop", dw, dh);
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = pixels;
    cfg.output.u.RGBA.stride = (int)stride;
    cfg.output.u.RGBA.size = nbytes;
    st = webp_status(WebPDecode(data, size, &cfg), err);
    WebPFreeDecBuffer(&cfg.output);
    if (st != FD_OK || direct)
        return st;
    for (uint32_t y = 0; y < (uint32_t)r->height; y++) {
        const uint32_t sy = y + dy < dh ? y + dy : dh - 1; /* the last row repeated */
        const uint8_t *src = pixels + (size_t)sy * stride + (size_t)dx * 3u;
        if (edge) {
            memcpy(edge, src, (size_t)dw * 3u);
            for (uint32_t x = dw; x < (uint32_t)r->width; x++)
                memcpy(edge + (size_t)x * 3u, src + (size_t)(dw - 1) * 3u, 3);
            src = edge;
        }
        if (gray) {
            for (uint32_t x = 0; x < (uint32_t)r->width; x++)
                gray[x] = fd_luma(src[3 * x], src[3 * x + 1], src[3 * x + 2]);
            src = gray;
        }
        fd_put_row(&dest, y, src);
    }
    return FD_OK;
}

static char version[32];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_init(void)
{
    const int v = WebPGetDecoderVersion();
    snprintf(version, sizeof(version), "%d.%d.%d", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
}

const char *fd_webp_library_version(void)
{
    pthread_once(&version_once, version_init);
    return version;
}

const fd_codec fd_webp_codec = {sniff, fd_webp_read_header, fd_webp_plan, fd_webp_decode};

#else /* !FD_HAVE_WEBP: WebP is not a native format (fd_formats.h has no row) */

const char *fd_webp_library_version(void)
{
    return "";
}

#endif
