"""Native WebP (src_c/fd_webp.c, libwebp): Pillow's pixels for every conformance
vector, libwebp's crop and scale, typed errors for bad files (issue 53).

* ``../shared/corpus/webp`` (libwebp's test vectors: lossy, lossless, alpha),
  each file x {decode RGB, decode L}: Pillow's ``convert()`` pixels, or a
  typed error where Pillow refuses. Skipped when the corpus is absent. The
  fused chains: tests/transforms/test_formats_fused.py.
* Crops at every parity: libwebp's crop (widened by a margin, to an even
  origin) gives the slice of the full decode.
* Reduced scales (libwebp's rescaler): the C planner's shape, and close to
  Pillow's reduction of the same crop.
* Animations: Pillow's first frame through decode_image; truncated and
  corrupt files: typed errors.

Also run against the ASan/UBSan build by `make test-sanitize`.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd
from fastdecode import _native

from helpers.png_webp import corpus_files, photos, pillow_pixels

pytestmark = pytest.mark.skipif("webp" not in _native.NATIVE_FORMATS,
                                reason="built without libwebp: WebP decodes through Pillow")

FILES = corpus_files("webp", ".webp")
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("path", FILES)
def test_corpus_decode(path, mode):
    data = path.read_bytes()
    ref = pillow_pixels(data, mode)
    if ref is None:
        with pytest.raises(fd.DecodeError, match=r"\w"):
            fd.decode_image(data, mode=mode)
        return
    np.testing.assert_array_equal(_native.decode_webp(data, mode=mode), ref)
    np.testing.assert_array_equal(fd.decode_image(data, mode=mode), ref)


@pytest.mark.parametrize("parity", ["even", "odd-left", "odd-top", "odd-both"])
@pytest.mark.parametrize("path", FILES[:: max(1, len(FILES) // 12)])
def test_crop_is_the_slice_of_the_full_decode(path, parity):
    data = path.read_bytes()
    full = _native.decode_webp(data)
    h, w = full.shape[:2]
    top = ((h // 4) & ~1) + (parity in ("odd-top", "odd-both"))
    left = ((w // 3) & ~1) + (parity in ("odd-left", "odd-both"))
    ch, cw = max(1, min(h - top, h // 2 + 1)), max(1, min(w - left, w // 2 + 1))
    got = _native.decode_webp(data, crop=(top, left, ch, cw), flip=True, layout="CHW")
    want = full[top:top + ch, left:left + cw][:, ::-1].transpose(2, 0, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scale", [0.5, 0.25, 0.125])
@pytest.mark.parametrize("path", FILES[:: max(1, len(FILES) // 8)])
def test_reduced_scale_is_the_planners_shape(path, scale):
    data = path.read_bytes()
    h, w = _native.decode_webp(data).shape[:2]
    crop = (h // 5, w // 7, max(1, h // 2), max(1, w // 2))
    for kw in ({}, {"crop": crop}):
        got = _native.decode_webp(data, scale=scale, **kw)
        assert got.shape == _native.plan_shape(h, w, scale=scale, **kw).shape


@pytest.mark.parametrize("scale", [0.5, 0.25])
def test_reduced_scale_is_close_to_pillow_on_photos(webp_photos, scale):
    """libwebp's rescaler (not Pillow's filter: exact=False's trade, as the DCT
    scale is for JPEG) of a crop: within a few levels of Pillow's box
    reduction of the same crop, on photos (on a one-pixel checkerboard it is
    not: its fixed-point weights make 85 of a 0/255 average)."""
    data = webp_photos["lossy"][0]
    full = _native.decode_webp(data)
    h, w = full.shape[:2]
    plan = _native.plan_shape(h, w, scale=scale, crop=(64, 96, 200, 240))
    got = _native.decode_webp(data, scale=scale, crop=(64, 96, 200, 240))
    top, left, rh, rw = plan.region
    m = round(scale * 8)
    box = (left * 8 / m, top * 8 / m, (left + rw) * 8 / m, (top + rh) * 8 / m)
    ref = np.asarray(Image.fromarray(full).resize((rw, rh), Image.Resampling.BOX, box=box))
    assert np.abs(got.astype(int) - ref).mean() < 3


@pytest.mark.parametrize("scale", [0.5, 0.25])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_reduced_scale_keeps_position_at_the_edges(webp_photos, index, scale):
    """A crop down to the right and bottom edges of a picture whose size is
    no multiple of 8/M: the region's last scaled pixel stands for pixels
    past the edge (as libjpeg's padding has them). libwebp's rescaler gets
    only the whole scaled pixels and the last is repeated; stretching all of
    them over the crop put the far side up to half a source pixel off (a 37 dB
    RandomResizedCrop(64) on a 375-wide photo, fuse's default mode)."""
    data = webp_photos["lossy"][index]
    full = _native.decode_webp(data)
    h, w = full.shape[:2]
    crop = (1, 1, h - 1, w - 1)
    plan = _native.plan_shape(h, w, scale=scale, crop=crop)
    got = _native.decode_webp(data, scale=scale, crop=crop).astype(int)
    assert got.shape == plan.shape
    top, left, rh, rw = plan.region
    m = round(scale * 8)
    pad_h, pad_w = (top + rh) * 8 // m - h, (left + rw) * 8 // m - w
    padded = np.pad(full, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    box = (left * 8 / m, top * 8 / m, (left + rw) * 8 / m, (top + rh) * 8 / m)
    ref = np.asarray(Image.fromarray(padded).resize((rw, rh), Image.Resampling.BOX, box=box))
    # the last row and column are the repeated pixel
    error = np.abs(got - ref)[:-1, :-1].mean()
    # stretched: the crop's whole span down to the edges reduced to the region
    stretched = np.asarray(Image.fromarray(full).resize(
        (rw, rh), Image.Resampling.BOX, box=(left * 8 // m, top * 8 // m, w, h))).astype(int)
    assert error < 1.5 and error < 0.85 * np.abs(stretched - ref)[:-1, :-1].mean()


def _animation() -> bytes:
    frames = [Image.new("RGB", (20, 12), c) for c in ((250, 0, 0), (0, 250, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    return buf.getvalue()


def test_animation_is_pillows_first_frame():
    data = _animation()
    with pytest.raises(fd.UnsupportedFormatError, match="animated WebP"):
        _native.decode_webp(data)
    np.testing.assert_array_equal(fd.decode_image(data), pillow_pixels(data))
    assert fd.decode_image(data)[0, 0].tolist() == [250, 0, 0]


@pytest.fixture(scope="module")
def lossy():
    return photos("WEBP", 1, quality=80)[0]


@pytest.mark.parametrize("cut", [12, 30, 100, 1000, -10])
def test_truncated(lossy, cut):
    with pytest.raises(fd.DecodeError, match="WebP"):
        fd.decode_image(lossy[:cut])


def test_corrupt_frame_header(lossy):
    data = bytearray(lossy)
    start = data.index(b"\x9d\x01\x2a")  # the VP8 key frame's start code
    data[start:start + 3] = b"\x00\x00\x00"
    with pytest.raises(fd.DecodeError, match="WebP"):
        _native.decode_webp(bytes(data))


def test_header_and_limits(lossy):
    info = fd.read_header(lossy)
    assert (info.format, info.channels, info.color_space) == ("webp", 3, "rgb")
    with pytest.raises(fd.ImageTooLargeError, match="max_pixels"):
        fd.decode_image(lossy, max_pixels=info.width * info.height - 1)


def test_flat_lossless_bomb_is_refused_by_the_work_budget():
    """4000 x 4000 of one colour is a few hundred bytes of lossless WebP."""
    buf = io.BytesIO()
    Image.new("RGB", (4000, 4000), (3, 4, 5)).save(buf, "WEBP", lossless=True)
    with pytest.raises(fd.ImageTooLargeError, match="max_work_per_byte=64"):
        fd.decode_image(buf.getvalue(), max_work_per_byte=64)


@pytest.fixture(scope="module")
def webp_photos():
    return {"lossy": photos("WEBP", 3, quality=85), "lossless": photos("WEBP", 2, lossless=True)}
