"""The read-ahead and the shared cache on slow storage (latencyfs, a delay per
open): the same batches as without latency, reads in flight within their
bounds, a file that vanishes or turns unreadable mid-epoch named in its own
sample, a cached epoch 2 that opens no file, and local reads that ask for
no attributes (counted by the daemon)."""

from __future__ import annotations

import errno
import inspect
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.errors import ImageFileError  # noqa: E402

BATCH = 4
DELAY_MS = 5


def chain():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])


def make_loader(kind: str, ds, workers: int, shuffle: bool = True):
    kwargs = dict(batch_size=BATCH, num_workers=workers, shuffle=shuffle,
                  generator=torch.Generator().manual_seed(0))
    if kind == "FastLoader":
        return fd.FastLoader(ds, **kwargs)
    return torch.utils.data.DataLoader(ds, **kwargs)


def epoch(loader) -> list[tuple]:
    torch.manual_seed(0)
    return [(x.clone(), y.clone()) for x, y in loader]


def test_the_datasets_take_readahead_and_cache():
    """Issue 28's read-ahead and cache are options of the datasets: a build
    without them fails here instead of skipping this module (issue 55)."""
    for cls in (fd.FastImageFolder, fd.FastDatasetFolder, fd.FastImageList):
        takes = inspect.signature(cls.__init__).parameters
        assert "readahead" in takes and "cache" in takes, f"{cls.__name__}: {list(takes)}"


LOADERS = [pytest.param("DataLoader", 0, id="DataLoader-0-workers"),
           pytest.param("DataLoader", 2, id="DataLoader-2-workers"),
           pytest.param("FastLoader", 0, id="FastLoader-0-workers"),
           pytest.param("FastLoader", 2, id="FastLoader-2-workers")]


@pytest.mark.parametrize("latency_tree", [DELAY_MS], indirect=True, ids=[f"{DELAY_MS}ms"])
@pytest.mark.parametrize("kind, workers", LOADERS)
def test_same_batches_as_without_latency(latency_tree, storage_tree, kind, workers):
    local = epoch(make_loader(kind, fd.FastImageFolder(storage_tree, chain(), readahead=0),
                              workers))
    slow_ds = fd.FastImageFolder(latency_tree.mount_path, chain())  # read-ahead by default
    slow = epoch(make_loader(kind, slow_ds, workers))
    assert len(slow) == len(local) == -(-len(slow_ds) // BATCH)
    for (x, y), (x0, y0) in zip(slow, local):
        assert torch.equal(x, x0) and torch.equal(y, y0)
    assert latency_tree.stats_reader()["opens"] == len(slow_ds)  # each file opened once


@pytest.mark.parametrize("latency_tree", [DELAY_MS], indirect=True, ids=[f"{DELAY_MS}ms"])
@pytest.mark.parametrize("depth", [2, 4, 8], ids=lambda d: f"depth-{d}")
def test_reads_in_flight_never_above_the_bound(latency_tree, depth):
    from fastdecode.storage._readahead import ReadAheadOptions

    files = sorted(p for p in latency_tree.mount_path.rglob("*.jpg"))
    biggest = max(p.stat().st_size for p in files)
    cap = 3 * biggest  # the byte bound: it binds before depth 8 does
    ds = fd.FastImageFolder(latency_tree.mount_path, chain(),
                            readahead=ReadAheadOptions(depth=depth, max_bytes=cap))
    latency_tree.fs.reset()
    ds.__getitems__(list(range(len(ds))))
    stats = ds.readahead_stats()
    assert 2 <= stats["peak_in_flight"] <= depth
    assert stats["peak_bytes"] <= cap
    # what reached the filesystem: the window's reads, and at most the one
    # read the decoding thread makes itself
    assert latency_tree.stats_reader()["max_in_flight"] <= depth + 1
    assert latency_tree.stats_reader()["opens"] == len(ds)


def _fstat_then_read(path) -> bytes:
    fd_ = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd_, os.fstat(fd_).st_size + 1)
    finally:
        os.close(fd_)


def _read_ahead(native: bool):
    from fastdecode.storage import _readahead, _reads, _window

    def read_all(paths):
        options = _readahead.ReadAheadOptions(depth=4)  # explicit: never bypassed
        window = (_reads._NativeWindow if native else _window.ReadAhead)(options)
        try:
            window.submit(paths)
            return [window.take(p) for p in paths]
        finally:
            window.close()
    return read_all


def _consumer(paths):
    from fastdecode.storage._readers import LocalReader
    return [LocalReader().open(p).read() for p in paths]


