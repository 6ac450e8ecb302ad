"""MixUp/CutMix where users put them, and erasing chains on FastLoader's rings
(issue 50): DataLoader(FastImageFolder) with torchvision's reference
collate_fn or :class:`fastdecode.augment.MixCollate`, FastLoader's
``batch_transform`` (CPU ring, no ring, threads, resumable) and timm's
prefetcher loader give ImageFolder's batches and soft targets for the same
seed; a chain ending in a fused RandomErasing goes through the CPU ring, and
the CUDA ring's worker side carries its boxes."""

from __future__ import annotations

import pathlib
import random
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torch.utils.data import DataLoader, default_collate  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.augment import MixCollate  # noqa: E402

from helpers.fusion import MEAN, STD  # noqa: E402
from helpers.trees import write_image  # noqa: E402

CLASSES = 4
BATCH = 4


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = pathlib.Path(tmp_path_factory.mktemp("mixing"))
    for i in range(16):
        write_image(root / f"c{i % CLASSES}" / f"{i}.jpg", "JPEG", (110 + 7 * i, 150 - 3 * i),
                    seed=i)
    return str(root)


def _v2(*erasing):
    return T2.Compose([T2.RandomResizedCrop(48), T2.RandomHorizontalFlip(), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD), *erasing,
                       T2.ToPureTensor()])


def _timm_chain(**kwargs):
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_transform(48, is_training=True, **kwargs)


CHAINS = {
    "v2": lambda: _v2(),
    "v2-erasing": lambda: _v2(T2.RandomErasing(p=0.6, value="random")),
    "v1-erasing": lambda: T.Compose([T.RandomResizedCrop(48), T.ToTensor(), T.Normalize(MEAN, STD),
                                     T.RandomErasing(p=0.6)]),
    "timm-pixel-erasing": lambda: _timm_chain(re_prob=0.6, re_mode="pixel"),
}


def _timm_mixup(**kwargs):
    mixup = pytest.importorskip("timm.data.mixup")
    return mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES, **kwargs)


MIXERS = {
    "tv-choice": lambda: T2.RandomChoice([T2.MixUp(alpha=0.2, num_classes=CLASSES),
                                          T2.CutMix(alpha=1.0, num_classes=CLASSES)]),
    "tv-cutmix": lambda: T2.CutMix(alpha=1.0, num_classes=CLASSES),
    "timm-mixup": lambda: _timm_mixup(),
}


def seeded(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Reference:
    """torchvision's reference collate_fn: ``mix(*default_collate(batch))``."""

    def __init__(self, mix):
        self.mix = mix

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


def same(got, want):
    assert len(got) == len(want) > 0
    for (x, y), (a, b) in zip(got, want):
        assert torch.equal(x, a) and torch.equal(y, b)


def reference(tree, chain, mix, workers, **kwargs):
    seeded()
    return list(DataLoader(ImageFolder(tree, chain), batch_size=BATCH, num_workers=workers,
                           collate_fn=Reference(mix) if mix is not None else None, **kwargs))


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers2"])
@pytest.mark.parametrize("collate", ["reference", "mix-collate"])
@pytest.mark.parametrize("mixer_id", list(MIXERS))
@pytest.mark.parametrize("chain_id", ["v2", "v2-erasing"])
def test_dataloader_collate_fn_gives_image_folders_batches(tree, chain_id, mixer_id, collate,
                                                           workers):
    chain, mix = CHAINS[chain_id](), MIXERS[mixer_id]()
    want = reference(tree, chain, mix, workers)
    ds = fd.FastImageFolder(tree, chain, exact=True)
    assert ds._batch_fused() is not None
    seeded()
    fn = Reference(mix) if collate == "reference" else MixCollate(mix)
    same(list(DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=fn)), want)


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers2"])
@pytest.mark.parametrize("mixer_id", list(MIXERS))
@pytest.mark.parametrize("chain_id", list(CHAINS))
def test_fast_loader_batch_transform_gives_image_folders_batches(tree, chain_id, mixer_id,
                                                                 workers):
    chain, mix = CHAINS[chain_id](), MIXERS[mixer_id]()
    want = reference(tree, chain, mix, workers)
    seeded()
    loader = fd.FastLoader(fd.FastImageFolder(tree, chain, exact=True), batch_size=BATCH,
                           num_workers=workers, batch_transform=mix)
    got = list(loader)
    same(got, want)
    if workers:  # the CPU ring kept: every batch mixed in its slot
        assert loader._cpu_ring is not None and loader._cpu_ring.reused == len(got)


