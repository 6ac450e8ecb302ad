/* Read-ahead pool: threads that read whole local files within a count and a
 * byte bound (the contract is in fd_readahead.h). */
#define _GNU_SOURCE /* MADV_DONTFORK, SCHED_BATCH, pthread_setname_np */
#include "fd_readahead.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { QUEUED = 0, RUNNING, DONE };

#define MIN_SHIFT 16 /* mappings are powers of two from 64 KiB */
#define MAX_SHIFT 62
#define STACK_BYTES (512 * 1024)

struct fd_ra_job {
    fd_ra_job *prev, *next; /* the live jobs (not dropped, not released), in submission order */
    char *path;
    int64_t size;     /* given at submit, -1: unknown */
    int state;
    int dropped;      /* out of the live list while its read runs: released when it ends */
    int64_t reserved; /* bytes held against the cap; -1: not reserved yet */
    int waiting_room; /* its reader waits on `room` */
    pthread_cond_t room;
    unsigned char *buf; /* a mapping of `cap` bytes, or NULL */
    size_t cap, len;
    int error, step;
    double latency;
};

struct fd_ra {
    pthread_mutex_t mu;
    pthread_cond_t work; /* idle threads wait here */
    pthread_cond_t done; /* the consumer waits here for a job or a free place */
    pthread_cond_t gone; /* fd_ra_free waits here for the threads to end */
    fd_ra_job *head, *tail;
    fd_ra_job *cursor; /* the first live job not started (every later live one is queued too) */
    int64_t queued;    /* live jobs not started */
    int64_t max_bytes;
    int64_t max_file; /* the per-file limit (set once, read unlocked) */
    int depth, holding, closing, orphaned;
    int64_t started_now, bytes; /* the count and byte bounds' use */
    int threads, idle;
    void *spare[MAX_SHIFT + 1]; /* unused mappings by size class, linked through their first word */
    int64_t spare_bytes;
    fd_ra_stats stats;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- mappings (under mu) ------------------------------------------------- */

static int shift_for(size_t want) /* the size class holding `want` bytes; -1: too large */
{
    int s = MIN_SHIFT;
    while (s <= MAX_SHIFT && ((size_t)1 << s) < want)
        s++;
    return s <= MAX_SHIFT ? s : -1;
}

static void *map_get(fd_ra *pool, int shift)
{
    void *p = pool->spare[shift];
    if (p) {
        memcpy(&pool->spare[shift], p, sizeof(void *));
        pool->spare_bytes -= (int64_t)1 << shift;
        return p;
    }
    p = mmap(NULL, (size_t)1 << shift, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pool->stats.mappings++;
#ifdef MADV_DONTFORK
    madvise(p, (size_t)1 << shift, MADV_DONTFORK); /* a forked worker starts without them */
#endif
    return p;
}

static void map_put(fd_ra *pool, void *p, size_t cap)
{
    int shift = shift_for(cap);
    if (!p)
        return;
    if (!pool->closing && pool->spare_bytes + (int64_t)cap <= pool->max_bytes) {
        memcpy(p, &pool->spare[shift], sizeof(void *));
        pool->spare[shift] = p;
        pool->spare_bytes += (int64_t)cap;
        return;
    }
    munmap(p, cap);
}

/* -- bookkeeping (under mu) ---------------------------------------------- */

static void unlink_job(fd_ra *pool, fd_ra_job *job)
{
    if (pool->cursor == job)
        pool->cursor = job->next;
    if (job->prev)
        job->prev->next = job->next;
    else
        pool->head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        pool->tail = job->prev;
    job->prev = job->next = NULL;
}

static void free_job(fd_ra_job *job)
{
    pthread_cond_destroy(&job->room);
    free(job->path);
    free(job);
}

static void wake_first(fd_ra *pool) /* the first job still to reserve may try */
{
    for (fd_ra_job *j = pool->head; j; j = j->next) {
        if (j->reserved < 0) {
            if (j->waiting_room)
                pthread_cond_signal(&j->room);
            return;
        }
    }
}

static void wake_threads(fd_ra *pool);

static void release(fd_ra *pool, fd_ra_job *job) /* its count, bytes and mapping back; freed */
{
    pool->started_now--;
    pool->bytes -= job->reserved > 0 ? job->reserved : 0;
    map_put(pool, job->buf, job->cap);
    free_job(job);
    wake_first(pool);
    pthread_cond_broadcast(&pool->done); /* a consumer waiting for a free place */
    wake_threads(pool);
}

static void drop(fd_ra *pool, fd_ra_job *job)
{
    unlink_job(pool, job);
    if (job->state == QUEUED) { /* never read */
        pool->queued--;
        free_job(job);
        wake_first(pool);
    } else if (job->state == RUNNING) { /* released when its read ends */
        job->dropped = 1;
        if (job->waiting_room)
            pthread_cond_signal(&job->room); /* not to be read now */
        wake_first(pool);
    } else {
        release(pool, job);
    }
}

static void claim(fd_ra *pool, fd_ra_job *job)
{
    pool->cursor = job->next; /* it was the cursor: jobs start in order */
    pool->queued--;
    job->state = RUNNING;
    pool->started_now++;
    pool->stats.started++;
    if (pool->started_now > pool->stats.peak_in_flight)
        pool->stats.peak_in_flight = pool->started_now;
}

/* `job` holds `bytes` against the cap from now (its earlier reservation, if
 * any, counted in them); the peak follows. */
static void hold(fd_ra *pool, fd_ra_job *job, int64_t bytes)
{
    pool->bytes += bytes - (job->reserved > 0 ? job->reserved : 0);
    job->reserved = bytes;
    if (pool->bytes > pool->stats.peak_bytes)
        pool->stats.peak_bytes = pool->bytes;
}

/* Waits until `job` may hold `size` bytes: first in submission order among
 * those not reserved, within the cap (alone when larger). 0: dropped
 * meanwhile, nothing reserved. */
static int reserve(fd_ra *pool, fd_ra_job *job, int64_t size)
{
    for (;;) {
        if (job->dropped)
            break;
        fd_ra_job *first = pool->head;
        while (first && first->reserved >= 0)
            first = first->next;
        if (first == job && (pool->bytes == 0 || size <= pool->max_bytes - pool->bytes))
            break;
        job->waiting_room = 1;
        pthread_cond_wait(&job->room, &pool->mu);
        job->waiting_room = 0;
    }
    if (job->dropped) {
        job->reserved = 0;
        wake_first(pool);
        return 0;
    }
    hold(pool, job, size);
    wake_first(pool); /* the next in order may reserve now */
    return 1;
}

/* -- one file, in the calling thread ------------------------------------- */

int fd_file_open(const char *path, int *fd)
{
    do /* O_NONBLOCK: a FIFO's open would wait for a writer (no effect on a file) */
        *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    while (*fd < 0 && errno == EINTR);
    return *fd < 0 ? (errno ? errno : EIO) : 0;
}

static int regular(mode_t mode)
{
    return S_ISREG(mode) ? 0 : S_ISDIR(mode) ? EISDIR : FD_FILE_NOT_REGULAR;
}

int fd_file_size(int fd, int64_t *size)
{
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE, &sx) == 0 &&
        (sx.stx_mask & (STATX_TYPE | STATX_SIZE)) == (STATX_TYPE | STATX_SIZE)) {
        *size = sx.stx_size > INT64_MAX ? INT64_MAX : (int64_t)sx.stx_size;
        return regular(sx.stx_mode);
    }
    struct stat st; /* no statx here (a kernel before 4.11, a filter) */
    if (fstat(fd, &st) != 0)
        return errno ? errno : EIO;
    *size = st.st_size > 0 ? (int64_t)st.st_size : 0;
    return regular(st.st_mode);
}

