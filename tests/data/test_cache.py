"""The shared RAM cache of encoded bytes (fastdecode/storage/_cache.py, ``cache=``):
epoch 2 opens no file whatever the workers (forked, spawned), hits and misses
counted over every process, the space checked before anything is filled
(CacheSpaceError), a budget smaller than the dataset, the same batches as
without it, a fill race between processes harmless, nothing left in /dev/shm."""

import gc
import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

from fastdecode import errors  # noqa: E402
from fastdecode.datasets import FastImageFolder  # noqa: E402
from fastdecode.storage import _readers  # noqa: E402
from fastdecode.storage._cache import SharedCache  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])


class LoggingReader:
    """The local reader, appending each opened path to a log file (one line
    per open, from any process)."""

    def __init__(self, log):
        self.log = str(log)
        self.local = _readers.LocalReader()

    def open(self, path):
        with open(self.log, "a") as f:
            f.write(path + "\n")
        return self.local.open(path)


def _opens(log):
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("cache"), per_class=8, classes=("a", "b", "c"))


def _shm_entries():
    return {n for n in os.listdir("/dev/shm") if n.startswith("fastdecode-cache")}


def _epoch(ds, workers, ctx, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # in-process, the augmentations draw from the global RNG
    loader = torch.utils.data.DataLoader(ds, batch_size=5, shuffle=True, generator=g,
                                         num_workers=workers,
                                         multiprocessing_context=ctx if workers else None)
    return [(x.clone(), y.clone()) for x, y in loader]


WORKERS = [pytest.param(0, None, id="in-process"), pytest.param(2, "fork", id="2-fork"),
           pytest.param(2, "spawn", id="2-spawn", marks=pytest.mark.slow)]


# spawned workers: the slow tier (~10-22 s, each of the two epochs' workers
# importing torch and torchvision); make test runs in-process and forked
@pytest.mark.parametrize("workers,ctx,readahead", [
    pytest.param(*w.values, r, id=f"{w.id}-readahead-{'off' if r == 0 else r}",
                 marks=pytest.mark.slow if w.id == "2-spawn" else ())
    for w in WORKERS for r in (0, 8)])
def test_epoch_two_opens_no_file(tree, tmp_path, workers, ctx, readahead):
    ds = FastImageFolder(tree, transform=TRAIN, cache="16MiB", readahead=readahead)
    log = tmp_path / "opens.log"
    ds._reads.reader = LoggingReader(log)
    first = _epoch(ds, workers, ctx, seed=1)
    assert _opens(log) == len(ds)
    assert ds.cache_stats()["stored"] == len(ds)
    second = _epoch(ds, workers, ctx, seed=1)
    assert _opens(log) == len(ds)  # nothing opened on epoch 2
    stats = ds.cache_stats()
    assert stats["hits"] == len(ds) and stats["misses"] == len(ds)  # counted in every worker
    for (a, ta), (b, tb) in zip(first, second):
        assert torch.equal(a, b) and torch.equal(ta, tb)


def test_the_same_batches_with_and_without_the_cache(tree):
    plain = _epoch(FastImageFolder(tree, transform=TRAIN), 0, None, seed=3)
    cached_ds = FastImageFolder(tree, transform=TRAIN, cache=1 << 24)
    for _ in range(2):  # filling, then from the cache
        cached = _epoch(cached_ds, 0, None, seed=3)
        for (a, ta), (b, tb) in zip(plain, cached):
            assert torch.equal(a, b) and torch.equal(ta, tb)


def test_a_budget_smaller_than_the_dataset_caches_what_fits(tree, tmp_path):
    sizes = [os.path.getsize(p) for p, _ in FastImageFolder(tree).samples]
    budget = sum(sizes[:5])
    ds = FastImageFolder(tree, transform=TRAIN, cache=budget)
    log = tmp_path / "opens.log"
    ds._reads.reader = LoggingReader(log)
    ds.__getitems__(list(range(len(ds))))
    stats = ds.cache_stats()
    assert stats["used"] <= budget and stats["stored"] >= 5
    assert stats["rejected"] == len(ds) - stats["stored"]
    ds.__getitems__(list(range(len(ds))))
    assert _opens(log) == len(ds) + (len(ds) - stats["stored"])


def test_a_budget_that_cannot_fit_is_refused_before_filling(tree):
    before = _shm_entries()
    with pytest.raises(errors.CacheSpaceError, match="does not fit: .*pass a smaller cache="):
        FastImageFolder(tree, cache="900TiB")
    assert _shm_entries() == before


@pytest.mark.parametrize("value,match", [
    pytest.param("lots", "cannot read 'lots' as a byte count", id="word"),
    pytest.param(-5, "a byte count must be >= 0", id="negative"),
])
def test_a_bad_budget_is_named(tree, value, match):
    with pytest.raises(ValueError, match=match):
        FastImageFolder(tree, cache=value)


def test_a_changed_path_is_not_served_from_the_cache(tree):
    ds = FastImageFolder(tree, cache="16MiB")
    ds.__getitems__([0, 1])
    ds.samples[0] = ds.samples[2]
    ds.__getitems__([0])
    assert ds.cache_stats()["hits"] == 0  # sample 0 now names another file


def _fill(cache, barrier, items, out):
    barrier.wait()
    out.put(sum(cache.put(i, p, d) for i, (p, d) in enumerate(items)))


def test_a_fill_race_between_processes_is_harmless():
    items = [(f"p{i}", bytes([i % 251]) * (100 + i)) for i in range(200)]
    cache = SharedCache(1 << 20, len(items))
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_fill, args=(cache, barrier, items, out)) for _ in range(3)]
    for p in procs:
        p.start()
    stored = sum(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert stored == len(items)  # each sample stored once
    assert [cache.get(i, p) for i, (p, _) in enumerate(items)] == [d for _, d in items]
    assert cache.stats()["used"] == sum(len(d) for _, d in items)


@pytest.mark.parametrize("workers,ctx", WORKERS)
def test_nothing_is_left_in_dev_shm(tree, workers, ctx):
    before = _shm_entries()
    ds = FastImageFolder(tree, transform=TRAIN, cache="8MiB")
    closing = ds._reads.cache._finalizer  # no reference to the cache itself is kept here
    _epoch(ds, workers, ctx, seed=0)
    assert _shm_entries() == before  # unlinked at birth
    del ds
    gc.collect()
    assert not closing.alive  # the dataset's collection closed the mapping and the descriptor
    links = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
             if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [link for link in links if "fastdecode-cache" in link]


def test_a_pickled_copy_elsewhere_has_a_cache_of_its_own(tree):
    import pickle

    ds = FastImageFolder(tree, cache="4MiB")
    ds.__getitems__([0])
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.cache_stats()["stored"] == 0 and copy.cache_stats()["capacity"] == 4 << 20
