/* The floor for bench_decode.py: libjpeg-turbo's libjpeg API driven from a
 * plain C loop, with nothing a Python binding adds.
 *
 * Files are preloaded in memory, one decompress object is reused for all of
 * them, the output is RGB (JCS_RGB, JDCT_ISLOW, fancy upsampling) written
 * straight into one preallocated buffer. Each run first decodes every file
 * once untimed (warming caches, sizing the buffer, finding the files libjpeg
 * cannot decode to RGB), then times --passes passes over the files that
 * decoded.
 *
 *   c_floor [--min-size N] [--crop-area F] [--passes P] [--check] LIST
 *
 * LIST names one file per line. --min-size N picks the smallest M/8 scale
 * whose output is at least NxN, the rule fastdecode's min_size uses.
 * --crop-area F decodes only a centred crop of that share of the area, with
 * jpeg_crop_scanline/jpeg_skip_scanlines and an abort after its last row.
 * Output, one key=value per line: "failed=I<TAB>message" per file that does
 * not decode (with --check, nothing else is timed), then "images=N" and
 * "seconds=S" per timed pass.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>

typedef struct {
    unsigned char *data;
    unsigned long size;
} file_t;

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} error_mgr;

typedef struct {
    int min_size;     /* 0: full size */
    double crop_area; /* 0: no crop */
} options_t;

static void on_error(j_common_ptr cinfo)
{
    longjmp(((error_mgr *)cinfo->err)->jump, 1);
}

/* Corrupt-data warnings would only add noise to the output. */
static void on_message(j_common_ptr cinfo)
{
    (void)cinfo;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int read_file(const char *path, file_t *f)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    int ok = fseek(fp, 0, SEEK_END) == 0;
    long size = ok ? ftell(fp) : -1;
    ok = size > 0 && fseek(fp, 0, SEEK_SET) == 0;
    f->data = ok ? malloc((size_t)size) : NULL;
    ok = f->data && fread(f->data, 1, (size_t)size, fp) == (size_t)size;
    f->size = (unsigned long)size;
    fclose(fp);
    return ok;
}

static file_t *read_list(const char *list_path, size_t *count)
{
    FILE *list = fopen(list_path, "r");
    if (!list)
        die(list_path);
    size_t n = 0, cap = 1024;
    file_t *files = malloc(cap * sizeof *files);
    char line[4096];
    while (files && fgets(line, sizeof line, list)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        if (n == cap)
            files = realloc(files, (cap *= 2) * sizeof *files);
        if (!files)
            break;
        if (!read_file(line, &files[n]))
            die(line);
        n++;
    }
    if (!files)
        die("malloc");
    fclose(list);
    *count = n;
    return files;
}

/* Smallest M/8 whose output is at least min_size in both directions. */
static void choose_scale(j_decompress_ptr c, int min_size)
{
    c->scale_denom = 8;
    for (c->scale_num = 1; c->scale_num < 8; c->scale_num++) {
        jpeg_calc_output_dimensions(c);
        if ((int)c->output_width >= min_size && (int)c->output_height >= min_size)
            return;
    }
}

/* Decodes one file into *buf, growing it when a file needs more; returns 0
 * on success, or 1 with libjpeg's message in msg. */
static int decode(j_decompress_ptr c, error_mgr *err, const file_t *f, const options_t *opt,
                  unsigned char **buf, size_t *buf_size, char *msg)
{
    if (setjmp(err->jump)) {
        (*c->err->format_message)((j_common_ptr)c, msg);
        jpeg_abort_decompress(c);
        return 1;
    }
    jpeg_mem_src(c, f->data, f->size);
    jpeg_read_header(c, TRUE);
    c->out_color_space = JCS_RGB;
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    if (opt->min_size)
        choose_scale(c, opt->min_size);
    jpeg_start_decompress(c);

    JDIMENSION rows = c->output_height, top = 0, width = c->output_width;
    if (opt->crop_area > 0) {
        double side = sqrt(opt->crop_area);
        JDIMENSION crop_width = (JDIMENSION)(width * side);
        JDIMENSION left = (width - crop_width) / 2;
        width = crop_width;
        rows = (JDIMENSION)(c->output_height * side);
        top = (c->output_height - rows) / 2;
        jpeg_crop_scanline(c, &left, &width); /* widens to iMCU boundaries */
    }
    size_t stride = (size_t)width * 3, need = stride * rows;
    if (need > *buf_size) {
        free(*buf);
        *buf = malloc(need);
        if (!*buf)
            die("malloc");
        *buf_size = need;
    }
    if (top)
        jpeg_skip_scanlines(c, top);
    for (JDIMENSION y = 0; y < rows;) {
        JSAMPROW row[16];
        JDIMENSION n = rows - y < 16 ? rows - y : 16;
        for (JDIMENSION i = 0; i < n; i++)
            row[i] = *buf + (y + i) * stride;
        y += jpeg_read_scanlines(c, row, n);
    }
    if (c->output_scanline < c->output_height)
        jpeg_abort_decompress(c); /* the rows below the crop are never needed */
    else
        jpeg_finish_decompress(c);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: c_floor [--min-size N] [--crop-area F] [--passes P] [--check] LIST\n");
    exit(2);
}

int main(int argc, char **argv)
{
    options_t opt = {0, 0.0};
    int passes = 1, check = 0;
    const char *list = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-size") && i + 1 < argc)
            opt.min_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--crop-area") && i + 1 < argc)
            opt.crop_area = atof(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check"))
            check = 1;
        else if (argv[i][0] != '-' && !list)
            list = argv[i];
        else
            usage();
    }
    if (!list || opt.min_size < 0 || opt.crop_area < 0 || opt.crop_area > 1 || passes < 1)
        usage();

    size_t n;
    file_t *files = read_list(list, &n);
    char *decodable = calloc(n ? n : 1, 1);
    struct jpeg_decompress_struct c;
    error_mgr err;
    c.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.output_message = on_message;
    jpeg_create_decompress(&c);
    unsigned char *buf = NULL;
    size_t buf_size = 0, ok = 0;
    char msg[JMSG_LENGTH_MAX];

    for (size_t i = 0; i < n; i++) {
        if (decode(&c, &err, &files[i], &opt, &buf, &buf_size, msg))
            printf("failed=%zu\t%s\n", i, msg);
        else
            decodable[i] = 1, ok++;
    }
    for (int p = 0; p < passes && !check; p++) {
        double t0 = now();
        for (size_t i = 0; i < n; i++)
            if (decodable[i])
                decode(&c, &err, &files[i], &opt, &buf, &buf_size, msg);
        printf("images=%zu\nseconds=%.9f\n", ok, now() - t0);
    }
    jpeg_destroy_decompress(&c);
    free(buf);
    for (size_t i = 0; i < n; i++)
        free(files[i].data);
    free(files);
    free(decodable);
    return 0;
}
