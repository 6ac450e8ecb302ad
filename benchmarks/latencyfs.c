/* latencyfs: a read-only FUSE passthrough that adds a fixed delay to every
 * open() and can cap the read bandwidth, to stand in for network storage
 * (NFS, Lustre, an object store behind FUSE) in benchmarks/bench_storage.py
 * and tests/storage.
 *
 *   latencyfs [--delay-ms MS] [--bw-mbps MBPS] SOURCE MOUNTPOINT [fuse options]
 *
 * Every open() of a file under SOURCE sleeps MS milliseconds after the real
 * open (the round trip), in the calling request's own thread, so opens in
 * flight overlap as they would on a network file system. A bandwidth cap
 * (MB/s, 10^6 bytes) is one shared link: each read() reserves its bytes' slot
 * on it and sleeps until the slot ends.
 *
 * Two files exist only inside the mount, at its root:
 *   /.stats    read: one JSON object of counters, made at open: opens, reads,
 *              bytes read, open errors, attribute requests (getattr; the
 *              special files' not counted), the requests in flight now and
 *              the most at once,
 *              this daemon's pid and its own user/system CPU (getrusage).
 *              Opening it counts nothing.
 *   /.control  write one command per line: "delay_ms N", "bw_mbps N" (0: no
 *              cap), "fail PATH" (opens of PATH, relative to the mount's root
 *              with a leading /, fail with EIO from then on), "clear" (no
 *              failing paths), "reset" (zero the counters).
 *
 * libfuse serves at most 10 requests at once by default; unless the command
 * line names max_threads this adds -o max_threads=64, so the daemon never
 * caps the concurrency a loader asks for. Built by `make benchmarks/latencyfs`.
 */

#define FUSE_USE_VERSION 312
#define _GNU_SOURCE

#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATS_PATH "/.stats"
#define CONTROL_PATH "/.control"
#define MAX_FAIL 64
#define STATS_FH ((uint64_t)-1)
#define CONTROL_FH ((uint64_t)-2)

static int source_fd = -1;
static long delay_us;        /* per open */
static double bw_bytes_per_us; /* 0: no cap */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double link_free_us;  /* when the shared link is next free (monotonic us) */
static char *fail_paths[MAX_FAIL];
static int fail_count;