class _Unfused(T2.RandomVerticalFlip):
    """A step fuse does not know (a subclass): the chain has no fixed shape."""


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers2"])
def test_batch_transform_without_a_fixed_shape(tree, workers):
    chain = T2.Compose([T2.RandomResizedCrop(48), _Unfused(), T2.ToImage(),
                        T2.ToDtype(torch.float32, scale=True), T2.ToPureTensor()])
    mix = MIXERS["tv-choice"]()
    want = reference(tree, chain, mix, workers)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        ds = fd.FastImageFolder(tree, chain, exact=True)
        assert ds.fixed_sample_shape() is None
        seeded()
        loader = fd.FastLoader(ds, batch_size=BATCH, num_workers=workers, batch_transform=mix)
        got = list(loader)
    same(got, want)
    assert loader._cpu_ring is not None and not loader._cpu_ring.slots  # no slot to hold them


def test_batch_transform_of_another_dataset_runs_in_the_collate():
    images = torch.arange(8 * 3 * 4 * 4, dtype=torch.float32).reshape(8, 3, 4, 4)
    data = [(images[k], k % CLASSES) for k in range(8)]
    mix = T2.MixUp(alpha=0.5, num_classes=CLASSES)
    seeded()
    want = list(DataLoader(data, batch_size=BATCH, collate_fn=Reference(mix)))
    seeded()
    same(list(fd.FastLoader(data, batch_size=BATCH, num_workers=0, batch_transform=mix)), want)


def test_batch_transform_must_be_callable(tree):
    with pytest.raises(TypeError, match="batch_transform must be callable, got int"):
        fd.FastLoader(fd.FastImageFolder(tree, CHAINS["v2"]()), batch_size=BATCH, num_workers=0,
                      batch_transform=3)


def _mixing_loader(tree, **options):
    return fd.FastLoader(fd.FastImageFolder(tree, CHAINS["v2-erasing"](), exact=True),
                         batch_size=BATCH, shuffle=True, resumable=True,
                         generator=torch.Generator().manual_seed(5),
                         batch_transform=MIXERS["tv-choice"](), **options)


@pytest.mark.parametrize("options", [dict(num_workers=2), dict(threads=2)],
                         ids=["workers2", "threads2"])
def test_resumable_mixing_is_the_same_in_every_way_through_the_batches(tree, options):
    seeded(1)  # the global state does not matter: the batches are the seed's alone
    want = list(_mixing_loader(tree, num_workers=0))
    seeded(2)
    same(list(_mixing_loader(tree, **options)), want)


