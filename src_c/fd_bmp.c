#include "fd_bmp.h"

/* Placeholder until the BMP reader lands. */
fd_status fd_bmp_read_header(const uint8_t *data, size_t size, fd_info *info, fd_error *err)
{
    (void)data; (void)size; (void)info;
    return fd_fail(err, FD_ERR_UNSUPPORTED, "BMP is not implemented yet");
}

fd_status fd_bmp_plan(const uint8_t *data, size_t size, const fd_options *opt, fd_shape *shape,
                      fd_error *err)
{
    (void)data; (void)size; (void)opt; (void)shape;
    return fd_fail(err, FD_ERR_UNSUPPORTED, "BMP is not implemented yet");
}

fd_status fd_bmp_decode(const uint8_t *data, size_t size, const fd_options *opt, uint8_t *out,
                        size_t out_size, fd_error *err)
{
    (void)data; (void)size; (void)opt; (void)out; (void)out_size;
    return fd_fail(err, FD_ERR_UNSUPPORTED, "BMP is not implemented yet");
}