static unsigned long long n_opens, n_reads, n_bytes, n_open_errors, n_getattrs;
static long in_flight, max_in_flight;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void sleep_us(double us) {
    if (us <= 0) return;
    struct timespec ts = {(time_t)(us / 1e6), (long)((us - (time_t)(us / 1e6) * 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void enter(void) {
    long now = __atomic_add_fetch(&in_flight, 1, __ATOMIC_SEQ_CST);
    long seen = __atomic_load_n(&max_in_flight, __ATOMIC_SEQ_CST);
    while (now > seen &&
           !__atomic_compare_exchange_n(&max_in_flight, &seen, now, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
}

static void leave(void) { __atomic_sub_fetch(&in_flight, 1, __ATOMIC_SEQ_CST); }

/* "/a/b" -> "a/b" (relative to source_fd); "/" -> "." */
static const char *rel(const char *path) { return path[1] ? path + 1 : "."; }

static int is_special(const char *path) {
    return strcmp(path, STATS_PATH) == 0 || strcmp(path, CONTROL_PATH) == 0;
}

static int lfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    if (is_special(path)) {
        memset(st, 0, sizeof *st);
        st->st_mode = S_IFREG | (strcmp(path, STATS_PATH) == 0 ? 0444 : 0222);
        st->st_nlink = 1;
        return 0;
    }
    __atomic_add_fetch(&n_getattrs, 1, __ATOMIC_SEQ_CST);
    return fstatat(source_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
}

static int lfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                       struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off; (void)fi; (void)flags;
    int fd = openat(source_fd, rel(path), O_RDONLY | O_DIRECTORY);
    if (fd == -1) return -errno;
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        close(fd);
        return -err;
    }
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        struct stat st = {0};
        st.st_ino = entry->d_ino;
        st.st_mode = (mode_t)DTTOIF(entry->d_type);
        if (fill(buf, entry->d_name, &st, 0, 0)) break;
    }
    closedir(dir);
    return 0;
}

static char *stats_json(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char *text = NULL;
    pthread_mutex_lock(&lock);
    double bw = bw_bytes_per_us;
    long delay = delay_us;
    int fails = fail_count;
    pthread_mutex_unlock(&lock);
    if (asprintf(&text,
                 "{\"pid\": %ld, \"opens\": %llu, \"reads\": %llu, \"bytes\": %llu, "
                 "\"open_errors\": %llu, \"getattrs\": %llu, \"in_flight\": %ld, "
                 "\"max_in_flight\": %ld, "
                 "\"delay_ms\": %g, "
                 "\"bw_mbps\": %g, \"failing_paths\": %d, \"cpu_user_s\": %.6f, "
                 "\"cpu_system_s\": %.6f}\n",
                 (long)getpid(), __atomic_load_n(&n_opens, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&n_reads, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&n_bytes, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&n_open_errors, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&n_getattrs, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&in_flight, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&max_in_flight, __ATOMIC_SEQ_CST), delay / 1e3, bw,
                 fails, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
                 ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6) < 0)
        return NULL;
    return text;
}

static int failing(const char *path) {
    int hit = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < fail_count && !hit; i++) hit = strcmp(fail_paths[i], path) == 0;
    pthread_mutex_unlock(&lock);
    return hit;
}

static int lfs_open(const char *path, struct fuse_file_info *fi) {
    if (strcmp(path, STATS_PATH) == 0) {
        if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EACCES;
        char *text = stats_json();
        if (text == NULL) return -ENOMEM;
        fi->fh = (uint64_t)(uintptr_t)text;
        fi->direct_io = 1; /* its size is not known to the kernel */
        return 0;
    }
    if (strcmp(path, CONTROL_PATH) == 0) {
        if ((fi->flags & O_ACCMODE) == O_RDONLY) return -EACCES;
        fi->fh = CONTROL_FH;
        fi->direct_io = 1;
        return 0;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
    enter();
    __atomic_add_fetch(&n_opens, 1, __ATOMIC_SEQ_CST);
    int fd = failing(path) ? (errno = EIO, -1) : openat(source_fd, rel(path), fi->flags);
    int err = errno;
    pthread_mutex_lock(&lock);
    long delay = delay_us;
    pthread_mutex_unlock(&lock);
    sleep_us((double)delay);
    leave();
    if (fd == -1) {
        __atomic_add_fetch(&n_open_errors, 1, __ATOMIC_SEQ_CST);
        return -err;
    }
    fi->fh = (uint64_t)fd;
    return 0;
}

static int lfs_read(const char *path, char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    (void)path;
    if (fi->fh == CONTROL_FH) return -EACCES;
    if (strcmp(path, STATS_PATH) == 0) {
        const char *text = (const char *)(uintptr_t)fi->fh;
        size_t len = strlen(text);
        if ((size_t)off >= len) return 0;
        size_t n = len - (size_t)off < size ? len - (size_t)off : size;
        memcpy(buf, text + off, n);
        return (int)n;
    }
    enter();
    ssize_t n = pread((int)fi->fh, buf, size, off);
    int err = errno;
    if (n > 0) {
        __atomic_add_fetch(&n_reads, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&n_bytes, (unsigned long long)n, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&lock);
        double wait = 0;
        if (bw_bytes_per_us > 0) {
            double now = now_us();
            double start = link_free_us > now ? link_free_us : now;
            link_free_us = start + (double)n / bw_bytes_per_us;
            wait = link_free_us - now;
        }
        pthread_mutex_unlock(&lock);
        sleep_us(wait);
    }
    leave();
    return n == -1 ? -err : (int)n;
}

static int command(char *line) {
    char *arg = strchr(line, ' ');
    if (arg != NULL) *arg++ = '\0';
    int ok = 1;
    pthread_mutex_lock(&lock);
    if (strcmp(line, "delay_ms") == 0 && arg != NULL) {
        delay_us = (long)(strtod(arg, NULL) * 1e3);
    } else if (strcmp(line, "bw_mbps") == 0 && arg != NULL) {
        bw_bytes_per_us = strtod(arg, NULL); /* MB/s == bytes/us */
    } else if (strcmp(line, "fail") == 0 && arg != NULL && fail_count < MAX_FAIL) {
        fail_paths[fail_count++] = strdup(arg);
    } else if (strcmp(line, "clear") == 0) {
        while (fail_count > 0) free(fail_paths[--fail_count]);
    } else if (strcmp(line, "reset") == 0) {
        __atomic_store_n(&n_opens, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&n_reads, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&n_bytes, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&n_open_errors, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&n_getattrs, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&max_in_flight, __atomic_load_n(&in_flight, __ATOMIC_SEQ_CST),
                         __ATOMIC_SEQ_CST);
    } else {
        ok = 0;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

static int lfs_write(const char *path, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
    (void)path; (void)off;
    if (fi->fh != CONTROL_FH) return -EROFS;
    char line[PATH_MAX + 32];
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && buf[i] != '\n') continue;
        size_t len = i - start;
        if (len > 0) {
            if (len >= sizeof line) return -EINVAL;
            memcpy(line, buf + start, len);
            line[len] = '\0';
            if (!command(line)) return -EINVAL;
        }
        start = i + 1;
    }
    return (int)size;
}

static int lfs_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    (void)size; (void)fi;
    return strcmp(path, CONTROL_PATH) == 0 ? 0 : -EROFS;
}

static int lfs_release(const char *path, struct fuse_file_info *fi) {
    if (strcmp(path, STATS_PATH) == 0)
        free((void *)(uintptr_t)fi->fh);
    else if (fi->fh != CONTROL_FH)
        close((int)fi->fh);
    return 0;
}

static int lfs_statfs(const char *path, struct statvfs *st) {
    (void)path;
    return fstatvfs(source_fd, st) == -1 ? -errno : 0;
}

static void *lfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    return NULL;
}

static const struct fuse_operations ops = {
    .init = lfs_init,
    .getattr = lfs_getattr,
    .readdir = lfs_readdir,
    .open = lfs_open,
    .read = lfs_read,
    .write = lfs_write,
    .truncate = lfs_truncate,
    .release = lfs_release,
    .statfs = lfs_statfs,
};

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [--delay-ms MS] [--bw-mbps MBPS] SOURCE MOUNTPOINT "
                    "[fuse options]\n", prog);
}

