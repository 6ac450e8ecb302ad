/* The floor for bench_decode.py: libjpeg-turbo's libjpeg API driven from a
 * plain C loop, with nothing a Python binding adds.
 *
 * Files are preloaded in memory, one decompress object is reused for all of
 * them (one per thread), the output is RGB (JCS_RGB, JDCT_ISLOW, fancy
 * upsampling) written straight into one preallocated buffer. Each run first
 * decodes every file once untimed (warming caches, sizing the buffer,
 * finding the files libjpeg cannot decode to RGB), then times a pass over
 * the files that decoded, shared among --threads threads.
 *
 *   c_floor [--min-size N | --min-size-pow2 N] [--crop-area F | --boxes BOXES]
 *           [--threads T] [--check | --serve] LIST
 *
 * LIST names one file per line. --min-size N picks the smallest M/8 scale
 * whose output is at least NxN, the rule fastdecode's min_size uses;
 * --min-size-pow2 N picks among 1/8, 1/4, 1/2 and 1 only (Pillow's draft and
 * OpenCV's IMREAD_REDUCED_*), the factors with SIMD IDCTs.
 * --crop-area F decodes only a centred crop of that share of the area, with
 * jpeg_crop_scanline/jpeg_skip_scanlines and an abort after its last row.
 * --boxes BOXES gives each file of LIST its own crop and scale instead, one
 * line "TOP LEFT HEIGHT WIDTH M" per file (full-resolution pixels, M of M/8;
 * HEIGHT 0 for the whole image): the rows and columns [floor(start * M/8),
 * ceil(end * M/8)) are decoded, the same span and early abort as
 * fastdecode's crop= at that scale (bench_floor.py writes these).
 * Output, one key=value per line: "failed=I<TAB>message" per file that does
 * not decode (with --check, nothing is timed), then "images=N",
 * "seconds=S" (wall clock), "cpu_seconds=C" (the decoding threads' CPU time
 * over the same span) and "peak_rss_kib=K" (this process's peak RSS so far,
 * its VmHWM; -1 where /proc does not say). With --serve it prints "ready"
 * and then times, instead of one pass over all, each range "LO HI" of file
 * indices read from stdin, answering each with those four lines.
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <pthread.h>
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

/* A reusable decoder: one decompress object and one output buffer. */
typedef struct {
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    unsigned char *buf;
    size_t buf_size;
    char msg[JMSG_LENGTH_MAX];
} decoder_t;

/* A per-file crop from --boxes. */
typedef struct {
    long top, left, height, width; /* height 0: the whole image */
    int scale_num;                 /* M of M/8 */
} box_t;

typedef struct {
    int min_size;       /* 0: full size */
    int pow2;           /* min_size chooses among 1/2^k only */
    double crop_area;   /* 0: no crop */
    const box_t *boxes; /* NULL: no per-file crops; else one per file */
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

static double clock_seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
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

/* Smallest M/8 (or 1/2^k) whose output is at least min_size both ways. */
static void choose_scale(j_decompress_ptr c, int min_size, int pow2)
{
    c->scale_denom = 8;
    for (c->scale_num = 1; c->scale_num < 8;
         c->scale_num = pow2 ? c->scale_num * 2 : c->scale_num + 1) {
        jpeg_calc_output_dimensions(c);
        if ((int)c->output_width >= min_size && (int)c->output_height >= min_size)
            return;
    }
}

/* [floor(start * m/8), ceil((start + len) * m/8)) clipped to the scaled
 * extent: fd_scaled_span's arithmetic. */
static void scaled_span(long start, long len, int m, JDIMENSION extent, JDIMENSION *lo,
                        JDIMENSION *hi)
{
    long a = start * m / 8, b = ((start + len) * m + 7) / 8;
    *lo = (JDIMENSION)(a < (long)extent ? a : (long)extent);
    *hi = (JDIMENSION)(b < (long)extent ? b : (long)extent);
}

/* One box per file of the list, from a --boxes file. */
static box_t *read_boxes(const char *path, size_t count)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        die(path);
    box_t *boxes = calloc(count ? count : 1, sizeof *boxes);
    if (!boxes)
        die("calloc");
    for (size_t i = 0; i < count; i++) {
        box_t *b = &boxes[i];
        if (fscanf(fp, "%ld %ld %ld %ld %d", &b->top, &b->left, &b->height, &b->width,
                   &b->scale_num) != 5 || b->top < 0 || b->left < 0 || b->height < 0 ||
            b->width < 0 || b->scale_num < 1 || b->scale_num > 8) {
            fprintf(stderr, "c_floor: %s: line %zu is not TOP LEFT HEIGHT WIDTH M\n", path, i + 1);
            exit(2);
        }
    }
    fclose(fp);
    return boxes;
}

