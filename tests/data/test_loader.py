"""FastLoader, collate, worker_init_fn and the oversubscription guards (CPU-only)."""

from __future__ import annotations

import gc
import os
import signal
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastdecode as fd
from fastdecode.loader import _setup as loader_mod

from helpers.fork_warning import ignore_fork_warning
from helpers.shm import torch_shm_entries
from helpers.trees import make_tree

tv = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TRAIN = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("loadertree"), per_class=6)


@pytest.fixture(autouse=True)
def fresh_warnings():
    loader_mod._warned.clear()
    yield


def batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def reference(tree, **kwargs):
    ds = fd.FastImageFolder(tree, TRAIN)
    torch.manual_seed(0)
    return batches(torch.utils.data.DataLoader(ds, batch_size=5, **kwargs))


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"num_workers": 0}, id="in-process"),
        pytest.param({"num_workers": 2}, id="two-workers"),
        pytest.param({"threads": 2, "num_workers": 0}, id="two-threads"),
    ],
)
def test_fast_loader_yields_what_dataloader_yields(tree, kwargs):
    ds = fd.FastImageFolder(tree, TRAIN)
    workers = kwargs.get("num_workers", 0)
    ref = reference(tree, num_workers=workers, shuffle=True,
                    generator=torch.Generator().manual_seed(5))
    # threads seed each sample's draws (reproducible, not DataLoader's one
    # stream: tests/data/test_loader_threads.py); values are compared for
    # deterministic chains in the next test
    torch.manual_seed(0)
    got = batches(fd.FastLoader(ds, batch_size=5, shuffle=True,
                                generator=torch.Generator().manual_seed(5), **kwargs))
    assert len(got) == len(ref) == 4
    for (a, ya), (b, yb) in zip(got, ref):
        assert torch.equal(ya, yb) and a.shape == b.shape and a.dtype == torch.float32
        if "threads" not in kwargs:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_threads_are_deterministic_for_deterministic_chains(tree):
    chain = T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])
    ds = fd.FastImageFolder(tree, chain)
    a = batches(fd.FastLoader(ds, batch_size=4, threads=2))
    b = batches(torch.utils.data.DataLoader(ds, batch_size=4))
    for (x, y), (u, v) in zip(a, b):
        assert torch.equal(x, u) and torch.equal(y, v)


def test_worker_batches_arrive_in_shared_memory_without_copy(tree):
    ds = fd.FastImageFolder(tree, TRAIN)
    loader = torch.utils.data.DataLoader(ds, batch_size=6, num_workers=1, collate_fn=fd.collate)
    images, targets = next(iter(loader))
    # on a slot of the worker's shared pool, borrowed (not shared: sending it on copies it)
    assert images.shape == (6, 3, 48, 48) and type(images) is torch.Tensor
    assert not images.is_shared() and targets.dtype == torch.int64


class ThreadProbe(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return torch.tensor([torch.get_num_threads(), int(os.environ.get("OMP_NUM_THREADS", 0))])


def test_worker_init_fn_pins_library_threads_and_chains_the_users():
    seen = []

    def user_init(worker_id):
        os.environ["USER_INIT_RAN"] = str(worker_id)

    class Probe(ThreadProbe):
        def __getitem__(self, i):
            return torch.tensor([torch.get_num_threads(), int(os.environ["OMP_NUM_THREADS"]),
                                 int(os.environ["USER_INIT_RAN"]) + 7])

    for batch in fd.FastLoader(Probe(), batch_size=1, num_workers=1, worker_init_fn=user_init):
        seen.append(batch.tolist())
    assert seen == [[[1, 1, 7]], [[1, 1, 7]]]


def test_oversubscription_warns_once(tree, monkeypatch):
    monkeypatch.setattr(loader_mod, "usable_cpus", lambda: 2)
    ds = fd.FastImageFolder(tree, TRAIN)
    with pytest.warns(RuntimeWarning, match=r"num_workers=3 x 1 thread\(s\) per worker exceeds "
                                            r"the 2 CPU\(s\)"):
        fd.FastLoader(ds, batch_size=2, num_workers=3)
    fd.FastLoader(ds, batch_size=2, num_workers=3)  # once: no second warning (errors would raise)


def test_small_dev_shm_warns(tree, monkeypatch):
    from fastdecode import _system

    monkeypatch.setattr(_system, "shm_free_bytes", lambda path=None: 1000)
    monkeypatch.setattr(loader_mod, "usable_cpus", lambda: 8)
    ds = fd.FastImageFolder(tree, TRAIN)
    with pytest.warns(RuntimeWarning, match=r"/dev/shm has 0 MiB free.*--shm-size"):
        fd.FastLoader(ds, batch_size=4, num_workers=2)


def test_unsharded_loader_under_a_distributed_world_warns_once(tree, monkeypatch):
    from torch.utils.data.distributed import DistributedSampler

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 0)
    ds = fd.FastImageFolder(tree, TRAIN)
    sharded = fd.FastLoader(ds, batch_size=4, num_workers=0,
                            sampler=DistributedSampler(ds, num_replicas=2, rank=0))
    next(iter(sharded))  # no warning: warnings are errors here
    loader = fd.FastLoader(ds, batch_size=4, num_workers=0, shuffle=True)
    with pytest.warns(RuntimeWarning, match=r"torch.distributed runs 2 processes but this "
                                            r"FastLoader's sampler \(RandomSampler\) does not "
                                            r"shard the data.*DistributedSampler"):
        next(iter(loader))
    next(iter(loader))  # once


