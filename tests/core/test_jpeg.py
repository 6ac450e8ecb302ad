"""decode_jpeg / read_header: parity with Pillow, exact crops, options, bad input.

Also run against the ASan/UBSan build by `make test` (test-sanitize).
"""

from __future__ import annotations

import io
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image, ImageOps

import fastdecode as fd

from helpers.corpus import CORPUS, corpus_params, read_manifest
from helpers.jpeg_samples import CJPEG, encode, natural_image, pillow_rgb, with_exif_orientation
from helpers.mutate import flip_bits

SUBSAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"]
CODINGS = ["baseline", "progressive", "optimized", "restart", "arithmetic"]
NEEDS_CJPEG = pytest.mark.skipif(CJPEG is None, reason="cjpeg (libjpeg-turbo-progs) not installed")


def sample(subsampling="4:2:0", coding="baseline", size=(61, 93), quality=90, seed=0):
    return encode(*size, subsampling=subsampling, quality=quality, coding=coding, seed=seed)


def needs_cjpeg(subsampling, coding):
    return subsampling in ("4:4:0", "4:1:1") or coding in ("restart", "arithmetic")


def variant_params(pairs):
    return [
        pytest.param(s, c, id=f"{s}-{c}", marks=[NEEDS_CJPEG] if needs_cjpeg(s, c) else [])
        for s, c in pairs
    ]


# ---------------------------------------------------------------------------
# Parity with Pillow's open + convert('RGB') (what ImageFolder returns)


@pytest.mark.parametrize(
    "subsampling,coding", variant_params([(s, c) for s in SUBSAMPLINGS for c in CODINGS])
)
def test_default_decode_equals_pillow(subsampling, coding):
    data = sample(subsampling, coding)
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


@pytest.mark.parametrize("quality", [pytest.param(q, id=f"q{q}") for q in (50, 75, 90, 100)])
@pytest.mark.parametrize("subsampling", [pytest.param(s, id=s) for s in ("4:4:4", "4:2:0")])
def test_qualities_equal_pillow(quality, subsampling):
    data = sample(subsampling, quality=quality, seed=quality)
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


SIZES = [(1, 1), (7, 13), (3, 4095), (13, 7), (1500, 2000)]


@pytest.mark.parametrize("size", [pytest.param(s, id=f"{s[1]}x{s[0]}") for s in SIZES])
@pytest.mark.parametrize("subsampling", [pytest.param(s, id=s) for s in ("4:2:0", "4:2:2", "gray")])
def test_sizes_equal_pillow(size, subsampling):
    data = sample(subsampling, size=size)
    out = fd.decode_jpeg(data)
    assert out.shape == (*size, 3)
    np.testing.assert_array_equal(out, pillow_rgb(data))


PHOTOS = read_manifest("photos")


@pytest.mark.parametrize("row", corpus_params("photos", PHOTOS, "file"))
def test_photos_equal_pillow(row):
    data = (CORPUS / "photos" / row["file"]).read_bytes()
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


# jpeg-edge files whose corrupt scans libjpeg-turbo 2.1.5 (the system library)
# and 3.2 (bundled in Pillow's wheel) repair differently: the difference sits
# in the damaged blocks only. Documented in DESIGN.md.
VERSION_DIVERGENT = {
    "jpeg-decoder/crashtest/imagetestsuite/8e5e74dbf9b68a322fbb9512db837329.jpg",
    "jpeg-decoder/crashtest/imagetestsuite/f6b4389c3cf0f5997b2e5a4b905aea8d.jpg",
}
EDGE = read_manifest("jpeg-edge")


def edge_params(expected):
    return corpus_params(f"jpeg-edge-{expected}",
                         [r for r in EDGE if r["expected"] == expected], "file")


def pillow_or_error(data):
    try:
        return pillow_rgb(data)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow: "malformed MPO file"
