"""Inputs that are not plain images, at the decode layer: each gives its
documented outcome (fastdecode/_fallback.py's module doc) from read_header,
decode_image and read_image, a typed FastDecodeError or the pixels
``PIL.Image.open(f).convert(mode)`` gives; never ValueError, OSError,
ZeroDivisionError or a Pillow warning. The cases: tests/helpers/odd_images.py.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd
from fastdecode import _fallback

from helpers.odd_images import ANIMATED, DECODES, ERRORS, FRAMES, ODD, params, pil_reference

MODES = [pytest.param("RGB", id="RGB"), pytest.param("L", id="L")]
# options that must not get around an error (each plans before it decodes)
OPTIONS = [
    pytest.param({}, id="default"),
    pytest.param({"size": (5, 7)}, id="size"),
    pytest.param({"scale": 0.5}, id="scale"),
    pytest.param({"mode": "L", "layout": "CHW", "flip": True}, id="L-CHW-flip"),
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("name", params(ERRORS))
def test_decode_image_raises_the_typed_error(name, options):
    odd = ODD[name]
    with pytest.raises(odd.error, match=odd.match) as info:
        fd.decode_image(odd.make(), **options)
    assert isinstance(info.value, fd.FastDecodeError)


@pytest.mark.parametrize("name", params(ERRORS))
def test_read_image_names_the_file(name, tmp_path):
    odd = ODD[name]
    path = tmp_path / f"{name}{odd.suffix}"
    path.write_bytes(odd.make())
    with pytest.raises(odd.error, match=odd.match) as info:
        fd.read_image(path)
    assert info.value.path == str(path) and str(path) in str(info.value)


@pytest.mark.parametrize("name", params(ERRORS))
def test_read_header_is_typed_or_gives_a_positive_size(name):
    """A header either has pixels to decode, or is the decode's error: no
    0x0 header for a loader to divide by (issue 27's ZeroDivisionError)."""
    try:
        info = fd.read_header(ODD[name].make())
    except fd.FastDecodeError:
        return
    assert info.width > 0 and info.height > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", params(DECODES))
def test_odd_but_valid_decodes_as_pil_converts_it(name, mode):
    data = ODD[name].make()
    got = fd.decode_image(data, mode=mode)
    want = pil_reference(data, mode)
    assert got.shape == want.shape and np.array_equal(got, want)
    info = fd.read_header(data)
    assert (info.height, info.width) == got.shape[:2]


@pytest.mark.parametrize("name", params(DECODES))
def test_odd_but_valid_takes_every_option(name):
    """A 1-pixel image resized up, a crop of a 16-bit one, a reduced scale."""
    data = ODD[name].make()
    height, width = fd.decode_image(data).shape[:2]
    assert fd.decode_image(data, size=(9, 4), layout="CHW").shape == (3, 9, 4)
    assert fd.decode_image(data, crop=(0, 0, 1, 1), mode="L").shape == (1, 1, 1)
    assert fd.decode_image(data, scale=0.5).shape == (-(-height // 2), -(-width // 2), 3)


@pytest.mark.parametrize("name", params(ANIMATED))
def test_an_animation_gives_its_first_frame(name):
    got = fd.decode_image(ODD[name].make())
    assert got.shape == (12, 16, 3)
    assert (got == np.array(FRAMES[0], np.uint8)).all()


def test_palette_with_byte_transparency_decodes_without_pillow_warning():
    """Pillow's convert warns ("should be converted to RGBA images"); the
    decode gives convert's pixels without it (pytest runs warnings as errors)."""
    data = ODD["png-P-trns-bytes"].make()
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "P" and isinstance(im.info["transparency"], bytes)
        with pytest.warns(UserWarning, match="Transparency expressed in bytes"):
            im.convert("RGB")
    assert np.array_equal(fd.decode_image(data), pil_reference(data))


class _Opened:
    """What a third-party Pillow plugin might hand back: a size Pillow's own
    plugins refuse (they never report one that is not positive)."""

    format = "FAKE"

    def __init__(self, size):
        self.size = size
        self.closed = False

    def close(self):
        self.closed = True


@pytest.mark.parametrize("size, error, match", [
    pytest.param((0, 3), fd.DecodeError, "FAKE image of 0x3 pixels: nothing to decode", id="0x3"),
    pytest.param((5, -1), fd.DecodeError, "FAKE image of 5x-1 pixels", id="negative"),
    pytest.param((1 << 32, 1), fd.ImageTooLargeError, "a side above 32 bits", id="33-bit"),
])
def test_a_size_the_planner_cannot_take_is_typed(monkeypatch, size, error, match):
    opened = _Opened(size)
    monkeypatch.setattr(Image, "open", lambda fp: opened)
    with pytest.raises(error, match=match):
        fd.decode_image(b"FAKE" + bytes(16))
    assert opened.closed
    with pytest.raises(error, match=match):
        _fallback.read_header(b"FAKE" + bytes(16))


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_read_header_never_decodes_a_png():
    """Pillow's PNG getexif decodes the whole image to look for EXIF after
    it (past max_pixels and the work budget; a 2000x2000 PNG's header cost
    its full decode): the header of an IHDR-only PNG of 10000 x 10000 reads,
    the decode is refused by the budget."""
    data = ODD["png-bomb-warning-ignored"].make()
    info = fd.read_header(data)
    assert (info.width, info.height, info.orientation) == (10000, 10000, 1)
    with pytest.raises(fd.ImageTooLargeError, match="above max_work_per_byte"):
        fd.decode_image(data)


def _with_orientation(fmt: str, orientation: int) -> bytes:
    im = Image.fromarray((np.arange(5 * 7 * 3).reshape(5, 7, 3) * 5 % 256).astype(np.uint8))
    exif = im.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, fmt, exif=exif, **({"lossless": True} if fmt == "WEBP" else {}))
    return buf.getvalue()


@pytest.mark.parametrize("orientation", range(1, 9), ids=lambda o: f"orientation{o}")
@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "TIFF"])
def test_the_header_orientation_is_the_decodes(fmt, orientation):
    """read_header's size and orientation describe what decode(exif=True)
    gives, which is PIL's exif_transpose; a TIFF comes oriented from Pillow
    itself (its size too), so its header says 1."""
    from PIL import ImageOps

    data = _with_orientation(fmt, orientation)
    info = fd.read_header(data)
    got = fd.decode_image(data, exif=True)
    with Image.open(io.BytesIO(data)) as im:
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert np.array_equal(got, want)
    assert info.orientation == (1 if fmt == "TIFF" else orientation)
    swapped = info.orientation >= 5
    assert (info.width, info.height) == ((got.shape[0], got.shape[1]) if swapped
                                         else (got.shape[1], got.shape[0]))
