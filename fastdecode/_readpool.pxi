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

cdef unsigned long long _pools_made = 0


cdef bytes _c_path(path):
    """``path`` as the bytes C opens (ValueError where a null byte would cut it)."""
    cdef bytes raw = _os.fsencode(path)
    if b"\0" in raw:  # C would read a shorter path
        raise ValueError(f"{path!r}: embedded null byte")
    return raw


cdef object _file_error(int error, bint sizing, path):
    """The OSError naming ``path`` of a file's failed step (``fd_file_*``, a
    pool's result); ``sizing``: the step that asked for its type and size."""
    if sizing and error == FD_FILE_NOT_REGULAR:
        return OSError(error, "not a regular file (a device, a FIFO or a socket)", path)
    return OSError(error, _os.strerror(error), path)


cdef class LocalFile:
    """A local file opened for one whole read in the calling thread (the
    read-ahead's ``Reader.open``): open and size in one call, the read in
    another, the GIL released around each; the size is asked for alone
    (``fd_file_size``), never a FUSE or network round trip for attributes.
    Its failures raise OSError naming ``path``."""

    cdef int fd
    cdef readonly object path
    cdef readonly long long size

    def __cinit__(self, path):
        self.fd = -1
        self.path = path
        cdef bytes raw = _c_path(path)
        cdef const char *c_path = raw
        cdef int fd = -1, error
        cdef bint sizing = False
        cdef int64_t size = 0
        with nogil:
            error = fd_file_open(c_path, &fd)
            if error == 0:
                sizing = True
                error = fd_file_size(fd, &size)
                if error == 0 and size >= PY_SSIZE_T_MAX:  # not a bytes object's size
                    error = EFBIG
                if error:
                    _close(fd)
        if error:
            raise _file_error(error, sizing, path)
        self.fd, self.size = fd, size

    cdef bytes _chunk(self, Py_ssize_t cap, size_t expect):
        """Up to ``cap`` bytes read (``fd_file_read``), the object shrunk to them."""
        cdef PyObject *obj
        try:
            obj = _new_bytes(NULL, cap)
        except MemoryError:  # a size no memory holds (a sparse file): the file's error
            raise _file_error(ENOMEM, False, self.path) from None
        cdef unsigned char *buf = <unsigned char *>PyBytes_AS_STRING(<object>obj)
        cdef int fd = self.fd, error
        cdef size_t got = 0
        with nogil:
            error = fd_file_read(fd, buf, <size_t>cap, expect, &got)
        if error:
            Py_XDECREF(obj)
            raise _file_error(error, False, self.path)
        if <Py_ssize_t>got != cap:
            _PyBytes_Resize(&obj, <Py_ssize_t>got)  # its one reference: in place (freed on failure)
        cdef bytes out = <bytes>obj
        Py_XDECREF(obj)  # now out's
        return out

    def read(self):
        """The file's bytes (one read when it still has its size; a file
        that grew is read to its end); closes it."""
        if self.fd < 0:
            raise ValueError(f"{self.path!r}: this file was already read or closed")
        cdef bytes first, chunk
        cdef list chunks
        cdef Py_ssize_t step
        try:
            first = self._chunk(<Py_ssize_t>self.size + 1, <size_t>self.size)
            if len(first) <= self.size:
                return first
            chunks = [first]
            step = max(<Py_ssize_t>self.size, 1 << 16)
            while True:
                chunk = self._chunk(step, <size_t>step)
                chunks.append(chunk)
                if len(chunk) < step:
                    return b"".join(chunks)
        finally:
            self.close()

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


cdef class _ReadJob:
    """One submitted file of a :class:`ReadPool` (a handle: taken or dropped once)."""
    cdef fd_ra_job *job
    cdef unsigned long long pool  # the serial of the pool it was submitted to


cdef class ReadPool:
    """Threads in C that open and read whole local files ahead, within a
    count bound (``configure``) and a byte bound (``max_bytes``), taken in
    submission order by one consumer thread; the GIL is released around
    each call. Belongs to the process that made it: in a forked child it is
    left as it is (its threads are not there) and never freed."""

    cdef fd_ra *pool
    cdef long pid
    cdef unsigned long long serial  # never reused, unlike an address

    def __cinit__(self, long long max_bytes):
        global _pools_made
        cdef fd_error err
        cdef fd_status st
        with nogil:
            st = fd_ra_new(max_bytes, &self.pool, &err)
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
            raise _file_error(res.error, res.step == FD_RA_STAT, path)
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