def test_fast_loader_is_a_dataloader_that_survives_re_creation(tree):
    """What Lightning and Accelerate do: rebuild it from its attributes with
    another sampler; the rebuilt one keeps threads, device and collate."""
    from torch.utils.data.distributed import DistributedSampler

    ds = fd.FastImageFolder(tree, TRAIN)
    loader = fd.FastLoader(ds, batch_size=4, threads=2, shuffle=True)
    assert isinstance(loader, torch.utils.data.DataLoader)
    kwargs = {k: v for k, v in vars(loader).items() if not k.startswith("_")}
    kwargs.update(sampler=DistributedSampler(ds, num_replicas=2, rank=1), batch_sampler=None)
    again = fd.FastLoader(**kwargs)
    assert again.threads == 2 and again.collate_fn is fd.collate and again.num_workers == 0
    assert again.worker_init_fn is loader.worker_init_fn  # pinning not chained twice
    assert [len(y) for _, y in batches(again)] == [4, 4, 1]  # 9 of the 18 samples


def test_the_cuda_ring_module_imports_without_a_gpu():
    from fastdecode.loader import _cuda_ring

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="the CUDA ring needs CUDA"):
        _cuda_ring.CudaRing(2, (1, 3, 8, 8))


def test_usable_cpus_reads_the_cgroup_quota(tmp_path):
    from fastdecode import _system

    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert _system.cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _system.cgroup_cpu_limit(tmp_path) is None
    assert 1 <= _system.usable_cpus() <= (os.cpu_count() or 1)


def test_cuda_device_without_cuda_is_an_error(tree):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        fd.FastLoader(fd.FastImageFolder(tree, TRAIN), batch_size=2, device="cuda")


def test_pin_memory_degrades_without_cuda(tree):
    loader = fd.FastLoader(fd.FastImageFolder(tree, TRAIN), batch_size=4, num_workers=0,
                           pin_memory=True)
    assert loader.pin_memory == torch.cuda.is_available()
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 48, 48)