@pytest.mark.parametrize("how, asks", [
    pytest.param(_consumer, False, id="the-consumer"),
    pytest.param(_read_ahead(native=True), False, id="the-pool-in-c"),
    pytest.param(_read_ahead(native=False), False, id="python-threads"),
    pytest.param(lambda paths: [_fstat_then_read(p) for p in paths], True,
                 id="fstat-the-control"),
])
def test_a_local_read_asks_the_file_system_no_attributes(latency_tree, storage_tree, how,
                                                         asks):
    # fstat after a read costs a FUSE (or network) file system a getattr
    # round trip (the read made its atime stale); the size is asked alone
    relative = sorted(p.relative_to(storage_tree) for p in storage_tree.rglob("*.jpg"))
    paths = [str(latency_tree.mount_path / r) for r in relative]
    assert how(paths) == [(storage_tree / r).read_bytes() for r in relative]  # looked up
    latency_tree.fs.reset()
    assert how(paths) == [(storage_tree / r).read_bytes() for r in relative]
    stats = latency_tree.stats_reader()
    assert stats["opens"] == len(paths)
    if asks:
        assert stats["getattrs"] >= len(paths)
    else:
        assert stats["getattrs"] == 0


def break_file(how: str, fs, source_root, relative: str) -> int:
    """Makes ``relative`` vanish from the source or fail to open (EIO); the errno to expect."""
    if how == "vanishes":
        os.unlink(source_root / relative)
        return errno.ENOENT
    fs.fail(relative)
    return errno.EIO


HOW = ["vanishes", "unreadable"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind, workers", LOADERS)
def test_a_file_broken_mid_epoch_is_named_in_its_own_sample(mount_latencyfs, own_tree, how,
                                                            kind, workers):
    """The file of sample 5 (the second batch) breaks after the listing: in
    the main process after the first batch was decoded; with workers before
    the epoch starts, since they read batches ahead. The first batch
    arrives, then the error, naming that file and why."""
    tree = mount_latencyfs(own_tree, DELAY_MS)
    ds = fd.FastImageFolder(tree.mount_path, chain())
    victim = BATCH + 1
    relative = os.path.relpath(ds.samples[victim][0], tree.mount_path)
    loader = iter(make_loader(kind, ds, workers, shuffle=False))
    delivered = 0
    if workers == 0:
        next(loader)
        delivered = 1
    expected_errno = break_file(how, tree.fs, own_tree, relative)
    with pytest.raises(ImageFileError, match=relative.replace(".", r"\.")) as caught:
        for _ in loader:
            delivered += 1
    assert delivered == victim // BATCH
    assert os.strerror(expected_errno) in str(caught.value)
    if workers == 0:  # the exception itself, not a worker's copy of its message
        assert caught.value.errno == expected_errno
        assert caught.value.filename == ds.samples[victim][0]


@pytest.mark.parametrize("how", HOW)
def test_on_error_warn_replaces_only_the_broken_sample(mount_latencyfs, own_tree, how):
    tree = mount_latencyfs(own_tree, DELAY_MS)
    ds = fd.FastImageFolder(tree.mount_path, chain(), on_error="warn")
    victim = 2
    relative = os.path.relpath(ds.samples[victim][0], tree.mount_path)
    break_file(how, tree.fs, own_tree, relative)
    with pytest.warns(RuntimeWarning, match=relative.replace(".", r"\.")):
        got = ds.__getitems__(list(range(BATCH)))
    assert ds.skipped == 1
    assert [t for _, t in got] == [ds.targets[i] if i != victim
                                   else ds.targets[ds._replacement(victim, 0)]
                                   for i in range(BATCH)]


@pytest.mark.parametrize("latency_tree", [DELAY_MS], indirect=True, ids=[f"{DELAY_MS}ms"])
@pytest.mark.parametrize("kind, workers", [pytest.param("DataLoader", 2, id="DataLoader-2"),
                                           pytest.param("FastLoader", 2, id="FastLoader-2")])
def test_cache_epoch_two_opens_no_file(latency_tree, storage_tree, kind, workers):
    ds = fd.FastImageFolder(latency_tree.mount_path, chain(), cache="8MiB")
    loader = make_loader(kind, ds, workers)
    first = epoch(loader)
    assert latency_tree.stats_reader()["opens"] == len(ds)  # shuffled: each file once
    latency_tree.fs.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = epoch(loader)
    assert latency_tree.stats_reader()["opens"] == 0  # every worker hit the one cache
    assert len(second) == len(first)
    stats = ds.cache_stats()
    assert stats["stored"] == len(ds) and stats["hits"] >= len(ds)
    # the cached bytes decode to what the files give (the same two epochs, uncached)
    plain = make_loader(kind, fd.FastImageFolder(storage_tree, chain(), readahead=0), workers)
    epoch(plain)
    for (x, y), (x0, y0) in zip(second, epoch(plain)):
        assert torch.equal(x, x0) and torch.equal(y, y0)