@pytest.mark.parametrize("row", edge_params("decodes"))
def test_edge_decodes_like_pillow(row):
    data = (CORPUS / "jpeg-edge" / row["file"]).read_bytes()
    ours = fd.decode_jpeg(data)
    ref = pillow_rgb(data)
    assert ours.shape == ref.shape
    if row["file"] in VERSION_DIVERGENT:
        differing = np.any(ours != ref, axis=-1)
        assert differing.mean() < 0.01, "divergence spread beyond the damaged blocks"
    else:
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("row", edge_params("must-raise"))
def test_edge_must_raise(row):
    data = (CORPUS / "jpeg-edge" / row["file"]).read_bytes()
    with pytest.raises(fd.DecodeError, match=r"\w"):
        fd.decode_image(data)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("row", edge_params("questionable"))
def test_edge_questionable_pillow_pixels_or_typed_error(row):
    """Either Pillow's pixels or a DecodeError; never anything else."""
    data = (CORPUS / "jpeg-edge" / row["file"]).read_bytes()
    ref = pillow_or_error(data)
    try:
        ours = fd.decode_image(data)
    except fd.DecodeError:
        assert ref is None or not data.startswith(b"\xff\xd8\xff") or b"\xff\xc3" in data, (
            "Pillow decodes this file; only lossless JPEG (SOF3, not in libjpeg-turbo 2.x) "
            "may be refused"
        )
        return
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


# ---------------------------------------------------------------------------
# Scaling and min_size


