"""geometry's small public helpers: round_box (the stored image's integer box
nearest to the kept region) and PilResize (the resize half of a
RandomResizedCrop on a PIL image)."""

from __future__ import annotations

import pytest

from fastdecode.transforms.geometry import Geometry, PilResize, round_box


@pytest.mark.parametrize("geo, expected", [
    (Geometry.start(40, 60), (0, 0, 40, 60)),
    # a 20 x 30 crop at (10, 15), resampled to 10 x 10, of which rows 2-7 and columns 0-4 kept:
    # (10 + 2 * 2, 15 + 0 * 3, 5 * 2, 5 * 3)
    (Geometry((40, 60), (10, 15, 20, 30), (10, 10), (2, 0, 5, 5), (5, 5), (0, 0, 5, 5)),
     (14, 15, 10, 15)),
    # a fractional box rounds to the nearest pixels and stays inside the image, >= 1 pixel
    (Geometry((9, 9), (0, 0, 9, 9), (4, 4), (3, 3, 1, 1), (1, 1), (0, 0, 1, 1)), (7, 7, 2, 2)),
], ids=["whole", "resampled-crop", "fractional-edge"])
def test_round_box(geo, expected):
    assert round_box(geo) == expected


def test_pil_resize_resizes_and_names_its_filter():
    image = pytest.importorskip("PIL.Image")
    resize = PilResize((12, 20), image.BICUBIC)
    out = resize(image.new("RGB", (64, 48)))
    assert out.size == (20, 12)  # PIL sizes are (w, h)
    assert repr(resize) == "PilResize(size=(12, 20), filter=bicubic)"
