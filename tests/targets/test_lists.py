"""DetectionList, the file-list form (image path + COCO annotations), against
torchvision's CocoDetection under wrap_dataset_for_transforms_v2 on the same
files and annotations: per preset x seed x image, boxes, labels, masks and
the RNG state after equal, the image bit-identical with exact=True; its
constructor's forms and manifests give the same samples; its errors name
what is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("pycocotools.mask")

from torchvision import datasets  # noqa: E402
from torchvision.datasets import wrap_dataset_for_transforms_v2  # noqa: E402

from fastdecode.targets import DetectionList, presets  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402

# pycocotools 2.0.11's decode under numpy 2 (torchvision's oracle path): not ours
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

PHOTOS = corpus_dir("photos")
KEYS = ("image_id", "boxes", "labels", "masks", "iscrowd", "area")


def _theirs(annotations, chain):
    return wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(PHOTOS, str(annotations), transforms=chain), target_keys=KEYS)


def _same_target(got, want):
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("preset", presets.DETECTION)
@pytest.mark.parametrize("index", range(6))
def test_detection_list_matches_torchvision(annotations, index, preset, seed, exact):
    chain = presets.detection(preset)
    ours = DetectionList.from_json(annotations, chain, root=PHOTOS, exact=exact, target_keys=KEYS)
    theirs = _theirs(annotations, chain)
    torch.manual_seed(seed)
    want_img, want = theirs[index]
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    got_img, got = ours[index]
    assert torch.equal(torch.get_rng_state(), state)
    _same_target(got, want)
    assert got_img.shape == want_img.shape
    if exact:
        assert torch.equal(got_img, want_img)


def test_without_transforms_the_sample_is_torchvisions(annotations):
    ours = DetectionList.from_json(annotations, root=PHOTOS, target_keys=KEYS)
    theirs = _theirs(annotations, None)
    for index in (0, 3):
        (got_img, got), (want_img, want) = ours[index], theirs[index]
        assert np.array_equal(np.asarray(got_img), np.asarray(want_img))
        _same_target(got, want)


def _coco_pairs(annotations):
    coco = json.loads(annotations.read_text())
    anns = {im["id"]: [a for a in coco["annotations"] if a["image_id"] == im["id"]]
            for im in coco["images"]}
    return coco, [(im["file_name"], anns[im["id"]]) for im in coco["images"]]


@pytest.mark.parametrize("form", ["samples", "paths", "list-manifest"])
def test_every_form_lists_the_coco_files_samples(annotations, tmp_path, form):
    """The in-memory forms and a list manifest give from_json's samples (the
    image ids aside: theirs are the sample's index)."""
    coco, pairs = _coco_pairs(annotations)
    chain = presets.detection("ssdlite")
    if form == "samples":
        ours = DetectionList(pairs, chain, root=PHOTOS, target_keys="all")
    elif form == "paths":
        ours = DetectionList(paths=[p for p, _ in pairs], targets=[t for _, t in pairs],
                             transforms=chain, root=PHOTOS, target_keys="all")
    else:
        manifest = tmp_path / "list.json"
        manifest.write_text(json.dumps([{"path": str(PHOTOS / p), "annotations": t}
                                        for p, t in pairs]))
        ours = DetectionList.from_json(manifest, chain, target_keys="all")
    want = DetectionList.from_json(annotations, chain, root=PHOTOS, target_keys="all")
    assert want.ids == [im["id"] for im in coco["images"]] and ours.ids == list(range(len(pairs)))
    assert want.classes[:2] == ["c1", "c2"] and len(ours) == len(want) == len(pairs)
    for index in range(len(pairs)):
        torch.manual_seed(index)
        got_img, got = ours[index]
        torch.manual_seed(index)
        want_img, wanted = want[index]
        wanted["image_id"] = index
        _same_target(got, wanted)
        assert torch.equal(got_img, want_img)


def test_an_image_without_annotations_is_torchvisions(annotations, tmp_path):
    """Its target is ``{'image_id': id}``, as torchvision's wrapper makes it."""
    coco, pairs = _coco_pairs(annotations)
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] != coco["images"][1]["id"]]
    emptied = tmp_path / "instances.json"
    emptied.write_text(json.dumps(coco))
    (got_img, got) = DetectionList.from_json(emptied, root=PHOTOS)[1]
    (want_img, want) = _theirs(emptied, None)[1]
    assert got == want == {"image_id": coco["images"][1]["id"]}
    assert np.array_equal(np.asarray(got_img), np.asarray(want_img))
    assert DetectionList(paths=[PHOTOS / pairs[0][0]])[0][1] == {"image_id": 0}


def test_errors_name_what_is_wrong(annotations, tmp_path):
    _, pairs = _coco_pairs(annotations)
    with pytest.raises(ValueError, match="samples, or paths"):
        DetectionList(pairs, paths=["a.jpg"])
    with pytest.raises(ValueError, match="samples, or paths"):
        DetectionList()
    with pytest.raises(ValueError, match="2 paths but 1 targets"):
        DetectionList(paths=["a.jpg", "b.jpg"], targets=[[]])
    with pytest.raises(ValueError, match="1 files but 2 ids"):
        DetectionList([("a.jpg", [])], ids=[1, 2])
    with pytest.raises(TypeError, match="a.jpg: a target is a list of COCO annotation dicts"):
        DetectionList([("a.jpg", {"boxes": []})])
    with pytest.raises(ValueError, match="Target keys"):
        DetectionList([("a.jpg", [])], target_keys=("nope",))
    with pytest.raises(FileNotFoundError, match="missing.jpg"):
        DetectionList([(tmp_path / "missing.jpg", pairs[0][1])])[0]
    manifest = tmp_path / "bad.json"
    manifest.write_text(json.dumps({"files": []}))
    with pytest.raises(ValueError, match="bad.json: a JSON manifest is a list"):
        DetectionList.from_json(manifest)


def test_the_collates_refuse_what_is_not_a_batch_of_pairs():
    import torch

    from fastdecode.targets import collate, segmentation_collate

    with pytest.raises(TypeError, match="not iterable"):
        collate([1, 2])
    with pytest.raises(ValueError, match="not enough values to unpack"):
        segmentation_collate([])
    with pytest.raises(ValueError, match="too many values to unpack"):
        segmentation_collate([(torch.zeros(3, 2, 2), torch.zeros(2, 2), 1)] * 3)
