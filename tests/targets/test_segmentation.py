"""Segmentation datasets (VOCSegmentation under the v2 wrapper, LabelFolder)
against torchvision's own and v2 on PIL: the label maps equal, the image
bit-identical with exact=True, over generated VOC and folder trees of the
shared photos with palette label PNGs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
PIL_Image = pytest.importorskip("PIL.Image")

from torchvision import datasets  # noqa: E402
from torchvision.datasets import wrap_dataset_for_transforms_v2  # noqa: E402

from fastdecode.targets import LabelFolder, VOCDetection, VOCSegmentation, presets  # noqa: E402
from fastdecode.targets.segmentation import read_label  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402

PHOTOS = corpus_dir("photos")
FILES = sorted(PHOTOS.glob("*/*.JPEG"))[:5] if PHOTOS else []
needs_photos = pytest.mark.skipif(not FILES, reason="shared corpus 'photos' absent")


@needs_photos
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("index", range(5))
def test_voc_segmentation_matches_torchvision(voc_root, index, seed, exact):
    chain = presets.segmentation()
    ours = wrap_dataset_for_transforms_v2(VOCSegmentation(voc_root, transforms=chain,
                                                          exact=exact))
    theirs = wrap_dataset_for_transforms_v2(datasets.VOCSegmentation(voc_root, transforms=chain))
    torch.manual_seed(seed)
    want_img, want = theirs[index]
    torch.manual_seed(seed)
    got_img, got = ours[index]
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert got_img.shape == want_img.shape
    if exact:
        assert torch.equal(got_img, want_img)


@needs_photos
def test_voc_segmentation_unwrapped_is_torchvisions(voc_root):
    (a, ta), (b, tb) = VOCSegmentation(voc_root)[0], datasets.VOCSegmentation(voc_root)[0]
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert np.array_equal(np.asarray(ta), np.asarray(tb))


@needs_photos
@pytest.mark.parametrize("seed", [0, 1])
def test_label_folder_matches_v2(tmp_path, seed, write_label):
    for k, path in enumerate(FILES[:3]):
        (tmp_path / "img" / "city").mkdir(parents=True, exist_ok=True)
        (tmp_path / "lab" / "city").mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tmp_path / "img" / "city" / f"{k}_leftImg8bit.jpg")
        write_label(path, tmp_path / "lab" / "city" / f"{k}_gtFine_labelIds.png")
    chain = presets.segmentation()
    folder = LabelFolder(tmp_path / "img", tmp_path / "lab", chain, exact=True,
                         label_name=lambda p: p.replace("_leftImg8bit.jpg", "_gtFine_labelIds.png"))
    assert len(folder) == 3
    for index, (image, label) in enumerate(folder.samples):
        torch.manual_seed(seed)
        want_img, want = chain(PIL_Image.open(image).convert("RGB"), read_label(label))
        torch.manual_seed(seed)
        got_img, got = folder[index]
        assert torch.equal(got, want) and torch.equal(got_img, want_img)


def test_label_folder_without_a_label_raises(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "lab").mkdir()
    PIL_Image.new("RGB", (4, 4)).save(tmp_path / "img" / "a.jpg")
    with pytest.raises(FileNotFoundError, match="a.jpg: no label at"):
        LabelFolder(tmp_path / "img", tmp_path / "lab")
    with pytest.raises(FileNotFoundError, match="no image under"):
        LabelFolder(tmp_path / "lab", tmp_path / "img")


@needs_photos
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("preset", ["ssdlite", "multiscale"])
@pytest.mark.parametrize("index", range(5))
def test_voc_detection_matches_torchvision(voc_root, index, preset, seed, exact):
    chain = presets.detection(preset)
    ours = wrap_dataset_for_transforms_v2(VOCDetection(voc_root, transforms=chain, exact=exact))
    theirs = wrap_dataset_for_transforms_v2(datasets.VOCDetection(voc_root, transforms=chain))
    torch.manual_seed(seed)
    want_img, want = theirs[index]
    torch.manual_seed(seed)
    got_img, got = ours[index]
    assert sorted(got) == sorted(want)
    for key in want:
        assert torch.equal(got[key], want[key]), key
    assert got_img.shape == want_img.shape
    if exact:
        assert torch.equal(got_img, want_img)


@needs_photos
def test_voc_detection_unwrapped_is_torchvisions(voc_root):
    (a, ta), (b, tb) = VOCDetection(voc_root)[2], datasets.VOCDetection(voc_root)[2]
    assert np.array_equal(np.asarray(a), np.asarray(b)) and ta == tb
