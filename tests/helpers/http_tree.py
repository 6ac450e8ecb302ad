"""A threaded HTTP server on 127.0.0.1 serving a directory tree, with faults
injected per request (503s, connection resets, a delay), for the remote
tests: the one copy, shared with bench_remote, is benchmarks/_servers.py."""

from benchmarks._servers import HttpProcess, HttpTree

__all__ = ["HttpProcess", "HttpTree"]
