"""fd_raster (COCO masks at sampled rows and columns) without torch: known
masks, sampled equals full at those pixels, bounds refused with named errors.
Runs in the sanitizer build too (make test-sanitize runs tests/core); the
pycocotools comparisons are in tests/targets/test_coco.py."""

from __future__ import annotations

import numpy as np
import pytest

from fastdecode import _native
from fastdecode.errors import DecodeError


def _full(call, h, w):
    out = np.zeros((h, w), np.uint8)
    call(np.arange(h), np.arange(w), out)
    return out


def test_an_axis_aligned_square_is_its_pixels():
    # pycocotools' rule: the pixels whose centres the boundary encloses, x 2..5, y 1..3
    out = _full(lambda r, c, o: _native.raster_polygons([[2, 1, 6, 1, 6, 4, 2, 4]], 6, 8, r, c, o),
                6, 8)
    want = np.zeros((6, 8), np.uint8)
    want[1:4, 2:6] = 1
    assert np.array_equal(out, want)


def test_rle_runs_are_column_major():
    out = _full(lambda r, c, o: _native.raster_rle([1, 2, 3, 2], 2, 4, r, c, o), 2, 4)
    # flat column-major: 0 | 1 1 | 0 0 0 | 1 1
    assert out.T.reshape(-1).tolist() == [0, 1, 1, 0, 0, 0, 1, 1]


def test_a_compressed_string_round_trips():
    # pycocotools' encode of the 2 x 4 mask with (1, 0) and (0, 1) set is "125"
    assert _native.rle_from_string("125").tolist() == [1, 2, 5]
    # from the fourth count on, each is a delta on the one two before (rleFrString's m > 2)
    assert _native.rle_from_string("1313").tolist() == [1, 3, 1, 6]
    assert _native.rle_from_string(b"").tolist() == []


@pytest.mark.parametrize("seed", range(12))
def test_sampled_pixels_are_the_full_masks(seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(1, 50)), int(rng.integers(1, 50))
    polys = [rng.uniform(-3, max(h, w) + 3, 2 * int(rng.integers(3, 9))).tolist()
             for _ in range(int(rng.integers(1, 3)))]
    rows = np.sort(rng.integers(-1, h, 17))
    cols = rng.integers(-1, w, 13)
    for call in (lambda r, c, o: _native.raster_polygons(polys, h, w, r, c, o),
                 lambda r, c, o: _native.raster_rle(
                     rng.integers(0, 9, 12).astype(np.uint32), h, w, r, c, o)):
        state = rng.bit_generator.state
        full = _full(call, h, w)
        rng.bit_generator.state = state
        part = np.zeros((len(rows), len(cols)), np.uint8)
        call(rows, cols, part)
        want = full[np.maximum(rows, 0)][:, np.maximum(cols, 0)]
        want[rows < 0] = 0
        want[:, cols < 0] = 0
        assert np.array_equal(part, want)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda out: _native.raster_polygons([[0, 0, 1e9, 0, 5, 5]], 4, 4, np.arange(4), np.arange(4),
                                         out), ValueError, "beyond 1e8"),
    (lambda out: _native.raster_polygons([[0, 0, float("nan"), 0, 5, 5]], 4, 4, np.arange(4),
                                         np.arange(4), out), ValueError, "not finite"),
    (lambda out: _native.raster_polygons([[0, 0, 9e7, 0, 5, 9e7]], 4, 4, np.arange(4),
                                         np.arange(4), out), ValueError, "boundary of .* steps"),
    (lambda out: _native.raster_rle([3, 2], 4, 4, np.array([0, 2, 1, 3]), np.arange(4), out),
     ValueError, "decreasing"),
    (lambda out: _native.raster_rle([3, 2], 4, 4, np.arange(4), np.array([0, 1, 2, 4]), out),
     ValueError, "out of range"),
    (lambda out: _native.raster_rle([3, 2], 0, 4, np.arange(4), np.arange(4), out),
     ValueError, "empty image"),
    (lambda out: _native.raster_rle([3], 4, 4, np.arange(4), np.arange(4), out[:, :3]),
     ValueError, "out must be a writable C-contiguous uint8 array"),
    (lambda out: _native.rle_from_string("0o"), DecodeError, "truncated"),
    (lambda out: _native.rle_from_string("oooooooo"), DecodeError, "truncated"),
], ids=["huge", "nan", "too-many-steps", "rows-decreasing", "column-out", "empty", "out-shape",
        "truncated-string", "overlong-number"])
def test_bad_input_raises_a_named_error(call, error, match):
    with pytest.raises(error, match=match):
        call(np.zeros((4, 4), np.uint8))
