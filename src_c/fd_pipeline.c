#include "fd_pipeline.h"

#include <ctype.h>
#include <math.h>

#include "fd_resample.h"

enum { SLOT_REGION = 3 }; /* fd_scratch slot of the decoded, unresized crop */

/* fd_formats.h's rows: each format's codec, defined in its own C file. */
#define DECLARE_CODEC(constant, name, codec) extern const fd_codec codec;
FD_FORMAT_ROWS(DECLARE_CODEC)
#undef DECLARE_CODEC

typedef struct {
    fd_format format;
    const char *name;
    const fd_codec *codec;
} format_row;

#define TABLE_ROW(constant, name, codec) {constant, name, &codec},
static const format_row FORMATS[] = {FD_FORMAT_ROWS(TABLE_ROW)};
#undef TABLE_ROW

enum { NFORMATS = sizeof(FORMATS) / sizeof(FORMATS[0]) };

static const format_row *row_of(fd_format fmt)
{
    for (size_t i = 0; i < NFORMATS; i++)
        if (FORMATS[i].format == fmt)
            return &FORMATS[i];
    return NULL;
}

static const fd_codec *codec_of(fd_format fmt)
{
    const format_row *row = row_of(fmt);
    return row ? row->codec : NULL;
}

/* FD_ERR_UNSUPPORTED naming every format: "not a JPEG or BMP". */
static fd_status not_native(fd_error *err)
{
    char list[FD_MESSAGE_LEN];
    size_t n = 0;
    for (size_t i = 0; i < NFORMATS; i++) {
        const char *sep = i == 0 ? "" : i + 1 < NFORMATS ? ", " : " or ";
        for (const char *c = sep; *c && n + 1 < sizeof(list); c++)
            list[n++] = *c;
        for (const char *c = FORMATS[i].name; *c && n + 1 < sizeof(list); c++)
            list[n++] = (char)toupper((unsigned char)*c);
    }
    list[n] = '\0';
    return fd_fail(err, FD_ERR_UNSUPPORTED, "not a %s", list);
}

fd_format fd_sniff(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < NFORMATS; i++)
        if (FORMATS[i].codec->sniff(data, size))
            return FORMATS[i].format;
    return FD_FORMAT_UNKNOWN;
}

const char *fd_format_name(fd_format fmt)
{
    const format_row *row = row_of(fmt);
    return row ? row->name : NULL;
}

fd_format fd_format_at(size_t index)
{
    return index < NFORMATS ? FORMATS[index].format : FD_FORMAT_UNKNOWN;
}

fd_status fd_read_header(fd_format fmt, const uint8_t *data, size_t size, fd_info *info,
                         fd_error *err)
{
    const fd_codec *codec = codec_of(fmt);
    return codec ? codec->read_header(data, size, info, err) : not_native(err);
}

/* The crop before resizing: unflipped, interleaved, exactly what the format
 * decoder produces for the same crop and scale. */
static fd_options region_options(const fd_options *opt)
{
    fd_options r = *opt;
    r.size_height = r.size_width = 0;
    r.flip = 0;
    r.layout = FD_LAYOUT_HWC;
    return r;
}

/* The shape of `region` resampled to opt's size. */
static fd_status resized_shape(const fd_options *opt, const fd_shape *region, fd_shape *out,
                               fd_error *err)
{
    size_t px;
    *out = *region;
    if (!fd_mul_size(opt->size_height, opt->size_width, &px) ||
        !fd_mul_size(px, region->channels, &out->nbytes))
        return fd_fail(err, FD_ERR_TOO_LARGE, "output size overflows");
    out->height = opt->size_height;
    out->width = opt->size_width;
    return FD_OK;
}

fd_status fd_plan(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                  fd_shape *shape, fd_error *err)
{
    const fd_codec *codec = codec_of(fmt);
    if (!codec)
        return not_native(err);
    if (!opt->size_height)
        return codec->plan(data, size, opt, shape, err);
    fd_options r = region_options(opt);
    fd_shape region;
    fd_status st = codec->plan(data, size, &r, &region, err);
    return st == FD_OK ? resized_shape(opt, &region, shape, err) : st;
}

fd_status fd_plan_dims(uint32_t h, uint32_t w, const fd_options *opt, fd_geometry *geo,
                       fd_shape *shape, fd_error *err)
{
    fd_status st = fd_check_pixels(h, w, opt->max_pixels, err);
    if (st != FD_OK)
        return st;
    fd_options r = region_options(opt);
    st = fd_plan_geometry(h, w, &r, geo, err);
    if (st == FD_OK)
        st = fd_geometry_shape(geo, &r, shape, err);
    if (st == FD_OK && opt->size_height)
        st = resized_shape(opt, shape, shape, err);
    return st;
}

/* Sub-pixel source box of the crop inside the decoded region: the region
 * starts at floor(start * M/8) and the crop spans len * M/8 pixels. */
static void crop_box(const fd_options *opt, int m, uint32_t region_h, uint32_t region_w,
                     fd_box *box)
{
    box->x0 = box->y0 = 0.0;
    box->x1 = region_w;
    box->y1 = region_h;
    if (!opt->has_crop)
        return;
    const double s = m / 8.0;
    const double y0 = opt->crop.top * s, x0 = opt->crop.left * s;
    box->y0 = y0 - floor(y0);
    box->x0 = x0 - floor(x0);
    box->y1 = fmin(box->y0 + opt->crop.height * s, region_h);
    box->x1 = fmin(box->x0 + opt->crop.width * s, region_w);
}

fd_status fd_decode(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                    uint8_t *out, size_t out_size, fd_error *err)
{
    const fd_codec *codec = codec_of(fmt);
    if (!codec)
        return not_native(err);
    if (!opt->size_height)
        return codec->decode(data, size, opt, out, out_size, err);

    fd_options r = region_options(opt);
    fd_shape region;
    fd_status st = codec->plan(data, size, &r, &region, err);
    if (st != FD_OK)
        return st;
    fd_shape final;
    st = resized_shape(opt, &region, &final, err);
    if (st != FD_OK)
        return st;
    if (final.nbytes != out_size)
        return fd_fail(err, FD_ERR_ARGUMENT, "output buffer has %zu bytes, expected %zu",
                       out_size, final.nbytes);
    uint8_t *pixels = fd_scratch(SLOT_REGION, region.nbytes);
    if (!pixels)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a %ux%u crop", region.width,
                       region.height);
    /* The scale the plan chose is now fixed, so the decode cannot differ. */
    r.scale_num = region.scale_num ? region.scale_num : 8;
    r.min_height = r.min_width = 0;
    st = codec->decode(data, size, &r, pixels, region.nbytes, err);
    if (st == FD_OK) {
        fd_box box;
        crop_box(opt, r.scale_num, region.height, region.width, &box);
        fd_dest dest = {out, opt->size_height, opt->size_width, region.channels, opt->layout,
                        opt->flip};
        st = fd_resample(pixels, (size_t)region.width * region.channels, region.height,
                         region.width, box, (fd_interp)opt->interpolation, &dest, err);
    }
    fd_scratch_trim();
    return st;
}
