"""Remote roots through fsspec: :class:`Remote`, a root's filesystem by
protocol and options, reading its files a batch at a time, its credentials
kept out of errors, logs, pickles and index files.

A root such as ``s3://bucket/train`` (any fsspec URL, with
``storage_options=`` as pandas, datasets and Ray take them) is listed once,
into a local index file (:mod:`fastdecode.storage._remote_index`). A Remote
keeps the protocol and the public options; its client is made lazily in each
process (fsspec instances are not fork-safe) and never pickled. Secrets
(option keys that name a key, secret, token, password, credential...; a
URL's user:password) stay in a process-local registry, which forked workers
inherit, and in an environment variable (``FASTDECODE_FS_<token>``), which
spawned workers inherit, as they inherit ``AWS_SECRET_ACCESS_KEY``.

Reads are bounded by the per-file limit (``FASTDECODE_MAX_FILE_BYTES``): an
object listed over it is refused unfetched, and every fetch stops one byte
past it (:mod:`fastdecode.storage._remote_fetch`); each refusal is an
ImageFileError (``errno.EFBIG``) naming the URL. :meth:`Remote.submit`
starts a batch's fetches at once, one future per URL; within
:class:`prefetched` a worker takes each file as it arrives
(:func:`take_prefetched`), and :func:`fetch_ahead` starts the next batch's.
Transient failures are retried per URL within ``$FASTDECODE_RETRY_SECONDS``;
then, or for a permanent failure, an ImageFileError naming the URL. Decision
record: docs/decisions/storage-remote.md.
"""

from __future__ import annotations

import asyncio
import base64
import errno as _errno
import os
import pickle
import re
import secrets as _secrets
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Sequence, Union
from urllib.parse import unquote, urlsplit, urlunsplit

from fastdecode._options import max_file_bytes, over_file_limit
from fastdecode.errors import ImageFileError
from fastdecode.storage._remote_fetch import (
    _attempt,
    _cat_to,
    _done,
    _http_get,
    _OverLimit,
    _read_to,
    _retry_seconds,
    _transient,
    _Tries,
)
from fastdecode.storage._remote_index import (
    _TREES,
    TreeIndex,
    _index_key,
    _load_index,
    _save_index,
    index_file,
    list_tree,
)

__all__ = ["Remote", "fetch_ahead", "folder_classes", "folder_samples", "open_root",
           "prefetched", "refresh_index", "scrub_url", "take_prefetched"]

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
        root = scrub_url(url).rstrip("/")
        key = _index_key(self.protocol, root, self.options)
        if root not in self._roots:
            self._roots.append(root)
        cached = _TREES.get(key)
        if cached is not None and not refresh:
            return cached
        path = index_file(key)
        index = None if refresh else _load_index(path, scrub_url(url))
        if index is None:
            index = self._list(url)
            _save_index(path, index)
        _TREES[key] = self._here[root] = index
        return index

    def _list(self, url: str) -> TreeIndex:
        """``url`` listed now (one ``find``), secrets kept out of its errors."""
        return list_tree(self.fs, scrub_url(url), self.scrub)


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


def _too_large(url: str, limit: int, how: str) -> ImageFileError:
    """The error of ``url``, larger than the per-file limit ``limit`` (``how``
    it was seen to be: its listed size, its Content-Length, the fetch)."""
    reason = over_file_limit(url, limit).strerror
    return ImageFileError(f"cannot read {scrub_url(url)}: {reason} ({how})",
                          path=scrub_url(url), errno=_errno.EFBIG)


class _RemoteFile:
    __slots__ = ("remote", "url", "size")

    def __init__(self, remote: Remote, url: str) -> None:
        self.remote, self.url, self.size = remote, url, None

    def read(self) -> bytes:
        return self.remote.read(self.url)


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
