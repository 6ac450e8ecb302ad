"""The slow path, visible (issue 53 item 5): a dataset counts its decodes by
path (native or Pillow) per format, says so in ``explain()``, warns once when
more than half of them take Pillow, and ``fastdecode doctor ROOT`` reports a
tree's shares per format and path."""

from __future__ import annotations

import warnings

import pytest
import torchvision.transforms as T
from PIL import Image

from fastdecode import _decode_paths
from fastdecode.cli.doctor import JobOptions, diagnose
from fastdecode.datasets import FastImageFolder

CHAIN = T.Compose([T.Resize(20), T.ToTensor()])


def tree(root, formats, count):
    (root / "a").mkdir()
    for i in range(count):
        fmt = formats[i % len(formats)]
        Image.new("RGB", (40, 30), (i % 256, 2, 3)).save(root / "a" / f"{i:03d}.{fmt.lower()}",
                                                        fmt)
    return root


@pytest.mark.parametrize("transform", [CHAIN, None], ids=["fused", "no-transform"])
def test_counts_per_format_and_path(tmp_path, transform):
    ds = FastImageFolder(tree(tmp_path, ["PNG", "TIFF", "JPEG", "WEBP"], 8), transform=transform)
    for i in range(len(ds)):
        ds[i]
    # without a transform no header is read: a format the C core lacks is 'other'
    slow = "tiff" if transform is not None else "other"
    assert ds.decode_stats() == {
        "native": 6, "pillow": 2,
        "formats": {"jpeg": {"native": 2, "pillow": 0}, "png": {"native": 2, "pillow": 0},
                    slow: {"native": 0, "pillow": 2}, "webp": {"native": 2, "pillow": 0}}}
    if transform is not None:
        assert ds.explain().splitlines()[-1] == \
            "decodes so far: 2 of 8 decodes (25 %) took the Pillow path (tiff 2)"


def test_warns_once_when_most_decodes_take_pillow(tmp_path):
    count = _decode_paths.PILLOW_WARN_AFTER + 10
    ds = FastImageFolder(tree(tmp_path, ["TIFF", "TIFF", "PNG"], count), transform=CHAIN)
    with pytest.warns(RuntimeWarning, match=r"took the Pillow path \(tiff \d+\)") as record:
        for i in range(len(ds)):
            ds[i]
    assert len([w for w in record if "Pillow path" in str(w.message)]) == 1
    assert ds.decode_stats()["pillow"] > ds.decode_stats()["native"]


def test_no_warning_for_a_native_tree(tmp_path):
    ds = FastImageFolder(tree(tmp_path, ["PNG", "WEBP", "JPEG"], _decode_paths.PILLOW_WARN_AFTER),
                         transform=CHAIN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(len(ds)):
            ds[i]
    assert ds.explain().splitlines()[-1] == \
        f"decodes so far: all {_decode_paths.PILLOW_WARN_AFTER} native"


def test_datasets_count_their_own(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a = FastImageFolder(tree(tmp_path / "x", ["PNG"], 3), transform=CHAIN)
    b = FastImageFolder(tree(tmp_path / "y", ["TIFF"], 2), transform=CHAIN)
    for i in range(3):
        a[i]
        if i < 2:
            b[i]
    assert (a.decode_stats()["native"], a.decode_stats()["pillow"]) == (3, 0)
    assert (b.decode_stats()["native"], b.decode_stats()["pillow"]) == (0, 2)


def test_decodes_outside_an_item_are_no_datasets(tmp_path):
    """A decode after an item (the user's own decode_image, another
    library's) is not counted as the dataset's, nor can it trip its warning."""
    from fastdecode import decode_image

    ds = FastImageFolder(tree(tmp_path, ["PNG"], 2), transform=CHAIN)
    ds[0]
    tiff = tmp_path / "loose.tiff"
    Image.new("RGB", (8, 8)).save(tiff)
    for _ in range(_decode_paths.PILLOW_WARN_AFTER + 1):
        decode_image(tiff.read_bytes())
    assert ds.decode_stats() == {"native": 1, "pillow": 0,
                                 "formats": {"png": {"native": 1, "pillow": 0}}}


@pytest.mark.parametrize("transform", [CHAIN, None], ids=["fused", "no-transform"])
def test_batches_count_their_decodes(tmp_path, transform):
    """A batch (__getitems__, the planned path that renders its slots)
    counts each sample's decode once."""
    ds = FastImageFolder(tree(tmp_path, ["PNG", "JPEG", "TIFF"], 6), transform=transform)
    ds.__getitems__(list(range(6)))
    stats = ds.decode_stats()
    assert (stats["native"], stats["pillow"]) == (4, 2)


@pytest.mark.parametrize("formats,status,share", [(["PNG", "JPEG", "WEBP", "TIFF"], "ok", 75),
                                                  (["TIFF", "TIFF", "PNG"], "warn", 33)],
                         ids=["mostly-native", "mostly-pillow"])
def test_doctor_reports_the_shares(tmp_path, formats, status, share):
    root = tree(tmp_path, formats, 12)
    report = diagnose(JobOptions(num_workers=0, root=root, sample=12))
    check = next(c for c in report.checks if c.name == "formats")
    assert check.status == status
    assert f"{share} % decode natively" in check.finding
    assert "tiff/pillow" in check.finding
    assert report.facts["formats"]["sampled"] == 12
