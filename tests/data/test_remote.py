"""Remote roots through fsspec: fsspec's memory filesystem and a threaded HTTP
server on 127.0.0.1 (started per test, bounded, always stopped) give the same
rows, targets and tensors as the local tree, in 0 and 2 workers, fork and
spawn; the listing index is reused, goes stale and is refreshed; transient
failures are retried within the bound, then a typed error naming the URL
that on_error handles; credentials stay out of messages, logs and pickles."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import pickle
import re
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("torchvision")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from fastdecode import FastLoader  # noqa: E402
from fastdecode.datasets import FastDatasetFolder, FastImageFolder, FastImageList  # noqa: E402
from fastdecode.errors import ImageFileError  # noqa: E402
from fastdecode.storage import _remote, _remote_fetch, _remote_index  # noqa: E402

from helpers import netns, s3_server  # noqa: E402
from helpers.http_tree import HttpProcess, HttpTree  # noqa: E402
from helpers.remote_roots import fresh_remote_roots  # noqa: E402
from helpers.s3_server import S3Server  # noqa: E402
from helpers.trees import make_tree  # noqa: E402

SECRET = "s3cr3t-Pa55w0rd-XYZ"
TF = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    fresh_remote_roots(tmp_path / "cache", monkeypatch)


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "site" / "tree")


@pytest.fixture
def memory_root(tree):
    """The tree copied onto fsspec's memory filesystem; removed after."""
    fs = MemoryFileSystem()
    name = f"/t-{uuid.uuid4().hex}"
    fs.pipe({f"{name}/{p.relative_to(tree).as_posix()}": p.read_bytes()
             for p in tree.rglob("*") if p.is_file()})
    yield f"memory://{name}"
    fs.rm(name, recursive=True)


LEAD = "test_the_http_cases_run_in_a_loopback_only_namespace"


@pytest.fixture
def loopback(request):
    """Every HTTP test is marked ``loopback`` and runs inside a loopback-only
    network namespace (helpers/netns.py), by the LEAD test."""
    assert request.node.get_closest_marker("loopback"), "an HTTP test must be marked loopback"
    reason = netns.skip_reason(LEAD)
    if reason:
        pytest.skip(reason)


@pytest.fixture
def server(tree, loopback):
    with HttpTree(str(tree.parent)) as s:
        yield s


# The loopback cases each namespaced pytest must pass, by tier and servers
# (three servers, spawned workers, convert's pools): a case that skips, fails
# or goes missing there changes the count. A new loopback test adds to it.
LOOPBACK_PASSED = {("default", "not s3"): 28, ("default", "s3"): 23,
                   ("full", "not s3"): 28, ("full", "s3"): 25}


def summary_counts(stdout: str) -> dict[str, int]:
    """The counts of pytest -q's last line ("28 passed, 69 deselected in 3s")."""
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0])}


@pytest.mark.slow  # the namespaced runs, ~20 s (HTTP) and a minute (S3): make test-full
@pytest.mark.parametrize("servers", [pytest.param("not s3", id="http"),
                                     pytest.param("s3", id="s3")])
def test_the_http_cases_run_in_a_loopback_only_namespace(request, servers):
    """The ``loopback`` tests of this module, in a pytest process inside a
    new network namespace where only lo is up, bounded in time: one process
    for the S3 server's cases, one for the others (a minute in one, under
    make test's parallel run); each passes exactly its LOOPBACK_PASSED cases
    and skips none."""
    if netns.inside():
        pytest.skip("already inside the namespace")
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"{reason}: the loopback tests run in this process, on 127.0.0.1 only")
    tier = "full" if request.config.getoption("full", default=False) else "default"
    # the tier this run is in: the full one runs the slow loopback cases too
    extra = ["--full"] if tier == "full" else ["-m", "loopback and not slow"]
    done = netns.run_marked(Path(__file__), [*extra, "-k", servers], timeout=540)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    counts = {outcome: n for outcome, n in summary_counts(done.stdout).items()
              if outcome not in ("deselected", "warning", "warnings")}
    assert counts == {"passed": LOOPBACK_PASSED[tier, servers]}, done.stdout[-2000:]


def test_summary_counts_read_the_last_line():
    assert summary_counts("..\n\n28 passed, 69 deselected in 32.74s\n") == \
        {"passed": 28, "deselected": 69}
    assert summary_counts("..s\n27 passed, 1 skipped, 69 deselected, 2 warnings in 1.00s "
                          "(0:01:50)\n") == {"passed": 27, "skipped": 1, "deselected": 69,
                                              "warnings": 2}
    assert summary_counts("") == {}


@pytest.fixture(scope="module")
def s3_service():
    """moto's S3 server in its own process (helpers/s3_server.py), one per
    module, started only inside the namespace; every test puts its own tree
    under a fresh prefix."""
    reason = s3_server.unavailable() or netns.skip_reason(LEAD)
    if reason:
        pytest.skip(reason)
    with S3Server() as s3:
        yield s3