def test_resumable_mixing_resumes_as_the_uninterrupted_run(tree):
    seeded(1)
    want = list(_mixing_loader(tree, num_workers=2))
    loader = _mixing_loader(tree, num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    resumed = _mixing_loader(tree, num_workers=0)
    seeded(13)
    resumed.load_state_dict(state)
    same(list(resumed), want[1:])


@pytest.mark.parametrize("chain_id", ["v2-erasing", "v1-erasing", "timm-pixel-erasing"])
def test_an_erasing_chain_goes_through_the_cpu_ring(tree, chain_id):
    chain = CHAINS[chain_id]()
    want = reference(tree, chain, None, 2)
    ds = fd.FastImageFolder(tree, chain, exact=True)
    assert ds.fixed_sample_shape() == (3, 48, 48) and ds.pixel_table() is None
    seeded()
    loader = fd.FastLoader(ds, batch_size=BATCH, num_workers=2)
    got = list(loader)
    same(got, want)
    assert loader._cpu_ring is not None and loader._cpu_ring.reused == len(got)


@pytest.mark.parametrize("mixer_id", [None, "tv-choice"], ids=["erasing", "erasing-mixed"])
def test_the_cuda_rings_worker_side_carries_the_erasing(tree, mixer_id):
    """What the CUDA ring's workers send (the slot, the targets, each slot's
    boxes and the batch) and what its main side does with them (the table,
    the boxes, the batch transform), run on the CPU: ImageFolder's batches.
    (The ring itself needs CUDA: tests/data/test_loader_cuda.py.)"""
    from fastdecode.batching._mixing import transform_batch
    from fastdecode.loader._cuda_ring import RingWriter, SlotBatch, apply_table, erase_rows

    chain = CHAINS["v2-erasing"]()
    mix = None if mixer_id is None else MIXERS[mixer_id]()
    want = reference(tree, chain, mix, 0)
    ds = fd.FastImageFolder(tree, chain, exact=True)
    ring = torch.zeros((2, BATCH, *ds.fixed_sample_shape()), dtype=torch.uint8)
    writer = RingWriter(ds, ring, send_batch=mix is not None)
    table = ds._ring_table()
    seeded()
    torch.empty((), dtype=torch.int64).random_()  # DataLoader's base seed, drawn at iter()
    got, erased = [], 0
    for n in range(len(ds) // BATCH):
        slot, targets, *extra = writer.__getitems__(
            SlotBatch(list(range(n * BATCH, (n + 1) * BATCH)), n % 2))
        erases, batch = extra[0] if extra else (None, None)
        erased += bool(erases)
        images = apply_table(table, ring[slot])
        erase_rows(images, erases)
        targets = torch.as_tensor(targets)
        if mix is not None:
            images, targets = transform_batch(mix, images, targets, batch)
        got.append((images, targets))
    same(got, want)
    assert erased, "no batch erased anything: the test shows nothing"


def _timm_loader(dataset, **kwargs):
    timm_data = pytest.importorskip("timm.data")
    return timm_data.create_loader(dataset, input_size=(3, 48, 48), batch_size=BATCH,
                                   is_training=True, use_prefetcher=True,
                                   device=torch.device("cpu"), persistent_workers=False, **kwargs)


def _fast_collate_mixup():
    mixup = pytest.importorskip("timm.data.mixup")
    return mixup.FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES)


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers2"])
@pytest.mark.parametrize("collate", [None, "fast-collate-mixup", "mix-collate"])
@pytest.mark.parametrize("re_prob", [0.0, 0.5], ids=["no-erasing", "device-erasing"])
def test_timms_prefetcher_loader_gives_image_folders_batches(tree, re_prob, collate, workers):
    """``create_loader(use_prefetcher=True)``: uint8 samples (timm's
    MaybePILToTensor), fast_collate or FastCollateMixup, normalize and
    erasing by PrefetchLoader (here on the CPU)."""
    def collate_fn():
        if collate is None:
            return None
        return _fast_collate_mixup() if collate == "fast-collate-mixup" else \
            MixCollate(_fast_collate_mixup())

    options = dict(re_prob=re_prob, num_workers=workers)
    seeded()
    want = list(_timm_loader(ImageFolder(tree), collate_fn=collate_fn() if collate else None,
                             **options))
    ds = fd.FastImageFolder(tree, exact=True)
    seeded()
    loader = _timm_loader(ds, collate_fn=collate_fn(), **options)
    assert ds._batch_fused() is not None and ds.fixed_sample_shape() == (3, 48, 48)
    same(list(loader), want)


@pytest.fixture
def timm_installed():
    fd_timm = pytest.importorskip("fastdecode.integrations.timm")
    pytest.importorskip("timm")
    fd_timm.install(exact=True)
    try:
        yield fd_timm
    finally:
        fd_timm.uninstall()


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers2"])
@pytest.mark.parametrize("collate", ["fast-collate", "fast-collate-mixup"])
def test_installed_timm_collates_take_the_batch_as_it_is(tree, timm_installed, collate, workers):
    """After fastdecode.integrations.timm.install(), create_loader's
    fast_collate and timm.data.FastCollateMixup (what train.py builds) take
    FastImageFolder's uint8 batch as it is: timm's batches, targets and draws."""
    import timm.data

    options = dict(re_prob=0.5, num_workers=workers)
    timm_installed.uninstall()
    seeded()
    want = list(_timm_loader(ImageFolder(tree), collate_fn=_fast_collate_mixup()
                             if collate == "fast-collate-mixup" else None, **options))
    timm_installed.install(exact=True)
    mixup = timm.data.FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES)
    assert type(mixup).__name__ == "InPlaceFastCollateMixup"
    seeded()
    got = list(_timm_loader(fd.FastImageFolder(tree, exact=True),
                            collate_fn=mixup if collate == "fast-collate-mixup" else None,
                            **options))
    same(got, want)