@pytest.mark.parametrize("denom", [pytest.param(d, id=f"1/{d}") for d in (2, 4, 8)])
@pytest.mark.parametrize("subsampling", [pytest.param(s, id=s) for s in ("4:4:4", "4:2:0", "gray")])
def test_scale_equals_pillow_draft(denom, subsampling):
    data = sample(subsampling, size=(203, 301))
    with Image.open(io.BytesIO(data)) as im:
        im.draft(im.mode, (im.width // denom, im.height // denom))
        assert im.width == -(-301 // denom)
        ref = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(fd.decode_jpeg(data, scale=1 / denom), ref)


@pytest.mark.parametrize("m", [pytest.param(m, id=f"{m}of8") for m in range(1, 9)])
def test_scale_shape_is_libjpeg_rounding(m):
    out = fd.decode_jpeg(sample(size=(203, 301)), scale=m / 8)
    assert out.shape == (-(-203 * m // 8), -(-301 * m // 8), 3)


@pytest.mark.parametrize(
    "min_size,expected_m",
    [
        pytest.param((100, 100), 4, id="half-fits"),
        pytest.param((26, 38), 1, id="eighth-fits"),
        pytest.param((27, 10), 2, id="eighth-one-row-short"),
        pytest.param((203, 301), 8, id="full"),
        pytest.param((500, 500), 8, id="larger-than-image"),
        pytest.param((150, 10), 6, id="three-quarters"),
    ],
)
def test_min_size_picks_smallest_scale(min_size, expected_m):
    data = sample(size=(203, 301))
    np.testing.assert_array_equal(fd.decode_jpeg(data, min_size=min_size),
                                  fd.decode_jpeg(data, scale=expected_m / 8))


def test_min_size_applies_to_the_crop():
    data = sample(size=(203, 301))
    crop = (10, 20, 100, 120)
    out = fd.decode_jpeg(data, min_size=(50, 60), crop=crop)
    np.testing.assert_array_equal(out, fd.decode_jpeg(data, scale=0.5, crop=crop))


# ---------------------------------------------------------------------------
# Crops are exact slices of the scaled decode


def crop_boxes(h, w, seed, n=12):
    rng = np.random.default_rng(seed)
    boxes = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (h // 3, 0, 5, w), (0, w // 2, h, 3)]
    for _ in range(n):
        top, left = int(rng.integers(0, h)), int(rng.integers(0, w))
        boxes.append((top, left, int(rng.integers(1, h - top + 1)), int(rng.integers(1, w - left + 1))))
    return boxes


def expected_crop(full, box, m):
    top, left, h, w = box
    return full[top * m // 8: -(-(top + h) * m // 8), left * m // 8: -(-(left + w) * m // 8)]


@pytest.mark.parametrize("m", [pytest.param(m, id=f"{m}of8") for m in range(1, 9)])
@pytest.mark.parametrize(
    "subsampling,coding",
    variant_params([(s, "baseline") for s in SUBSAMPLINGS] + [("4:2:0", "progressive"),
                                                             ("4:2:2", "restart")]),
)
def test_crop_equals_slice(subsampling, coding, m):
    size = (149, 211)
    data = sample(subsampling, coding, size=size)
    full = fd.decode_jpeg(data, scale=m / 8)
    for box in crop_boxes(*size, seed=m):
        np.testing.assert_array_equal(
            fd.decode_jpeg(data, scale=m / 8, crop=box), expected_crop(full, box, m), err_msg=str(box)
        )


@pytest.mark.parametrize("subsampling", [pytest.param(s, id=s) for s in ("4:2:0", "4:2:2")])
def test_crop_equals_slice_in_fast_mode(subsampling):
    data = sample(subsampling, size=(149, 211))
    full = fd.decode_jpeg(data, fast=True)
    for box in crop_boxes(149, 211, seed=7):
        np.testing.assert_array_equal(fd.decode_jpeg(data, fast=True, crop=box),
                                      expected_crop(full, box, 8))


def test_crop_of_large_image_equals_slice():
    data = sample("4:2:0", size=(1500, 2000))
    full = fd.decode_jpeg(data)
    for box in [(700, 900, 224, 224), (0, 1800, 1500, 200), (1400, 0, 100, 2000)]:
        np.testing.assert_array_equal(fd.decode_jpeg(data, crop=box), expected_crop(full, box, 8))


def edge_phase_boxes(h, w, sweep):
    """Crops whose edges take every position modulo two iMCUs (32 pixels),
    where the decoder's widening to iMCU columns and skipping of rows must
    still leave the upsampler the neighbours of a full decode; 'narrow' is
    1-7 columns wide at every offset, where libjpeg picks its upsampler anew."""
    if sweep == "columns":
        return [(20, left, 40, w - left - gap) for left in range(32) for gap in range(32)]
    if sweep == "rows":
        return [(top, 30, h - top - gap, 50) for top in range(32) for gap in range(32)]
    return [(10, left, 30, width) for left in range(w) for width in range(1, 8) if left + width <= w]


@pytest.mark.parametrize("sweep", [pytest.param(s, id=s) for s in ("columns", "rows", "narrow")])
@pytest.mark.parametrize("fast", [pytest.param(False, id="fancy"), pytest.param(True, id="fast")])
# 6/8 upsamples chroma; at 3/8 the IDCT does, unless fast=True (merged upsampling).
@pytest.mark.parametrize("m", [pytest.param(m, id=f"{m}of8") for m in (8, 6, 3)])
@pytest.mark.parametrize(
    "subsampling,coding",
    variant_params([("4:2:0", "baseline"), ("4:2:2", "baseline"), ("4:4:0", "baseline"),
                    ("4:2:0", "progressive")]),
)
def test_crop_edges_at_every_imcu_phase(subsampling, coding, m, fast, sweep):
    size = (88, 120)
    data = sample(subsampling, coding, size=size, seed=3)
    full = fd.decode_jpeg(data, scale=m / 8, fast=fast)
    for box in edge_phase_boxes(*size, sweep):
        got = fd.decode_jpeg(data, scale=m / 8, crop=box, fast=fast)
        expected = expected_crop(full, box, m)
        if not np.array_equal(got, expected):  # one readable failure, not a 1,000-line diff
            np.testing.assert_array_equal(got, expected, err_msg=str(box))


@pytest.mark.parametrize(
    "crop",
    [
        pytest.param((0, 0, 62, 10), id="too-tall"),
        pytest.param((0, 90, 10, 4), id="too-wide"),
        pytest.param((61, 0, 1, 1), id="starts-below"),
    ],
)
def test_crop_outside_image_is_value_error(crop):
    with pytest.raises(ValueError, match="outside the 93x61 image"):
        fd.decode_jpeg(sample(), crop=crop)


@pytest.mark.parametrize(
    "crop,match",
    [
        pytest.param((-1, 0, 5, 5), "top, left >= 0", id="negative"),
        pytest.param((0, 0, 0, 5), "positive size", id="empty"),
        pytest.param((0, 0, 5), "must have 4 values", id="three-values"),
    ],
)
def test_crop_bad_values(crop, match):
    with pytest.raises(ValueError, match=match):
        fd.decode_jpeg(sample(), crop=crop)


# ---------------------------------------------------------------------------
# Flip, layout, mode, out=


@pytest.mark.parametrize("crop", [pytest.param(None, id="whole"), pytest.param((5, 7, 30, 41), id="crop")])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_flip_and_chw_are_rearrangements(mode, crop):
    data = sample(size=(61, 93))
    base = fd.decode_jpeg(data, mode=mode, crop=crop)
    np.testing.assert_array_equal(fd.decode_jpeg(data, mode=mode, crop=crop, flip=True), base[:, ::-1])
    np.testing.assert_array_equal(fd.decode_jpeg(data, mode=mode, crop=crop, layout="CHW"),
                                  base.transpose(2, 0, 1))
    np.testing.assert_array_equal(
        fd.decode_jpeg(data, mode=mode, crop=crop, layout=fd.Layout.CHW, flip=True),
        base[:, ::-1].transpose(2, 0, 1),
    )


@pytest.mark.parametrize(
    "subsampling,coding", variant_params([(s, "baseline") for s in SUBSAMPLINGS] + [("4:2:0", "progressive")])
)
def test_mode_l_equals_pillow_convert_l(subsampling, coding):
    """'L' is Pillow's convert('L'), not libjpeg's Y channel (up to 13 apart)."""
    data = sample(subsampling, coding)
    with Image.open(io.BytesIO(data)) as im:
        ref = np.asarray(im.convert("L"))
    np.testing.assert_array_equal(fd.decode_jpeg(data, mode="L")[:, :, 0], ref)


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_out_is_filled_and_returned(layout):
    data = sample()
    expected = fd.decode_jpeg(data, layout=layout)
    out = np.zeros_like(expected)
    assert fd.decode_jpeg(data, layout=layout, out=out) is out
    np.testing.assert_array_equal(out, expected)


def test_out_accepts_a_batch_slot_and_bytearray():
    data = sample()
    batch = np.zeros((2, 61, 93, 3), np.uint8)
    fd.decode_jpeg(data, out=batch[1])
    np.testing.assert_array_equal(batch[1], fd.decode_jpeg(data))
    assert not batch[0].any()
    raw = bytearray(61 * 93 * 3)
    fd.decode_jpeg(data, out=raw)
    assert bytes(raw) == fd.decode_jpeg(data).tobytes()


@pytest.mark.parametrize(
    "make_out,error,match",
    [
        pytest.param(lambda: np.zeros((61, 93, 4), np.uint8), ValueError,
                     r"out has 22692 bytes, expected 17019 bytes \(shape \(61, 93, 3\)", id="size"),
        pytest.param(lambda: np.zeros((61, 93, 3), np.float32), ValueError, "dtype uint8", id="dtype"),
        pytest.param(lambda: np.zeros((93, 61, 3), np.uint8), ValueError,
                     r"out has shape \(93, 61, 3\), expected \(61, 93, 3\)", id="transposed"),
        pytest.param(lambda: np.zeros((61, 93, 3), np.uint8)[:, ::-1], ValueError, "C-contiguous",
                     id="non-contiguous"),
        pytest.param(lambda: bytes(61 * 93 * 3), ValueError, "writable", id="read-only-bytes"),
        pytest.param(lambda: [0] * 10, TypeError, "buffer protocol", id="not-a-buffer"),
    ],
)
def test_out_errors_say_expected_vs_got(make_out, error, match):
    with pytest.raises(error, match=match):
        fd.decode_jpeg(sample(), out=make_out())


def test_read_only_array_out_is_rejected():
    out = np.zeros((61, 93, 3), np.uint8)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        fd.decode_jpeg(sample(), out=out)


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(bytearray, id="bytearray"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(lambda d: np.frombuffer(d, np.uint8), id="numpy"),
    ],
)
def test_any_bytes_like_input(wrap):
    data = sample()
    np.testing.assert_array_equal(fd.decode_jpeg(wrap(data)), pillow_rgb(data))


def test_mmap_input(tmp_path):
    import mmap

    path = tmp_path / "a.jpg"
    path.write_bytes(sample())
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        np.testing.assert_array_equal(fd.decode_jpeg(m), pillow_rgb(sample()))


# ---------------------------------------------------------------------------
# CMYK / YCCK


def cmyk_jpeg():
    rgb = Image.fromarray(natural_image(40, 56, 3))
    buf = io.BytesIO()
    rgb.convert("CMYK").save(buf, "JPEG", quality=95)
    return buf.getvalue()


def test_cmyk_header_and_rgb_equal_pillow():
    data = cmyk_jpeg()
    info = fd.read_header(data)
    assert (info.channels, info.color_space) == (4, "cmyk")
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


def test_cmyk_l_is_pillow_luma_of_rgb():
    data = cmyk_jpeg()
    with Image.open(io.BytesIO(data)) as im:
        ref = np.asarray(im.convert("RGB").convert("L"))
    np.testing.assert_array_equal(fd.decode_jpeg(data, mode="L")[:, :, 0], ref)


def test_cmyk_crop_flip_chw():
    data = cmyk_jpeg()
    full = fd.decode_jpeg(data)
    out = fd.decode_jpeg(data, crop=(3, 5, 20, 30), flip=True, layout="CHW")
    np.testing.assert_array_equal(out, full[3:23, 5:35][:, ::-1].transpose(2, 0, 1))


YCCK_FILES = [r for r in EDGE if "adobe_transform=2" in r.get("features(parsed)", "")
              and "4comp" in r.get("features(parsed)", "") and r["expected"] == "decodes"]


@pytest.mark.parametrize("row", corpus_params("jpeg-edge-ycck", YCCK_FILES, "file"))
def test_ycck_equals_pillow_and_reports_ycck(row):
    data = (CORPUS / "jpeg-edge" / row["file"]).read_bytes()
    assert fd.read_header(data).color_space == "ycck"
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


# ---------------------------------------------------------------------------
# EXIF orientation


ORIENTATIONS = [pytest.param(o, id=f"orientation{o}") for o in range(1, 9)]


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_exif_applies_orientation_like_pillow(orientation):
    data = with_exif_orientation(sample("4:2:0", size=(37, 58)), orientation)
    assert fd.read_header(data).orientation == orientation
    with Image.open(io.BytesIO(data)) as im:
        ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    np.testing.assert_array_equal(fd.decode_jpeg(data, exif=True), ref)
    # default: ignore it, as torchvision's ImageFolder loader does
    np.testing.assert_array_equal(fd.decode_jpeg(data), pillow_rgb(data))


@pytest.mark.parametrize("m", [pytest.param(m, id=f"{m}of8") for m in (8, 4, 3)])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_exif_crop_flip_is_slice_of_oriented(orientation, m):
    data = with_exif_orientation(sample("4:2:0", size=(37, 58)), orientation)
    full = fd.decode_jpeg(data, exif=True, scale=m / 8)
    h, w = fd.decode_jpeg(data, exif=True).shape[:2]
    for box in crop_boxes(h, w, seed=orientation, n=5):
        out = fd.decode_jpeg(data, exif=True, scale=m / 8, crop=box, flip=True, layout="CHW")
        np.testing.assert_array_equal(out, expected_crop(full, box, m)[:, ::-1].transpose(2, 0, 1))


# ---------------------------------------------------------------------------
# Header


@pytest.mark.parametrize(
    "subsampling,coding", variant_params([(s, "baseline") for s in SUBSAMPLINGS] + [("4:2:0", "progressive")])
)
def test_read_header_fields(subsampling, coding):
    info = fd.read_header(sample(subsampling, coding, size=(61, 93)))
    assert info == fd.ImageInfo(
        format="jpeg", width=93, height=61, channels=1 if subsampling == "gray" else 3,
        color_space="gray" if subsampling == "gray" else "ycbcr", subsampling=subsampling,
        progressive=coding == "progressive", orientation=1,
    )


def test_read_header_of_fallback_format():
    buf = io.BytesIO()
    Image.fromarray(natural_image(9, 11)).save(buf, "PNG")
    info = fd.read_header(buf.getvalue())
    assert (info.format, info.width, info.height, info.channels) == ("png", 11, 9, 3)


# ---------------------------------------------------------------------------
# Bad input: only typed errors, never a crash or a hang


@pytest.mark.parametrize(
    "data,error,match",
    [
        pytest.param(b"", fd.DecodeError, "[Ee]mpty", id="empty"),
        pytest.param(b"\x00" * 100, fd.UnsupportedFormatError, "Not a JPEG file", id="zeros"),
        pytest.param(b"GIF89a" + bytes(50), fd.UnsupportedFormatError, "Not a JPEG", id="gif-magic"),
        pytest.param(b"\xff\xd8\xff\xd9", fd.DecodeError, r"\w", id="soi-eoi"),
    ],
)
def test_garbage_raises_typed_error(data, error, match):
    with pytest.raises(error, match=match):
        fd.decode_jpeg(data)


TRUNCATION_CASES = [
    pytest.param(s, c, id=f"{s}-{c}")
    for s, c in [("4:2:0", "baseline"), ("4:4:4", "progressive"), ("gray", "baseline")]
]


@pytest.mark.parametrize("subsampling,coding", TRUNCATION_CASES)
def test_truncated_at_every_offset_raises_decode_error(subsampling, coding):
    data = sample(subsampling, coding, size=(24, 40))
    for cut in range(0, len(data) - 2):
        with pytest.raises(fd.DecodeError):
            fd.decode_jpeg(data[:cut])


@pytest.mark.parametrize("cut", [pytest.param(n, id=f"minus{n}") for n in (1, 2, 3, 8)])
def test_truncated_tail_agrees_with_pillow(cut):
    """Pillow decodes or refuses a file cut near its end; so do we."""
    data = sample()[:-cut]
    ref = pillow_or_error(data)
    if ref is None:
        with pytest.raises(fd.DecodeError, match="truncated"):
            fd.decode_jpeg(data)
    else:
        np.testing.assert_array_equal(fd.decode_jpeg(data), ref)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in range(4)])
def test_bit_flips_give_pixels_or_typed_error(seed):
    rng = np.random.default_rng(seed)
    data = sample("4:2:0", "progressive" if seed % 2 else "baseline", size=(40, 56))
    for _ in range(60):
        try:
            out = fd.decode_jpeg(flip_bits(data, rng, 3))
        except fd.DecodeError:
            continue
        assert out.dtype == np.uint8 and out.ndim == 3


def sof_with_size(data: bytes, height: int, width: int) -> bytes:
    i = data.index(b"\xff\xc0")
    return data[: i + 5] + struct.pack(">HH", height, width) + data[i + 9:]


def test_huge_declared_size_is_image_too_large():
    data = sof_with_size(sample(), 65500, 65500)
    with pytest.raises(fd.ImageTooLargeError, match="65500x65500 = 4290250000 pixels"):
        fd.decode_jpeg(data)
    assert fd.read_header(data)[1:3] == (65500, 65500)


def test_max_pixels_is_checked_before_decoding():
    with pytest.raises(fd.ImageTooLargeError, match="above max_pixels=5000"):
        fd.decode_jpeg(sample(), max_pixels=5000)
    assert fd.decode_jpeg(sample(), max_pixels=None).shape == (61, 93, 3)
    assert issubclass(fd.ImageTooLargeError, fd.DecodeError)


def test_undefined_huffman_table_after_reuse_is_error():
    """A reused decoder must not lend the previous file's tables."""
    data = sample()
    fd.decode_jpeg(sample("4:4:4"))
    stripped = bytearray()
    pos = 2
    stripped += data[:2]
    while pos < len(data):
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2: pos + 4])[0]
        if marker == 0xDA:
            stripped += data[pos:]
            break
        if marker not in (0xC4, 0xDB):  # drop DHT and DQT
            stripped += data[pos: pos + 2 + length]
        pos += 2 + length
    with pytest.raises(fd.DecodeError, match="not defined|Bogus"):
        fd.decode_jpeg(bytes(stripped))


def test_extraneous_bytes_pass_unless_strict():
    data = sample()
    i = data.index(b"\xff\xda")
    damaged = data[:i] + b"\x00\x00\x00" + data[i:]
    np.testing.assert_array_equal(fd.decode_jpeg(damaged), pillow_rgb(damaged))
    with pytest.raises(fd.DecodeError, match="extraneous bytes.*strict mode"):
        fd.decode_jpeg(damaged, strict=True)


def test_too_many_scans_is_refused():
    data = sample(coding="progressive")
    i = data.index(b"\xff\xda")
    j = data.index(b"\xff\xd9")
    # repeat the first scan (its header and data) far beyond the scan limit
    k = data.index(b"\xff", data.index(b"\xff\xda") + 2 + struct.unpack(">H", data[i + 2:i + 4])[0])
    while data[k + 1] == 0 or 0xD0 <= data[k + 1] <= 0xD7:
        k = data.index(b"\xff", k + 2)
    scan = data[i:k]
    bomb = data[:i] + scan * 1100 + data[j:]
    with pytest.raises(fd.DecodeError, match="more than 1000 scans"):
        fd.decode_jpeg(bomb)


# ---------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        pytest.param({"scale": 0.3}, ValueError, "scale must be M/8", id="scale-not-eighths"),
        pytest.param({"scale": 2}, ValueError, "scale must be M/8", id="scale-above-1"),
        pytest.param({"scale": "half"}, ValueError, "scale must be M/8", id="scale-str"),
        pytest.param({"scale": 0.5, "min_size": (8, 8)}, ValueError, "not both", id="scale-and-min"),
        pytest.param({"min_size": (0, 8)}, ValueError, "positive", id="min-size-zero"),
        pytest.param({"mode": "RGBA"}, ValueError, "mode must be 'RGB' or 'L'", id="mode"),
        pytest.param({"layout": "NHWC"}, ValueError, "layout must be 'HWC' or 'CHW'", id="layout"),
        pytest.param({"crop": "top"}, TypeError, "tuple of 4 ints", id="crop-str"),
        pytest.param({"max_pixels": -1}, ValueError, "max_pixels", id="max-pixels"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        fd.decode_jpeg(sample(), **kwargs)


@pytest.mark.parametrize("data", [pytest.param("a string", id="str"), pytest.param(3, id="int")])
def test_non_bytes_input_is_type_error(data):
    with pytest.raises(TypeError, match="bytes-like"):
        fd.decode_jpeg(data)


def test_fast_mode_is_close_to_accurate():
    data = sample(size=(149, 211))
    fast = fd.decode_jpeg(data, fast=True).astype(float)
    mse = np.mean((fast - fd.decode_jpeg(data)) ** 2)
    assert 10 * np.log10(255**2 / max(mse, 1e-9)) > 30


# ---------------------------------------------------------------------------
# Threads


def test_threads_give_identical_results():
    datas = [sample(s, c, size=(120, 160), seed=i)
             for i, (s, c) in enumerate([("4:2:0", "baseline"), ("4:4:4", "progressive"),
                                         ("gray", "baseline"), ("4:2:2", "optimized")])]
    crops = [None, (10, 10, 50, 60)]
    serial = [fd.decode_jpeg(d, crop=c) for d in datas for c in crops]
    barrier = threading.Barrier(4)

    def work(_):
        barrier.wait()
        return [[fd.decode_jpeg(d, crop=c) for d in datas for c in crops] for _ in range(10)]

    with ThreadPoolExecutor(4) as pool:
        for rounds in pool.map(work, range(4)):
            for results in rounds:
                for got, want in zip(results, serial):
                    np.testing.assert_array_equal(got, want)


def test_info_reports_running_library():
    info = fd.info()
    assert info["libjpeg_turbo"][0].isdigit()
    assert isinstance(info["simd"], bool)
    assert info["version"] == fd.__version__
    assert set(info) == {"version", "libjpeg_turbo", "simd", "libspng", "libwebp", "native"}
    assert info["native"][:2] == ["jpeg", "bmp"]  # always built; png/webp where found
    for lib, fmt in (("libspng", "png"), ("libwebp", "webp")):
        assert (info[lib] is not None) == (fmt in info["native"]), lib
        assert info[lib] is None or info[lib][0].isdigit(), info[lib]


@pytest.mark.skipif(os.environ.get("FASTDECODE_EXPECT_SANITIZED") != "1",
                    reason="only in the ASan/UBSan run (make test-sanitize)")
def test_sanitizer_run_uses_the_sanitized_extension():
    import ctypes

    import fastdecode._native as native

    assert "asan-pkg" in native.__file__
    assert hasattr(ctypes.CDLL(None), "__asan_init")