@dataclass
class Root:
    """A remote copy of the local ``tree`` at ``url``, opened with ``options``;
    ``remove``/``put`` change a key of it behind the dataset's back."""

    kind: str
    url: str
    tree: Path
    options: dict
    fs: Any  # an fsspec client of the store, the test's own

    def remove(self, url: str) -> None:
        if self.kind == "http":  # the served folder is the local tree
            Path(url.replace(self.url, str(self.tree))).unlink()
        else:
            self.fs.rm(url)

    def put(self, url: str, data: bytes) -> None:
        if self.kind == "http":
            Path(url.replace(self.url, str(self.tree))).write_bytes(data)
        else:
            self.fs.pipe_file(url, data)


def _s3_root(request, tree, secret=SECRET) -> Root:
    request.getfixturevalue("loopback")
    s3 = request.getfixturevalue("s3_service")
    url = s3.upload(tree, f"t-{uuid.uuid4().hex}/tree", secret)
    return Root("s3", url, tree, s3.options(secret), s3.filesystem(secret))


S3 = pytest.param("s3", marks=pytest.mark.loopback)
HTTP = pytest.param("http", marks=pytest.mark.loopback)


@pytest.fixture(params=["memory", HTTP, S3])
def root(request, tree) -> Root:
    """Each kind of remote root over a copy of the local tree: fsspec's memory
    filesystem, the threaded HTTP server, moto's S3 (``s3://bucket/...``
    with endpoint_url and key/secret in storage_options)."""
    if request.param == "memory":
        return Root("memory", request.getfixturevalue("memory_root"), tree, {},
                    MemoryFileSystem())
    if request.param == "http":
        return Root("http", request.getfixturevalue("server").url + "/tree", tree, {}, None)
    return _s3_root(request, tree)


def local_paths(ds, url, tree):
    return [(p.replace(url, str(tree)), t) for p, t in ds.samples]


def rows(loader):
    images, labels = [], []
    for x, y in loader:
        images.append(x)
        labels.append(y)
    return torch.cat(images), torch.cat(labels)


# -- rows, targets, tensors ------------------------------------------------


def open_root(root, *args, **kwargs):
    return FastImageFolder(root.url, *args, storage_options=root.options, **kwargs)


def test_classes_samples_and_targets_are_imagefolders(root):
    ds, ref = open_root(root), ImageFolder(str(root.tree))
    assert ds.classes == ref.classes and ds.class_to_idx == ref.class_to_idx
    assert local_paths(ds, root.url, root.tree) == ref.samples and ds.targets == ref.targets
    assert ds.root == root.url


# spawned workers import torch each (~40 s a case on a loaded 2-core machine): http's
# runs in the default tier, s3's in the full one; the memory filesystem lives in one
# process, so it has no spawn case
SERVERS_SLOW_S3 = [HTTP, pytest.param("s3", marks=[pytest.mark.loopback, pytest.mark.slow])]


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork")],
                         ids=["0-workers", "2-workers-fork"])
def test_batches_are_bit_identical_to_the_local_trees(root, workers, context):
    batches_match(root, workers, context)


@pytest.mark.parametrize("root", SERVERS_SLOW_S3, indirect=True)
def test_spawned_workers_batches_are_bit_identical_to_the_local_trees(root):
    batches_match(root, 2, "spawn")


def batches_match(root, workers, context):
    ds = open_root(root, TF, exact=True)
    ds[0]  # the client exists in this process before the workers fork
    ref = FastImageFolder(str(root.tree), TF, exact=True)
    kw = dict(batch_size=5, num_workers=workers, multiprocessing_context=context)
    got, want = rows(torch.utils.data.DataLoader(ds, **kw)), rows(
        torch.utils.data.DataLoader(ref, batch_size=5))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_fast_dataset_folder_takes_a_url_with_extensions(root):
    ds = FastDatasetFolder(root.url, loader=None, extensions=(".png",),
                           storage_options=root.options)
    assert [p for p, _ in local_paths(ds, root.url, root.tree)] == sorted(
        str(p) for p in root.tree.rglob("*.png"))


def test_a_batch_is_fetched_in_one_call_each_url_once(memory_root, monkeypatch):
    """A batch (drawn with replacement: a URL twice) is one submit of its URLs, each once."""
    ds = FastImageFolder(memory_root, TF)
    fetched = record_fetches(monkeypatch)
    assert len(ds.__getitems__([0, 1, 2, 3, 1, 0])) == 6
    assert fetched.submitted == [[p for p, _ in ds.samples[:4]]]