class Killer(torch.utils.data.Dataset):
    """Kills its worker on the third sample."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.zeros(3, 8, 8)


# torch's iterator leaves the dead worker's socket for gc to close; collect it
# here so the warning is attributed to this test, not a later one.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_dead_worker_is_reported_quickly_and_leaks_no_shm():
    before = torch_shm_entries([os.getpid()])
    start = time.monotonic()
    it = iter(fd.FastLoader(Killer(), batch_size=1, num_workers=2))
    pids = [w.pid for w in it._workers]
    with pytest.raises(RuntimeError,
                       match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly"):
        for _ in it:
            pass
    assert time.monotonic() - start < 30
    del it
    gc.collect()
    assert torch_shm_entries([os.getpid(), *pids]) - before == set()


def test_collate_passes_other_batches_to_default_collate():
    batch = [(torch.zeros(2), 1), (torch.ones(2), 0)]
    images, targets = fd.collate(batch)
    assert images.shape == (2, 2) and targets.tolist() == [1, 0]
    base = torch.zeros(3, 2)
    views = [(base[1], 0), (base[0], 1), (base[2], 2)]  # not in slot order: copied
    assert fd.collate(views)[0].data_ptr() != base.data_ptr()
    assert np.array_equal(fd.collate([({"a": 1}, 2)])[1].numpy(), [2])


# -- the CPU ring: shared batch slots written once, reused when proven free --

# The tests of the CPU ring and of the batch pools pass pin_memory=False: on a
# CUDA machine FastLoader's default (True) hands over a pinned copy of each
# batch instead of the slot or pooled buffer itself (and starts torch's pin
# thread), which is what those tests look at.
RING_CHAINS = [
    pytest.param(lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]),
                 id="uint8"),
    pytest.param(lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(),
                                    T.Normalize(MEAN, STD)]), id="float"),
]


def in_process(ds, batch_size):
    return batches(torch.utils.data.DataLoader(ds, batch_size=batch_size))


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent"])
@pytest.mark.parametrize("chain", RING_CHAINS)
def test_ring_batches_are_reused_only_once_dropped(tree, chain, persistent):
    ds = fd.FastImageFolder(tree, chain())
    expected = in_process(ds, 4)
    loader = fd.FastLoader(ds, batch_size=4, num_workers=2, persistent_workers=persistent,
                           pin_memory=False)
    ring = loader._cpu_ring
    assert ring is not None
    for _ in range(3):  # a training loop: each batch dropped when the next comes
        for (x, y), (u, v) in zip(loader, expected, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v) and x.is_shared()
    assert ring.fresh == 0 and ring.reused == 3 * len(expected)
    slots = {s.untyped_storage().data_ptr() for s in ring.slots}
    assert all(x.untyped_storage().data_ptr() in slots for x, _ in loader)


@pytest.mark.parametrize("chain", RING_CHAINS)
def test_ring_never_writes_over_a_batch_still_held(tree, chain):
    ds = fd.FastImageFolder(tree, chain())
    expected = in_process(ds, 2)
    loader = fd.FastLoader(ds, batch_size=2, num_workers=2, persistent_workers=True,
                           pin_memory=False)
    assert len(expected) > len(loader._cpu_ring.slots)
    held = list(loader)  # every batch kept: the ring runs out, later ones are fresh
    assert loader._cpu_ring.fresh > 0
    sample = held[1][0][1]  # a view of one sample (from a ring slot) outlives its batch
    snapshot = sample.clone()
    del held
    for _ in range(3):
        for (x, y), (u, v) in zip(loader, expected, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    assert torch.equal(sample, snapshot)


def test_ring_workers_do_not_fault_on_each_batch(tree):
    """Minor page faults (counts, repeatable under load): a batch written into
    the ring costs its workers far fewer than it has pages, as does the stock
    collate's batch on the worker's shared pool (batching/_shared_pool.py)."""
    from helpers.faults_per_batch import faults_per_batch

    chain = T.Compose([T.RandomResizedCrop(128), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = fd.FastImageFolder(tree, chain)
    def measure():
        ring = faults_per_batch(lambda: fd.FastLoader(ds, batch_size=6, num_workers=2,
                                                      persistent_workers=True), epochs=4)
        stock = faults_per_batch(lambda: torch.utils.data.DataLoader(
            ds, batch_size=6, num_workers=2, persistent_workers=True), epochs=4)
        return ring, stock

    ring, stock = measure()
    assert ring["batch_pages"] == stock["batch_pages"] == 6 * 3 * 128 * 128 * 4 // 4096
    assert stock["worker_faults_per_batch"] < stock["batch_pages"] / 2
    # what remains is the decoder's per-image scratch, not the batch
    assert ring["worker_faults_per_batch"] < ring["batch_pages"] / 2
    # the main process's own faults (~12 against ~27 per batch) depend on its
    # heap's history too (a long-lived pytest process: once 42 against 35 in
    # a clean clone's parallel run), so the lower of two measurements each
    main = {"ring": ring["main_faults_per_batch"], "stock": stock["main_faults_per_batch"]}
    if main["ring"] >= main["stock"]:
        again = measure()
        main = {"ring": min(main["ring"], again[0]["main_faults_per_batch"]),
                "stock": min(main["stock"], again[1]["main_faults_per_batch"])}
    assert main["ring"] < main["stock"], main


def resident_kib(pid: int, start: int, end: int) -> int:
    """KiB of ``pid``'s mappings inside [start, end) that are mapped in its
    page tables (smaps' Rss)."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < end and hi > start
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


class WorkerTagged(fd.FastImageFolder):
    """Each sample's target is the id of the worker that made it."""

    def __getitems__(self, indices):
        worker = torch.utils.data.get_worker_info()
        return [(x, worker.id) for x, _ in super().__getitems__(indices)]


FLOAT_FIXED = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc smaps")
@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent"])
def test_ring_workers_map_the_slots_they_write_and_no_other(tree, persistent):
    """fork copies no page tables of a shared mapping, so a worker's first
    write to a ring slot faulted once per page (with 8 workers x 19 slots a
    whole batch's pages per batch for ~80 batches); a worker now maps a slot
    whole before its first write there (map_slot), and only the slots it is
    given: mapping the whole ring at each worker's start zeroed all of it
    there (2.9 GB at 8 float workers) before a first batch."""
    loader = fd.FastLoader(WorkerTagged(tree, FLOAT_FIXED), batch_size=4, num_workers=2, pin_memory=False,
                           persistent_workers=persistent)
    ring = loader._cpu_ring
    assert ring is not None
    it = iter(loader)
    got = [next(it), next(it)]  # each worker has made a batch
    written: dict[int, set[int]] = {0: set(), 1: set()}
    for x, workers in got:
        slot = next(k for k, s in enumerate(ring.slots) if s.data_ptr() == x.data_ptr())
        written[int(workers[0])].add(slot)
    assert all(written.values())
    mapped = 0
    for worker_id, worker in enumerate(loader._ring_pass._workers):
        whole = set()
        for k, slot in enumerate(ring.slots):
            storage = slot.untyped_storage()
            start, size = storage.data_ptr(), storage.nbytes()
            resident = resident_kib(worker.pid, start, start + size) * 1024
            assert resident == 0 or resident >= size - 4096, (worker_id, k, resident)
            if resident:
                whole.add(k)
        assert written[worker_id] <= whole
        mapped += len(whole)
    # the batches delivered (held here) and those dispatched since: each its own
    # slot, mapped in one worker; the ring has more (mapping all: 2 x 7)
    dispatched = len(got) + loader.prefetch_factor * loader.num_workers
    assert mapped <= dispatched < len(ring.slots)
    del got, it


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc smaps")
def test_ring_is_not_touched_in_the_main_process(tree):
    """The main process only reserves the ring: its pages are zeroed where a
    worker first maps a slot, not here before any worker starts (8 workers'
    float ring: 2.1-4.7 s)."""
    loader = fd.FastLoader(fd.FastImageFolder(tree, FLOAT_FIXED), batch_size=4, num_workers=2)
    ring = loader._cpu_ring
    assert ring is not None
    for slot in ring.slots:
        storage = slot.untyped_storage()
        start = storage.data_ptr()
        assert resident_kib(os.getpid(), start, start + storage.nbytes()) == 0
    batches = [x for x, _ in loader]
    assert len(batches) == len(loader) and all(torch.isfinite(x).all() for x in batches)


def test_ring_filler_maps_each_slot_once_before_its_first_write(tree, monkeypatch):
    """RingFiller, the workers' side, run in-process: map_slot is called for a
    slot once, before the batch is written there."""
    from fastdecode.loader import _cpu_ring as _batches

    ring = _batches.CpuRing(2, (4, 3, 32, 32), torch.float32)
    for slot in ring.slots:
        slot.fill_(float("nan"))
    mapped: list[int] = []

    def record(slot):
        mapped.append(next(k for k, s in enumerate(ring.slots) if s.data_ptr() == slot.data_ptr()))
        assert torch.isnan(slot).all()  # nothing written yet

    monkeypatch.setattr(_batches, "map_slot", record)
    filler = _batches.RingFiller(fd.FastImageFolder(tree, FLOAT_FIXED), ring, fd.collate)
    for slot, indices in [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7]), (0, [8, 9, 10, 11])]:
        kind, got_slot, rows, _ = filler.__getitems__(_batches.SlotBatch(indices, slot))
        assert (kind, got_slot, rows) == ("slot", slot, 4)
        assert torch.isfinite(ring.slots[slot]).all()
        if slot == 1:
            ring.slots[0].fill_(float("nan"))
    assert mapped == [0, 1]


