"""tests/targets: one torch thread, as in DataLoader workers; the generated data sets the
modules share (a COCO file and a VOC2012 tree over the shared photos)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.corpus import corpus_dir  # noqa: E402

PHOTOS = corpus_dir("photos")
COCO_FILES = sorted(PHOTOS.glob("*/*"))[:6] if PHOTOS else []
VOC_FILES = sorted(PHOTOS.glob("*/*.JPEG"))[:5] if PHOTOS else []


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """As in DataLoader workers (see tests/transforms/conftest.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def annotations(tmp_path_factory):
    """A generated COCO instances file over the first 6 photos (benchmarks/_coco_data.py)."""
    from benchmarks._coco_data import make_coco

    if not COCO_FILES:
        pytest.skip("shared corpus 'photos' absent")
    return make_coco(COCO_FILES, PHOTOS, tmp_path_factory.mktemp("coco") / "instances.json",
                     seed=3)


def _write_label(path, out):
    """A palette label PNG from a photo: its grey levels // 40, the top rows 255 (VOC's border)."""
    import PIL.Image

    with PIL.Image.open(path) as im:
        classes = (np.asarray(im.convert("L")) // 40).astype(np.uint8)
    classes[:3] = 255
    label = PIL.Image.fromarray(classes, "P")
    label.putpalette([v for c in range(256) for v in (c, 255 - c, (7 * c) % 256)])
    label.save(out)


@pytest.fixture
def write_label():
    """The label PNG writer the VOC tree uses, for trees of a test's own."""
    return _write_label


@pytest.fixture(scope="session")
def voc_root(tmp_path_factory):
    """A VOC2012 tree over 5 photos: JPEGs, label PNGs, detection XMLs, the train lists."""
    import PIL.Image

    if not VOC_FILES:
        pytest.skip("shared corpus 'photos' absent")
    root = tmp_path_factory.mktemp("voc")
    base = root / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation", "Annotations",
                "ImageSets/Main"):
        (base / sub).mkdir(parents=True)
    names = []
    for k, path in enumerate(VOC_FILES):
        name = f"2012_{k:06d}"
        shutil.copy(path, base / "JPEGImages" / f"{name}.jpg")
        _write_label(path, base / "SegmentationClass" / f"{name}.png")
        names.append(name)
        with PIL.Image.open(path) as im:
            w, h = im.size
        objects = "".join(
            f"<object><name>{cls}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
            f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for cls, (x0, y0, x1, y1) in [("dog", (5, 8, w // 2, h // 2)),
                                          ("person", (w // 3, h // 4, w - 3, h - 2)),
                                          ("cat", (k + 1, k + 2, k + 40, k + 30))][:2 + k % 2])
        (base / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename>{objects}</annotation>")
    for sub in ("Segmentation", "Main"):
        (base / "ImageSets" / sub / "train.txt").write_text("\n".join(names) + "\n")
    return root