@pytest.mark.parametrize("threads", [1, 2])
def test_fast_loader_fetches_the_next_batch_ahead(memory_root, threads, monkeypatch):
    """FastLoader starts each batch's fetches before that batch begins (with
    the batch before it): over an epoch every URL is fetched once, every
    fetch started ahead, none left over; the rows are DataLoader's."""
    ds = FastImageFolder(memory_root, TF, exact=True)
    fetched = record_fetches(monkeypatch)
    ahead: list[int] = []  # the positions in fetched.submitted that fetch_ahead made
    add = _remote._Ahead.add

    def adding(self, remote, urls):
        before = len(fetched.submitted)
        add(self, remote, urls)
        ahead.extend(range(before, len(fetched.submitted)))

    monkeypatch.setattr(_remote._Ahead, "add", adding)
    got = rows(FastLoader(ds, batch_size=3, threads=threads))
    want = rows(torch.utils.data.DataLoader(ds, batch_size=3))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    submitted = [url for urls in fetched.submitted for url in urls]
    # each URL once by FastLoader, once by the DataLoader (which fetches no batch ahead)
    assert sorted(submitted) == sorted([p for p, _ in ds.samples] * 2)
    assert len(ahead) == -(-len(ds) // 3) and not _remote._AHEAD.futures


def test_fast_loader_workers_read_the_local_trees_rows(root):
    """FastLoader's worker processes (each fetching its next batch ahead)
    give the local tree's rows, bit-identical in exact mode."""
    chain = T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])
    got = rows(FastLoader(open_root(root, chain, exact=True), batch_size=3, num_workers=2))
    want = rows(FastLoader(FastImageFolder(str(root.tree), chain, exact=True), batch_size=3,
                           num_workers=2))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.loopback
@pytest.mark.timeout(120)
def test_a_batch_is_taken_as_it_arrives_and_what_is_left_is_cancelled(server, tree,
                                                                      monkeypatch):
    """A batch's first file is taken while its last is still held by the
    server (so it decodes while the rest are in flight); a batch left with a
    fetch not taken cancels it. Were the batch awaited whole, the first take
    would wait for the held one (30 s), and the test fail."""
    ds = FastImageFolder(server.url + "/tree", TF)
    urls = [p for p, _ in ds.samples[:3]]
    local = [Path(p).read_bytes() for p, _ in local_paths(ds, server.url + "/tree", tree)[:3]]
    fetched = record_fetches(monkeypatch)
    remote = ds._remote
    for leave_early in (False, True):
        server.release.clear()
        server.faults[urls[2][len(server.url):]] = ["hold"]
        with _remote.prefetched(remote, urls):
            assert _remote.take_prefetched(remote, urls[0]) == local[0]
            held = fetched.futures[urls[2]]
            assert not held.done()
            if not leave_early:
                server.release.set()
                assert _remote.take_prefetched(remote, urls[2]) == local[2]
        assert held.cancelled() == leave_early
    server.release.set()


def test_a_sync_filesystems_batch_is_read_by_as_many_threads(monkeypatch):
    """A sync filesystem's fetches run in a pool of threads; 8 served a batch
    eight at a time (at 50 ms a round trip, 76 GETs/s a process, where 64
    threads served 411). memory:// is sync: the first 20 opens of a batch of
    24 wait for each other at a barrier, which fewer threads would break."""
    fs = MemoryFileSystem()
    name = f"/sync-{uuid.uuid4().hex}"
    fs.pipe({f"{name}/{i}.bin": bytes([i]) * (i + 1) for i in range(24)})
    together = threading.Barrier(20, timeout=10)
    opened = itertools.count()
    open_file = MemoryFileSystem._open

    def waiting_open(self, path, *args, **kwargs):
        if next(opened) < 20:
            together.wait()
        return open_file(self, path, *args, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "_open", waiting_open)
    try:
        got = _remote.Remote(f"memory://{name}").read_many(
            [f"memory://{name}/{i}.bin" for i in range(24)])
    finally:
        fs.rm(name, recursive=True)
    assert got == [bytes([i]) * (i + 1) for i in range(24)]


@pytest.mark.loopback
def test_an_s3_batch_is_fetched_over_more_connections_than_botocores_ten(request, tmp_path):
    """botocore keeps 10 connections per client, so a batch's fetches, all
    started at once, reached the store ten at a time (at 100 ms a round trip,
    80 GETs/s a process); fastdecode's default holds 64: of 40 GETs of
    200 ms each, more than 10 are at the server at once."""
    request.getfixturevalue("loopback")
    s3 = request.getfixturevalue("s3_service")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(40):
        (many / f"{i}.jpg").write_bytes(b"x" * (i + 1))
    url = s3.upload(many, f"t-{uuid.uuid4().hex}/many", SECRET)
    remote = _remote.Remote(url, s3.options(SECRET))
    s3.set_delay(0.2)
    try:
        s3.peak_in_flight(reset=True)
        got = remote.read_many([f"{url}/{i}.jpg" for i in range(40)])
        peak = s3.peak_in_flight()
    finally:
        s3.set_delay(0)
    assert [len(b) for b in got] == list(range(1, 41))
    assert peak > 10


