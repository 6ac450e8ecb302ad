/* The read pool (src_c/fd_readahead.c) driven straight from C, for
 * ThreadSanitizer (tests/core/test_readpool.py builds and runs it):
 * readpool_stress DIR FILES SEED ROUNDS HINTS. DIR holds FILES files f0 .. f{n-1},
 * each filled with the byte (i * 7 + j) & 255 at offset j, of the sizes the
 * test wrote; every take is checked against that. A random mix of submits
 * (HINTS 1: some with a size given, often not the file's), drops, takes that
 * skip ahead, depth changes and holds, with a small byte cap; exit 0 when
 * every byte checked out and (HINTS 0) the bytes held never passed the cap
 * (the files are smaller than it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fd_readahead.h"

#define MAX_PENDING 4096

static unsigned long long rng_state;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)((rng_state >> 33) % n);
}

static int check(const fd_ra_result *res, int file, const char *dir)
{
    if (res->error) {
        fprintf(stderr, "%s/f%d: read failed, errno %d at step %d\n", dir, file, res->error,
                res->step);
        return 1;
    }
    for (size_t j = 0; j < res->length; j++) {
        if (res->data[j] != (unsigned char)((file * 7 + j) & 255)) {
            fprintf(stderr, "%s/f%d: byte %zu differs\n", dir, file, j);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: readpool_stress DIR FILES SEED ROUNDS HINTS\n");
        return 2;
    }
    const char *dir = argv[1];
    int files = atoi(argv[2]), rounds = atoi(argv[4]), hints = atoi(argv[5]);
    int64_t cap;
    rng_state = strtoull(argv[3], NULL, 10) + 1;
    fd_ra *pool;
    fd_error err;
    cap = rnd(2) ? 400000 : 1 << 20;
    if (fd_ra_new(cap, INT64_MAX, &pool, &err) != FD_OK) {
        fprintf(stderr, "fd_ra_new: %s\n", err.message);
        return 1;
    }
    static fd_ra_job *jobs[MAX_PENDING];
    static int which[MAX_PENDING];
    int n = 0, bad = 0, taken = 0;
    char path[4096];
    fd_ra_configure(pool, 4, 0);
    for (int r = 0; r < rounds && !bad; r++) {
        unsigned op = rnd(100);
        if (op < 35 && n < MAX_PENDING - 8) {
            for (unsigned k = rnd(8) + 1; k > 0; k--) {
                int f = (int)rnd((unsigned)files);
                snprintf(path, sizeof path, "%s/f%d", dir, f);
                int64_t size = !hints || rnd(3) ? -1 : (int64_t)rnd(200000);
                if (fd_ra_submit(pool, path, size, &jobs[n], &err) != FD_OK) {
                    fprintf(stderr, "fd_ra_submit: %s\n", err.message);
                    return 1;
                }
                which[n++] = f;
            }
        } else if (op < 45) {
            fd_ra_configure(pool, (int)rnd(12) + 1, rnd(5) == 0);
        } else if (op < 55 && n > 0) {
            int i = (int)rnd((unsigned)n);
            fd_ra_drop(pool, jobs[i]);
            memmove(jobs + i, jobs + i + 1, (size_t)(n - i - 1) * sizeof jobs[0]);
            memmove(which + i, which + i + 1, (size_t)(n - i - 1) * sizeof which[0]);
            n--;
        } else if (n > 0) {
            int skip = (int)rnd(n < 3 ? (unsigned)n : 3);
            for (int i = 0; i < skip; i++)
                fd_ra_drop(pool, jobs[i]);
            fd_ra_result res;
            if (fd_ra_take(pool, jobs[skip], &res, &err) != FD_OK) {
                fprintf(stderr, "fd_ra_take: %s\n", err.message);
                return 1;
            }
            bad |= check(&res, which[skip], dir);
            fd_ra_release(pool, jobs[skip]);
            taken++;
            memmove(jobs, jobs + skip + 1, (size_t)(n - skip - 1) * sizeof jobs[0]);
            memmove(which, which + skip + 1, (size_t)(n - skip - 1) * sizeof which[0]);
            n -= skip + 1;
        }
    }
    fd_ra_stats st;
    fd_ra_get_stats(pool, &st);
    fd_ra_free(pool, 10.0); /* drops what is left */
    printf("taken %d started %lld peak_in_flight %lld peak_bytes %lld\n", taken,
           (long long)st.started, (long long)st.peak_in_flight, (long long)st.peak_bytes);
    if (!hints && st.peak_bytes > cap) {
        fprintf(stderr, "peak bytes %lld over the cap %lld\n", (long long)st.peak_bytes,
                (long long)cap);
        bad = 1;
    }
    return bad;
}
