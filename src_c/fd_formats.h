/* The formats the native core decodes: this list is the only place that names them.
 *
 * One row per format, in the order fd_sniff tries them:
 *   ROW(constant, name, codec)
 * constant  the fd_format member the row defines (numbered from 1, in row order);
 * name      what the binding reports for it (ImageInfo.format, _native.sniff) and
 *           the key of its row in fastdecode/_formats.py;
 * codec     the format's entry points (an fd_codec, fd_common.h), defined in its
 *           own C file (fd_jpeg.c: fd_jpeg_codec).
 * fd_pipeline.c dispatches through these rows. A new format is a row here plus
 * its C file, and its row in fastdecode/_formats.py (docs/decisions/core.md).
 */
#ifndef FD_FORMATS_H
#define FD_FORMATS_H

/* PNG and WebP are rows only where their library was found (setup.py
 * defines FD_HAVE_SPNG / FD_HAVE_WEBP); without it they go to Pillow. */
#ifdef FD_HAVE_SPNG
#define FD_FORMAT_ROW_PNG(ROW) ROW(FD_FORMAT_PNG, "png", fd_png_codec)
#else
#define FD_FORMAT_ROW_PNG(ROW)
#endif
#ifdef FD_HAVE_WEBP
#define FD_FORMAT_ROW_WEBP(ROW) ROW(FD_FORMAT_WEBP, "webp", fd_webp_codec)
#else
#define FD_FORMAT_ROW_WEBP(ROW)
#endif

#define FD_FORMAT_ROWS(ROW)                   \
    ROW(FD_FORMAT_JPEG, "jpeg", fd_jpeg_codec) \
    ROW(FD_FORMAT_BMP, "bmp", fd_bmp_codec)    \
    FD_FORMAT_ROW_PNG(ROW)                    \
    FD_FORMAT_ROW_WEBP(ROW)

#define FD_FORMAT_ENUM_ROW(constant, name, codec) constant,
typedef enum { FD_FORMAT_UNKNOWN = 0, FD_FORMAT_ROWS(FD_FORMAT_ENUM_ROW) } fd_format;
#undef FD_FORMAT_ENUM_ROW

#endif
