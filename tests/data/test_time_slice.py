"""A worker's longer scheduler time slice: asked for in every DataLoader worker
that decodes with fastdecode, never in the trainer's process (CPU-only)."""

from __future__ import annotations

import ctypes
import multiprocessing

import pytest

torch = pytest.importorskip("torch")

import fastdecode as fd
from fastdecode import _system

from helpers.trees import make_tree

tv = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

TRAIN = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
ODD = T.Compose([T.Resize(40)])  # no fixed size: one sample at a time, no batch in place


def _child_lengthens(ns: int, then: int, out) -> None:
    out.put((_system.lengthen_time_slice(ns), _system.lengthen_time_slice(then),
             _system.time_slice_ns()))


def in_child(ns: int, then: int) -> tuple:
    """lengthen_time_slice(ns), then (then), in a forked child: this process's
    slice stays as it is."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_lengthens, args=(ns, then, out))
    child.start()
    got = out.get(timeout=60)
    child.join(60)
    return got


@pytest.fixture(scope="module")
def slices():
    """Skips where the kernel reports no slice (before Linux 6.12, not Linux)."""
    if _system.time_slice_ns() is None or not in_child(_system.WORKER_SLICE_NS, 0)[0]:
        pytest.skip("this kernel takes no time slice for a SCHED_OTHER task (Linux < 6.12)")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("slicetree"), per_class=3)


def slice_of_this_process(_target: int) -> int:
    """A target_transform: runs where the sample is made."""
    return _system.time_slice_ns() or 0


def test_a_slice_is_lengthened_never_shortened(slices):
    longer = 3 * _system.WORKER_SLICE_NS
    took, kept, now = in_child(longer, _system.WORKER_SLICE_NS)
    assert (took, kept, now) == (True, True, longer)


def test_the_trainers_process_keeps_its_slice(slices):
    before = _system.time_slice_ns()
    assert in_child(_system.WORKER_SLICE_NS, 0)[2] == _system.WORKER_SLICE_NS
    assert _system.time_slice_ns() == before != _system.WORKER_SLICE_NS


def _stock_batched(ds):
    return torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2)


def _stock_per_sample(ds):
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)


def _fast_loader(ds):
    return fd.FastLoader(ds, batch_size=3, num_workers=2)


@pytest.mark.parametrize("make, chain", [
    pytest.param(_stock_batched, TRAIN, id="DataLoader-batch-in-place"),
    pytest.param(_stock_per_sample, TRAIN, id="DataLoader-per-sample"),
    pytest.param(_stock_per_sample, ODD, id="DataLoader-unfixed-size"),
    pytest.param(_fast_loader, TRAIN, id="FastLoader-ring"),
])
def test_every_worker_asks_for_the_longer_slice(slices, tree, make, chain):
    ds = fd.FastImageFolder(tree, chain, target_transform=slice_of_this_process)
    before = _system.time_slice_ns()
    seen = set()
    for _, target in make(ds):
        seen.update(torch.as_tensor(target).reshape(-1).tolist())
    assert seen == {_system.WORKER_SLICE_NS}
    assert ds[0][1] == before == _system.time_slice_ns()  # in-process: untouched


def _slice_of(sample: tuple) -> tuple:
    """A webdataset map stage after the decode: (image, this process's slice)."""
    return sample[0], slice_of_this_process(0)


@pytest.fixture(scope="module")
def shards(tree, tmp_path_factory):
    import fastdecode.webdataset as fwds

    dst = tmp_path_factory.mktemp("slicewds")
    fwds.write_shards(tree, dst, shard_count=2, workers=1)
    return sorted(str(p) for p in dst.glob("*.tar"))


@pytest.mark.parametrize("per", ["sample", "batch"])
def test_webdataset_workers_ask_for_the_longer_slice(slices, shards, per):
    wds = pytest.importorskip("webdataset")
    import fastdecode.webdataset as fwds

    ds = wds.WebDataset(shards, shardshuffle=False)  # one shard per worker
    if per == "sample":
        ds = ds.decode(fwds.handler(TRAIN)).to_tuple("jpg;png", "cls").map(_slice_of)
    else:
        ds = ds.to_tuple("jpg;png", "cls").batched(2, collation_fn=fwds.collate(TRAIN)) \
            .map(_slice_of)
    seen = {int(target) for _, target in torch.utils.data.DataLoader(ds, batch_size=None,
                                                                      num_workers=2)}
    assert seen == {_system.WORKER_SLICE_NS}


@pytest.mark.parametrize("machine", ["sparc64", ""])
def test_an_unknown_architecture_asks_nothing(monkeypatch, machine):
    monkeypatch.setattr(_system.platform, "machine", lambda: machine)
    assert _system.time_slice_ns() is None
    assert _system.lengthen_time_slice() is False


@pytest.mark.parametrize("policy, runtime", [pytest.param(0, 0, id="no-slice-reported"),
                                             pytest.param(1, 5_000_000, id="SCHED_FIFO")])
def test_a_kernel_that_reports_no_fair_slice_is_left_alone(monkeypatch, policy, runtime):
    calls = []

    class Libc:
        def syscall(self, *args):
            calls.append(args)
            return 0

    attr = _system._SchedAttr(sched_policy=policy, sched_runtime=runtime)
    monkeypatch.setattr(_system, "_sched_attr", lambda: (attr, Libc(), 314))
    assert _system.lengthen_time_slice() is False
    assert calls == []  # no sched_setattr


def test_the_attr_struct_is_the_kernels_first_version():
    assert ctypes.sizeof(_system._SchedAttr) == 48  # SCHED_ATTR_SIZE_VER0