def test_installed_fast_collate_hands_the_batch_on_without_a_copy(tree, timm_installed):
    import pickle

    import timm.data
    from timm.data import loader

    ds = fd.FastImageFolder(tree, _timm_chain(use_prefetcher=True))  # uint8 samples
    samples = ds.__getitems__([0, 1, 2, 3])
    images, targets = loader.fast_collate(samples)
    assert images.data_ptr() == samples[0][0].data_ptr() and images.dtype == torch.uint8
    assert targets.dtype == torch.long and targets.tolist() == [s[1] for s in samples]
    mixup = pickle.loads(pickle.dumps(timm.data.FastCollateMixup(num_classes=CLASSES)))
    assert type(mixup).__name__ == "InPlaceFastCollateMixup" and mixup.num_classes == CLASSES
    timm_installed.uninstall()
    assert timm.data.FastCollateMixup.__name__ == "FastCollateMixup"
    assert loader.fast_collate.__module__ == "timm.data.loader"


@pytest.mark.parametrize("way", ["mix-collate", "fast-loader"])
@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_the_imagenet1k_v2_recipe_on_photos(use_v2, way):
    """torchvision's reference with IMAGENET1K_V2's flags (--auto-augment
    ta_wide --random-erase 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0
    --train-crop-size 176) on real photos, 2 workers: ImageFolder's batches
    and soft targets, bit for bit (exact=True)."""
    from benchmarks.presets import ClassificationPresetTrain

    from helpers.corpus import corpus_dir

    photos = corpus_dir("photos")
    if photos is None:
        pytest.skip("shared corpus 'photos' not present")
    chain = ClassificationPresetTrain(crop_size=176, auto_augment_policy="ta_wide",
                                      random_erase_prob=0.1, use_v2=use_v2)
    classes = len(ImageFolder(str(photos)).classes)
    mix = T2.RandomChoice([T2.MixUp(alpha=0.2, num_classes=classes),
                           T2.CutMix(alpha=1.0, num_classes=classes)])
    picked = list(range(0, 8 * 32, 8))
    seeded()
    want = list(DataLoader(torch.utils.data.Subset(ImageFolder(str(photos), chain), picked),
                           batch_size=8, num_workers=2, collate_fn=Reference(mix)))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "fastdecode stopped fusion", RuntimeWarning)
        ds = fd.FastImageFolder(str(photos), chain, exact=True)
        seeded()
        if way == "mix-collate":
            got = list(DataLoader(torch.utils.data.Subset(ds, picked), batch_size=8, num_workers=2,
                                  collate_fn=MixCollate(mix)))
        else:
            got = list(fd.FastLoader(ds, batch_size=8, sampler=picked, num_workers=2,
                                     batch_transform=mix))
    same(got, want)
