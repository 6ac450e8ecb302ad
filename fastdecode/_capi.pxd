# Declarations of the plain-C core (src_c/) that the binding uses; the
# format decoders are reached through fd_pipeline.h, which dispatches on
# fd_formats.h's rows. Nothing here touches Python.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "fd_formats.h" nogil:
    # FD_FORMAT_ROWS' members; the binding names one only in that format's .pxi
    ctypedef enum fd_format:
        FD_FORMAT_UNKNOWN
        FD_FORMAT_JPEG
        FD_FORMAT_BMP


cdef extern from "fd_common.h" nogil:
    ctypedef enum fd_status:
        FD_OK
        FD_ERR_DECODE
        FD_ERR_UNSUPPORTED
        FD_ERR_TOO_LARGE
        FD_ERR_ARGUMENT
        FD_ERR_NOMEM

    ctypedef struct fd_error:
        fd_status status
        char message[240]

    ctypedef enum fd_mode:
        FD_MODE_RGB
        FD_MODE_L

    ctypedef enum fd_layout:
        FD_LAYOUT_HWC
        FD_LAYOUT_CHW

    ctypedef enum fd_color_space:
        FD_CS_GRAY
        FD_CS_YCBCR
        FD_CS_RGB
        FD_CS_CMYK
        FD_CS_YCCK
        FD_CS_OTHER
        FD_CS_PALETTE

    ctypedef enum fd_subsampling:
        FD_SS_NONE
        FD_SS_444
        FD_SS_422
        FD_SS_420
        FD_SS_440
        FD_SS_411
        FD_SS_GRAY
        FD_SS_OTHER

    ctypedef struct fd_info:
        fd_format format
        uint32_t width
        uint32_t height
        int channels
        fd_color_space color_space
        fd_subsampling subsampling
        int progressive
        int orientation
        int bits_per_pixel

    ctypedef struct fd_rect:
        int64_t top
        int64_t left
        int64_t height
        int64_t width

    uint64_t FD_DEFAULT_MAX_PIXELS
    uint32_t FD_DEFAULT_MAX_WORK_PER_BYTE

    ctypedef struct fd_options:
        fd_mode mode
        fd_layout layout
        int scale_num
        uint32_t min_height
        uint32_t min_width
        int simd_scales_only
        int has_crop
        fd_rect crop
        int flip
        int exif
        int fast
        int strict
        uint64_t max_pixels
        uint32_t max_work_per_byte
        uint32_t size_height
        uint32_t size_width
        int interpolation

    ctypedef struct fd_shape:
        uint32_t height
        uint32_t width
        uint32_t channels
        size_t nbytes
        int scale_num

    ctypedef struct fd_geometry:
        int scale_num
        uint32_t scaled_height
        uint32_t scaled_width
        fd_rect region

    void fd_options_init(fd_options *opt)
    fd_status fd_check_work(uint64_t blocks, size_t size, uint32_t max_work_per_byte,
                            const char *what, fd_error *err)


cdef extern from "fd_jpeg.h" nogil:
    void fd_jpeg_library_info(char *version, size_t version_len, int *simd)


cdef extern from "fd_png.h" nogil:
    const char *fd_png_library_version()


cdef extern from "fd_webp.h" nogil:
    const char *fd_webp_library_version()


cdef extern from "fd_resample.h" nogil:
    ctypedef enum fd_interp:
        FD_INTERP_NEAREST
        FD_INTERP_BILINEAR
        FD_INTERP_BICUBIC

    ctypedef struct fd_box:
        double x0
        double y0
        double x1
        double y1

    ctypedef struct fd_dest:
        uint8_t *base
        uint32_t height
        uint32_t width
        uint32_t channels
        fd_layout layout
        int flip

    fd_status fd_resample(const uint8_t *src, size_t stride, uint32_t src_h, uint32_t src_w,
                          fd_box box, fd_interp interp, const fd_dest *dst, fd_error *err)


