"""moto's S3 server in its own process on 127.0.0.1 for the remote tests (as
s3fs's own test suite runs it): the one copy, shared with bench_remote, is
benchmarks/_servers.py (a delay per request, the requests counted, the
server's CPU, always killed, ending itself when its parent goes)."""

from benchmarks._servers import BUCKET, KEY, S3Server
from benchmarks._servers import s3_unavailable as unavailable

__all__ = ["BUCKET", "KEY", "S3Server", "unavailable"]