int main(int argc, char **argv) {
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        char *end;
        double value = strtod(argv[i + 1], &end);
        if (*end != '\0' || value < 0) {
            usage(argv[0]);
            return 2;
        }
        if (strcmp(argv[i], "--delay-ms") == 0) {
            delay_us = (long)(value * 1e3);
        } else if (strcmp(argv[i], "--bw-mbps") == 0) {
            bw_bytes_per_us = value;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (argc - i < 2) {
        usage(argv[0]);
        return 2;
    }
    source_fd = open(argv[i], O_RDONLY | O_DIRECTORY);
    if (source_fd == -1) {
        fprintf(stderr, "latencyfs: %s: %s\n", argv[i], strerror(errno));
        return 1;
    }
    int threads_named = 0;
    for (int j = i + 2; j < argc; j++) threads_named |= strstr(argv[j], "max_threads=") != NULL;
    /* argv[0], the mount point, the caller's options, -o max_threads=64, NULL */
    char **fargv = calloc((size_t)argc + 4, sizeof *fargv);
    if (fargv == NULL) return 1;
    int fargc = 0;
    fargv[fargc++] = argv[0];
    for (int j = i + 1; j < argc; j++) fargv[fargc++] = argv[j];
    if (!threads_named) {
        fargv[fargc++] = "-o";
        fargv[fargc++] = "max_threads=64";
    }
    int rc = fuse_main(fargc, fargv, &ops, NULL);
    free(fargv);
    return rc;
}
