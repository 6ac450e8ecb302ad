# The read-ahead pool's binding (src_c/fd_readahead.h): included by _native.pyx.
# fastdecode.data._readahead owns the policy; this holds the GIL-side only.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_XDECREF
from libc.errno cimport EFBIG, ENOMEM
from libc.string cimport memcpy
from posix.unistd cimport close as _close, getpid

cdef extern from "Python.h":
    PyObject *_new_bytes "PyBytes_FromStringAndSize" (const char *v, Py_ssize_t n) except NULL
    int _PyBytes_Resize(PyObject **string, Py_ssize_t newsize) except -1
    const Py_ssize_t PY_SSIZE_T_MAX

import os as _os

from fastdecode._options import max_file_bytes as _max_file_bytes
from fastdecode._options import over_file_limit as _over_file_limit

cdef unsigned long long _pools_made = 0


cdef bytes _c_path(path):
    """``path`` as the bytes C opens (ValueError where a null byte would cut it)."""
    cdef bytes raw = _os.fsencode(path)
    if b"\0" in raw:  # C would read a shorter path
        raise ValueError(f"{path!r}: embedded null byte")
    return raw


cdef object _file_error(int error, int step, path, long long limit):
    """The OSError naming ``path`` of a file's failed step (FD_RA_*: a
    ``fd_file_*`` call, a pool's result); ``limit``: the per-file limit a
    step FD_RA_LIMIT went over."""
    path = _os.fspath(path)  # as open() names it: a str (or bytes), not a Path's repr
    if step == FD_RA_LIMIT:
        return _over_file_limit(path, limit)
    if step == FD_RA_STAT and error == FD_FILE_NOT_REGULAR:
        return OSError(error, "not a regular file (a device, a FIFO or a socket)", path)
    return OSError(error, _os.strerror(error), path)


cdef long long _file_limit(max_size) except -1:
    """``max_size`` (None: the limit in force, ``_options.max_file_bytes()``)
    as a positive byte count (ValueError for one below 1)."""
    cdef object value = _max_file_bytes() if max_size is None else operator.index(max_size)
    if value <= 0:
        raise ValueError(f"max_size must be at least one byte, got {max_size!r}")
    return min(value, 2 ** 63 - 1)  # no file is larger


cdef class LocalFile:
    """A local file opened for one whole read in the calling thread (the
    read-ahead's ``Reader.open``; :func:`read_file`): open and size in one
    call, the read in another, the GIL released around each; the size is
    asked for alone (``fd_file_size``), never a FUSE or network round trip
    for attributes. A file over ``max_size`` bytes (None: the per-file limit,
    ``FASTDECODE_MAX_FILE_BYTES``) is refused from its size, before anything
    is allocated, and a file that grows past it while read is refused at the
    limit. Its failures raise OSError naming ``path``."""

    cdef int fd
    cdef readonly object path
    cdef readonly long long size
    cdef long long limit

    def __cinit__(self, path, max_size=None):
        self.fd = -1
        self.path = path
        cdef long long limit = _file_limit(max_size)
        cdef bytes raw = _c_path(path)
        cdef const char *c_path = raw
        cdef int fd = -1, error
        cdef int step = FD_RA_OPEN
        cdef int64_t size = 0
        with nogil:
            error = fd_file_open(c_path, &fd)
            if error == 0:
                step = FD_RA_STAT
                error = fd_file_size(fd, &size)
                if error == 0 and size > limit:
                    step, error = FD_RA_LIMIT, EFBIG
                elif error == 0 and size >= PY_SSIZE_T_MAX:  # not a bytes object's size
                    error = EFBIG
                if error:
                    _close(fd)
        if error:
            raise _file_error(error, step, path, limit)
        self.fd, self.size, self.limit = fd, size, limit

    cdef bytes _chunk(self, Py_ssize_t cap, size_t expect):
        """Up to ``cap`` bytes read (``fd_file_read``), the object shrunk to them."""
        cdef PyObject *obj
        try:
            obj = _new_bytes(NULL, cap)
        except MemoryError:  # a size no memory holds (a sparse file): the file's error
            raise _file_error(ENOMEM, FD_RA_NOMEM, self.path, self.limit) from None
        cdef unsigned char *buf = <unsigned char *>PyBytes_AS_STRING(<object>obj)
        cdef int fd = self.fd, error
        cdef size_t got = 0
        with nogil:
            error = fd_file_read(fd, buf, <size_t>cap, expect, &got)
        if error:
            Py_XDECREF(obj)
            raise _file_error(error, FD_RA_READ, self.path, self.limit)
        if <Py_ssize_t>got != cap:
            _PyBytes_Resize(&obj, <Py_ssize_t>got)  # its one reference: in place (freed on failure)
        cdef bytes out = <bytes>obj
        Py_XDECREF(obj)  # now out's
        return out

    def read(self):
        """The file's bytes (one read when it still has its size; a file
        that grew is read to its end, or to one byte past the limit, then
        refused); closes it."""
        if self.fd < 0:
            raise ValueError(f"{self.path!r}: this file was already read or closed")
        cdef bytes first, chunk
        cdef list chunks
        cdef Py_ssize_t step, total
        try:
            first = self._chunk(<Py_ssize_t>self.size + 1, <size_t>self.size)
            if len(first) <= self.size:
                return first
            chunks, total = [first], len(first)
            while total <= self.limit:
                step = <Py_ssize_t>min(max(self.size, 1 << 16), self.limit + 1 - total)
                chunk = self._chunk(step, <size_t>step)
                chunks.append(chunk)
                total += len(chunk)
                if len(chunk) < step:
                    return b"".join(chunks)
            raise _file_error(EFBIG, FD_RA_LIMIT, self.path, self.limit)
        finally:
            self.close()

    def fileno(self):
        """The open file's descriptor (for a mapping of it; -1 once closed)."""
        return self.fd

    def close(self):
        """Closes the file (a no-op once closed)."""
        cdef int fd = self.fd
        self.fd = -1
        if fd >= 0:
            with nogil:
                _close(fd)

    def __dealloc__(self):
        if self.fd >= 0:
            _close(self.fd)