int fd_file_read(int fd, unsigned char *buf, size_t cap, size_t expect, size_t *len)
{
    *len = 0;
    while (*len < cap) {
        ssize_t n = read(fd, buf + *len, cap - *len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno ? errno : EIO;
        }
        if (n == 0)
            break;
        *len += (size_t)n;
        if (*len == expect) /* the size it was known to have: no read to see its end */
            break;
    }
    return 0;
}

/* -- a read (entered and left under mu; unlocked while it blocks) -------- */

static void fail(fd_ra_job *job, int step, int error)
{
    job->step = step;
    job->error = error ? error : EIO;
}

/* Reads `fd`, `size` bytes when it did not change, into the job's mapping
 * of size class `shift` (shift_for(size + 1): one byte more, so a file that
 * grew shows), grown by doubling when the file is longer (it grew after its
 * size was learnt), never past max_file + 1 bytes (then FD_RA_LIMIT).
 * Called unlocked; takes mu only for the mappings. */
static void read_all(fd_ra *pool, fd_ra_job *job, int fd, int64_t size, int shift)
{
    pthread_mutex_lock(&pool->mu);
    job->buf = map_get(pool, shift);
    pthread_mutex_unlock(&pool->mu);
    if (!job->buf) {
        fail(job, FD_RA_NOMEM, ENOMEM);
        return;
    }
    job->cap = (size_t)1 << shift;
    const size_t most = (size_t)pool->max_file + 1; /* one byte past the limit (fits a size_t) */
    for (;;) {
        if (job->len == job->cap) {
            int bigger = shift_for(job->cap + 1);
            unsigned char *grown = NULL;
            pthread_mutex_lock(&pool->mu);
            if (bigger >= 0)
                grown = map_get(pool, bigger);
            if (grown) {
                memcpy(grown, job->buf, job->len);
                map_put(pool, job->buf, job->cap);
                job->buf = grown;
                job->cap = (size_t)1 << bigger;
                shift = bigger;
            }
            pthread_mutex_unlock(&pool->mu);
            if (!grown) {
                fail(job, FD_RA_NOMEM, bigger < 0 ? EFBIG : ENOMEM);
                return;
            }
        }
        size_t room = job->cap - job->len;
        if (room > most - job->len)
            room = most - job->len;
        size_t got, expect = (size_t)size > job->len ? (size_t)size - job->len : SIZE_MAX;
        int error = fd_file_read(fd, job->buf + job->len, room, expect, &got);
        job->len += got;
        if (error) {
            fail(job, FD_RA_READ, error);
            return;
        }
        if (job->len == most) { /* it grew past the limit */
            fail(job, FD_RA_LIMIT, EFBIG);
            return;
        }
        if (job->len < job->cap)
            return;
    }
}