@pytest.mark.loopback
def test_an_s3_batch_is_one_get_per_key(request, tree):
    """No HEAD before each GET (s3fs asks an object's size first for a
    cat_file with no range and max_concurrency > 1, its default; fastdecode's
    are ranged), no listing: 4 images, 4 requests."""
    root = _s3_root(request, tree)
    ds = open_root(root, TF)
    s3 = request.getfixturevalue("s3_service")
    before = s3.requests()
    ds.__getitems__([0, 1, 2, 3])
    assert s3.requests() - before == 4


@pytest.mark.loopback
@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_server_process_takes_its_delay_counts_requests_and_reports_cpu(kind, request, tree,
                                                                          loopback):
    """bench_remote's servers: the delay set at run time reaches the server
    (its stats say so) and reads still work under it, each GET counted, its
    CPU read from /proc, and a killed server is reaped."""
    if kind == "http":
        cm = HttpProcess(str(tree.parent))
    else:
        reason = s3_server.unavailable()
        if reason:
            pytest.skip(reason)
        cm = S3Server()
    with cm as server:
        if kind == "http":
            url, options = server.url + "/tree", {}
        else:
            url, options = server.upload(tree, "delayed/tree", SECRET), server.options(SECRET)
        ds = FastImageFolder(url, TF, storage_options=options)
        server.set_delay(0.005)
        assert server._control("stats")["delay"] == 0.005
        before = server.requests()
        assert len(ds.__getitems__([0, 1, 2])) == 3
        assert server.requests() - before == 3
        assert server.cpu_seconds() > 0
        server.kill()
        assert server.process.returncode is not None


@pytest.mark.parametrize("protocol,given,want", [
    ("s3", {}, {"config_kwargs": {
        "retries": {"total_max_attempts": 1, "mode": "standard"}, "connect_timeout": 2.0,
        "read_timeout": 2.0, "max_pool_connections": 64}}),
    ("s3", {"max_concurrency": 4, "config_kwargs": {"retries": {"max_attempts": 9},
                                                    "read_timeout": 30,
                                                    "max_pool_connections": 8}},
     {"max_concurrency": 4, "config_kwargs": {"retries": {"max_attempts": 9},
                                              "read_timeout": 30, "connect_timeout": 2.0,
                                              "max_pool_connections": 8}}),
    ("http", {"headers": {"X": "1"}}, {"headers": {"X": "1"}}),
], ids=["s3-defaults", "s3-users-settings-kept", "http-untouched"])
def test_s3_clients_get_the_retry_bound(protocol, given, want):
    """The s3fs defaults (botocore's retries off, timeouts at
    $FASTDECODE_RETRY_SECONDS, 2 here, 64 connections) where the options do
    not set them."""
    assert _remote._client_defaults(protocol, given) == want


@pytest.mark.parametrize("exc,transient", [
    (OSError(16, "SlowDown"), True),  # EBUSY: s3fs's 503
    (OSError(121, "InternalError"), True),  # EREMOTEIO: s3fs's 500
    (FileNotFoundError(2, "NoSuchKey"), False),
    (PermissionError(13, "AccessDenied"), False),
], ids=["s3-503", "s3-500", "no-such-key", "access-denied"])
def test_s3s_translated_errors_are_transient_or_not(exc, transient):
    assert _remote_fetch._transient(exc) is transient


# -- the listing index -------------------------------------------------------


def count_lists(monkeypatch):
    """The listings made (each one ``find`` of the store)."""
    calls = []
    listing = _remote.Remote._list
    monkeypatch.setattr(_remote.Remote, "_list",
                        lambda self, url: calls.append(url) or listing(self, url))
    return calls


def test_reopening_a_root_lists_nothing(root, monkeypatch):
    lists = count_lists(monkeypatch)
    first = open_root(root)
    _remote_index._TREES.clear()  # a new process: only the index file is left
    again = open_root(root)
    assert len(lists) == 1 and again.samples == first.samples
    assert list((Path(_remote_index.cache_dir()) / "index").glob("*.npz"))


def test_a_stale_index_is_refreshed_on_request(root, monkeypatch):
    lists = count_lists(monkeypatch)
    before = open_root(root)
    stale = _remote.Remote(root.url, root.options).tree(root.url).fingerprint
    new = f"{root.url}/cat/zz-new.jpg"
    root.put(new, (root.tree / "cat" / "img0.jpg").read_bytes())
    _remote_index._TREES.clear()
    assert len(open_root(root)) == len(before)  # the index, as it was
    fresh = open_root(root, refresh_index=True)
    assert len(fresh) == len(before) + 1 and len(lists) == 2
    assert fresh.samples.index((new, 0)) == 3  # after cat/img3.png, before cat/nested/
    assert fresh[3][1] == 0  # and it reads
    assert _remote.refresh_index(root.url, root.options).fingerprint != stale


