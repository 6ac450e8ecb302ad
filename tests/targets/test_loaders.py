"""Detection and segmentation batches through DataLoader and FastLoader.

Detection batches are lists (the references' ``utils.collate_fn``,
``fastdecode.targets.collate``), segmentation batches fixed-size tensors (the
default collate, or the references' padding ``collate_fn``). With the same
generator, each loader over fastdecode's datasets gives the samples
DataLoader gives over torchvision's (FastLoader's workers are DataLoader's:
the same per-worker seeds, the same tasks to the same workers), image
included with exact=True, across persistent workers' epochs too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("pycocotools.mask")

from torch.utils.data import DataLoader  # noqa: E402
from torchvision import datasets  # noqa: E402
from torchvision.datasets import wrap_dataset_for_transforms_v2  # noqa: E402

from fastdecode.loader import FastLoader  # noqa: E402
from fastdecode.targets import (  # noqa: E402
    CocoDetection,
    DetectionList,
    VOCDetection,
    VOCSegmentation,
    collate,
    presets,
    segmentation_collate,
)

from helpers.corpus import corpus_dir  # noqa: E402

# pycocotools 2.0.11's decode under numpy 2 (torchvision's oracle path): not ours
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

PHOTOS = corpus_dir("photos")
KEYS = ("image_id", "boxes", "labels", "masks")


def _coco(annotations, voc_root, kind, chain):
    """(fastdecode's dataset, torchvision's) of one kind, the same samples."""
    theirs = wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(PHOTOS, str(annotations), transforms=chain), target_keys=KEYS)
    if kind == "coco":
        return wrap_dataset_for_transforms_v2(CocoDetection(
            PHOTOS, str(annotations), transforms=chain, exact=True, target_keys=KEYS)), theirs
    if kind == "list":
        return DetectionList.from_json(annotations, chain, root=PHOTOS, exact=True,
                                       target_keys=KEYS), theirs
    ours = wrap_dataset_for_transforms_v2(VOCDetection(voc_root, transforms=chain, exact=True))
    return ours, wrap_dataset_for_transforms_v2(datasets.VOCDetection(voc_root, transforms=chain))


def _epochs(loader, epochs):
    return [[batch for batch in loader] for _ in range(epochs)]


def _same_detection_batches(got, want):
    assert len(got) == len(want)
    for (gi, gt), (wi, wt) in zip(got, want):
        assert isinstance(gi, tuple) and isinstance(gt, tuple) and len(gi) == len(wi)
        for a, b in zip(gi, wi):
            assert torch.equal(a, b)
        for a, b in zip(gt, wt):
            assert sorted(a) == sorted(b)
            for key in b:
                if isinstance(b[key], torch.Tensor):
                    assert torch.equal(a[key], b[key]), key
                else:
                    assert a[key] == b[key], key


@pytest.mark.parametrize("kind", ["coco", "list", "voc"])
@pytest.mark.parametrize("loader", ["DataLoader", "FastLoader"])
def test_detection_batches_are_torchvisions(annotations, voc_root, kind, loader):
    """Two workers, the list collate, shuffled under one generator: every
    sample equals torchvision's DataLoader's (images bit for bit)."""
    ours, theirs = _coco(annotations, voc_root, kind, presets.detection("ssdlite"))
    kwargs = dict(batch_size=2, num_workers=2, collate_fn=collate, shuffle=True)
    make = DataLoader if loader == "DataLoader" else FastLoader
    got = _epochs(make(ours, generator=torch.Generator().manual_seed(11), **kwargs), 1)
    want = _epochs(DataLoader(theirs, generator=torch.Generator().manual_seed(11), **kwargs), 1)
    _same_detection_batches(got[0], want[0])


def test_fastloader_persistent_epochs_are_torchvisions(annotations, voc_root):
    """Persistent workers (FastLoader draws the next epoch ahead): three
    epochs, each DataLoader's."""
    ours, theirs = _coco(annotations, voc_root, "coco", presets.detection("hflip"))
    kwargs = dict(batch_size=4, num_workers=2, collate_fn=collate, shuffle=True,
                  persistent_workers=True)
    got = _epochs(FastLoader(ours, generator=torch.Generator().manual_seed(3), **kwargs), 3)
    want = _epochs(DataLoader(theirs, generator=torch.Generator().manual_seed(3), **kwargs), 3)
    for g, w in zip(got, want):
        _same_detection_batches(g, w)


