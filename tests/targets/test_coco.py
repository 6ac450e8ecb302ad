"""fastdecode's CocoDetection under wrap_dataset_for_transforms_v2 against torchvision's own,
and the masks at sampled rows and columns against pycocotools (polygons, RLE, crowd).

Per preset x seed x image of a generated COCO set over the shared photos:
boxes, labels and masks equal to torchvision's CocoDetection + v2, the image
bit-identical with exact=True. pycocotools is the oracle (skipped without it).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
mask_utils = pytest.importorskip("pycocotools.mask")

from torchvision import datasets  # noqa: E402
from torchvision.datasets import wrap_dataset_for_transforms_v2  # noqa: E402

from benchmarks._coco_data import _runs  # noqa: E402
from fastdecode import _native  # noqa: E402
from fastdecode.targets import CocoDetection, presets  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402

# pycocotools 2.0.11's decode under numpy 2 (torchvision's oracle path): not ours
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

PHOTOS = corpus_dir("photos")
FILES = sorted(PHOTOS.glob("*/*"))[:6] if PHOTOS else []
needs_photos = pytest.mark.skipif(not FILES, reason="shared corpus 'photos' absent")
KEYS = ("image_id", "boxes", "labels", "masks", "iscrowd")


def _pair(annotations, chain, exact):
    ours = wrap_dataset_for_transforms_v2(
        CocoDetection(PHOTOS, str(annotations), transforms=chain, exact=exact, target_keys=KEYS))
    theirs = wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(PHOTOS, str(annotations), transforms=chain), target_keys=KEYS)
    return ours, theirs


@needs_photos
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("preset", presets.DETECTION)
@pytest.mark.parametrize("index", range(6))
def test_coco_detection_matches_torchvision(annotations, index, preset, seed, exact):
    ours, theirs = _pair(annotations, presets.detection(preset), exact)
    torch.manual_seed(seed)
    want_img, want = theirs[index]
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    got_img, got = ours[index]
    assert torch.equal(torch.get_rng_state(), state)
    assert sorted(got) == sorted(want)
    for key in ("boxes", "labels", "masks"):
        assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
    assert got["iscrowd"] == want["iscrowd"] and got["image_id"] == want["image_id"]
    assert got_img.shape == want_img.shape
    if exact:
        assert torch.equal(got_img, want_img)


@needs_photos
def test_without_transforms_the_wrapped_sample_is_torchvisions(annotations):
    ours, theirs = _pair(annotations, None, False)
    got_img, got = ours[0]
    want_img, want = theirs[0]
    assert np.array_equal(np.asarray(got_img), np.asarray(want_img))
    assert torch.equal(got["masks"], want["masks"]) and torch.equal(got["boxes"], want["boxes"])


@needs_photos
def test_unwrapped_it_is_torchvisions_dataset(annotations):
    ours = CocoDetection(PHOTOS, str(annotations))
    theirs = datasets.CocoDetection(PHOTOS, str(annotations))
    (a, ta), (b, tb) = ours[1], theirs[1]
    assert ta == tb and np.array_equal(np.asarray(a), np.asarray(b))


def _polygons(rng, h, w):
    out = []
    for _ in range(int(rng.integers(1, 3))):
        n = int(rng.integers(3, 10))
        out.append(np.stack([rng.uniform(-4, w + 4, n), rng.uniform(-4, h + 4, n)], 1)
                   .reshape(-1).round(int(rng.integers(0, 3))).tolist())
    return out


@pytest.mark.parametrize("seed", range(40))
def test_polygons_at_sampled_pixels_are_pycocotools(seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(3, 90)), int(rng.integers(3, 90))
    polys = _polygons(rng, h, w)
    full = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, h, w)))
    rows = np.sort(rng.integers(-1, h, int(rng.integers(1, 40))))
    cols = rng.integers(-1, w, int(rng.integers(1, 40)))
    out = np.zeros((len(rows), len(cols)), np.uint8)
    _native.raster_polygons(polys, h, w, rows, cols, out)
    want = full[np.maximum(rows, 0)][:, np.maximum(cols, 0)]
    want[rows < 0] = 0
    want[:, cols < 0] = 0
    assert np.array_equal(out, want)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("form", ["compressed", "uncompressed"])
def test_rle_at_sampled_pixels_is_pycocotools(seed, form):
    rng = np.random.default_rng(100 + seed)
    h, w = int(rng.integers(2, 70)), int(rng.integers(2, 70))
    full = (rng.random((h, w)) < rng.uniform(0.05, 0.95)).astype(np.uint8)
    rle = mask_utils.encode(np.asfortranarray(full))
    if form == "compressed":
        counts = _native.rle_from_string(rle["counts"].decode())
    else:
        runs = _runs(full)
        decoded = mask_utils.decode(mask_utils.frPyObjects({"size": [h, w], "counts": runs}, h, w))
        assert np.array_equal(decoded, full)
        counts = np.asarray(runs, np.uint32)
    rows, cols = np.arange(h), rng.permutation(w)
    out = np.zeros((h, w), np.uint8)
    _native.raster_rle(counts, h, w, rows, cols, out)
    assert np.array_equal(out, full[:, cols])