cdef extern from "fd_pipeline.h" nogil:
    fd_format fd_sniff(const uint8_t *data, size_t size)
    const char *fd_format_name(fd_format fmt)
    fd_format fd_format_at(size_t index)
    fd_status fd_read_header(fd_format fmt, const uint8_t *data, size_t size, fd_info *info,
                             fd_error *err)
    fd_status fd_plan(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                      fd_shape *shape, fd_error *err)
    fd_status fd_plan_dims(uint32_t h, uint32_t w, const fd_options *opt, fd_geometry *geo,
                           fd_shape *shape, fd_error *err)
    fd_status fd_decode(fd_format fmt, const uint8_t *data, size_t size, const fd_options *opt,
                        uint8_t *out, size_t out_size, fd_error *err)


cdef extern from "fd_color.h" nogil:
    ctypedef enum fd_color_op:
        FD_COLOR_BRIGHTNESS
        FD_COLOR_CONTRAST
        FD_COLOR_SATURATION
        FD_COLOR_HUE

    ctypedef struct fd_color_step:
        fd_color_op op
        float factor

    enum: FD_COLOR_MAX_STEPS

    fd_status fd_color_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                             fd_layout layout, const fd_color_step *steps, size_t nsteps,
                             fd_error *err)


cdef extern from "fd_augment.h" nogil:
    ctypedef enum fd_aug_kind:
        FD_AUG_COLOR
        FD_AUG_AFFINE
        FD_AUG_LUT
        FD_AUG_AUTOCONTRAST
        FD_AUG_EQUALIZE
        FD_AUG_SHARPNESS
        FD_AUG_BLUR

    enum: FD_AUG_NEAREST
    enum: FD_AUG_BILINEAR
    enum: FD_AUG_BICUBIC
    enum: FD_AUG_MAX_STEPS

    ctypedef struct fd_aug_step:
        fd_aug_kind kind
        fd_color_step color
        double matrix[6]
        int resample
        uint8_t fill[3]
        const uint8_t *table
        float factor
        int32_t ksize[2]
        float sigma[2]

    fd_status fd_augment_apply(uint8_t *pixels, size_t size, uint32_t height, uint32_t width,
                               fd_layout layout, const fd_aug_step *steps, size_t nsteps,
                               fd_error *err)


cdef extern from "fd_readahead.h" nogil:
    ctypedef struct fd_ra:
        pass

    ctypedef struct fd_ra_job:
        pass

    enum:
        FD_RA_OK
        FD_RA_OPEN
        FD_RA_STAT
        FD_RA_READ
        FD_RA_NOMEM
        FD_RA_LIMIT
        FD_RA_MAX_DEPTH
        FD_FILE_NOT_REGULAR

    ctypedef struct fd_ra_result:
        const unsigned char *data
        size_t length
        int error
        int step
        double latency
        int waited

    ctypedef struct fd_ra_stats:
        int64_t in_flight
        int64_t bytes
        int64_t peak_in_flight
        int64_t peak_bytes
        int64_t started
        int64_t failed
        int64_t threads
        int64_t mappings
        int64_t spare_bytes

    fd_status fd_ra_new(int64_t max_bytes, int64_t max_file, fd_ra **out, fd_error *err)
    fd_status fd_ra_submit(fd_ra *pool, const char *path, int64_t size, fd_ra_job **out,
                           fd_error *err)
    void fd_ra_configure(fd_ra *pool, int depth, int holding)
    fd_status fd_ra_take(fd_ra *pool, fd_ra_job *job, fd_ra_result *res, fd_error *err)
    void fd_ra_release(fd_ra *pool, fd_ra_job *job)
    void fd_ra_drop(fd_ra *pool, fd_ra_job *job)
    void fd_ra_get_stats(fd_ra *pool, fd_ra_stats *out)
    void fd_ra_free(fd_ra *pool, double wait_s)
    int fd_file_open(const char *path, int *fd)
    int fd_file_size(int fd, int64_t *size)
    int fd_file_read(int fd, unsigned char *buf, size_t cap, size_t expect, size_t *len)