def read_file(path, max_size=None):
    """The bytes of the local file ``path``, read whole (:class:`LocalFile`:
    a FIFO or a device refused rather than waited for or read without end, a
    file over ``max_size``, None: the per-file limit, refused from its size);
    OSError naming ``path``."""
    return LocalFile(path, max_size).read()


cdef class _ReadJob:
    """One submitted file of a :class:`ReadPool` (a handle: taken or dropped once)."""
    cdef fd_ra_job *job
    cdef unsigned long long pool  # the serial of the pool it was submitted to


cdef class ReadPool:
    """Threads in C that open and read whole local files ahead, within a
    count bound (``configure``) and a byte bound (``max_bytes``), each file
    within ``max_file`` bytes (None: the per-file limit in force), taken in
    submission order by one consumer thread; the GIL is released around
    each call. Belongs to the process that made it: in a forked child it is
    left as it is (its threads are not there) and never freed."""

    cdef fd_ra *pool
    cdef long pid
    cdef unsigned long long serial  # never reused, unlike an address

    cdef long long max_file

    def __cinit__(self, long long max_bytes, max_file=None):
        global _pools_made
        cdef fd_error err
        cdef fd_status st
        self.max_file = _file_limit(max_file)
        with nogil:
            st = fd_ra_new(max_bytes, self.max_file, &self.pool, &err)
        if st != FD_OK:
            raise_error(&err)
        self.pid = getpid()
        _pools_made += 1
        self.serial = _pools_made

    cdef int _check(self) except -1:
        if self.pool == NULL:
            raise ValueError("the read pool is closed")
        if self.pid != getpid():
            raise RuntimeError("a read pool belongs to the process that made it")
        return 0

    def submit(self, path, long long size=-1):
        """Queues ``path`` (size -1: unknown); returns its job."""
        self._check()
        cdef bytes raw = _c_path(path)
        cdef const char *c_path = raw
        cdef fd_error err
        cdef fd_status st
        cdef _ReadJob handle = _ReadJob.__new__(_ReadJob)
        with nogil:
            st = fd_ra_submit(self.pool, c_path, size, &handle.job, &err)
        if st != FD_OK:
            raise_error(&err)
        handle.pool = self.serial
        return handle

    def configure(self, int depth, bint holding):
        """The count bound (clamped to 1..FD_RA_MAX_DEPTH) and whether the threads hold."""
        self._check()
        with nogil:
            fd_ra_configure(self.pool, depth, holding)

    def take(self, _ReadJob handle, path):
        """``(bytes, latency_s, waited)`` of ``handle``'s file (read here
        when no thread started it); its OSError, naming ``path``, raised.
        ``handle`` must be the oldest read not taken nor dropped (else
        ValueError)."""
        self._check()
        if handle.job == NULL:
            raise ValueError(f"{path!r}: this read was already taken or dropped")
        cdef fd_ra_job *job = handle.job
        if handle.pool != self.serial:
            raise ValueError("a read of another read pool")
        cdef fd_ra_result res
        cdef fd_error err
        cdef fd_status st
        cdef bytes out = None
        cdef char *dst = NULL
        with nogil:
            st = fd_ra_take(self.pool, job, &res, &err)
        if st != FD_OK:
            raise_error(&err)
        handle.job = NULL
        try:
            if res.error == 0:
                out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>res.length)
                dst = PyBytes_AS_STRING(out)
        finally:
            with nogil:
                if dst != NULL and res.length:
                    memcpy(dst, res.data, res.length)
                fd_ra_release(self.pool, job)
        if res.error:
            raise _file_error(res.error, res.step, path, self.max_file)
        return out, res.latency, bool(res.waited)

    def drop(self, _ReadJob handle):
        """Discards ``handle``'s read (a no-op once taken or dropped)."""
        self._check()
        if handle.job != NULL and handle.pool != self.serial:
            raise ValueError("a read of another read pool")
        cdef fd_ra_job *job = handle.job
        handle.job = NULL
        if job != NULL:
            with nogil:
                fd_ra_drop(self.pool, job)

    def stats(self):
        """The pool's counters (fd_ra_stats) as a dict."""
        self._check()
        cdef fd_ra_stats s
        with nogil:
            fd_ra_get_stats(self.pool, &s)
        return {"in_flight": s.in_flight, "bytes": s.bytes, "peak_in_flight": s.peak_in_flight,
                "peak_bytes": s.peak_bytes, "started": s.started, "failed": s.failed,
                "threads": s.threads, "mappings": s.mappings, "spare_bytes": s.spare_bytes}

    def close(self, double wait_s=5.0):
        """Drops what was not taken, ends the threads (waiting up to
        ``wait_s`` for reads still running) and frees the pool."""
        cdef fd_ra *pool = self.pool
        self.pool = NULL
        if pool != NULL and self.pid == getpid():
            with nogil:
                fd_ra_free(pool, wait_s)

    def __dealloc__(self):
        if self.pool != NULL and self.pid == getpid():
            with nogil:
                fd_ra_free(self.pool, 5.0)
            self.pool = NULL