static void decoder_init(decoder_t *d)
{
    d->cinfo.err = jpeg_std_error(&d->err.pub);
    d->err.pub.error_exit = on_error;
    d->err.pub.output_message = on_message;
    jpeg_create_decompress(&d->cinfo);
    d->buf = NULL;
    d->buf_size = 0;
}

static void decoder_reserve(decoder_t *d, size_t size)
{
    if (size <= d->buf_size)
        return;
    free(d->buf);
    d->buf = malloc(size);
    if (!d->buf)
        die("malloc");
    memset(d->buf, 0, size); /* fault the pages in now, not while timing */
    d->buf_size = size;
}

/* Decodes one file into d->buf, growing it when a file needs more; returns
 * 0 on success, or 1 with libjpeg's message in d->msg. */
static int decode(decoder_t *d, const file_t *f, const options_t *opt, const box_t *box)
{
    j_decompress_ptr c = &d->cinfo;
    if (setjmp(d->err.jump)) {
        (*c->err->format_message)((j_common_ptr)c, d->msg);
        jpeg_abort_decompress(c);
        return 1;
    }
    jpeg_mem_src(c, f->data, f->size);
    jpeg_read_header(c, TRUE);
    c->out_color_space = JCS_RGB;
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    if (opt->min_size)
        choose_scale(c, opt->min_size, opt->pow2);
    if (box) {
        c->scale_num = (unsigned)box->scale_num;
        c->scale_denom = 8;
    }
    jpeg_start_decompress(c);

    JDIMENSION rows = c->output_height, top = 0, width = c->output_width;
    if (box && box->height > 0) {
        JDIMENSION x0, x1;
        scaled_span(box->top, box->height, box->scale_num, c->output_height, &top, &rows);
        scaled_span(box->left, box->width, box->scale_num, c->output_width, &x0, &x1);
        rows -= top;
        width = x1 - x0;
        jpeg_crop_scanline(c, &x0, &width); /* widens to iMCU boundaries */
    } else if (opt->crop_area > 0) {
        double side = sqrt(opt->crop_area);
        JDIMENSION crop_width = (JDIMENSION)(width * side);
        JDIMENSION left = (width - crop_width) / 2;
        width = crop_width;
        rows = (JDIMENSION)(c->output_height * side);
        top = (c->output_height - rows) / 2;
        jpeg_crop_scanline(c, &left, &width); /* widens to iMCU boundaries */
    }
    size_t stride = (size_t)width * 3;
    decoder_reserve(d, stride * rows);
    if (top)
        jpeg_skip_scanlines(c, top);
    for (JDIMENSION y = 0; y < rows;) {
        JSAMPROW row[16];
        JDIMENSION n = rows - y < 16 ? rows - y : 16;
        for (JDIMENSION i = 0; i < n; i++)
            row[i] = d->buf + (y + i) * stride;
        y += jpeg_read_scanlines(c, row, n);
    }
    if (c->output_scanline < c->output_height)
        jpeg_abort_decompress(c); /* the rows below the crop are never needed */
    else
        jpeg_finish_decompress(c);
    return 0;
}

static const box_t *file_box(const options_t *opt, size_t i)
{
    return opt->boxes ? &opt->boxes[i] : NULL;
}

/* One timed pass over files[next..end), shared by the worker threads
 * through a work counter. */
typedef struct {
    const file_t *files;
    const char *decodable;
    size_t count;
    const options_t *opt;
    size_t buf_size;          /* the largest output, from the untimed pass */
    size_t next, end;         /* the files still to take */
    pthread_barrier_t start;  /* workers are ready: the clock starts */
} pass_t;

/* VmHWM from /proc/self/status, not getrusage's ru_maxrss: that one keeps,
 * across exec, the peak of the process that spawned this one. */
static long peak_rss_kib(void)
{
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (status && fgets(line, sizeof line, status))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (status)
        fclose(status);
    return kib;
}

/* A worker thread and the CPU time it spent decoding. */
typedef struct {
    pass_t *pass;
    double cpu_seconds;
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    pass_t *pass = w->pass;
    decoder_t d;
    decoder_init(&d);
    decoder_reserve(&d, pass->buf_size);
    pthread_barrier_wait(&pass->start);
    /* Per thread, from the barrier on: its set-up is not timed either. */
    double cpu0 = clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    for (;;) {
        size_t i = __atomic_fetch_add(&pass->next, 1, __ATOMIC_RELAXED);
        if (i >= pass->end)
            break;
        if (pass->decodable[i])
            decode(&d, &pass->files[i], pass->opt, file_box(pass->opt, i));
    }
    w->cpu_seconds = clock_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    jpeg_destroy_decompress(&d.cinfo);
    free(d.buf);
    return NULL;
}

