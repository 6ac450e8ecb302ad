"""One file, one verdict: a crop decode that stops before the last row
rejects what a full decode rejects (a scan truncated below the crop, a
missing EOI) and accepts what it accepts, for every crop box."""

from __future__ import annotations

import pytest

import fastdecode as fd

from helpers.jpeg_samples import CJPEG, encode

HEIGHT, WIDTH = 240, 320


def _file(coding: str, damage: str) -> bytes:
    data = encode(HEIGHT, WIDTH, subsampling="4:2:0", coding=coding, seed=3)
    assert data.endswith(b"\xff\xd9")
    if damage == "no-eoi":
        return data[:-2]
    if damage == "truncated":  # cut inside the scan data, well below the top rows
        return data[: len(data) * 3 // 4]
    if damage == "trailing-zeros":  # valid, with padding after EOI (the EOI is not last)
        return data + bytes(4096)
    return data


DAMAGE = ["valid", "no-eoi", "truncated", "trailing-zeros"]
CODINGS = ["baseline", "restart", "progressive",
           pytest.param("arithmetic", marks=pytest.mark.skipif(CJPEG is None, reason="no cjpeg"))]
BOXES = {
    "top-strip": (0, 0, 16, WIDTH),
    "top-left": (0, 0, 64, 64),
    "upper-middle": (40, 100, 80, 120),
    "center": (80, 80, 80, 160),
    "lower-middle": (150, 30, 60, 90),
    "above-last-row": (0, 0, HEIGHT - 1, WIDTH),
    "bottom-right": (200, 280, 40, 40),
    "whole": (0, 0, HEIGHT, WIDTH),
}
ROUTES = {
    "crop": {},
    "crop-size": {"size": (56, 56)},
    "crop-scale-1/2": {"scale": 0.5},
    "crop-strict": {"strict": True},
}


def verdict(data: bytes, **options) -> str:
    try:
        fd.decode_jpeg(data, **options)
    except fd.DecodeError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "decodes"


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
@pytest.mark.parametrize("box", BOXES.values(), ids=BOXES.keys())
@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("coding", CODINGS)
def test_crop_verdict_is_the_full_decodes(coding, damage, box, route):
    data = _file(coding, damage)
    strict = {"strict": True} if route.get("strict") else {}
    assert verdict(data, crop=box, **route) == verdict(data, **strict)


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("damage, want", [("valid", "decodes"), ("trailing-zeros", "decodes"),
                                          ("no-eoi", "truncated"), ("truncated", "truncated")])
def test_full_verdicts(coding, damage, want):
    """The reference the crops are held to (so the matrix cannot pass by
    accepting or rejecting everything)."""
    data = _file(coding, damage)
    if want == "decodes":
        assert verdict(data) == "decodes"
    else:
        with pytest.raises(fd.DecodeError, match=r"^truncated JPEG: Premature end of JPEG file$"):
            fd.decode_jpeg(data, crop=BOXES["top-left"])
        with pytest.raises(fd.DecodeError, match=r"^truncated JPEG: Premature end of JPEG file$"):
            fd.decode_image(data, crop=BOXES["top-left"], size=(32, 32))
