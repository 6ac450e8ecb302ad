"""Remote roots through fsspec: one listing kept as a local index, files read
in batches with bounded retries, credentials kept out of errors, logs and pickles.

A root such as ``s3://bucket/train`` (any fsspec URL, with ``storage_options=``
as pandas, datasets and Ray take them) is listed once with ``fs.find(detail=
True)``; the listing is written as an index file under :func:`cache_dir`
(``$FASTDECODE_CACHE``, else ``~/.cache/fastdecode``), keyed by the URL and
the public storage options, and it records a fingerprint of the listing's
etags/mtimes/sizes. Re-opening the root reads that file and lists nothing;
``refresh_index=True`` (or :func:`refresh_index`) lists again. A stale index
shows as a missing key: an :class:`~fastdecode.errors.ImageFileError` naming
the URL, which ``on_error`` handles.

:class:`Remote` is what a dataset keeps: the protocol and the public options;
the filesystem client is made lazily in each process (fsspec instances are not
fork-safe) and is never pickled. Secrets (option keys that name a key, secret,
token, password, credential...; a URL's user:password) never enter a pickle, a
message or the index: they stay in a process-local registry, which forked
workers inherit, and in an environment variable (``FASTDECODE_FS_<token>``),
which spawned workers inherit, as they inherit ``AWS_SECRET_ACCESS_KEY``.

Reads are bounded by the per-file limit (``FASTDECODE_MAX_FILE_BYTES``,
1 GiB): an object whose size in a listing this process opened is over it is
refused unfetched, and every fetch stops one byte past it, so an object no
listing sized (a URL of a file list, an HTTP page of links) or one that grew
after its listing is refused too, having cost at most that many bytes; each
is an ImageFileError (``errno.EFBIG``) naming the URL.

:meth:`Remote.submit` starts a batch's fetches at once, one future per URL,
so a worker decodes each file as soon as its bytes arrive while the rest are
in flight (:class:`prefetched`, :func:`take_prefetched`); :meth:`Remote.
read_many` waits for them all. HTTP(S): one GET each, refused from its
Content-Length or read to the limit; other async filesystems (s3, gcs, ...):
a ranged ``cat_file`` of the limit's range (a range from byte 0 that the
store cannot satisfy is an empty object: its 0 bytes), both on fsspec's
event loop; sync ones: read threads (blocking in the kernel, GIL released),
each reading to the limit. Transient failures (timeouts, connection resets
or refusals, HTTP 5xx/408/429) are retried per URL with exponential backoff
within ``$FASTDECODE_RETRY_SECONDS`` (default 10 s) in all; then, or for a
permanent failure, an ImageFileError naming the URL.
"""

from __future__ import annotations

import asyncio
import base64
import errno as _errno
import hashlib
import json
import os
import pickle
import re
import secrets as _secrets
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from fastdecode._options import max_file_bytes, over_file_limit
from fastdecode.errors import ImageFileError

__all__ = ["Remote", "TreeIndex", "cache_dir", "refresh_index", "scrub_url"]

# Option names whose values are credentials (matched anywhere in the name,
# case-insensitive, at any depth of the options).
_SECRET_NAME = re.compile(
    r"key|secret|token|passw|credential|auth|session|sas|signature|cookie|private", re.I)
# Option names that match the pattern but are no secret.
_PUBLIC_NAMES = frozenset({"use_listings_cache", "skip_instance_cache", "requester_pays"})
_REDACTED = "***"
_ENV_PREFIX = "FASTDECODE_FS_"
_SECRETS: dict[str, dict] = {}  # token -> secret options, this process
# The fetches one process keeps in flight: a sync filesystem's threads and
# s3fs's connections (botocore keeps 10; fsspec's HTTP(S) client keeps
# aiohttp's default pool, 100). A batch's fetches start at once: at a 100 ms
# round trip 10 connections served a process 80 GETs/s where 64 served 218,
# and at 50 ms 8 threads of a sync client 76 where 64 served 411
# (docs/decisions/storage-remote.md)
IN_FLIGHT = 64
_CHUNK = 16 << 20  # the most one read of a sync filesystem asks for
_INDEX_VERSION = 2  # 2: the sizes
# EBUSY and EREMOTEIO: how s3fs translates S3's 503 (SlowDown, ServiceUnavailable) and 500
_TRANSIENT_ERRNO = {_errno.ECONNRESET, _errno.ECONNREFUSED, _errno.ECONNABORTED, _errno.ETIMEDOUT,
                    _errno.EPIPE, _errno.EHOSTUNREACH, _errno.ENETUNREACH, _errno.EAGAIN,
                    _errno.EBUSY, _errno.EREMOTEIO}


