"""Servers on 127.0.0.1 for the remote roots' tests and bench_remote: a
threaded HTTP server over a folder (:class:`HttpTree`, in this process), and
the same HTTP server or moto's S3 in a child process of their own
(:class:`HttpProcess`, :class:`S3Server`: their CPU is theirs alone, and a
test can SIGKILL them mid-epoch). Every one adds a delay per request, set at
start or while it runs, and counts the requests it served.

The child processes are this file run as a script (standard library, plus
moto for S3); each prints the port it bound, answers ``/_fastdecode/delay?s=``
and ``/_fastdecode/stats`` (no bucket and no served file is named so; the S3
server also ``/_fastdecode/reset-peak``, its most requests at once), and
ends itself when its parent goes away or after ``lifetime`` seconds. Used as
context managers, they are always killed on exit.

moto and s3fs are optional: :func:`s3_unavailable` says why S3 cannot run.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Optional

KEY = "fastdecode-test-key-id"  # moto takes any key id and secret
BUCKET = "fastdecode-test"
CONTROL = "/_fastdecode/"


# -- HTTP ------------------------------------------------------------------------


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: "_Server"
    # as real servers serve: connections kept alive, and no Nagle, which with
    # keep-alive holds a response's body behind its headers until the client's
    # delayed ACK (tens of ms). HTTP/1.0 (http.server's default) costs a TCP
    # connection and a thread per request: on 2 CPUs that doubled the client's
    # CPU per request and, at 5 ms, raised the server's by a fifth (its threads
    # contending for the GIL), competing with the decode being measured
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 10  # seconds a connection may idle: never a hung test

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _fault(self) -> bool:
        tree = self.server.tree
        if self.path.startswith(CONTROL):
            if self.path.startswith(CONTROL + "delay?s="):
                tree.delay = float(self.path.split("=", 1)[1])
            body = json.dumps({"delay": tree.delay,
                               "requests": sum(tree.requests.values())}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True
        tree.requests[self.path] += 1
        if tree.delay:
            time.sleep(tree.delay)
        with tree.lock:
            plan = tree.faults.get(self.path)
            action = plan.pop(0) if plan else None
        if action == "503":
            self.send_error(503, "injected")
            return True
        if action == "hold":  # served when the test sets tree.release (30 s at most)
            tree.release.wait(30)
            action = None
        if action == "endless":  # no Content-Length, a body that never ends (to 1 GiB)
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.end_headers()
            block = b"\xff" * (64 << 10)
            try:
                for _ in range(1 << 14):
                    self.wfile.write(block)
            except OSError:  # the client hung up: what a bounded read does
                pass
            self.close_connection = True
            return True
        if action == "reset":  # RST instead of a response
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return True
        if tree.auth is not None and self.headers.get("Authorization") != tree.auth:
            self.send_error(401, "unauthorized")
            return True
        return False

    def do_GET(self) -> None:
        if not self._fault():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._fault():
            super().do_HEAD()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of a batch fetched at
    # once, and each dropped one waits for its retransmission (1 s)
    request_queue_size = 1024
    tree: "HttpTree"

    def server_activate(self) -> None:
        self.live: set[socket.socket] = set()  # the connections open now
        self.live_lock = threading.Lock()
        super().server_activate()

    def get_request(self) -> Any:
        conn, addr = super().get_request()
        with self.live_lock:
            self.live.add(conn)
        return conn, addr

    def shutdown_request(self, request: Any) -> None:
        with self.live_lock:
            self.live.discard(request)
        super().shutdown_request(request)

    def hang_up(self) -> None:
        """Ends every connection open now (kept alive, they would go on being
        served after the listening socket closed)."""
        with self.live_lock:
            live = list(self.live)
        for conn in live:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed meanwhile
                pass


class HttpTree:
    """``with HttpTree(directory) as server: server.url`` (``http://127.0.0.1:PORT``),
    served over HTTP/1.1 by threads of this process, a thread per connection
    kept alive (``stop`` ends them all).

    faults: path -> list of actions taken by the next requests of that path
    ('503', 'reset', 'endless': a body of no stated length that goes on,
    'hold': served once ``release`` is set); delay: seconds before each
    response; requests: count per path; auth: the Authorization header
    required, when set."""

    def __init__(self, directory: str, delay: float = 0.0, auth: Optional[str] = None) -> None:
        self.directory = os.fspath(directory)
        self.delay = delay
        self.auth = auth
        self.faults: dict[str, list[str]] = {}
        self.release = threading.Event()
        self.requests: Counter = Counter()
        self.lock = threading.Lock()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "HttpTree":
        handler = functools.partial(_Handler, directory=self.directory)
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.tree = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """Stops serving now (a server killed mid-epoch)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.hang_up()
            assert self._thread is not None
            self._thread.join(timeout=10)
            self._server = None

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- a server in a child process ---------------------------------------------------


class ServerProcess:
    """This file run as a child process serving ``kind`` (see the module doc)."""

    kind = ""

    def __init__(self, delay: float = 0.0, lifetime: float = 900.0,
                 start_timeout: float = 60.0) -> None:
        self.delay = delay
        self.lifetime = lifetime
        self.start_timeout = start_timeout
        self.process: Optional[subprocess.Popen] = None
        self.port = 0
        self._log = tempfile.TemporaryFile()

    def _args(self) -> list[str]:
        return []

    def __enter__(self) -> "ServerProcess":
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.kind, "--delay", repr(self.delay),
             "--lifetime", repr(self.lifetime), "--parent", str(os.getpid()), *self._args()],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            self.port = self._read_port()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _read_port(self) -> int:
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(self.start_timeout):
                raise TimeoutError(f"the {self.kind} server did not start within "
                                   f"{self.start_timeout} s: {self.log()[-2000:]}")
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.process.wait(5)
            raise RuntimeError(f"the {self.kind} server failed to start: {line!r} "
                               f"{self.log()[-2000:]}")
        return int(line.split()[1])

    def log(self) -> str:
        """What the child wrote to stderr."""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _control(self, what: str) -> dict:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + CONTROL + what, timeout=10) as reply:
            return json.loads(reply.read())

    def set_delay(self, seconds: float) -> None:
        """Seconds the server waits before answering each request from now on."""
        self._control(f"delay?s={seconds}")
        self.delay = seconds

    def requests(self) -> int:
        """Requests served so far (the control channel's not counted)."""
        return int(self._control("stats")["requests"])

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


