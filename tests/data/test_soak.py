"""Soak: many epochs of the train chain through 2 workers (read-ahead as by
default, and at a fixed depth: the read pool's threads read every file),
sampling per epoch the RSS of the main process and of the workers, the main
process's open descriptors and the /dev/shm entries. After the warm-up nothing may
grow: < 2 MB of RSS per process, not one descriptor or entry.

The default run is short (5 epochs over a small tree); ``make soak``
(FASTDECODE_SOAK=1) runs 50 epochs over a generated 2,000-image tree.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402

from helpers.faults_per_batch import children  # noqa: E402
from helpers.shm import torch_shm_entries  # noqa: E402

pytestmark = pytest.mark.no_sanitize

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
MB = 2**20


def generated_tree(root, images: int, classes: int = 10):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
    for i in range(images):
        path = root / f"c{i % classes}" / f"{i}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.roll(base, i, axis=1)).save(path, quality=85)
    return root


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    return generated_tree(tmp_path_factory.mktemp("soak_small"), 64)


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory):
    return generated_tree(tmp_path_factory.mktemp("soak_big"), 2000)


def rss(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def soak(loader, epochs: int) -> list[dict]:
    """One sample per epoch, taken as its last batch arrives (the workers
    still alive), after the consumer dropped the batch before it."""
    samples = []
    others = set(children())  # what earlier tests left running is not ours
    seen = {os.getpid()}  # every worker so far: a dead one's entries count too
    for _ in range(epochs):
        n = len(loader)
        for i, (images, targets) in enumerate(loader):
            float(images.float().mean())  # the consumer reads its batch
            if i == n - 1:
                del images, targets
                gc.collect()
                workers = [p for p in children() if p not in others]
                seen.update(workers)
                samples.append({"main": rss(), "workers": sorted(rss(p) for p in workers),
                                "fds": len(os.listdir("/proc/self/fd")),
                                "shm": len(torch_shm_entries(seen))})
    return samples


KINDS = {
    "DataLoader": lambda ds, p: torch.utils.data.DataLoader(
        ds, batch_size=16, num_workers=2, shuffle=True, persistent_workers=p),
    "DataLoader+collate": lambda ds, p: torch.utils.data.DataLoader(
        ds, batch_size=16, num_workers=2, shuffle=True, persistent_workers=p,
        collate_fn=fd.collate),
    "FastLoader": lambda ds, p: fd.FastLoader(
        ds, batch_size=16, num_workers=2, shuffle=True, persistent_workers=p),
}
# make test runs the two read-ahead cases (a DataLoader's fresh workers, a
# FastLoader's persistent ones); make test-full all eight
# (docs/decisions/test-suite.md, "make test's time")
CASES = [pytest.param(k, p, None, id=f"{k}-{'persistent' if p else 'fresh'}",
                      marks=pytest.mark.slow)
         for k in KINDS for p in (False, True)]
# read-ahead at a fixed depth: the read pool's threads read every file (the
# adaptive default reads a local disk's files in the decoding thread)
CASES += [pytest.param(k, p, 16, id=f"{k}-{'persistent' if p else 'fresh'}-readahead16")
          for k, p in (("DataLoader", False), ("FastLoader", True))]


def check_flat(samples: list[dict], warm: int) -> None:
    first, last = samples[warm - 1], samples[-1]
    assert last["main"] - first["main"] < 2 * MB, [s["main"] for s in samples]
    assert len(last["workers"]) == len(first["workers"]) == 2
    for a, b in zip(first["workers"], last["workers"]):
        assert b - a < 2 * MB, [s["workers"] for s in samples]
    assert last["fds"] == first["fds"], [s["fds"] for s in samples]
    assert last["shm"] == first["shm"], [s["shm"] for s in samples]


def train_chain():
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


@pytest.mark.parametrize("kind, persistent, readahead", CASES)
def test_short_soak_grows_nothing(small_tree, kind, persistent, readahead):
    ds = fd.FastImageFolder(small_tree, train_chain(), readahead=readahead)
    check_flat(soak(KINDS[kind](ds, persistent), epochs=5), warm=2)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FASTDECODE_SOAK"), reason="the full soak: make soak")
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("kind, persistent, readahead", CASES)
def test_soak_50_epochs_grows_nothing(big_tree, kind, persistent, readahead):
    ds = fd.FastImageFolder(big_tree, train_chain(), readahead=readahead)
    samples = soak(KINDS[kind](ds, persistent), epochs=50)
    print(f"{kind} persistent={persistent} readahead={readahead}: main RSS {samples[4]['main'] / MB:.1f} -> "
          f"{samples[-1]['main'] / MB:.1f} MB, workers "
          f"{[round(w / MB, 1) for w in samples[4]['workers']]} -> "
          f"{[round(w / MB, 1) for w in samples[-1]['workers']]} MB, fds "
          f"{samples[4]['fds']} -> {samples[-1]['fds']}, shm {samples[4]['shm']} -> "
          f"{samples[-1]['shm']}")
    check_flat(samples, warm=5)
