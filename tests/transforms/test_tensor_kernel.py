"""The ToTensor + Normalize kernels against torchvision."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

from fastdecode import _native  # noqa: E402

from helpers.fusion import (  # noqa: E402
    MEAN,
    STD,
)

# --------------------------------------------------------------------------
# The ToTensor + Normalize kernel.


@pytest.mark.parametrize("shape", [(3, 224, 224), (2, 3, 17, 5), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_normalize_kernel_matches_torchvision(shape):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, shape, dtype=np.uint8)
    channels = shape[-3]
    mean, std = MEAN[:channels], STD[:channels]
    ours = _native.normalize_u8(src, mean, std)
    theirs = T.Normalize(mean, std)(torch.from_numpy(src).float().div(255)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    out = np.empty(shape, np.float32)
    assert _native.normalize_u8(src, mean, std, out=out) is out
    np.testing.assert_array_equal(out, ours)
    np.testing.assert_array_equal(_native.normalize_u8(src), src.astype(np.float32) / 255)


def test_normalize_kernel_errors():
    src = np.zeros((3, 4, 4), np.uint8)
    with pytest.raises(TypeError, match="src must be a uint8 numpy array"):
        _native.normalize_u8(src.astype(np.float32), MEAN, STD)
    with pytest.raises(ValueError, match=r"src must have shape \(\.\.\., C, H, W\)"):
        _native.normalize_u8(np.zeros((4, 4), np.uint8), MEAN, STD)
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        _native.lut_to_float(np.zeros((3, 4, 8), np.uint8)[:, :, ::2],
                             np.zeros((3, 256), np.float32))
    with pytest.raises(ValueError, match="std evaluated to zero"):
        _native.normalize_u8(src, MEAN, [1, 0, 1])
    with pytest.raises(ValueError, match="mean must have 1 or 3 values"):
        _native.normalize_u8(src, [0.5, 0.5], STD)
    with pytest.raises(ValueError, match="out has shape"):
        _native.normalize_u8(src, MEAN, STD, out=np.empty((3, 4, 5), np.float32))
    with pytest.raises(TypeError, match="out must be a float32 numpy array"):
        _native.normalize_u8(src, MEAN, STD, out=np.empty((3, 4, 4), np.float64))
    with pytest.raises(ValueError, match="out must be writable and C-contiguous"):
        _native.normalize_u8(src, MEAN, STD, out=np.empty((3, 4, 8), np.float32)[:, :, ::2])
    with pytest.raises(ValueError, match="out must not overlap src"):
        buf = np.zeros(3 * 4 * 4 * 4, np.uint8)
        _native.lut_to_float(buf[:48].reshape(3, 4, 4), np.zeros((3, 256), np.float32),
                             out=buf.view(np.float32).reshape(3, 4, 4))
    with pytest.raises(ValueError, match="lut must have shape"):
        _native.lut_to_float(src, np.zeros((3, 255), np.float32))
    with pytest.raises(ValueError, match="the table has 3"):
        _native.lut_to_float(np.zeros((2, 4, 4), np.uint8), np.zeros((3, 256), np.float32))