static void run_job(fd_ra *pool, fd_ra_job *job)
{
    double began = now_s(), waited = 0;
    pthread_mutex_unlock(&pool->mu);
    int fd = -1, error;
    int64_t size = job->size; /* given: its size is not asked for (a round trip on some) */
    if (size > pool->max_file) { /* given and over the limit: not even opened */
        size = -1;
        fail(job, FD_RA_LIMIT, EFBIG);
    } else if ((error = fd_file_open(job->path, &fd)) != 0) {
        size = -1;
        fail(job, FD_RA_OPEN, error);
    } else if (size < 0 && (error = fd_file_size(fd, &size)) != 0) {
        size = -1;
        fail(job, FD_RA_STAT, error);
    } else if (size > pool->max_file) {
        size = -1;
        fail(job, FD_RA_LIMIT, EFBIG);
    }
    int shift = size >= 0 ? shift_for((size_t)size + 1) : -1;
    if (size >= 0 && shift < 0) { /* never reserved: no mapping holds it */
        size = -1;
        fail(job, FD_RA_NOMEM, EFBIG);
    }
    pthread_mutex_lock(&pool->mu);
    int wanted = 0;
    if (size >= 0) {
        double at = now_s();
        wanted = reserve(pool, job, size);
        waited = now_s() - at;
    } else if (job->reserved < 0) { /* failed before it reserved: the next one may */
        job->reserved = 0;
        wake_first(pool);
    }
    pthread_mutex_unlock(&pool->mu);
    if (wanted)
        read_all(pool, job, fd, size, shift);
    if (fd >= 0)
        close(fd); /* unlocked: a network file system's close can be a round trip */
    pthread_mutex_lock(&pool->mu);
    if (wanted && !job->error) {
        job->latency = now_s() - began - waited;
        if ((int64_t)job->len > job->reserved) /* a file that grew */
            hold(pool, job, (int64_t)job->len);
    }
    if (job->error) {
        pool->stats.failed++;
        map_put(pool, job->buf, job->cap);
        job->buf = NULL;
        job->len = job->cap = 0;
    }
    job->state = DONE;
    if (job->dropped)
        release(pool, job);
    else
        pthread_cond_broadcast(&pool->done);
}

/* -- the threads --------------------------------------------------------- */

