"""One remote file fetched: read to one byte past the per-file limit, and
retried after a transient failure within ``$FASTDECODE_RETRY_SECONDS``.

A sync filesystem's file is read by :func:`_read_to` (in reads of at most
16 MiB); an async one's by :func:`_cat_to` (a ranged ``cat_file`` of the
limit's range; a range from byte 0 the store cannot satisfy is an empty
object) or, over HTTP(S), :func:`_http_get` (one GET, refused unread from
its Content-Length). :class:`_Tries` is one URL's retry policy (50 ms
doubling to 2 s, while the time since the first attempt stays within the
bound, default 10 s); :func:`_transient` tells a failure worth another
attempt (timeouts, connection resets or refusals, HTTP 5xx/408/429) from a
permanent one. What the last attempt gave becomes the URL's bytes or its
ImageFileError in :class:`~fastdecode.storage._remote.Remote`. Decision
record: docs/decisions/storage-remote.md.
"""

from __future__ import annotations

import errno as _errno
import os
import time
from concurrent.futures import Future
from typing import Any, Optional

__all__: list[str] = []  # private to fastdecode.storage._remote

_CHUNK = 16 << 20  # the most one read of a sync filesystem asks for
# EBUSY and EREMOTEIO: how s3fs translates S3's 503 (SlowDown, ServiceUnavailable) and 500
_TRANSIENT_ERRNO = {_errno.ECONNRESET, _errno.ECONNREFUSED, _errno.ECONNABORTED, _errno.ETIMEDOUT,
                    _errno.EPIPE, _errno.EHOSTUNREACH, _errno.ENETUNREACH, _errno.EAGAIN,
                    _errno.EBUSY, _errno.EREMOTEIO}


def _retry_seconds() -> float:
    return float(os.environ.get("FASTDECODE_RETRY_SECONDS", "10"))


def _transient(exc: BaseException) -> bool:
    """A failure worth another attempt (the server or the network, not the key)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError,
                        NotADirectoryError)):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNO:
        return True
    status = getattr(exc, "status", None)
    if status is None:
        status = getattr(exc, "code", None)
    if isinstance(status, int) and status >= 400:
        return status >= 500 or status in (408, 429)
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if module.startswith(("aiohttp", "asyncio", "botocore", "urllib3", "requests")):
        return any(w in name for w in ("Connection", "Disconnected", "Timeout", "Payload",
                                       "Reset", "ClientOSError", "EndpointConnection"))
    return False


class _Tries:
    """One URL's retry policy: another attempt after a transient failure,
    after 50 ms doubling to 2 s, while the time since the first attempt
    stays within ``$FASTDECODE_RETRY_SECONDS``."""

    def __init__(self) -> None:
        self.start, self.delay, self.count = time.monotonic(), 0.05, 0
        self.bound = _retry_seconds()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def wait_after(self, value: Any) -> Optional[float]:
        """The seconds to wait before the next attempt after an attempt that
        gave ``value``, or None: no other attempt (``value`` stands)."""
        self.count += 1
        if not (isinstance(value, BaseException) and _transient(value)):
            return None
        if self.elapsed() + self.delay > self.bound:
            return None
        wait, self.delay = self.delay, min(self.delay * 2, 2.0)
        return wait


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class _OverLimit(Exception):
    """A fetch stopped as over the per-file limit; its text says how it was seen."""


def _range_of_nothing(exc: BaseException) -> bool:
    """``exc`` is the store's "range not satisfiable" (HTTP 416; s3fs's EINVAL)
    for a range from byte 0: the object is empty."""
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    if status == 416:
        return True
    return (isinstance(exc, OSError) and exc.errno == _errno.EINVAL
            and "range" in str(exc).lower())


def _read_to(fs: Any, url: str, limit: int) -> bytes:
    """``url``'s bytes on the sync filesystem ``fs``, read to at most ``limit``
    + 1 (in reads of at most ``_CHUNK``: no allocation past what arrived)."""
    chunks, total = [], 0
    with fs.open(url, "rb") as f:
        while total <= limit:
            chunk = f.read(min(limit + 1 - total, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _cat_to(fs: Any, url: str, limit: int) -> bytes:
    """``url``'s first ``limit`` + 1 bytes on the async filesystem ``fs`` (a
    ranged GET); an empty object, whose range from byte 0 the store cannot
    satisfy (a 416), is its 0 bytes."""
    try:
        return await fs._cat_file(url, start=0, end=limit + 1)
    except Exception as exc:
        if _range_of_nothing(exc):
            return b""
        raise


async def _http_get(fs: Any, url: str, limit: int) -> bytes:
    """One GET of ``url`` with fsspec's HTTP client ``fs`` (its session,
    headers and errors, as its ``cat_file``): refused unread when its
    Content-Length is over ``limit``, else its body read to at most ``limit``
    + 1 bytes (a chunked or endless body, a decompressing one)."""
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), **fs.kwargs) as r:
        fs._raise_not_found_for_status(r, url)  # fsspec's errors: 404 FileNotFoundError...
        if r.content_length is not None and r.content_length > limit:
            raise _OverLimit(f"Content-Length {r.content_length:,}")
        chunks, total = [], 0
        async for chunk in r.content.iter_any():
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _OverLimit(f"sent more than {limit:,} bytes")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _attempt(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - returned, classified by the caller
        return exc