def test_a_root_with_nothing_under_it_is_file_not_found():
    with pytest.raises(FileNotFoundError, match="memory://nowhere-"):
        FastImageFolder(f"memory://nowhere-{uuid.uuid4().hex}")


# -- errors: deleted keys, retries, a server that goes away ------------------


def test_a_key_deleted_after_listing_names_the_url(root):
    ds = open_root(root, TF)
    gone = ds.samples[2][0]
    root.remove(gone)
    with pytest.raises(ImageFileError, match=f"sample 2: cannot read {re.escape(gone)}") as info:
        ds[2]
    assert isinstance(info.value, OSError) and info.value.filename == gone


@pytest.mark.parametrize("path", ["item", "batch"])
def test_a_deleted_key_is_skipped_under_on_error_skip(root, path):
    ds = open_root(root, TF, on_error="skip")
    root.remove(ds.samples[2][0])
    if path == "item":
        image, _ = ds[2]
        assert image.shape == (3, 32, 32)
    else:
        assert len(ds.__getitems__([1, 2, 3])) == 3
    assert ds.skipped == 1


# -- the per-file limit: refused from a listed size unfetched, else from the fetch ---


def sizes_and_limit(ds, root) -> tuple[list[int], int]:
    """The samples' sizes and a limit (the second largest) that puts some over."""
    sizes = [os.path.getsize(p) for p, _ in local_paths(ds, root.url, root.tree)]
    return sizes, sorted(set(sizes))[-2]


@dataclass
class Fetches:
    """What the last attempt at each URL gave (bytes, an _OverLimit, an
    error), the URLs of each call of Remote.submit and the futures it gave."""

    by_url: dict[str, Any] = field(default_factory=dict)
    submitted: list[list[str]] = field(default_factory=list)
    futures: dict[str, Future] = field(default_factory=dict)


def record_fetches(monkeypatch) -> Fetches:
    fetches = Fetches()
    submit, settle = _remote.Remote.submit, _remote.Remote._settle

    def submitting(self, urls):
        fetches.submitted.append(list(urls))
        futures = submit(self, urls)
        fetches.futures.update(zip(urls, futures))
        return futures

    def settling(self, url, value, tries, limit):
        fetches.by_url[url] = value
        return settle(self, url, value, tries, limit)

    monkeypatch.setattr(_remote.Remote, "submit", submitting)
    monkeypatch.setattr(_remote.Remote, "_settle", settling)
    return fetches


def over_limit(url: str, limit: int, how: str) -> str:
    return (f"cannot read {re.escape(url)}: larger than the per-file limit of {limit:,} bytes "
            f"\\(set FASTDECODE_MAX_FILE_BYTES to read larger files\\) \\({how}\\)")


def test_an_object_over_the_per_file_limit_is_refused(root, monkeypatch):
    """memory:// and S3 list each object's size: one over the limit is
    refused unfetched. An HTTP listing (links in a page) has no sizes: its
    GET is refused from the Content-Length, the body unread. Either is its
    sample's ImageFileError (EFBIG) naming the URL; ``on_error="skip"`` goes on."""
    ds = open_root(root, TF)
    sizes, limit = sizes_and_limit(ds, root)
    over = [i for i, n in enumerate(sizes) if n > limit]
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", str(limit))
    fetched = record_fetches(monkeypatch)
    url, size = ds.samples[over[0]][0], sizes[over[0]]
    listed = root.kind != "http"
    assert ds._remote.listed_over(url, limit) == (size if listed else None)
    how = f"listed at {size:,} bytes" if listed else f"Content-Length {size:,}"
    with pytest.raises(ImageFileError,
                       match=f"sample {over[0]}: {over_limit(url, limit, how)}") as info:
        ds[over[0]]
    assert info.value.errno == errno.EFBIG and info.value.filename == url
    skipping = open_root(root, TF, on_error="skip")
    assert len(skipping.__getitems__(list(range(len(ds))))) == len(ds)
    assert skipping.skipped == len(over)
    refused = {fetched.by_url.get(ds.samples[i][0], "unfetched").__class__ for i in over}
    assert refused == ({str} if listed else {_remote_fetch._OverLimit})