static void free_pool(fd_ra *pool)
{
    for (int s = 0; s <= MAX_SHIFT; s++) {
        while (pool->spare[s]) {
            void *p = pool->spare[s];
            memcpy(&pool->spare[s], p, sizeof(void *));
            munmap(p, (size_t)1 << s);
        }
    }
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->gone);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

static fd_ra_job *startable(fd_ra *pool)
{
    if (pool->holding || pool->started_now >= pool->depth)
        return NULL;
    return pool->cursor;
}

/* Named, for top -H and profilers. A read thread never preempts the work
 * it reads for: SCHED_BATCH differs from SCHED_OTHER in wake-up alone
 * (sched(7)); a thread woken (its open or read returned) waits for the
 * running one's slice to end or for an idle CPU instead of taking the CPU
 * at once. On slow storage every read ends in such wake-ups, and each had
 * cut into a decode (docs/decisions/storage-read-pool.md, "The read threads'
 * policy"). The nice value is kept; a caller that chose another policy
 * (idle, real time) keeps it for its threads too. Best effort: a refusal
 * changes nothing else. */
static void settle_thread(void)
{
#ifdef __linux__
    int policy;
    struct sched_param param;
    if (pthread_getschedparam(pthread_self(), &policy, &param) == 0 && policy == SCHED_OTHER) {
        param.sched_priority = 0;
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
    }
    pthread_setname_np(pthread_self(), "fd-readahead"); /* last: the thread is settled */
#endif
}

static void *thread_main(void *arg)
{
    fd_ra *pool = arg;
    settle_thread();
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        if (pool->closing) {
            pool->idle--; /* counted idle from its start or its last job */
            break;
        }
        fd_ra_job *job = startable(pool);
        if (!job) {
            pthread_cond_wait(&pool->work, &pool->mu);
            continue;
        }
        pool->idle--;
        claim(pool, job);
        run_job(pool, job);
        pool->idle++;
    }
    int last = --pool->threads == 0;
    if (last && pool->orphaned) { /* fd_ra_free stopped waiting: the last one out frees */
        pthread_mutex_unlock(&pool->mu);
        free_pool(pool);
        return NULL;
    }
    pthread_cond_broadcast(&pool->gone);
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* Wakes (or starts) threads for the queued jobs the count bound lets start. */
static void wake_threads(fd_ra *pool)
{
    if (pool->holding || pool->closing)
        return;
    int64_t room = pool->depth - pool->started_now;
    int64_t want = pool->queued < room ? pool->queued : room;
    if (want <= 0)
        return;
    for (int64_t i = 0; i < want && i < pool->idle; i++)
        pthread_cond_signal(&pool->work);
    while (pool->idle < want && pool->threads < pool->depth) {
        pthread_attr_t attr;
        pthread_t t;
        sigset_t all, old;
        int ok = pthread_attr_init(&attr) == 0;
        if (!ok)
            return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, STACK_BYTES);
        sigfillset(&all); /* signals stay with the process's own threads */
        pthread_sigmask(SIG_SETMASK, &all, &old);
        ok = pthread_create(&t, &attr, thread_main, pool) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (!ok)
            return; /* fewer threads: the consumer reads what none starts */
        pool->threads++;
        pool->idle++; /* counted idle until it takes a job */
    }
}

/* -- the consumer -------------------------------------------------------- */

fd_status fd_ra_new(int64_t max_bytes, int64_t max_file, fd_ra **out, fd_error *err)
{
    *out = NULL;
    fd_ra *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a read-ahead pool");
    if (pthread_mutex_init(&pool->mu, NULL) != 0) {
        free(pool);
        return fd_fail(err, FD_ERR_NOMEM, "cannot create a read-ahead pool's lock");
    }
    int conds = 0;
    pthread_cond_t *cv[3] = {&pool->work, &pool->done, &pool->gone};
    while (conds < 3 && pthread_cond_init(cv[conds], NULL) == 0)
        conds++;
    if (conds < 3) {
        while (conds > 0)
            pthread_cond_destroy(cv[--conds]);
        pthread_mutex_destroy(&pool->mu);
        free(pool);
        return fd_fail(err, FD_ERR_NOMEM, "cannot create a read-ahead pool's conditions");
    }
    pool->max_bytes = max_bytes > 0 ? max_bytes : 1;
    pool->max_file = max_file > 0 ? max_file : INT64_MAX;
    pool->depth = 1;
    *out = pool;
    return FD_OK;
}

