"""Inputs the fuzzer found (tests/fuzz), minimized, each replayed exactly as
the fuzzer ran it and checked against the documented outcome.

tests/regressions/<target>-<name>.bin is the raw fuzz input of that target:
for the option-taking targets its last 12 bytes are the option trailer
(tests/fuzz/targets.py decodes it). Every file there must be listed below.
"""

from __future__ import annotations

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
    "read_header-png-broken-chunk.bin": (
        [], fd.DecodeError, "broken PNG file",
        "a PNG whose chunk type is garbage: SyntaxError"),
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


def test_every_regression_file_is_listed():
    listed = set(CASES) | {"decode_bmp-rle4-tall-resize.bin"}
    assert sorted(p.name for p in REGRESSIONS.glob("*.bin")) == sorted(listed)
    assert all(name.split("-", 1)[0] in targets.TARGETS for name in listed)