def scrub_url(url: str) -> str:
    """``url`` without the user:password part of its authority (the same
    object: the dataset keeps the credentials apart and reads with them)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _split(options: Any) -> tuple[Any, Any]:
    """(public, secret) parts of nested storage options."""
    if not isinstance(options, dict):
        return options, None
    public, secret = {}, {}
    for name, value in options.items():
        if _SECRET_NAME.search(str(name)) and name not in _PUBLIC_NAMES:
            secret[name] = value
            continue
        pub, sec = _split(value)
        public[name] = pub
        if sec:
            secret[name] = sec
    return public, secret


def _merge(public: dict, secret: dict) -> dict:
    out = dict(public)
    for name, value in secret.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = _merge(out[name], value)
        else:
            out[name] = value
    return out


def _secret_strings(secret: Any) -> list[str]:
    if isinstance(secret, dict):
        return [s for v in secret.values() for s in _secret_strings(v)]
    if isinstance(secret, (list, tuple)):
        return [s for v in secret for s in _secret_strings(v)]
    if isinstance(secret, (str, bytes)):
        text = secret.decode("utf-8", "replace") if isinstance(secret, bytes) else secret
        return [text] if len(text) >= 3 else []
    return [s for v in getattr(secret, "_asdict", lambda: {})().values()
            for s in _secret_strings(v)]


def cache_dir() -> str:
    """Where listing indexes are kept: ``$FASTDECODE_CACHE``, else
    ``~/.cache/fastdecode`` (``$XDG_CACHE_HOME/fastdecode`` when set)."""
    explicit = os.environ.get("FASTDECODE_CACHE")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastdecode")


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


@dataclass
class TreeIndex:
    """A root's listing: its files (paths relative to the root, sorted) in one
    bytes blob, each ended by a newline, path i from ``offsets[i]`` to
    ``offsets[i + 1] - 1``, the top-level folders, the fingerprint of the
    listing's etags/mtimes/sizes, and each file's size (-1: not listed)."""

    root: str
    blob: np.ndarray
    offsets: np.ndarray
    folders: list[str]
    fingerprint: str
    sizes: np.ndarray
    _over: dict[int, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def relpath(self, i: int) -> str:
        return self.blob[self.offsets[i]:self.offsets[i + 1] - 1].tobytes().decode("utf-8")

    def relpaths(self) -> list[str]:
        return self.blob.tobytes().decode("utf-8").split("\n")[:len(self)] if len(self) else []

    def over(self, limit: int) -> dict[str, int]:
        """The files listed larger than ``limit`` bytes, with their sizes
        (usually none; made once per limit, then a lookup per read)."""
        found = self._over.get(limit)
        if found is None:
            found = self._over[limit] = {self.relpath(int(i)): int(self.sizes[i])
                                         for i in np.flatnonzero(self.sizes > limit)}
        return found


class Remote:
    """A remote filesystem by protocol and options, its client made lazily in
    each process; picklable without its secrets (see the module doc)."""

    def __init__(self, url: str, storage_options: Optional[dict] = None) -> None:
        import fsspec.core

        options = dict(storage_options or {})
        protocol = fsspec.core.split_protocol(url)[0] or "file"
        parts = urlsplit(url)
        if "@" in parts.netloc:  # user:password in the URL: kept as a secret, not in the URL
            userinfo = parts.netloc.rsplit("@", 1)[0]
            user, _, password = userinfo.partition(":")
            if protocol in ("http", "https"):  # basic auth, a header of every request
                pair = f"{unquote(user)}:{unquote(password)}".encode("latin-1")
                headers = dict(options.get("headers") or {})
                headers.setdefault("Authorization",
                                   "Basic " + base64.b64encode(pair).decode("ascii"))
                options["headers"] = headers
            else:
                cls = fsspec.get_filesystem_class(protocol)
                options = {**cls._get_kwargs_from_urls(url), **options}
        self.protocol = protocol
        self._roots: list[str] = []  # the roots listed through it (their sizes known)
        public, secret = _split(options)
        self.options: dict = public
        self._token = ""
        if secret:
            self._token = _secrets.token_hex(8)
            _SECRETS[self._token] = secret
            os.environ[_ENV_PREFIX + self._token] = base64.b64encode(
                pickle.dumps(secret)).decode("ascii")
        self._init_local()

    def _init_local(self) -> None:
        self._pid = -1
        self._fs: Any = None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self._here: dict[str, TreeIndex] = {}  # this process's listings of _roots

    # -- pickling: no client, no secret ---------------------------------------

    def __getstate__(self) -> dict:
        return {"protocol": self.protocol, "options": self.options, "_token": self._token,
                "_roots": self._roots}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_roots", [])
        self._init_local()

    def __repr__(self) -> str:
        return f"Remote({self.protocol!r}, options={sorted(self.options)})"

    def _secret(self) -> dict:
        if not self._token:
            return {}
        secret = _SECRETS.get(self._token)
        if secret is None:
            encoded = os.environ.get(_ENV_PREFIX + self._token)
            if encoded is None:
                raise ImageFileError(f"the credentials of this {self.protocol}:// root are not "
                                     "in this process (its environment lost "
                                     f"{_ENV_PREFIX}{self._token})")
            secret = _SECRETS[self._token] = pickle.loads(base64.b64decode(encoded))
        return secret

    def scrub(self, text: str) -> str:
        """``text`` with every secret value and URL userinfo replaced."""
        for value in _secret_strings(_SECRETS.get(self._token, {})):
            text = text.replace(value, _REDACTED)
        return re.sub(r"(://)[^/\s@]+@", r"\1", text)

    @property
    def fs(self) -> Any:
        """This process's client (a new one after a fork)."""
        if self._pid != os.getpid():
            import fsspec

            with self._lock:
                options = _client_defaults(self.protocol, _merge(self.options, self._secret()))
                # a client of this process's own, also where the options name the cache
                options["skip_instance_cache"] = True
                self._fs = fsspec.filesystem(self.protocol, **options)
                self._pool = None
                self._pid = os.getpid()
        return self._fs

    # -- reading ----------------------------------------------------------------

    def submit(self, urls: Sequence[str]) -> list[Future]:
        """Starts fetching each of ``urls`` now, concurrently; a future per
        URL whose result is its bytes, or the ImageFileError naming it (one
        listed over the per-file limit: done at once, nothing fetched; one
        that fails for good or past the retry bound; one the fetch finds
        over the limit, stopped one byte past it). The result is never raised."""
        urls = list(urls)
        limit = max_file_bytes()
        refused = self._over_limit(urls, limit)
        fs = self.fs
        futures: list[Future] = []
        for i, url in enumerate(urls):
            if i in refused:
                futures.append(_done(refused[i]))
            elif getattr(fs, "async_impl", False):
                futures.append(asyncio.run_coroutine_threadsafe(
                    self._get_async(fs, url, limit), fs.loop))
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(IN_FLIGHT,
                                                    thread_name_prefix="fastdecode-read")
                futures.append(self._pool.submit(self._get_sync, fs, url, limit))
        return futures

    def _get_sync(self, fs: Any, url: str, limit: int) -> Union[bytes, ImageFileError]:
        tries = _Tries()
        while True:
            value = _attempt(_read_to, fs, url, limit)
            wait = tries.wait_after(value)
            if wait is None:
                return self._settle(url, value, tries, limit)
            time.sleep(wait)

    async def _get_async(self, fs: Any, url: str, limit: int) -> Union[bytes, ImageFileError]:
        tries = _Tries()
        get = _http_get if self.protocol in ("http", "https") else _cat_to
        while True:
            try:
                value: Any = await get(fs, url, limit)
            except Exception as exc:  # noqa: BLE001 - classified, then settled
                value = exc
            wait = tries.wait_after(value)
            if wait is None:
                return self._settle(url, value, tries, limit)
            await asyncio.sleep(wait)

    def _settle(self, url: str, value: Any, tries: "_Tries",
                limit: int) -> Union[bytes, ImageFileError]:
        """What the last attempt at ``url`` gave, as the future's result."""
        if isinstance(value, _OverLimit):
            return _too_large(url, limit, str(value))
        if isinstance(value, BaseException):
            return self._error(url, value, tries.count if _transient(value) else None,
                               tries.elapsed())
        if len(value) > limit:
            return _too_large(url, limit, f"fetched to {limit + 1:,} bytes")
        return value if isinstance(value, bytes) else bytes(value)

    def listed_over(self, url: str, limit: int) -> Optional[int]:
        """``url``'s listed size when a root listed through this Remote (in
        any process: its index file) lists it larger than ``limit``, else None."""
        for root in self._roots:
            if url.startswith(root + "/"):
                index = self._here.get(root)
                if index is None:
                    index = self.tree(root)  # which keeps it in _here
                return index.over(limit).get(url[len(root) + 1:])
        return None

    def read_many(self, urls: Sequence[str]) -> list[Union[bytes, ImageFileError]]:
        """The bytes of each URL, fetched concurrently, in order, or in its
        place the ImageFileError naming it (:meth:`submit`'s results)."""
        return [future.result() for future in self.submit(urls)]

    def _over_limit(self, urls: list[str], limit: int) -> dict[int, ImageFileError]:
        """The errors of ``urls`` whose listed size is over ``limit``, by position."""
        if not self._roots:
            return {}
        listed = {i: self.listed_over(url, limit) for i, url in enumerate(urls)}
        return {i: _too_large(urls[i], limit, f"listed at {size:,} bytes")
                for i, size in listed.items() if size is not None}

    def read(self, url: str) -> bytes:
        """The bytes at ``url`` (retried as :meth:`read_many`), or an ImageFileError."""
        value = self.read_many([url])[0]
        if isinstance(value, BaseException):
            raise value
        return value

    def _error(self, url: str, exc: BaseException, attempts: Optional[int],
               elapsed: float) -> ImageFileError:
        reason = self.scrub(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        if attempts is not None:
            reason += f" (transient; gave up after {attempts} attempts in {elapsed:.1f} s)"
        code = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else None
        if isinstance(exc, FileNotFoundError):
            code = _errno.ENOENT
        err = ImageFileError(f"cannot read {scrub_url(url)}: {reason}", path=scrub_url(url),
                             errno=code)
        err.__suppress_context__ = True
        return err

    def open_file(self, url: str, mode: str = "rb") -> Any:
        """``url`` opened on this filesystem (for manifests)."""
        return self.fs.open(url, mode)

    def open(self, url: str) -> "_RemoteFile":
        """The Reader protocol (:class:`~fastdecode.storage._readers.Reader`):
        an opened file whose ``read()`` is :meth:`read` (size unknown
        before); one listed over the per-file limit is refused here, as a
        local file is at its open."""
        refused = self._over_limit([url], max_file_bytes())
        if refused:
            raise refused[0]
        return _RemoteFile(self, url)

    # -- listing ----------------------------------------------------------------

    def tree(self, url: str, refresh: bool = False) -> TreeIndex:
        """The listing of ``url`` from its index file, made (one ``find``) when
        absent or when ``refresh``."""
        key = _index_key(self.protocol, url, self.options)
        root = scrub_url(url).rstrip("/")
        if root not in self._roots:
            self._roots.append(root)
        cached = _TREES.get(key)
        if cached is not None and not refresh:
            return cached
        path = os.path.join(cache_dir(), "index", key + ".npz")
        index = None if refresh else _load_index(path, url)
        if index is None:
            index = self._list(url)
            _save_index(path, index)
        _TREES[key] = self._here[root] = index
        return index

    def _list(self, url: str) -> TreeIndex:
        url = scrub_url(url)
        fs = self.fs
        root = fs._strip_protocol(url).rstrip("/")
        try:
            found = fs.find(url, withdirs=True, detail=True)
        except Exception as exc:  # noqa: BLE001 - any client error, named and scrubbed
            raise FileNotFoundError(self.scrub(f"cannot list {scrub_url(url)}: "
                                               f"{type(exc).__name__}: {exc}")) from None
        prefix = root + "/"
        files, folders, stamp = [], set(), hashlib.sha256()
        for name, info in found.items():
            stripped = fs._strip_protocol(name).rstrip("/")
            if not stripped.startswith(prefix):
                continue
            rel = stripped[len(prefix):]
            if info.get("type") == "directory":
                if "/" not in rel:
                    folders.add(rel)
                continue
            files.append(rel)
            if "/" in rel:
                folders.add(rel.split("/", 1)[0])
        files.sort()
        sizes = np.full(len(files), -1, np.int64)
        for i, rel in enumerate(files):
            info = found.get(prefix + rel) or found.get(fs.unstrip_protocol(prefix + rel)) or {}
            version = (info.get("ETag") or info.get("etag") or info.get("mtime")
                       or info.get("LastModified") or info.get("updated") or info.get("created"))
            stamp.update(f"{rel}\0{info.get('size')}\0{version}\n".encode())
            if isinstance(info.get("size"), int) and info["size"] >= 0:
                sizes[i] = info["size"]
        if not files and not folders:
            raise FileNotFoundError(f"no file under {scrub_url(url)}")
        blob = np.frombuffer("".join(f"{rel}\n" for rel in files).encode("utf-8"), np.uint8)
        offsets = np.zeros(len(files) + 1, np.int64)
        np.cumsum(np.fromiter((len(r.encode("utf-8")) + 1 for r in files), np.int64,
                              count=len(files)), out=offsets[1:])
        return TreeIndex(scrub_url(url), blob, offsets, sorted(folders), stamp.hexdigest(), sizes)


def _client_defaults(protocol: str, options: dict) -> dict:
    """``options`` with what fastdecode's reads need of the client, where the
    user did not set it. s3fs: no retries inside botocore (its legacy mode
    retries a refused connection for ~9 s per attempt), with timeouts at the
    retry bound: each fetch retries, within ``$FASTDECODE_RETRY_SECONDS``;
    and ``IN_FLIGHT`` connections, where botocore keeps 10, so a batch's
    fetches, all started at once, are not served ten at a time. (One GET per
    object needs nothing: a ranged ``cat_file`` never asks the object's size
    first.)"""
    if protocol not in ("s3", "s3a"):
        return options
    bound = max(1.0, _retry_seconds())
    options = dict(options)
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    config.setdefault("connect_timeout", bound)
    config.setdefault("read_timeout", bound)
    config.setdefault("max_pool_connections", IN_FLIGHT)
    options["config_kwargs"] = config
    return options


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


def _too_large(url: str, limit: int, how: str) -> ImageFileError:
    """The error of ``url``, larger than the per-file limit ``limit`` (``how``
    it was seen to be: its listed size, its Content-Length, the fetch)."""
    reason = over_file_limit(url, limit).strerror
    return ImageFileError(f"cannot read {scrub_url(url)}: {reason} ({how})",
                          path=scrub_url(url), errno=_errno.EFBIG)


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


class _RemoteFile:
    __slots__ = ("remote", "url", "size")

    def __init__(self, remote: Remote, url: str) -> None:
        self.remote, self.url, self.size = remote, url, None

    def read(self) -> bytes:
        return self.remote.read(self.url)


_TREES: dict[str, TreeIndex] = {}  # this process's open indexes, by key


def _attempt(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - returned, classified by the caller
        return exc


def _index_key(protocol: str, url: str, options: dict) -> str:
    text = json.dumps([_INDEX_VERSION, protocol, scrub_url(url).rstrip("/"), options],
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _save_index(path: str, index: TreeIndex) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, blob=index.blob, offsets=index.offsets, sizes=index.sizes,
                     meta=np.frombuffer(json.dumps(
                         {"root": index.root, "folders": index.folders,
                          "fingerprint": index.fingerprint}).encode(), np.uint8))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _load_index(path: str, url: str) -> Optional[TreeIndex]:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes())
            if meta["root"] != scrub_url(url):
                return None
            return TreeIndex(meta["root"], data["blob"], data["offsets"], meta["folders"],
                             meta["fingerprint"], data["sizes"])
    except (OSError, KeyError, ValueError):
        return None


def refresh_index(url: str, storage_options: Optional[dict] = None) -> TreeIndex:
    """Lists ``url`` again and rewrites its index (what ``refresh_index=True``
    does when a dataset opens the root)."""
    return Remote(url, storage_options).tree(url, refresh=True)


# -- ImageFolder over a remote tree -------------------------------------------

_ROOTS: dict[str, Remote] = {}  # root URL (scrubbed) -> the Remote it was opened with


def open_root(url: str, storage_options: Optional[dict] = None,
              refresh: bool = False) -> tuple[Remote, TreeIndex]:
    """The Remote for ``url`` and its listing (from the index file unless
    ``refresh``); later :func:`folder_classes`/:func:`folder_samples` calls
    on ``url`` in this process use the same."""
    remote = Remote(url, storage_options)
    index = remote.tree(url, refresh=refresh)
    _ROOTS[scrub_url(url).rstrip("/")] = remote
    return remote, index


def _index_of(url: str) -> TreeIndex:
    remote = _ROOTS.get(scrub_url(url).rstrip("/"))
    if remote is None:
        remote, index = open_root(url)
        return index
    return remote.tree(url)


def folder_classes(url: str) -> tuple[list[str], dict[str, int]]:
    """ImageFolder's find_classes over the remote tree ``url``."""
    classes = sorted(_index_of(url).folders)
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {scrub_url(url)}.")
    return classes, {name: i for i, name in enumerate(classes)}


def folder_samples(url: str, class_to_idx: dict[str, int],
                   is_valid_file: Any) -> tuple[list[tuple[str, int]], set[str]]:
    """(url, class_index) pairs in ImageFolder's walk order (class folders
    sorted, then each file by its folder and name) and the classes seen."""
    index = _index_of(url)
    base = scrub_url(url).rstrip("/") + "/"
    keyed = []
    for rel in index.relpaths():
        name, sep, _ = rel.partition("/")
        if sep and name in class_to_idx:
            folder, _, file = rel.rpartition("/")
            keyed.append((name, folder, file, rel))
    keyed.sort()
    samples, seen = [], set()
    for name, _, _, rel in keyed:
        path = base + rel
        if is_valid_file(path):
            samples.append((path, class_to_idx[name]))
            seen.add(name)
    return samples, seen


# -- a batch fetched together, taken one file at a time --------------------

_LOCAL = threading.local()


class prefetched:  # noqa: N801 - used as a context manager, named as one
    """Within it, :func:`take_prefetched` gives ``urls``' bytes, fetched from
    its start concurrently (each URL once, however often the batch names it;
    those :func:`fetch_ahead` started are not fetched again) and taken as
    each arrives, so the files decode while the rest are in flight (errors
    raised when taken); fetches not taken by its end are cancelled."""

    def __init__(self, remote: Remote, urls: list[str]) -> None:
        self.remote, self.urls = remote, urls

    def __enter__(self) -> None:
        self.outer = getattr(_LOCAL, "batch", None)
        takes = Counter(self.urls)
        futures = _AHEAD.claim(self.remote, list(takes))
        rest = [url for url in takes if url not in futures]
        if rest:
            futures.update(zip(rest, self.remote.submit(rest)))
        _LOCAL.batch = (self.remote, {url: [futures[url], n] for url, n in takes.items()})

    def __exit__(self, *exc: Any) -> None:
        for future, _ in _LOCAL.batch[1].values():
            future.cancel()
        _LOCAL.batch = self.outer


def take_prefetched(remote: Remote, url: str) -> bytes:
    """``url``'s bytes: from the batch this thread prefetched (waiting for
    them to arrive), else read now."""
    batch = getattr(_LOCAL, "batch", None)
    entries = batch[1] if batch is not None and batch[0] is remote else {}
    entry = entries.get(url)
    if entry is None:
        return remote.read(url)
    entry[1] -= 1
    if not entry[1]:
        del entries[url]
    value = entry[0].result()
    if isinstance(value, BaseException):
        raise value
    return value


class _Ahead:
    """This process's fetches started for batches not begun yet (FastLoader's
    next batch), until a :class:`prefetched` of the same Remote claims them:
    (Remote, URL) -> future, at most ``AHEAD_URLS``, the oldest cancelled
    past that."""

    def __init__(self) -> None:
        self._reset()
        # a forked child: its parent's fetches (and a lock held then) are not its own
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.futures: dict[tuple[Remote, str], Future] = {}

    def add(self, remote: Remote, urls: list[str]) -> None:
        with self.lock:
            futures = self.futures
            new = [url for url in dict.fromkeys(urls) if (remote, url) not in futures]
            if new:
                futures.update(zip([(remote, url) for url in new], remote.submit(new)))
            while len(futures) > AHEAD_URLS:
                futures.pop(next(iter(futures))).cancel()

    def claim(self, remote: Remote, urls: list[str]) -> dict[str, Future]:
        with self.lock:
            futures = self.futures
            return {url: futures.pop((remote, url)) for url in urls if (remote, url) in futures}


AHEAD_URLS = 1024
_AHEAD = _Ahead()


def fetch_ahead(remote: Remote, urls: list[str]) -> None:
    """Starts fetching ``urls`` now, for a :class:`prefetched` batch to come
    (in any thread of this process); a URL already started is not again."""
    _AHEAD.add(remote, urls)