def test_map_ring_maps_a_slot_forked_before_it_was_touched():
    """The mechanism alone: in a forked child a shared slot is not mapped
    until touched; map_slot maps all of it."""
    slot = torch.zeros(4, 3, 64, 64).share_memory_()
    storage = slot.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            before = resident_kib(os.getpid(), start, start + size)
            loader_mod.map_slot(slot)
            after = resident_kib(os.getpid(), start, start + size)
            os.write(write, f"{before} {after}".encode())
        finally:
            os._exit(0)
    os.close(write)
    before, after = (int(v) for v in os.read(read, 100).split())
    os.close(read)
    os.waitpid(pid, 0)
    assert before * 1024 < size // 2 and after * 1024 >= size - 4096


# -- persistent workers never wait between epochs: the next epoch drawn ahead --

RANDOM_UINT8 = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])
FIXED_UINT8 = T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])


class Counted(torch.utils.data.RandomSampler):
    """Draws with replacement, ``count`` per epoch, changeable between epochs
    (what benchmarks/bench_loader.py's rounds do)."""

    def __init__(self, ds, count):
        self.count = count
        super().__init__(ds, replacement=True, num_samples=count,
                         generator=torch.Generator().manual_seed(4))

    @property
    def num_samples(self):
        return self.count


def plain(ds, epoch):  # what does not change between epochs: nothing to do
    pass


