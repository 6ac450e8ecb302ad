"""_native.lut_to_float: the one-pass uint8 -> float32 table kernel behind
the fused ToTensor/Normalize tails (the tables are built in transforms)."""

from __future__ import annotations

import numpy as np
import pytest

from fastdecode import _native


@pytest.mark.parametrize("shape", [(3, 224, 224), (2, 3, 17, 5), (1, 1, 1), (3, 0, 4)],
                         ids=lambda s: "x".join(map(str, s)))
def test_lut_to_float_is_a_per_channel_lookup(shape):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, shape, dtype=np.uint8)
    lut = rng.normal(size=(shape[-3], 256)).astype(np.float32)
    want = lut[np.arange(shape[-3])[:, None, None], src]
    ours = _native.lut_to_float(src, lut)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, want)
    out = np.empty(shape, np.float32)
    assert _native.lut_to_float(src, lut, out=out) is out
    np.testing.assert_array_equal(out, want)


def test_lut_to_float_errors():
    src = np.zeros((3, 4, 4), np.uint8)
    lut = np.zeros((3, 256), np.float32)
    with pytest.raises(TypeError, match="src must be a uint8 numpy array"):
        _native.lut_to_float(src.astype(np.float32), lut)
    with pytest.raises(ValueError, match=r"src must have shape \(\.\.\., C, H, W\)"):
        _native.lut_to_float(np.zeros((4, 4), np.uint8), lut)
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        _native.lut_to_float(np.zeros((3, 4, 8), np.uint8)[:, :, ::2], lut)
    with pytest.raises(ValueError, match="out has shape"):
        _native.lut_to_float(src, lut, out=np.empty((3, 4, 5), np.float32))
    with pytest.raises(TypeError, match="out must be a float32 numpy array"):
        _native.lut_to_float(src, lut, out=np.empty((3, 4, 4), np.float64))
    with pytest.raises(ValueError, match="out must be writable and C-contiguous"):
        _native.lut_to_float(src, lut, out=np.empty((3, 4, 8), np.float32)[:, :, ::2])
    with pytest.raises(ValueError, match="out must not overlap src"):
        buf = np.zeros(3 * 4 * 4 * 4, np.uint8)
        _native.lut_to_float(buf[:48].reshape(3, 4, 4), lut,
                             out=buf.view(np.float32).reshape(3, 4, 4))
    with pytest.raises(ValueError, match="lut must have shape"):
        _native.lut_to_float(src, np.zeros((3, 255), np.float32))
    with pytest.raises(ValueError, match="the table has 3"):
        _native.lut_to_float(np.zeros((2, 4, 4), np.uint8), lut)
