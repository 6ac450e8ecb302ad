"""Inputs the fuzzer found (tests/fuzz), minimized, each replayed exactly as
the fuzzer ran it and checked against the documented outcome.

tests/regressions/<target>-<name>.bin is the raw fuzz input of that target:
for the option-taking targets its last 12 bytes are the option trailer
(tests/fuzz/targets.py decodes it). Every file there must be listed below.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastdecode as fd

from fuzz import targets

HERE = Path(__file__).resolve().parent

REGRESSIONS = HERE / "regressions"

# file: (marks, what the API must raise, message pattern, what was found)
CASES = {
    "read_header-qoi-bomb.bin": (
        [], fd.ImageTooLargeError, "exceeds limit",
        "a 13-byte QOI header declaring 3.9 G pixels: DecompressionBombError"),
    "read_header-png-truncated-file-read.bin": (
        [], fd.DecodeError, "Truncated File Read",
        "a PNG cut inside a chunk: OSError"),
    "read_header-png-truncated-ihdr.bin": (
        [], fd.DecodeError, "Truncated IHDR chunk",
        "a PNG with an empty IHDR: ValueError (not a DecodeError)"),
    "read_header-ftex-closed-file.bin": (
        [], fd.DecodeError, "closed file",
        "an FTEX header: the plugin closes the file, getexif() then raises ValueError"),
    "read_header-iptc-field-length.bin": (
        [], fd.DecodeError, "illegal field length",
        "4 bytes Pillow takes for IPTC/NAA: OSError"),
    "decode_image-gif-bomb.bin": (
        [], fd.ImageTooLargeError, "exceeds limit",
        "a 22-byte GIF declaring 1.8 G pixels: DecompressionBombError"),
    "decode_image-lossless-jpeg-cut.bin": (
        [], fd.DecodeError, "Unsupported JPEG process|Truncated File Read",
        "6 bytes of a lossless JPEG: the native decoder says unsupported, the "
        "Pillow retry raised OSError instead of re-raising the native error"),
    "decode_image-bufr-stub-jfif.bin": (
        [], fd.UnsupportedFormatError, "BUFR: Pillow identifies the format but has no decoder",
        "'BUFR' then a JFIF stream: Pillow's BUFR stub plugin claims it and reports 0x0; "
        "the planner's ValueError (not a DecodeError), a ZeroDivisionError from a dataset item"),
}


def call(target: str, data: bytes):
    """The API call the fuzz target makes for this input."""
    if target == "read_header":
        return lambda: fd.read_header(data)
    image, trailer = targets.split(data)
    opts = targets.options(image, trailer, jpeg_only=target != "decode_bmp")
    fn = {"decode_jpeg": fd.decode_jpeg, "decode_bmp": fd.decode_bmp,
          "decode_image": fd.decode_image}[target]
    return lambda: fn(image, **opts.kwargs)


@pytest.mark.parametrize(
    "name", [pytest.param(n, id=n.removesuffix(".bin"), marks=m) for n, (m, *_) in CASES.items()])
def test_regression(name):
    _, error, match, _ = CASES[name]
    target = name.split("-", 1)[0]
    data = (REGRESSIONS / name).read_bytes()
    with pytest.raises(error, match=match):
        call(target, data)()
    targets.run(target, data)  # the fuzz oracle's verdict: no finding


def test_png_broken_after_its_header():
    """A PNG whose chunk type after IHDR is garbage: read_header raised
    SyntaxError (found by the fuzzer), because Pillow's PNG getexif decodes
    the whole image; now the header reads without the pixels and the
    decode is the DecodeError."""
    data = (REGRESSIONS / "read_header-png-broken-chunk.bin").read_bytes()
    info = fd.read_header(data)
    assert (info.format, info.width, info.height) == ("png", 127, 64)
    with pytest.raises(fd.DecodeError, match="broken PNG file"):
        fd.decode_image(data)
    targets.run("read_header", data)


def test_tall_rle_bmp_resized_decodes():
    """libFuzzer timeout (10 s under ASan + coverage): 150 bytes of RLE4 BMP
    declaring 8 x 262145 pixels, whose end-of-bitmap comes early (the rest is
    index 0, as in Pillow), resized to 145 x 156. Not a hang: the cost is the
    resampler's horizontal pass over all 262145 rows (1.8 s in the release
    build), i.e. proportional to the declared size, which max_pixels bounds.
    The fuzz targets now cap max_pixels at 1 M pixels."""
    data = (REGRESSIONS / "decode_bmp-rle4-tall-resize.bin").read_bytes()
    image, _ = targets.split(data)
    info = fd.read_header(image)
    assert (info.width, info.height) == (8, 262145)
    out = fd.decode_bmp(image, size=(145, 156), max_pixels=1 << 22)
    assert out.shape == (145, 156, 3)
    with pytest.raises(fd.ImageTooLargeError, match="8x262145 = 2097160 pixels"):
        fd.decode_bmp(image, size=(145, 156), max_pixels=1 << 20)
    targets.run("decode_bmp", data)  # as the fuzzer runs it now: no finding


def test_gray_crop_into_a_7_byte_out_is_right():
    """Issue 27's "a 7-byte out= was accepted": a 1 x 7 gray crop (CHW,
    flipped) of an 8x4 palette BMP is 7 bytes, so the oracle's fixed
    bytearray(7) was the right size and the decode into it correct; the
    oracle now passes a buffer one byte short of the result, refused."""
    data = (REGRESSIONS / "decode_bmp-gray-crop-7-byte-out.bin").read_bytes()
    image, trailer = targets.split(data)
    opts = targets.options(image, trailer, jpeg_only=False)
    assert opts.out == "wrong" and opts.kwargs["crop"] == (0, 0, 1, 7)
    want = fd.decode_bmp(image, **opts.kwargs)
    assert want.shape == (1, 1, 7)
    out = bytearray(7)
    assert fd.decode_bmp(image, out=out, **opts.kwargs) is out
    assert bytes(out) == want.tobytes()
    with pytest.raises(ValueError, match=r"out has 6 bytes, expected 7 bytes \(shape \(1, 1, 7\)"):
        fd.decode_bmp(image, out=bytearray(6), **opts.kwargs)
    targets.run("decode_bmp", data)  # the oracle now: no finding


def _short_outs(n: int):
    """Every form of a buffer one byte short of ``n`` bytes."""
    import numpy as np
    import torch

    return {
        "bytearray": bytearray(n - 1),
        "memoryview": memoryview(bytearray(n - 1)),
        "offset-view": memoryview(bytearray(n + 1))[2:],
        "numpy-flat": np.zeros(n - 1, np.uint8),
        "numpy-sliced": np.zeros(n + 4, np.uint8)[5:],
        "tensor-numpy": torch.zeros(n - 1, dtype=torch.uint8).numpy(),
    }


SHORT_FORMS = list(_short_outs(2))


@pytest.mark.parametrize("form", SHORT_FORMS)
@pytest.mark.parametrize("fn", ["decode_bmp", "decode_image-png"])
def test_a_short_out_is_refused_in_every_form(fn, form):
    """The binding's size check holds for each buffer form the oracle might
    pass (native BMP, and the Pillow fallback's copy into ``out``)."""
    import io

    from PIL import Image

    if fn == "decode_bmp":
        data = (REGRESSIONS / "decode_bmp-gray-crop-7-byte-out.bin").read_bytes()[:-targets.TRAILER]
        call = fd.decode_bmp
    else:
        buf = io.BytesIO()
        Image.new("RGB", (7, 1), (1, 2, 3)).save(buf, "PNG")
        data, call = buf.getvalue(), fd.decode_image
    kw = {"mode": "L", "layout": "CHW", "crop": (0, 0, 1, 7)}
    assert call(data, **kw).nbytes == 7
    with pytest.raises(ValueError, match=r"out has 6 bytes, expected 7 bytes"):
        call(data, out=_short_outs(7)[form], **kw)


def _first_decodes_poisoned() -> None:
    """Leaves the thread's decoder buffers holding another image's rows."""
    from helpers.jpeg_samples import encode

    fd.decode_jpeg(encode(300, 400), crop=(3, 5, 200, 300), scale=0.5)


@pytest.mark.parametrize("source", ["fuzz-input", "cjpeg-2x4", "cjpeg-4x2"])
def test_scaled_crop_of_2x4_sampling_is_the_slice(source, tmp_path):
    """Issue 27's campaign, decode_jpeg: a scaled crop of a JPEG whose luma is
    sampled 2x4 (or 4x2) gave other pixels than the same slice of the full
    decode (libjpeg-turbo 2.1's jpeg_crop_scanline; on a fresh decoder,
    uninitialized ones). Such files now decode the whole width and slice."""
    if source == "fuzz-input":
        image, trailer = targets.split(
            (REGRESSIONS / "decode_jpeg-h2v4-scaled-crop.bin").read_bytes())
        targets.run("decode_jpeg", image + trailer)
    else:
        import subprocess

        from PIL import Image

        from helpers.jpeg_samples import CJPEG, natural_image

        if CJPEG is None:
            pytest.skip("cjpeg (libjpeg-turbo-progs) writes 2x4 sampling; Pillow cannot")
        Image.fromarray(natural_image(149, 227)).save(tmp_path / "in.ppm")
        sample = source.split("-")[1]
        image = subprocess.run([CJPEG, "-sample", f"{sample},1x1,1x1", str(tmp_path / "in.ppm")],
                               check=True, capture_output=True).stdout
    for scale in (0.25, 0.5, 0.75):
        for mode in ("RGB", "L"):
            _first_decodes_poisoned()
            m = round(scale * 8)
            got = fd.decode_jpeg(image, crop=(2, 156, 6, 40), scale=scale, mode=mode)
            full = fd.decode_jpeg(image, scale=scale, mode=mode)
            want = full[2 * m // 8: -(-8 * m // 8), 156 * m // 8: -(-196 * m // 8)]
            assert got.shape == want.shape and (got == want).all(), (scale, mode)


def test_progressive_crop_keeps_the_smoothing_context():
    """Issue 27's `make fuzz` reruns, decode_jpeg: a crop of a 37 x 19 gray
    progressive JPEG whose scans leave coefficients incomplete differed by 1
    from the slice of the full decode, at every scale: libjpeg's block
    smoothing reads a 5 x 5 block neighbourhood, the window kept one iMCU of
    margin. A progressive crop now keeps two."""
    image, trailer = targets.split(
        (REGRESSIONS / "decode_jpeg-progressive-gray-smoothing-crop.bin").read_bytes())
    targets.run("decode_jpeg", image + trailer)
    for scale in (0.25, 0.5, 0.625, 1.0):
        m = round(scale * 8)
        full = fd.decode_jpeg(image, mode="L", scale=scale)
        got = fd.decode_jpeg(image, mode="L", scale=scale, crop=(7, 18, 2, 5))
        want = full[7 * m // 8: -(-9 * m // 8), 18 * m // 8: -(-23 * m // 8)]
        assert got.shape == want.shape and (got == want).all(), scale


def test_every_regression_file_is_listed():
    listed = set(CASES) | {"decode_bmp-rle4-tall-resize.bin", "decode_bmp-gray-crop-7-byte-out.bin",
                           "read_header-png-broken-chunk.bin", "decode_jpeg-h2v4-scaled-crop.bin",
                           "decode_jpeg-progressive-gray-smoothing-crop.bin"}
    assert sorted(p.name for p in REGRESSIONS.glob("*.bin")) == sorted(listed)
    assert all(name.split("-", 1)[0] in targets.TARGETS for name in listed)


FAST_CROP_GRID = """
import random, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/core"]
import numpy as np
import fastdecode as fd
from test_jpeg import edge_phase_boxes, expected_crop, sample
size = (88, 120)
variants = [(s, c, m, f, w)
            for s, c in [("4:2:0", "baseline"), ("4:2:2", "baseline"), ("4:4:0", "baseline"),
                         ("4:2:0", "progressive")]
            for m in (8, 6, 3) for f in (False, True) for w in ("columns", "rows", "narrow")]
images = {(s, c): sample(s, c, size=size, seed=3) for s, c in {(v[0], v[1]) for v in variants}}
order = random.Random(1)
bad = 0
for _ in range(4):
    order.shuffle(variants)
    for s, c, m, f, w in variants:
        full = fd.decode_jpeg(images[(s, c)], scale=m / 8, fast=f)
        for box in edge_phase_boxes(*size, w):
            got = fd.decode_jpeg(images[(s, c)], scale=m / 8, crop=box, fast=f)
            bad += not np.array_equal(got, expected_crop(full, box, m))
# strict crops of truncated copies: the decode skips the rows below the crop
# on the same decompressor (end_decode) and must raise as a full decode does
for i, (s, c, m, f, w) in enumerate(variants):
    data = images[(s, c)]
    box = edge_phase_boxes(*size, "rows")[i * 7 % 1024]
    cut = data[:order.randrange(len(data) // 3, len(data) - 2)]
    try:
        fd.decode_jpeg(cut, scale=m / 8, crop=box, fast=True, strict=True)
        bad += 1
    except fd.FastDecodeError:
        pass
print("bad", bad)
"""


@pytest.mark.slow  # ~45 s of one process: make test-full
@pytest.mark.no_sanitize
def test_fast_crops_after_other_decodes_on_one_thread_are_exact():
    """libjpeg-turbo 2.1.5's jpeg_skip_scanlines with merged upsampling
    (fast=True) read an earlier image's freed pool through this thread's
    reused decompressor (valgrind: a use-after-free; a segfault or garbage
    rows, depending on the order of decodes before it): the crop grid of
    test_jpeg, in an order that showed it, then strict crops of truncated
    copies (whose decode skips the rest of the scan on the same object), in a
    child process (a crash is a failure here, not the end of the run)."""
    tests = str(Path(__file__).resolve().parents[1])
    # the images' order in memory follows a set's: hash seed 0 crashed before the fix
    done = subprocess.run([sys.executable, "-c", FAST_CROP_GRID, tests], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert done.returncode == 0 and done.stdout.strip() == "bad 0", done.stdout + done.stderr