def set_epoch(ds, epoch, sampler):
    sampler.set_epoch(epoch)


def draws_global(ds, epoch):  # a training loop drawing from torch's global generator
    torch.rand(3)


def distributed(ds):
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(ds, num_replicas=2, rank=1, seed=9)


# (loader kwargs from ds, between-epoch action, epochs whose batches were kept ahead, of 4)
EPOCH_CASES = [
    pytest.param(lambda ds: dict(shuffle=True, generator=torch.Generator().manual_seed(5)),
                 plain, 3, id="shuffle-generator"),
    pytest.param(lambda ds: dict(shuffle=True), plain, 3, id="shuffle-global-rng"),
    pytest.param(lambda ds: dict(shuffle=True), draws_global, 0,
                 id="shuffle-global-rng-drawn-between"),
    pytest.param(lambda ds: dict(shuffle=True, generator=torch.Generator().manual_seed(5)),
                 draws_global, 3, id="shuffle-generator-global-drawn-between"),
    pytest.param(lambda ds: dict(shuffle=False), plain, 3, id="sequential"),
    pytest.param(lambda ds: dict(sampler=distributed(ds)), "set_epoch", 3,
                 id="distributed-set-epoch"),
    pytest.param(lambda ds: dict(sampler=distributed(ds)), plain, 0,
                 id="distributed-without-set-epoch"),
    pytest.param(lambda ds: dict(sampler=Counted(ds, 15)), "recount", 2,
                 id="sampler-changed-between-epochs"),
    pytest.param(lambda ds: dict(shuffle=True, collate_fn=fd.collate), plain, 3,
                 id="no-ring"),
]


def epochs_of(make, between, stops=(None,) * 4):
    """Batches of 4 epochs of a persistent 2-worker loader (an epoch left
    after ``stops[e]`` batches), the global RNG state after them, the
    loader, and (FastLoader) how many of each epoch's batches were made ahead."""
    torch.manual_seed(11)
    loader = make()
    sampler = loader.sampler
    out, ahead = [], []
    for epoch, stop in enumerate(stops):
        if between == "set_epoch":
            sampler.set_epoch(epoch)
        elif between == "recount":
            sampler.count = 15 if epoch < 2 else 12
        else:
            between(loader.dataset, epoch)
        got = []
        for x, y in loader:
            got.append((x.clone(), y.clone()))
            if len(got) == 1:
                ahead.append(getattr(loader, "made_ahead", 0))
            if len(got) == stop:
                break
        out.append(got)
    return out, torch.get_rng_state(), loader, ahead


