/* pool_read.so: a read pool in C, for benchmarks/bench_io_ways.py's paced rows
 * only (what the read-ahead window's threads would cost without Python: no
 * GIL, no Python condition variables; docs/decisions/storage.md, "What a read
 * pool in C would save"). Not the library's: its window is
 * fastdecode/data/_readahead.py.
 *
 * pool_new(depth) starts DEPTH threads; pool_submit(pool, path) queues a read
 * (its id, or -1 when CAP reads are live); pool_take(pool, id, &len, &err)
 * waits for that read (reading it in the caller when no thread started it)
 * and returns its bytes (NULL with err = errno on failure); pool_release(pool,
 * id) frees them and frees its place; pool_close(pool) joins the threads and
 * frees everything. At most DEPTH reads are started and not released. Ids
 * are taken and released in submission order (one consumer). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CAP = 1024, MAX_THREADS = 256 };
enum { QUEUED, STARTED, DONE };

typedef struct {
    char *path, *buf;
    size_t len;
    int state, err;
} entry;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    entry e[CAP];
    long head, next, tail; /* oldest live, next to start, next to submit */
    int started, depth, idle, waiting, closed, nthreads;
    pthread_t threads[MAX_THREADS];
} pool;

static void read_whole(entry *x) {
    int fd = open(x->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { x->err = errno; return; }
    struct stat st;
    if (fstat(fd, &st) != 0) { x->err = errno; close(fd); return; }
    size_t size = st.st_size > 0 ? (size_t)st.st_size : 0, have = 0;
    size_t cap = size + 1; /* one byte more: a read that fills it saw the file grow */
    char *buf = malloc(cap);
    if (buf == NULL) { x->err = ENOMEM; close(fd); return; }
    for (;;) {
        ssize_t n = read(fd, buf + have, cap - have);
        if (n < 0) { if (errno == EINTR) continue; x->err = errno; free(buf); close(fd); return; }
        if (n == 0) break;
        have += (size_t)n;
        if (have == cap) {
            if (cap > ((size_t)-1) / 2) { x->err = EFBIG; free(buf); close(fd); return; }
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) { x->err = ENOMEM; free(buf); close(fd); return; }
            buf = grown;
            cap *= 2;
        }
    }
    close(fd);
    x->buf = buf;
    x->len = have;
}

/* Under the lock: starts entry x (the next to start), reads it with the lock
 * released, and marks it done. */
static void read_next(pool *p, entry *x) {
    p->next++;
    x->state = STARTED;
    p->started++;
    pthread_mutex_unlock(&p->mu);
    read_whole(x);
    pthread_mutex_lock(&p->mu);
    x->state = DONE;
}

static void *run(void *arg) {
    pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->closed && !(p->next < p->tail && p->started < p->depth)) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->mu);
            p->idle--;
        }
        if (p->closed) break;
        read_next(p, &p->e[p->next % CAP]);
        if (p->waiting) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void pool_close(pool *p);

pool *pool_new(int depth) {
    if (depth < 1 || depth > MAX_THREADS) return NULL;
    pool *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->depth = depth;
    for (; p->nthreads < depth; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, run, p) != 0) {
            pool_close(p);
            return NULL;
        }
    return p;
}

long pool_submit(pool *p, const char *path) {
    char *copy = strdup(path);
    if (copy == NULL) return -1;
    pthread_mutex_lock(&p->mu);
    if (p->tail - p->head >= CAP) { pthread_mutex_unlock(&p->mu); free(copy); return -1; }
    long id = p->tail++;
    entry *x = &p->e[id % CAP];
    *x = (entry){.path = copy, .state = QUEUED};
    if (p->idle && p->started < p->depth) pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return id;
}

const char *pool_take(pool *p, long id, size_t *len, int *err) {
    pthread_mutex_lock(&p->mu);
    entry *x = &p->e[id % CAP];
    while (x->state == QUEUED && p->started >= p->depth) { /* wait for a place */
        p->waiting = 1;
        pthread_cond_wait(&p->done, &p->mu);
    }
    if (x->state == QUEUED) read_next(p, x); /* no thread started it: read it here */
    while (x->state != DONE) {
        p->waiting = 1;
        pthread_cond_wait(&p->done, &p->mu);
    }
    p->waiting = 0;
    pthread_mutex_unlock(&p->mu);
    *len = x->len;
    *err = x->err;
    return x->buf;
}

void pool_release(pool *p, long id) {
    pthread_mutex_lock(&p->mu);
    entry *x = &p->e[id % CAP];
    free(x->buf);
    free(x->path);
    x->buf = x->path = NULL;
    p->started--;
    p->head = id + 1;
    if (p->idle && p->next < p->tail) pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void pool_close(pool *p) {
    pthread_mutex_lock(&p->mu);
    p->closed = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    for (long id = p->head; id < p->tail; id++) {
        free(p->e[id % CAP].buf);
        free(p->e[id % CAP].path);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}