@pytest.mark.parametrize("case", ["file-list", "grown-after-listing"])
def test_an_object_no_listing_bounds_is_refused_from_its_fetch(root, case, monkeypatch):
    """An object no listing sized (a URL of a file list) or one that grew
    after its listing is refused from its fetch: memory:// and S3 read the
    limit's range, one byte past the limit (so a huge object costs no more),
    HTTP from the Content-Length."""
    folder = open_root(root, TF)
    sizes, limit = sizes_and_limit(folder, root)
    if case == "file-list":
        ds = FastImageList(list(folder.samples), TF, storage_options=root.options)
        i = sizes.index(max(sizes))
    else:
        ds, i = folder, 0
        limit = max(sizes)
        root.put(ds.samples[i][0], Path(local_paths(ds, root.url, root.tree)[i][0]).read_bytes()
                 + bytes(limit + 4096))
        sizes[i] += limit + 4096
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", str(limit))
    fetched = record_fetches(monkeypatch)
    url = ds.samples[i][0]
    how = f"Content-Length {sizes[i]:,}" if root.kind == "http" else f"fetched to {limit + 1:,} bytes"
    with pytest.raises(ImageFileError, match=f"sample {i}: {over_limit(url, limit, how)}") as info:
        ds[i]
    assert info.value.errno == errno.EFBIG
    got = fetched.by_url[url]
    assert (isinstance(got, _remote_fetch._OverLimit) if root.kind == "http"
            else len(got) == limit + 1)


@pytest.mark.loopback
def test_an_endless_http_body_is_read_to_the_limit_and_refused(server, monkeypatch):
    """A GET whose body states no length and never ends (the server would send
    1 GiB) is read to one byte past the limit, then refused."""
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "1MiB")
    ds = FastImageFolder(server.url + "/tree", TF)
    server.faults["/tree/cat/img1.jpg"] = ["endless"]
    how = "sent more than 1,048,576 bytes"
    with pytest.raises(ImageFileError,
                       match=f"sample 1: {over_limit(ds.samples[1][0], 2**20, how)}") as info:
        ds[1]
    assert info.value.errno == errno.EFBIG


def test_an_empty_object_reads_as_no_bytes(root):
    """An empty object is its 0 bytes, not the store's refusal of the limit's
    range (S3 answers a range from byte 0 of nothing with 416), so its sample
    fails as an empty local file does."""
    ds = open_root(root, TF)
    url = ds.samples[0][0]
    root.put(url, b"")
    assert ds._remote.read(url) == b""
    with pytest.raises(ImageFileError, match=f"{re.escape(url)}: sample 0: Empty input file$"):
        ds[0]


def test_listed_sizes_survive_the_index_file_and_a_pickle(memory_root, monkeypatch):
    """A spawned worker gets the Remote pickled: it finds the sizes in the
    index file, listing nothing; the read-ahead Reader (``open``) refuses
    what they put over the limit."""
    remote, index = _remote.open_root(memory_root)
    url = f"{memory_root}/{index.relpath(0)}"
    want = MemoryFileSystem().size(url)
    lists = count_lists(monkeypatch)
    _remote_index._TREES.clear()  # a new process: only the index file is left
    again = pickle.loads(pickle.dumps(remote))
    assert again.listed_over(url, want - 1) == want and not lists
    assert again.listed_over(url, want) is None and again.open(url).url == url
    assert again.listed_over(f"{memory_root}/no-such.jpg", 0) is None
    assert again.listed_over("memory://elsewhere/a.jpg", 0) is None
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", str(want - 1))
    with pytest.raises(ImageFileError, match="larger than the per-file limit") as info:
        again.open(url)
    assert info.value.errno == errno.EFBIG


@pytest.mark.loopback
@pytest.mark.parametrize("fault", ["503", "reset"])
def test_transient_failures_are_retried(server, tree, fault):
    ds = FastImageFolder(server.url + "/tree", TF, exact=True)
    ref = FastImageFolder(str(tree), TF, exact=True)
    server.faults["/tree/cat/img1.jpg"] = [fault, fault]
    assert torch.equal(ds[1][0], ref[1][0])
    assert server.requests["/tree/cat/img1.jpg"] == 3


@pytest.mark.loopback
def test_a_persistent_5xx_gives_up_within_the_bound(server, monkeypatch):
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "1")
    ds = FastImageFolder(server.url + "/tree", TF)
    server.faults["/tree/cat/img1.jpg"] = ["503"] * 1000
    start = time.monotonic()
    with pytest.raises(ImageFileError, match=r"cannot read http://127\.0\.0\.1:\d+/tree/cat/"
                       r"img1\.jpg: .*503.*transient; gave up after \d+ attempts"):
        ds[1]
    assert time.monotonic() - start < 30  # bounded (the bound is 1 s; generous for a busy host)


@pytest.mark.loopback
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_server_killed_mid_epoch_is_a_typed_error_not_a_hang(kind, tree, loopback,
                                                               monkeypatch):
    """The server dies between two batches (the HTTP server shut down, moto's
    process SIGKILLed): the next batch raises the typed error naming the URL,
    within the retry bound plus the client's own retries."""
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "1")
    if kind == "http":
        server = HttpTree(str(tree.parent))
        with server:
            url, options, stop = server.url + "/tree", {}, server.stop
            scheme = r"http://127\.0\.0\.1:\d+/tree/"
            ds = FastImageFolder(url, TF, storage_options=options)
            _next_batch_after(ds, stop, scheme)
        return
    reason = s3_server.unavailable()
    if reason:
        pytest.skip(reason)
    with S3Server() as s3:
        url = s3.upload(tree, "killed/tree", SECRET)
        ds = FastImageFolder(url, TF, storage_options=s3.options(SECRET))
        _next_batch_after(ds, s3.kill, re.escape(url) + "/")