@pytest.mark.parametrize("stops", [pytest.param((None,) * 4, id="whole-epochs"),
                                   pytest.param((None, 1, 5, None), id="epochs-left-early")])
@pytest.mark.parametrize("kwargs, between, kept", EPOCH_CASES)
def test_persistent_epochs_are_dataloaders_with_the_next_drawn_ahead(tree, kwargs, between,
                                                                     kept, stops, monkeypatch):
    """Same batches, same global RNG state after, as DataLoader's persistent
    workers; the next epoch's batches dispatched before it began wherever
    its sampler's state allows. Where every prediction is kept the chain is
    random: the workers' draws are DataLoader's too. A dropped prediction
    cost the workers the draws of its batches (later augmentations differ
    from DataLoader's, reproducibly: the next test), so there the chain is
    fixed and the batches show the samples are DataLoader's."""
    from fastdecode.loader import _workers

    monkeypatch.setattr(_workers, "_warned_dropped", False)
    ds = fd.FastImageFolder(tree, RANDOM_UINT8 if kept == 3 else FIXED_UINT8)
    common = dict(batch_size=3, num_workers=2, persistent_workers=True, pin_memory=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ignore_fork_warning()
        ours, ours_rng, loader, ahead = epochs_of(
            lambda: fd.FastLoader(ds, **kwargs(ds), **common), between, stops)
    theirs, their_rng, _, _ = epochs_of(lambda: torch.utils.data.DataLoader(
        ds, **{"collate_fn": fd.collate, **kwargs(ds)}, **common), between, stops)
    assert [len(e) for e in ours] == [len(e) for e in theirs]
    for a, b in zip(ours, theirs):
        for (x, y), (u, v) in zip(a, b, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    assert torch.equal(ours_rng, their_rng)
    it = (loader._ring_loader or loader)._iterator
    dropped = [str(w.message) for w in record if "dropped the next epoch" in str(w.message)]
    assert len(record) == len(dropped) == (it.ahead_dropped > 0)  # said once, if at all
    assert (it.ahead_dropped > 0) == (kept < 3 and stops[1] is None) or stops[1] == 1
    # an epoch left after 1 of its 5+ batches never ran its sampler out (2 x 2 primed,
    # 1 more): nothing drawn ahead
    expect = min(kept, 2) if stops[1] == 1 and len(ours[0]) > 4 else kept
    assert it.ahead_kept == expect and sum(n > 0 for n in ahead) == expect
    assert all(n <= 4 for n in ahead)  # never more than DataLoader primes (2 x 2 workers)
    if kept == 3 and stops[1] is None:
        assert ahead == [0] + [min(4, len(e)) for e in ours[1:]]
    if loader._cpu_ring is not None:
        assert loader._cpu_ring.fresh == 0  # every batch written into a slot


def test_dropped_predictions_are_reproducible_and_free_their_slots(tree, monkeypatch):
    """The batches drawn ahead and dropped (the sampler changed) free their
    ring slots, later epochs still write every batch into the ring, and two
    runs give the same batches."""
    from fastdecode.loader import _workers

    ds = fd.FastImageFolder(tree, RANDOM_UINT8)

    def run():
        monkeypatch.setattr(_workers, "_warned_dropped", False)
        sampler = Counted(ds, 15)
        loader = fd.FastLoader(ds, batch_size=3, sampler=sampler, num_workers=2, pin_memory=False,
                               persistent_workers=True, generator=torch.Generator().manual_seed(2))
        out = []
        for epoch in range(6):
            sampler.count = 15 if epoch % 2 else 12  # changed every epoch: always dropped
            out += [x.clone() for x, _ in loader]
            # in flight: the next epoch's, drawn ahead (2 x 2 at most), none left over
            assert len(loader._cpu_ring.in_flight) <= 4
        it = loader._ring_loader._iterator
        assert it.ahead_kept == 0 and it.ahead_dropped == 5
        assert loader._cpu_ring.fresh == 0
        return out

    with pytest.warns(RuntimeWarning, match=r"dropped the next epoch's batches it had drawn "
                                            r"ahead.*differ from what DataLoader's persistent "
                                            r"workers would draw.*own generator") as record:
        ignore_fork_warning()
        first, second = run(), run()
    assert len(record) == 2  # once per run (the flag is reset between them)
    assert len(first) == 3 * (5 + 4)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


# -- in-process batches taken whole: a 2-deep pool, reused when proven free --


@pytest.fixture
def taken_whole_fresh(monkeypatch):
    """This thread has not seen fastdecode.collate take a batch whole."""
    from fastdecode.batching import _buffers as _batches

    monkeypatch.setattr(_batches._taken_whole, "flag", False, raising=False)


IN_PROCESS = [
    pytest.param(lambda ds: torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=fd.collate),
                 id="dataloader-collate"),
    pytest.param(lambda ds: fd.FastLoader(ds, batch_size=4, num_workers=0, pin_memory=False),
                 id="fastloader"),
]


@pytest.mark.parametrize("make", IN_PROCESS)
@pytest.mark.parametrize("chain", RING_CHAINS)
def test_in_process_batches_taken_whole_are_reused_once_dropped(tree, chain, make,
                                                                taken_whole_fresh):
    """A training loop holds one batch while the next is made: after the
    first, every batch is one of two buffers, with the right values."""
    ds = fd.FastImageFolder(tree, chain())
    expected = in_process(ds, 4)
    loader = make(ds)
    storages = []
    for _ in range(3):
        for (x, y), (u, v) in zip(loader, expected, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
            storages.append(x.untyped_storage().data_ptr())
    pool = ds._batch_buffers().pools["batch"]  # alive all along: no fresh batch has their address
    assert len(pool) == 2
    # the first batch came before collate said it takes them whole
    assert set(storages[1:]) == {buf.untyped_storage().data_ptr() for buf, _ in pool}


@pytest.mark.parametrize("chain", RING_CHAINS)
def test_in_process_pool_never_writes_over_a_batch_still_held(tree, chain, taken_whole_fresh):
    ds = fd.FastImageFolder(tree, chain())
    expected = in_process(ds, 4)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=fd.collate)
    for _ in range(2):
        held = list(loader)  # every batch kept: the pool's two are held, the rest fresh
        assert len({x.untyped_storage().data_ptr() for x, _ in held}) == len(held)
        for (x, y), (u, v) in zip(held, expected, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    sample = held[1][0][2]  # a view of one sample outlives its batch
    snapshot = sample.clone()
    del held
    for _ in range(2):
        for (x, y), (u, v) in zip(loader, expected, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    assert torch.equal(sample, snapshot)


def test_a_pooled_batch_sent_to_another_process_is_never_reused(tree, taken_whole_fresh):
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

    ds = fd.FastImageFolder(tree, RING_CHAINS[1].values[0]())
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=fd.collate)
    it = iter(loader)
    next(it), next(it)  # the second comes from the pool
    x, _ = next(it)
    ForkingPickler.dumps(x)  # moves its storage to shared memory, in place
    ptr = x.untyped_storage().data_ptr()
    del x
    later = [x.untyped_storage().data_ptr() for x, _ in it]
    assert ptr not in later


class Uncopyable(torch.utils.data.RandomSampler):
    def __copy__(self):
        raise TypeError("this sampler cannot be copied")


def test_a_prediction_that_fails_warns_once_and_changes_nothing(tree, monkeypatch):
    from fastdecode.loader import _workers

    monkeypatch.setattr(_workers, "_warned_unpredicted", False)
    ds = fd.FastImageFolder(tree, FIXED_UINT8)
    common = dict(batch_size=3, num_workers=2, persistent_workers=True, pin_memory=False)
    expected, _, _, _ = epochs_of(lambda: torch.utils.data.DataLoader(
        ds, sampler=Uncopyable(ds), collate_fn=fd.collate, **common), plain)
    with pytest.warns(RuntimeWarning, match=r"could not draw the next epoch's batches ahead "
                                            r"\(TypeError\('this sampler cannot be copied'\)\)"
                      ) as record:
        ignore_fork_warning()
        got, _, loader, ahead = epochs_of(lambda: fd.FastLoader(ds, sampler=Uncopyable(ds),
                                                                **common), plain)
    assert len(record) == 1 and ahead == [0, 0, 0, 0]
    for a, b in zip(got, expected, strict=True):
        for (x, y), (u, v) in zip(a, b, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
