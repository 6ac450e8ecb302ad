"""An S3-compatible server for the remote tests: moto's server mode in its own
process on 127.0.0.1, as s3fs's own test suite runs it, with a delay per
request that the test sets (at start or while it runs).

``with S3Server() as s3:`` starts ``python s3_server.py`` (this file as a
script), reads the port it bound, and always kills it on exit; the server
also ends itself when its parent goes away or after ``lifetime`` seconds, so
nothing outlives the test. :meth:`S3Server.kill` is a server killed
mid-epoch (SIGKILL). Requests to ``/_fastdecode/...`` (no bucket can be named
so) are the control channel: ``delay?s=0.005`` sets the delay, ``stats``
gives the count of S3 requests served.

moto and s3fs are optional: :func:`unavailable` says why the S3 cases skip.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

KEY = "fastdecode-test-key-id"
BUCKET = "fastdecode-test"
CONTROL = "/_fastdecode/"


def unavailable() -> Optional[str]:
    """Why no S3 server can run here (None: it can)."""
    for module, extra in (("moto.server", "moto[server]"), ("s3fs", "s3fs"),
                          ("flask", "moto[server]")):
        try:
            __import__(module)
        except ImportError:
            return f"needs {extra} (requirements/test.txt)"
    return None


class S3Server:
    """moto's S3 in a child process on 127.0.0.1 (see the module doc)."""

    def __init__(self, delay: float = 0.0, lifetime: float = 900.0,
                 start_timeout: float = 60.0) -> None:
        self.delay = delay
        self.lifetime = lifetime
        self.start_timeout = start_timeout
        self.process: Optional[subprocess.Popen] = None
        self.port = 0
        self._log = tempfile.TemporaryFile()

    def __enter__(self) -> "S3Server":
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--delay", repr(self.delay),
             "--lifetime", repr(self.lifetime), "--parent", str(os.getpid())],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            self.port = self._read_port()
        except BaseException:
            self.kill()
            raise
        return self

    def _read_port(self) -> int:
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(self.start_timeout):
                raise TimeoutError(f"moto server did not start within {self.start_timeout} s"
                                   f": {self.log()[-2000:]}")
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.process.wait(5)
            raise RuntimeError(f"moto server failed to start: {line!r} {self.log()[-2000:]}")
        return int(line.split()[1])

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def options(self, secret: str) -> dict[str, Any]:
        """``storage_options`` for s3fs against this server, with ``secret`` as
        the secret access key (moto takes any)."""
        return {"key": KEY, "secret": secret, "endpoint_url": self.url,
                "client_kwargs": {"region_name": "us-east-1"}}

    def filesystem(self, secret: str) -> Any:
        """A fresh s3fs client of this server (for putting and removing keys)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                                 **self.options(secret))

    def upload(self, local: Path, prefix: str, secret: str) -> str:
        """Every file under ``local`` put at ``BUCKET/prefix/...``; the root URL."""
        fs = self.filesystem(secret)
        if not fs.exists(BUCKET):  # us-east-1 takes no location constraint (s3fs's mkdir sends one)
            fs.call_s3("create_bucket", Bucket=BUCKET)
            fs.invalidate_cache()
        fs.pipe({f"{BUCKET}/{prefix}/{p.relative_to(local).as_posix()}": p.read_bytes()
                 for p in sorted(local.rglob("*")) if p.is_file()})
        return f"s3://{BUCKET}/{prefix}"

    def _control(self, what: str) -> bytes:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + CONTROL + what, timeout=10) as reply:
            return reply.read()

    def set_delay(self, seconds: float) -> None:
        """Seconds the server waits before answering each S3 request from now on."""
        self._control(f"delay?s={seconds}")
        self.delay = seconds

    def requests(self) -> int:
        """S3 requests served so far."""
        return int(json.loads(self._control("stats"))["requests"])

    def cpu_seconds(self) -> float:
        """The server process's user + system CPU time so far."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        """SIGKILL now (a server that dies mid-epoch), and reaped."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def __exit__(self, *exc: object) -> None:
        self.kill()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


# -- the child process -------------------------------------------------------


def _serve(delay: float, lifetime: float, parent: int) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    state = {"delay": delay, "requests": 0}
    lock = threading.Lock()

    def wrapped(environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(CONTROL):
            if path == CONTROL + "delay":
                state["delay"] = float(environ.get("QUERY_STRING", "s=0").split("=", 1)[1])
            body = json.dumps(state).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        with lock:
            state["requests"] += 1
        if state["delay"]:
            time.sleep(state["delay"])
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, wrapped, threaded=True,
                         request_handler=MotoRequestHandler)
    started = time.monotonic()

    def watchdog() -> None:  # never outlive the test
        while os.getppid() == parent and time.monotonic() - started < lifetime:
            time.sleep(0.2)
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--lifetime", type=float, default=900.0)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args()
    _serve(args.delay, args.lifetime, args.parent)