def _next_batch_after(ds, kill, url_pattern):
    loader = iter(torch.utils.data.DataLoader(ds, batch_size=4))
    next(loader)
    kill()
    start = time.monotonic()
    with pytest.raises(ImageFileError, match=f"cannot read {url_pattern}") as info:
        next(loader)
    assert isinstance(info.value, OSError)
    assert time.monotonic() - start < 30  # bounded: 1 s, and a busy host


# -- fastdecode.ray.read_images over the same roots -----------------------------
# Its read tasks run here, in this process (no cluster: tests/data/test_ray.py
# has the cluster); what they decode is what a Ray worker would.


def ray_module():
    pytest.importorskip("ray.data")
    import fastdecode.integrations.ray

    return fastdecode.integrations.ray


def task_rows(fdray, listing):
    from fastdecode.batching._rows import BatchDecoder

    source = fdray.ImageDatasource(listing, BatchDecoder(TF, exact=True), seed=0,
                                   include_paths=True, block_rows=4)
    blocks = [b for task in source.get_read_tasks(2) for b in task()]
    images = np.concatenate([b.column("image").combine_chunks().to_numpy_ndarray()
                             for b in blocks])
    return images, [x for b in blocks for x in b.column("label").to_pylist()], [
        x for b in blocks for x in b.column("path").to_pylist()]


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")
def test_read_images_reads_a_url_as_fastimagefolder_does(root):
    fdray = ray_module()
    listing = fdray._list_urls([root.url], root.options)
    ds = open_root(root)
    assert listing.paths == [p for p, _ in ds.samples] and listing.classes == ds.classes
    images, labels, paths = task_rows(fdray, listing)
    ref = FastImageFolder(str(root.tree), TF, exact=True)
    assert np.array_equal(images, np.stack([ref[i][0].numpy() for i in range(len(ref))]))
    assert labels == ref.targets and paths == listing.paths


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")
def test_read_images_takes_urls_of_files_and_folders(root):
    fdray = ray_module()
    listing = fdray._list_urls([f"{root.url}/cat", f"{root.url}/dog/img0.jpg"], root.options)
    want = sorted(str(p) for p in (root.tree / "cat").rglob("*")
                  if p.suffix in (".jpg", ".jpeg", ".png")) + [str(root.tree / "dog/img0.jpg")]
    assert [p.replace(root.url, str(root.tree)) for p in listing.paths] == want
    assert set(listing.labels.tolist()) == {-1}
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        fdray._list_urls([f"{root.url}/cat", f"{root.url}/nope.jpg"], root.options)


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")
def test_read_images_names_a_deleted_key(root):
    from fastdecode.errors import DecodeError

    fdray = ray_module()
    listing = fdray._list_urls([root.url], root.options)
    root.remove(listing.paths[5])
    with pytest.raises(DecodeError, match=re.escape(listing.paths[5])):
        task_rows(fdray, listing)


def test_read_images_takes_storage_options_with_urls_only(tree):
    fdray = ray_module()
    with pytest.raises(ValueError, match="storage_options= goes with fsspec URLs"):
        fdray.read_images(str(tree), TF, storage_options={"anon": True})


# -- fastdecode convert from a URL -------------------------------------------------


