/* Read-ahead pool: threads that open and read whole local files, many in
 * flight, within a count and a byte bound, each taken by one consumer.
 *
 * Plain C, no Python. fastdecode.data._readahead owns the policy (which
 * files, in which order, how deep, when to hold); this pool owns the
 * threads and the bounds. One consumer thread calls every function below;
 * the pool's threads never call back into it. A file's bytes are read into
 * a private anonymous mapping (reused; never from a thread's malloc arena),
 * which the consumer copies out before fd_ra_release.
 *
 * Bounds: at most `depth` jobs started and not released (the count bound),
 * holding at most `max_bytes` of file bytes (the byte bound), reserved in
 * submission order from the size given at submit or learnt at open;
 * a file larger than max_bytes is read only when nothing else is reserved,
 * and one larger than `max_file` (the per-file limit) not at all.
 * While `holding`, the threads start nothing: the consumer reads each job
 * itself when it takes it.
 */
#ifndef FD_READAHEAD_H
#define FD_READAHEAD_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "fd_common.h"

typedef struct fd_ra fd_ra;
typedef struct fd_ra_job fd_ra_job;

/* The step a failed read failed at (fd_ra_result.step); FD_RA_LIMIT: the
 * file is larger than the pool's max_file (error EFBIG). */
enum { FD_RA_OK = 0, FD_RA_OPEN, FD_RA_STAT, FD_RA_READ, FD_RA_NOMEM, FD_RA_LIMIT };

typedef struct {
    const unsigned char *data; /* the file's bytes, valid until fd_ra_release */
    size_t length;
    int error;      /* errno of the failed step; 0: read whole */
    int step;       /* FD_RA_* */
    double latency; /* seconds from open to bytes, waits for byte room excluded */
    int waited;     /* the job had not ended when the take began */
} fd_ra_result;

typedef struct {
    int64_t in_flight;      /* started and not released */
    int64_t bytes;          /* reserved by them */
    int64_t peak_in_flight;
    int64_t peak_bytes;
    int64_t started;        /* jobs ever started (by a thread or the consumer) */
    int64_t failed;
    int64_t threads;        /* alive now */
    int64_t mappings;       /* mappings ever made (the others were reused) */
    int64_t spare_bytes;    /* kept for reuse, at most max_bytes */
} fd_ra_stats;

/* One file, read in the calling thread (the pool's reads, and a consumer's
 * read of a file it did not submit). Each returns 0 or an errno. */

/* Opens `path` read-only (close-on-exec, without waiting for a FIFO's
 * writer); *fd is -1 on failure. */
int fd_file_open(const char *path, int *fd);

/* The size of the open file `fd`: statx asked for the type and size alone,
 * so a FUSE or network file system answers from its cache where an fstat
 * (every attribute, its atime stale after each read) costs a round trip.
 * A directory is EISDIR; a device, FIFO or socket (no size: read, it could
 * block or never end) is FD_FILE_NOT_REGULAR. */
#define FD_FILE_NOT_REGULAR EINVAL
int fd_file_size(int fd, int64_t *size);

/* Reads `fd` into buf[0, cap) until it is full, the file ends, or exactly
 * `expect` bytes were read (the size it was known to have: no further read
 * to see its end; SIZE_MAX: none known); *len is what was read, also on an
 * error. */
int fd_file_read(int fd, unsigned char *buf, size_t cap, size_t expect, size_t *len);

/* A pool with no threads yet (they start at the first job they may run),
 * depth 1 and not holding. A file larger than `max_file` bytes (its size
 * given, learnt, or read past it when it grew) fails at FD_RA_LIMIT: never
 * reserved nor read beyond max_file + 1 bytes. */
fd_status fd_ra_new(int64_t max_bytes, int64_t max_file, fd_ra **out, fd_error *err);

/* Queues `path` (copied) behind every job submitted before; `size` >= 0 is
 * its size when known (reserved, and not asked of the file), -1 unknown. */
fd_status fd_ra_submit(fd_ra *pool, const char *path, int64_t size, fd_ra_job **out,
                       fd_error *err);

/* The count bound (1..FD_RA_MAX_DEPTH) and whether the threads hold. */
#define FD_RA_MAX_DEPTH 1024
void fd_ra_configure(fd_ra *pool, int depth, int holding);

/* Waits for `job` (reading it in the calling thread when no thread started
 * it and the count bound has room) and fills `res`; the job is then the
 * caller's: fd_ra_release it once its bytes are copied out. `job` must be
 * the oldest not taken nor dropped (FD_ERR_ARGUMENT otherwise, nothing
 * done): jobs start and reserve their bytes in submission order. */
fd_status fd_ra_take(fd_ra *pool, fd_ra_job *job, fd_ra_result *res, fd_error *err);

/* Gives a taken job's bytes and bounds back and frees it. */
void fd_ra_release(fd_ra *pool, fd_ra_job *job);

/* Discards a job not taken: a queued one is never read, a running one is
 * released when its read ends, an ended one now. */
void fd_ra_drop(fd_ra *pool, fd_ra_job *job);

void fd_ra_get_stats(fd_ra *pool, fd_ra_stats *out);

/* Drops every job not taken, ends the threads (after the reads running
 * end) and frees the pool; a taken job must have been released. A thread
 * still blocked in a read after `wait_s` seconds is left to free the pool
 * when it ends. */
void fd_ra_free(fd_ra *pool, double wait_s);

#endif
