"""FastLoader's CUDA path: the pinned shared ring, side-stream copies, GPU
normalization. Runs only where CUDA is available (not on the CPU-only CI)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fastdecode as fd

from helpers.trees import make_tree

tv = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("cudatree"), per_class=8)


@pytest.mark.parametrize("chain", [pytest.param(EVAL, id="normalize-on-gpu"),
                                   pytest.param(T.Compose([T.Resize(40), T.CenterCrop(32),
                                                           T.PILToTensor()]), id="uint8")])
def test_ring_batches_equal_the_cpu_chain(tree, chain):
    ds = fd.FastImageFolder(tree, chain)
    cpu = [(x, y) for x, y in torch.utils.data.DataLoader(ds, batch_size=4)]
    loader = fd.FastLoader(ds, batch_size=4, num_workers=2, device="cuda")
    assert loader._ring is not None and loader._ring.registered
    gpu = [(x, y) for x, y in loader]
    assert len(gpu) == len(cpu)
    for (a, ya), (b, yb) in zip(gpu, cpu):
        assert a.is_cuda and ya.is_cuda and a.dtype == b.dtype
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=1e-6)
        assert torch.equal(ya.cpu(), yb)
    # two epochs reuse the ring; closing unregisters it
    assert sum(1 for _ in loader) == len(cpu)
    loader.close()
    assert not loader._ring.registered


def test_device_copy_without_ring_for_variable_shapes(tree):
    ds = fd.FastImageFolder(tree, EVAL)
    loader = fd.FastLoader(ds, batch_size=4, threads=2, device="cuda")
    images, targets = next(iter(loader))
    assert images.is_cuda and images.shape == (4, 3, 32, 32)


def _seeded():
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.mark.parametrize("mixed", [False, True], ids=["erasing", "erasing-then-mixup-cutmix"])
def test_ring_carries_the_erasing_and_the_batch_transform(tree, mixed):
    """A chain ending in a fused RandomErasing goes through the ring: the
    workers send each slot's boxes, written on the GPU after the table
    (ImageFolder's batches); a batch_transform runs there after them, drawing
    in the main process, as a loop mixing each batch it receives would."""
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    chain = T.Compose([T.Resize(40), T.RandomCrop(32), T.ToTensor(), T.Normalize(MEAN, STD),
                       T.RandomErasing(p=0.7, value="random")])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=3), v2.CutMix(alpha=1.0, num_classes=3)])
    _seeded()
    want = []
    for x, y in torch.utils.data.DataLoader(ImageFolder(tree, chain), batch_size=4, num_workers=2):
        want.append(mix(x, y) if mixed else (x, y))
    ds = fd.FastImageFolder(tree, chain, exact=True)
    _seeded()
    loader = fd.FastLoader(ds, batch_size=4, num_workers=2, device="cuda",
                           batch_transform=mix if mixed else None)
    assert loader._ring is not None
    got = list(loader)
    assert len(got) == len(want)
    for (a, ya), (b, yb) in zip(got, want):
        assert a.is_cuda
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=1e-6)
        torch.testing.assert_close(ya.cpu(), yb, rtol=0, atol=1e-6)
