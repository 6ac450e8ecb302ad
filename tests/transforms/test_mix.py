"""MixUp and CutMix on batches (issue 50): ``fastdecode.augment.mix_batch`` and
``MixCollate`` give torchvision v2's and timm's own mixed batches and soft
targets for the same seed, with the same draws left behind, mixing in place;
what they do not know runs as the transform's own call, errors included."""

from __future__ import annotations

import pickle
import random
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.augment import MixCollate, mix_batch  # noqa: E402

CLASSES = 10


def _timm(**kwargs):
    mixup = pytest.importorskip("timm.data.mixup")
    return mixup.Mixup(num_classes=CLASSES, **kwargs)


MIXERS = {
    "tv-mixup": lambda: T2.MixUp(alpha=0.2, num_classes=CLASSES),
    "tv-cutmix": lambda: T2.CutMix(alpha=1.0, num_classes=CLASSES),
    "tv-choice": lambda: T2.RandomChoice([T2.MixUp(alpha=0.2, num_classes=CLASSES),
                                          T2.CutMix(alpha=1.0, num_classes=CLASSES)]),
    "tv-choice-weighted": lambda: T2.RandomChoice(
        [T2.MixUp(alpha=0.8, num_classes=CLASSES), T2.CutMix(alpha=1.0, num_classes=CLASSES)],
        p=[0.3, 0.7]),
    "tv-no-num-classes-soft": lambda: T2.MixUp(alpha=1.0),
    "timm-both": lambda: _timm(mixup_alpha=0.8, cutmix_alpha=1.0),
    "timm-mixup-prob": lambda: _timm(mixup_alpha=0.4, prob=0.6, label_smoothing=0.0),
    "timm-cutmix-minmax": lambda: _timm(mixup_alpha=0.0, cutmix_alpha=1.0,
                                        cutmix_minmax=(0.2, 0.8)),
    "timm-cutmix-uncorrected": lambda: _timm(mixup_alpha=0.0, cutmix_alpha=1.0,
                                             correct_lam=False),
    "timm-elem": lambda: _timm(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem"),
    "timm-pair": lambda: _timm(mixup_alpha=0.8, cutmix_alpha=1.0, mode="pair"),
}
IN_PLACE = {"tv-mixup", "tv-cutmix", "tv-choice", "tv-choice-weighted", "tv-no-num-classes-soft",
            "timm-both", "timm-mixup-prob", "timm-cutmix-minmax", "timm-cutmix-uncorrected"}
SHAPES = {"batch8-odd-size": (8, 3, 37, 53), "batch2": (2, 3, 16, 16), "batch6-one-channel": (6, 1, 24, 20)}


def seeded(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def states():
    return torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()


def _batch(shape, seed, soft):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(shape, generator=g)
    labels = torch.randint(0, CLASSES, (shape[0],), generator=g)
    if soft:
        labels = torch.nn.functional.one_hot(labels, CLASSES).float()
    return images, labels


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape_id", list(SHAPES))
@pytest.mark.parametrize("mixer_id", list(MIXERS))
def test_mix_batch_gives_the_transforms_batch_targets_and_draws(mixer_id, shape_id, seed):
    t = MIXERS[mixer_id]()
    images, labels = _batch(SHAPES[shape_id], seed, soft=mixer_id == "tv-no-num-classes-soft")
    seeded(seed)
    want_images, want_labels = t(images.clone(), labels.clone())
    after = states()
    seeded(seed)
    ours = images.clone()
    got_images, got_labels = mix_batch(t, ours, labels.clone())
    assert torch.equal(got_images, want_images) and torch.equal(got_labels, want_labels)
    now = states()
    assert torch.equal(now[0], after[0]) and (now[1] == after[1]).all() and now[2] == after[2]
    if mixer_id in IN_PLACE:
        assert got_images.data_ptr() == ours.data_ptr()  # mixed where it was


@pytest.mark.parametrize("mixer_id", ["tv-cutmix", "tv-choice"])
def test_a_uint8_batch_is_cut_and_pasted_in_place(mixer_id):
    """CutMix pastes boxes, whatever the dtype (a RandomChoice that picks
    MixUp for uint8 images refuses them as torchvision does)."""
    t = MIXERS[mixer_id]()
    g = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, CLASSES, (6,), generator=g)
    for seed in range(4):
        seeded(seed)
        try:
            want = t(images.clone(), labels)
        except RuntimeError as exc:
            seeded(seed)
            with pytest.raises(RuntimeError, match=re.escape(str(exc))):
                mix_batch(t, images.clone(), labels)
            continue
        seeded(seed)
        ours = images.clone()
        got = mix_batch(t, ours, labels)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0].data_ptr() == ours.data_ptr()