def outputs(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("root", ["memory", *SERVERS_SLOW_S3], indirect=True)
def test_convert_from_a_url_writes_the_local_trees_outputs(root, tmp_path):
    """The same files, bytes and summary as converting the local tree; spawned
    workers over the servers (the memory filesystem is this process's), the
    decode trade timed on the URL's bytes, and a rerun skips every file and
    counts its sources' sizes from the store."""
    from fastdecode.cli.convert import convert_tree

    workers = 1 if root.kind == "memory" else 2
    got = convert_tree(root.url, tmp_path / "from-url", to="bmp", workers=workers,
                       time_sample=2, storage_options=root.options)
    want = convert_tree(root.tree, tmp_path / "from-local", to="bmp", workers=1, time_sample=0)
    assert outputs(tmp_path / "from-url") == outputs(tmp_path / "from-local")
    assert (got.converted, got.failed, got.bytes_before, got.bytes_after, got.classes) == (
        want.converted, 0, want.bytes_before, want.bytes_after, want.classes)
    assert got.source == root.url and got.timed_images == 2
    again = convert_tree(root.url, tmp_path / "from-url", to="bmp", workers=1, time_sample=0,
                         storage_options=root.options)
    assert (again.skipped, again.converted, again.bytes_before) == (
        want.converted, 0, want.bytes_before)


def test_convert_lists_a_key_deleted_after_listing_as_failed(root, tmp_path):
    from fastdecode.cli.convert import convert_tree

    gone = open_root(root).samples[1][0]
    root.remove(gone)
    summary = convert_tree(root.url, tmp_path / "out", to="bmp", workers=1, time_sample=0,
                           storage_options=root.options)
    assert summary.failed == 1 and summary.failures[0]["path"] == gone
    assert f"cannot read {gone}" in summary.failures[0]["error"]


@pytest.mark.parametrize("argv,message", [
    (["--to", "wds"], "--to wds takes a local SRC"),
    (["--to", "bmp", "--storage-option", "anon"], "--storage-option takes KEY=VALUE"),
], ids=["wds", "option-without-value"])
def test_convert_cli_refuses_what_a_url_cannot_do(memory_root, tmp_path, argv, message, capsys):
    from fastdecode.cli.__main__ import main

    assert main(["convert", memory_root, str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_convert_cli_passes_storage_options_and_writes_locally(memory_root, tmp_path, capsys):
    from fastdecode.cli.__main__ import main

    out = tmp_path / "out"
    assert main(["convert", memory_root, str(out), "--to", "bmp", "--workers", "1",
                 "--time-sample", "0", "--storage-option", "skip_instance_cache=true",
                 "--storage-option", f"secret={SECRET}", "--json", str(tmp_path / "s.json")]) == 0
    assert len(list(out.rglob("*.bmp"))) == 12
    assert SECRET not in capsys.readouterr().out + (tmp_path / "s.json").read_text()
    assert main(["convert", memory_root, "memory://elsewhere", "--to", "bmp"]) == 2
    assert "is a URL: convert writes to a local folder" in capsys.readouterr().err


@pytest.mark.parametrize("pairs,options", [
    (None, None),
    (["anon=true", "endpoint_url=http://127.0.0.1:9000"],
     {"anon": True, "endpoint_url": "http://127.0.0.1:9000"}),
    (['client_kwargs={"region_name": "eu-west-1"}', "n=3", "s=a=b"],
     {"client_kwargs": {"region_name": "eu-west-1"}, "n": 3, "s": "a=b"}),
], ids=["none", "json-and-strings", "nested"])
def test_convert_storage_options_parse_as_json_where_they_can(pairs, options):
    from fastdecode.cli.convert import storage_options

    assert storage_options(pairs) == options


# -- credentials -----------------------------------------------------------------


@pytest.fixture(params=["memory", S3])
def secret_root(request, tree) -> Root:
    """A root whose storage options carry SECRET (s3: the secret access key)."""
    if request.param == "memory":
        return Root("memory", request.getfixturevalue("memory_root"), tree,
                    {"secret": SECRET, "client_kwargs": {"aws_session_token": SECRET}},
                    MemoryFileSystem())
    return _s3_root(request, tree)


def test_secret_options_stay_out_of_pickles_messages_logs_and_reprs(secret_root, caplog):
    root = secret_root
    with caplog.at_level(logging.DEBUG):
        ds = open_root(root, TF)
        assert SECRET.encode() not in pickle.dumps(ds)
        assert SECRET not in repr(ds._remote) and SECRET not in repr(ds)
        clone = pickle.loads(pickle.dumps(ds))
        assert clone._remote.fs.storage_options["secret"] == SECRET  # the client still gets it
        assert clone[1][0].shape == (3, 32, 32)
        root.remove(ds.samples[0][0])
        with pytest.raises(ImageFileError) as info:
            clone[0]
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert SECRET not in caplog.text
    for index in (Path(_remote_index.cache_dir()) / "index").glob("*.npz"):
        assert SECRET.encode() not in index.read_bytes()


@pytest.mark.loopback
def test_url_userinfo_is_an_http_credential_never_shown(tree, caplog, loopback):
    import base64

    token = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    with HttpTree(str(tree.parent), auth=token) as server, caplog.at_level(logging.DEBUG):
        host = server.url.split("://", 1)[1]
        ds = FastImageFolder(f"http://alice:{SECRET}@{host}/tree", TF)
        assert ds[0][0].shape == (3, 32, 32)  # authorized
        assert ds.root == f"http://{host}/tree"
        assert all(SECRET not in p for p, _ in ds.samples)
        assert SECRET.encode() not in pickle.dumps(ds)
        (tree / "cat" / "img0.jpg").unlink()
        with pytest.raises(ImageFileError) as info:
            ds[0]
        assert SECRET not in str(info.value)
    assert SECRET not in caplog.text


def test_scrub_url_removes_userinfo():
    assert _remote.scrub_url(f"https://bob:{SECRET}@h.example/x") == "https://h.example/x"
    assert _remote.scrub_url("s3://bucket/x") == "s3://bucket/x"


def test_local_trees_still_read_locally(tree):
    ds = FastImageFolder(str(tree))
    assert "_remote" not in ds.__dict__
