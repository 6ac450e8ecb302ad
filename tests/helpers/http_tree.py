"""A threaded HTTP server on 127.0.0.1 serving a directory tree, with faults
injected per request (503s, connection resets, a delay), for the remote tests.

Used as a context manager: the server thread is always stopped on exit, and
each connection has a socket timeout, so nothing outlives the test.
"""

from __future__ import annotations

import functools
import http.server
import os
import socket
import struct
import threading
import time
from collections import Counter
from typing import Optional


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: "_Server"
    timeout = 10  # seconds a connection may idle: never a hung test

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _fault(self) -> bool:
        tree = self.server.tree
        tree.requests[self.path] += 1
        if tree.delay:
            time.sleep(tree.delay)
        with tree.lock:
            plan = tree.faults.get(self.path)
            action = plan.pop(0) if plan else None
        if action == "503":
            self.send_error(503, "injected")
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
    tree: "HttpTree"


class HttpTree:
    """``with HttpTree(directory) as server: server.url`` (``http://127.0.0.1:PORT``).

    faults: path -> list of actions taken by the next requests of that path
    ('503', 'reset'); delay: seconds before each response; requests: count
    per path; auth: the Authorization header required, when set."""

    def __init__(self, directory: str, delay: float = 0.0, auth: Optional[str] = None) -> None:
        self.directory = os.fspath(directory)
        self.delay = delay
        self.auth = auth
        self.faults: dict[str, list[str]] = {}
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
            assert self._thread is not None
            self._thread.join(timeout=10)
            self._server = None

    def __exit__(self, *exc: object) -> None:
        self.stop()