@pytest.mark.parametrize("mixer_id", ["tv-mixup", "tv-cutmix"])
def test_an_image_batch_stays_an_image_batch(mixer_id):
    t = MIXERS[mixer_id]()
    images, labels = _batch((4, 3, 20, 20), 1, soft=False)
    seeded(4)
    want, _ = t(tv_tensors.Image(images.clone()), labels)
    seeded(4)
    got, _ = mix_batch(t, tv_tensors.Image(images.clone()), labels)
    assert type(got) is type(want) is tv_tensors.Image and torch.equal(got, want)


@pytest.mark.parametrize("make, images, labels, error, match", [
    pytest.param(lambda: T2.MixUp(), torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long),
                 ValueError, "num_classes must be passed", id="tv-index-labels-without-num-classes"),
    pytest.param(lambda: T2.CutMix(num_classes=3), torch.zeros(4, 3, 8, 8), torch.zeros(4, 5),
                 ValueError, "must match num_classes", id="tv-soft-labels-of-another-width"),
    pytest.param(lambda: T2.MixUp(num_classes=3), torch.zeros(4, 3, 8, 8),
                 torch.zeros(3, dtype=torch.long), ValueError, "batch size of the image",
                 id="tv-labels-of-another-batch"),
    pytest.param(lambda: T2.MixUp(num_classes=3), torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
                 torch.zeros(4, dtype=torch.long), RuntimeError, "can't be cast",
                 id="tv-mixup-of-uint8-images"),
    pytest.param(lambda: _timm(mixup_alpha=1.0), torch.zeros(3, 3, 8, 8),
                 torch.zeros(3, dtype=torch.long), AssertionError, "Batch size should be even",
                 id="timm-odd-batch"),
])
def test_what_the_transform_refuses_it_refuses_itself(make, images, labels, error, match):
    with pytest.raises(error, match=match):
        make()(images.clone(), labels)
    with pytest.raises(error, match=match):
        mix_batch(make(), images.clone(), labels)


def test_another_callable_is_called_as_it_is():
    calls = []

    def mine(images, labels):
        calls.append(images.shape)
        return images * 2, labels

    images, labels = _batch((4, 3, 8, 8), 0, soft=False)
    got, _ = mix_batch(mine, images, labels)
    assert calls == [images.shape] and torch.equal(got, images * 2)


def _fast_collate_mixup(**kwargs):
    mixup = pytest.importorskip("timm.data.mixup")
    return mixup.FastCollateMixup(num_classes=CLASSES, **kwargs)


COLLATE_MIXERS = {
    "timm-fast-both": lambda: _fast_collate_mixup(mixup_alpha=0.8, cutmix_alpha=1.0),
    "timm-fast-mixup": lambda: _fast_collate_mixup(mixup_alpha=0.8, label_smoothing=0.0),
    "timm-fast-cutmix-minmax": lambda: _fast_collate_mixup(mixup_alpha=0.0, cutmix_alpha=1.0,
                                                           cutmix_minmax=(0.3, 0.9)),
    "timm-fast-elem": lambda: _fast_collate_mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem"),
    "tv-choice": MIXERS["tv-choice"],
    "timm-both": MIXERS["timm-both"],
}


def _samples(seed, uint8):
    g = torch.Generator().manual_seed(seed)
    if uint8:
        return [(torch.randint(0, 256, (3, 21, 30), dtype=torch.uint8, generator=g), k % CLASSES)
                for k in range(8)]
    return [(torch.randn(3, 21, 30, generator=g), k % CLASSES) for k in range(8)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mixer_id", list(COLLATE_MIXERS))
def test_mix_collate_is_the_reference_collate(mixer_id, seed):
    """torchvision's reference collate_fn (``mix(*default_collate(batch))``) and
    timm's FastCollateMixup, called on the samples."""
    t = COLLATE_MIXERS[mixer_id]()
    fast = mixer_id.startswith("timm-fast")
    samples = _samples(seed, uint8=fast)

    def reference(batch):
        return t(batch) if fast else t(*torch.utils.data.default_collate(batch))

    seeded(seed)
    want = reference([(x.clone(), y) for x, y in samples])
    after = states()
    seeded(seed)
    got = pickle.loads(pickle.dumps(MixCollate(t)))([(x.clone(), y) for x, y in samples])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(states()[0], after[0]) and (states()[1] == after[1]).all()


def test_mix_collate_needs_a_callable():
    with pytest.raises(TypeError, match="MixCollate needs a callable transform, got int"):
        MixCollate(3)