/* Prints how many files of [lo, hi) decoded, the seconds and CPU seconds
 * they took, and the peak RSS. */
static void timed_pass(pass_t *pass, size_t lo, size_t hi, int threads)
{
    pthread_t tid[64];
    worker_t workers[64];
    size_t images = 0;
    for (size_t i = lo; i < hi; i++)
        images += (size_t)pass->decodable[i];
    pass->next = lo;
    pass->end = hi;
    if (pthread_barrier_init(&pass->start, NULL, (unsigned)threads + 1))
        die("pthread_barrier_init");
    for (int t = 0; t < threads; t++) {
        workers[t] = (worker_t){pass, 0.0};
        if (pthread_create(&tid[t], NULL, worker, &workers[t]))
            die("pthread_create");
    }
    pthread_barrier_wait(&pass->start);
    double t0 = clock_seconds(CLOCK_MONOTONIC), cpu_seconds = 0.0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        cpu_seconds += workers[t].cpu_seconds;
    }
    double seconds = clock_seconds(CLOCK_MONOTONIC) - t0;
    pthread_barrier_destroy(&pass->start);
    printf("images=%zu\nseconds=%.9f\ncpu_seconds=%.9f\npeak_rss_kib=%ld\n", images, seconds,
           cpu_seconds, peak_rss_kib());
    fflush(stdout);
}

/* Times the ranges "LO HI" read from stdin, one per line, so that the
 * caller can interleave short slices of this floor with other decoders. */
static void serve(pass_t *pass, int threads)
{
    printf("ready\n");
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        size_t lo, hi;
        if (sscanf(line, "%zu %zu", &lo, &hi) != 2 || lo > hi || hi > pass->count) {
            fprintf(stderr, "c_floor: bad range: %s", line);
            exit(2);
        }
        timed_pass(pass, lo, hi, threads);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: c_floor [--min-size N | --min-size-pow2 N] [--crop-area F | --boxes "
                    "BOXES] [--threads T] [--check | --serve] LIST\n");
    exit(2);
}

int main(int argc, char **argv)
{
    options_t opt = {0, 0, 0.0, NULL};
    int threads = 1, check = 0, serving = 0;
    const char *list = NULL, *boxes = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-size") && i + 1 < argc)
            opt.min_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-size-pow2") && i + 1 < argc)
            opt.min_size = atoi(argv[++i]), opt.pow2 = 1;
        else if (!strcmp(argv[i], "--crop-area") && i + 1 < argc)
            opt.crop_area = atof(argv[++i]);
        else if (!strcmp(argv[i], "--boxes") && i + 1 < argc)
            boxes = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check"))
            check = 1;
        else if (!strcmp(argv[i], "--serve"))
            serving = 1;
        else if (argv[i][0] != '-' && !list)
            list = argv[i];
        else
            usage();
    }
    if (!list || opt.min_size < 0 || opt.crop_area < 0 || opt.crop_area > 1 || threads < 1
        || threads > 64 || (check && serving) || (boxes && (opt.crop_area > 0 || opt.min_size)))
        usage();

    pass_t pass = {0};
    pass.files = read_list(list, &pass.count);
    box_t *file_boxes = boxes ? read_boxes(boxes, pass.count) : NULL;
    opt.boxes = file_boxes;
    char *decodable = calloc(pass.count ? pass.count : 1, 1);
    if (!decodable)
        die("calloc");
    pass.decodable = decodable;
    pass.opt = &opt;
    decoder_t d;
    decoder_init(&d);
    for (size_t i = 0; i < pass.count; i++) {
        if (decode(&d, &pass.files[i], &opt, file_box(&opt, i)))
            printf("failed=%zu\t%s\n", i, d.msg);
        else
            decodable[i] = 1;
    }
    pass.buf_size = d.buf_size;
    jpeg_destroy_decompress(&d.cinfo);
    free(d.buf);

    if (serving)
        serve(&pass, threads);
    else if (!check)
        timed_pass(&pass, 0, pass.count, threads);
    for (size_t i = 0; i < pass.count; i++)
        free(pass.files[i].data);
    free((void *)pass.files);
    free(decodable);
    free(file_boxes);
    return 0;
}