fd_status fd_ra_submit(fd_ra *pool, const char *path, int64_t size, fd_ra_job **out,
                       fd_error *err)
{
    *out = NULL;
    fd_ra_job *job = calloc(1, sizeof(*job));
    char *copy = job ? strdup(path) : NULL;
    if (!job || !copy || pthread_cond_init(&job->room, NULL) != 0) {
        free(copy);
        free(job);
        return fd_fail(err, FD_ERR_NOMEM, "out of memory for a read-ahead job");
    }
    job->path = copy;
    job->size = size >= 0 ? size : -1;
    job->reserved = -1;
    pthread_mutex_lock(&pool->mu);
    job->prev = pool->tail;
    if (pool->tail)
        pool->tail->next = job;
    else
        pool->head = job;
    pool->tail = job;
    if (!pool->cursor)
        pool->cursor = job;
    pool->queued++;
    wake_threads(pool);
    pthread_mutex_unlock(&pool->mu);
    *out = job;
    return FD_OK;
}

void fd_ra_configure(fd_ra *pool, int depth, int holding)
{
    pthread_mutex_lock(&pool->mu);
    pool->depth = depth < 1 ? 1 : depth > FD_RA_MAX_DEPTH ? FD_RA_MAX_DEPTH : depth;
    pool->holding = holding != 0;
    wake_threads(pool);
    pthread_cond_broadcast(&pool->done); /* a consumer waiting for a free place */
    pthread_mutex_unlock(&pool->mu);
}

fd_status fd_ra_take(fd_ra *pool, fd_ra_job *job, fd_ra_result *res, fd_error *err)
{
    pthread_mutex_lock(&pool->mu);
    if (pool->head != job) { /* jobs start and reserve in order: an older one first */
        pthread_mutex_unlock(&pool->mu);
        return fd_fail(err, FD_ERR_ARGUMENT,
                       "a read taken before an older one was taken or dropped");
    }
    res->waited = job->state != DONE;
    /* no thread took it yet: read it here, in bounds; while this waits for a
     * free place, a thread may take it (the place that freed is then its) */
    while (job->state == QUEUED && pool->started_now >= pool->depth)
        pthread_cond_wait(&pool->done, &pool->mu);
    if (job->state == QUEUED) {
        claim(pool, job);
        run_job(pool, job);
    } else {
        wake_first(pool); /* at the front, so its bytes are reserved first */
        while (job->state != DONE)
            pthread_cond_wait(&pool->done, &pool->mu);
    }
    unlink_job(pool, job);
    res->data = job->buf;
    res->length = job->len;
    res->error = job->error;
    res->step = job->step;
    res->latency = job->latency;
    pthread_mutex_unlock(&pool->mu);
    return FD_OK;
}

void fd_ra_release(fd_ra *pool, fd_ra_job *job)
{
    pthread_mutex_lock(&pool->mu);
    release(pool, job);
    pthread_mutex_unlock(&pool->mu);
}

void fd_ra_drop(fd_ra *pool, fd_ra_job *job)
{
    pthread_mutex_lock(&pool->mu);
    drop(pool, job);
    pthread_mutex_unlock(&pool->mu);
}

void fd_ra_get_stats(fd_ra *pool, fd_ra_stats *out)
{
    pthread_mutex_lock(&pool->mu);
    *out = pool->stats;
    out->in_flight = pool->started_now;
    out->bytes = pool->bytes;
    out->threads = pool->threads;
    out->spare_bytes = pool->spare_bytes;
    pthread_mutex_unlock(&pool->mu);
}

void fd_ra_free(fd_ra *pool, double wait_s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)wait_s;
    until.tv_nsec += (long)((wait_s - (double)(time_t)wait_s) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&pool->mu);
    while (pool->head)
        drop(pool, pool->head);
    pool->closing = 1;
    pthread_cond_broadcast(&pool->work);
    while (pool->threads > 0) {
        if (pthread_cond_timedwait(&pool->gone, &pool->mu, &until) == ETIMEDOUT)
            break;
    }
    if (pool->threads > 0) {
        pool->orphaned = 1;
        pthread_mutex_unlock(&pool->mu);
        return;
    }
    pthread_mutex_unlock(&pool->mu);
    free_pool(pool);
}