class HttpProcess(ServerProcess):
    """:class:`HttpTree` over ``directory`` in a child process."""

    kind = "http"

    def __init__(self, directory: str, delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(delay, **kwargs)
        self.directory = os.fspath(directory)

    def _args(self) -> list[str]:
        return ["--directory", self.directory]


def s3_unavailable() -> Optional[str]:
    """Why no S3 server can run here (None: it can)."""
    for module, extra in (("moto.server", "moto[server]"), ("flask", "moto[server]"),
                          ("s3fs", "s3fs")):
        try:
            __import__(module)
        except ImportError:
            return f"needs {extra} (requirements/test.txt)"
    return None


class S3Server(ServerProcess):
    """moto's S3 in a child process, as s3fs's own test suite runs it."""

    kind = "s3"

    def peak_in_flight(self, reset: bool = False) -> int:
        """The most requests the server held at once since the last reset
        (``reset``: start counting again from now)."""
        return int(self._control("reset-peak" if reset else "stats")["peak"])

    def options(self, secret: str) -> dict[str, Any]:
        """``storage_options`` for s3fs against this server, with ``secret`` as
        the secret access key."""
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
                 for p in sorted(Path(local).rglob("*")) if p.is_file()})
        return f"s3://{BUCKET}/{prefix}"


# -- the child process ---------------------------------------------------------------


def _watchdog(parent: int, lifetime: float) -> None:
    """Ends this process when its parent is gone or after ``lifetime`` seconds."""
    started = time.monotonic()

    def watch() -> None:
        while os.getppid() == parent and time.monotonic() - started < lifetime:
            time.sleep(0.2)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def _serve_s3(delay: float) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    # peak: the most requests in the server at once (delay and moto's answer)
    # since the last "reset-peak"
    state = {"delay": delay, "requests": 0, "in_flight": 0, "peak": 0}
    lock = threading.Lock()

    def wrapped(environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(CONTROL):
            with lock:
                if path == CONTROL + "delay":
                    state["delay"] = float(environ.get("QUERY_STRING", "s=0").split("=", 1)[1])
                if path == CONTROL + "reset-peak":
                    state["peak"] = state["in_flight"]
                body = json.dumps(state).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        with lock:
            state["requests"] += 1
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        try:
            if state["delay"]:
                time.sleep(state["delay"])
            return app(environ, start_response)
        finally:
            with lock:
                state["in_flight"] -= 1

    class Quiet(MotoRequestHandler):
        def log_request(self, *args: Any) -> None:  # a line per request: CPU and disk
            pass

    server = make_server("127.0.0.1", 0, wrapped, threaded=True, request_handler=Quiet)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


def _serve_http(delay: float, directory: str) -> None:
    tree = HttpTree(directory, delay)
    with tree:
        print(f"PORT {tree.url.rsplit(':', 1)[1]}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("s3", "http"))
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--lifetime", type=float, default=900.0)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--directory")
    args = parser.parse_args()
    _watchdog(args.parent, args.lifetime)
    if args.kind == "s3":
        _serve_s3(args.delay)
    else:
        _serve_http(args.delay, args.directory)