@pytest.mark.parametrize("workers", [0, 2])
def test_fastloader_in_process_and_workers_take_the_list_collate(annotations, workers):
    """Default mode (no exact): list batches, each sample's masks, boxes and
    labels of one count and the image's size; in-process under one global
    seed, the samples DataLoader gives."""
    ours = wrap_dataset_for_transforms_v2(CocoDetection(
        PHOTOS, str(annotations), transforms=presets.detection("ssdlite"), target_keys=KEYS))
    torch.manual_seed(5)
    batches = _epochs(FastLoader(ours, batch_size=2, num_workers=workers, collate_fn=collate), 1)
    seen = 0
    for images, targets in batches[0]:
        for image, target in zip(images, targets):
            n = len(target["boxes"])
            assert target["masks"].shape == (n,) + tuple(image.shape[1:])
            assert len(target["labels"]) == n
            seen += 1
    assert seen == len(ours)
    if workers == 0:
        torch.manual_seed(5)
        want = _epochs(DataLoader(ours, batch_size=2, collate_fn=collate), 1)
        _same_detection_batches(batches[0], want[0])


@pytest.mark.parametrize("collate_fn", [None, segmentation_collate], ids=["default", "references"])
@pytest.mark.parametrize("loader", ["DataLoader", "FastLoader"])
def test_segmentation_batches_are_torchvisions(voc_root, loader, collate_fn):
    """VOCSegmentation's fixed-size batches (the preset's 480 x 480 crop),
    two workers: the default collate (FastLoader's, fastdecode.collate) and
    the references' padding one both give DataLoader's batches over
    torchvision's VOCSegmentation."""
    chain = presets.segmentation()
    ours = wrap_dataset_for_transforms_v2(VOCSegmentation(voc_root, transforms=chain, exact=True))
    theirs = wrap_dataset_for_transforms_v2(datasets.VOCSegmentation(voc_root, transforms=chain))
    kwargs = dict(batch_size=2, num_workers=2, shuffle=True)
    make = DataLoader if loader == "DataLoader" else FastLoader
    got = _epochs(make(ours, generator=torch.Generator().manual_seed(2), collate_fn=collate_fn,
                       **kwargs), 1)[0]
    want = _epochs(DataLoader(theirs, generator=torch.Generator().manual_seed(2),
                              collate_fn=collate_fn or torch.utils.data.default_collate,
                              **kwargs), 1)[0]
    assert len(got) == len(want) == 3
    for (gi, gt), (wi, wt) in zip(got, want):
        assert gi.shape == (len(gi), 3, 480, 480) and gt.shape[-2:] == (480, 480)
        assert torch.equal(gi, wi) and torch.equal(gt, wt) and gt.dtype == torch.int64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fastloader_device_moves_every_tensor_of_a_list_batch(annotations, voc_root):
    """device='cuda': a detection batch's images and every target tensor on
    the GPU, equal to the CPU loader's, the tuples and dicts kept."""
    ours, _ = _coco(annotations, voc_root, "coco", presets.detection("ssdlite"))
    kwargs = dict(batch_size=2, num_workers=2, collate_fn=collate)
    got = _epochs(FastLoader(ours, device="cuda", generator=torch.Generator().manual_seed(1),
                             **kwargs), 1)[0]
    want = _epochs(FastLoader(ours, generator=torch.Generator().manual_seed(1), **kwargs), 1)[0]
    for (gi, gt), (wi, wt) in zip(got, want):
        assert all(image.is_cuda for image in gi)
        assert all(t[key].is_cuda for t in gt for key in ("boxes", "labels", "masks"))
        _same_detection_batches([(tuple(i.cpu() for i in gi),
                                  tuple({k: v.cpu() if isinstance(v, torch.Tensor) else v
                                         for k, v in t.items()} for t in gt))], [(wi, wt)])


def test_fastloader_list_batches_cross_in_a_reused_slot(annotations, voc_root):
    """With workers and a collate of one's own, a batch's large plain tensors
    (images, masks) arrive borrowing a worker's pool slot (all released once
    dropped), small ones (labels) as DataLoader sends them; the samples are
    DataLoader's."""
    import gc

    from fastdecode.batching._shared_pool import borrowed

    ours, theirs = _coco(annotations, voc_root, "coco", presets.detection("lsj"))
    kwargs = dict(batch_size=2, num_workers=2, collate_fn=collate)
    loader = FastLoader(ours, generator=torch.Generator().manual_seed(4), **kwargs)
    reference = DataLoader(theirs, generator=torch.Generator().manual_seed(4), **kwargs)
    gc.collect()  # tensors an earlier test left to the collector
    before = borrowed()
    wanted = iter(reference)
    for images, targets in loader:
        assert all(type(image) is torch.Tensor for image in images)
        # each image and its masks (and those of batches that arrived ahead of their turn)
        assert borrowed() - before >= 2 * len(images)
        _same_detection_batches([(images, targets)], [next(wanted)])
    del images, targets
    gc.collect()
    assert borrowed() == before
