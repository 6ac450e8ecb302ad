/* uring_read DEPTH FILE...: open + statx + read every file through
 * io_uring (IORING_OP_OPENAT, IORING_OP_STATX, IORING_OP_READ), DEPTH files in flight;
 * prints files, seconds, CPU seconds (process, incl. its io-wq workers), bytes.
 * benchmarks/bench_io_ways.py builds it (gcc, liburing-dev) and compares it
 * with the read-ahead threads, a serial read and preadv. */
#include <liburing.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
enum { OPEN, STAT, READ };
typedef struct { int state, fd; struct statx st; char *buf; const char *path; } job;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
int main(int argc, char **argv){
  int depth = atoi(argv[1]); int n = argc - 2; char **paths = argv + 2;
  struct io_uring ring; if (io_uring_queue_init(depth * 2, &ring, 0)) { perror("init"); return 1; }
  job *jobs = calloc(depth, sizeof(job)); int next = 0, done = 0, live = 0; long bytes = 0;
  double t0 = now(), c0 = cpu();
  for (int j = 0; j < depth && next < n; j++, next++, live++) {
    jobs[j].path = paths[next]; jobs[j].state = OPEN;
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    io_uring_prep_openat(s, AT_FDCWD, jobs[j].path, O_RDONLY, 0); io_uring_sqe_set_data(s, &jobs[j]);
  }
  io_uring_submit(&ring);
  while (live) {
    struct io_uring_cqe *c; if (io_uring_wait_cqe(&ring, &c)) { perror("wait"); return 1; }
    job *jb = io_uring_cqe_get_data(c); int res = c->res; io_uring_cqe_seen(&ring, c);
    if (res < 0) { fprintf(stderr, "%s: %s\n", jb->path, strerror(-res)); return 1; }
    if (jb->state == READ && next >= n) { bytes += res; close(jb->fd); free(jb->buf); done++; live--; continue; }
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (jb->state == OPEN) { jb->fd = res; jb->state = STAT;
      io_uring_prep_statx(s, jb->fd, "", AT_EMPTY_PATH, STATX_SIZE, &jb->st);
    } else if (jb->state == STAT) { jb->state = READ; jb->buf = malloc(jb->st.stx_size + 1);
      io_uring_prep_read(s, jb->fd, jb->buf, jb->st.stx_size + 1, 0);
    } else { bytes += res; close(jb->fd); free(jb->buf); done++;
      if (next < n) { jb->path = paths[next++]; jb->state = OPEN;
        io_uring_prep_openat(s, AT_FDCWD, jb->path, O_RDONLY, 0);
      } else { live--; continue; } }
    io_uring_sqe_set_data(s, jb); io_uring_submit(&ring);
  }
  printf("%d %.4f %.4f %ld\n", done, now() - t0, cpu() - c0, bytes);
  return 0;
}
