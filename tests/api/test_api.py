"""decode_image / read_image: format dispatch, the Pillow fallback, file errors."""

from __future__ import annotations

import ast
import errno
import inspect
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd
from fastdecode import api
from fastdecode._formats import NATIVE
from fastdecode._options import BMP_OPTIONS, DEFAULTS, DecodeOptions

from helpers.jpeg_samples import natural_image, pillow_rgb, sample_jpeg


def encoded(fmt: str, size=(45, 67), mode="RGB") -> bytes:
    arr = natural_image(*size, seed=11)
    im = Image.fromarray(arr).convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt)
    return buf.getvalue()


# The formats Pillow decodes: PNG and WebP are native where the build found
# libspng / libwebp (the format table says; tests/core/test_png.py and
# test_webp.py hold them to Pillow's pixels), Pillow's otherwise.
FALLBACK_FORMATS = [pytest.param(f, id=f.lower()) for f in ("PNG", "WEBP", "TIFF", "GIF")
                    if f.lower() not in NATIVE]


@pytest.mark.parametrize("fmt", FALLBACK_FORMATS)
def test_fallback_formats_equal_pillow(fmt):
    data = encoded(fmt)
    with Image.open(io.BytesIO(data)) as im:
        ref = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(fd.decode_image(data), ref)
    assert fd.read_header(data).format == fmt.lower()


@pytest.mark.parametrize("fmt", FALLBACK_FORMATS)
def test_fallback_options_mean_what_they_mean_for_jpeg(fmt):
    data = encoded(fmt)
    full = fd.decode_image(data)
    crop = (5, 9, 30, 40)
    got = fd.decode_image(data, crop=crop, flip=True, layout="CHW")
    np.testing.assert_array_equal(got, full[5:35, 9:49][:, ::-1].transpose(2, 0, 1))
    out = np.empty((1, 30, 40), np.uint8)
    fd.decode_image(data, mode="L", crop=crop, layout="CHW", out=out)
    with Image.open(io.BytesIO(data)) as im:
        np.testing.assert_array_equal(out[0], np.asarray(im.convert("L"))[5:35, 9:49])
    half = fd.decode_image(data, scale=0.5)
    assert half.shape == (23, 34, 3)
    resized = fd.decode_image(data, crop=crop, size=(16, 20))
    np.testing.assert_array_equal(resized, fd._native.resize(full, (16, 20), box=(9, 5, 49, 35)))


def test_fallback_errors_are_typed():
    with pytest.raises(fd.UnsupportedFormatError, match="unrecognized image format"):
        fd.decode_image(b"definitely not an image")
    gif = encoded("GIF")  # a format Pillow decodes in every build
    with pytest.raises(fd.DecodeError, match="cannot decode GIF"):
        fd.decode_image(gif[: len(gif) // 2])
    with pytest.raises(fd.ImageTooLargeError, match="above max_pixels=100"):
        fd.decode_image(gif, max_pixels=100)
    with pytest.raises(ValueError, match="outside the 67x45 image"):
        fd.decode_image(gif, crop=(0, 0, 46, 5))


def test_decode_image_dispatches_jpeg_natively():
    data = sample_jpeg((45, 67))
    np.testing.assert_array_equal(fd.decode_image(data, crop=(1, 2, 3, 4)),
                                  fd.decode_jpeg(data, crop=(1, 2, 3, 4)))


def test_read_image_names_the_file_in_errors(tmp_path):
    path = tmp_path / "broken.jpg"
    path.write_bytes(sample_jpeg((45, 67))[:300])
    with pytest.raises(fd.DecodeError, match=r"broken\.jpg: truncated JPEG") as info:
        fd.read_image(path)
    assert info.value.path == str(path)
    # the path survives pickling (DataLoader workers send exceptions back)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.path == str(path) and str(again) == str(info.value)


def test_read_image_maps_large_files(tmp_path, monkeypatch):
    data = sample_jpeg((45, 67))
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    monkeypatch.setattr(api, "MMAP_THRESHOLD", 16)
    np.testing.assert_array_equal(fd.read_image(path), pillow_rgb(data))
    monkeypatch.setattr(api, "MMAP_THRESHOLD", 1 << 30)
    np.testing.assert_array_equal(fd.read_image(path, layout="CHW"),
                                  pillow_rgb(data).transpose(2, 0, 1))


def _fifo(path):
    os.mkfifo(path)


def _big(path):  # 2 KiB and one byte, over a limit of 2 KiB
    path.write_bytes(sample_jpeg((45, 67)).ljust(2049, b"\0"))


@pytest.mark.timeout(30)  # a FIFO's open would wait for a writer
@pytest.mark.parametrize("mapped", [False, True], ids=["read", "mapped"])
@pytest.mark.parametrize("make, error, match", [
    pytest.param(_fifo, errno.EINVAL, r"not a regular file \(a device, a FIFO or a socket\)",
                 id="a-fifo"),
    pytest.param(_big, errno.EFBIG, r"larger than the per-file limit of 2,048 bytes \(set "
                 r"FASTDECODE_MAX_FILE_BYTES to read larger files\)", id="over-the-limit"),
])
def test_read_image_refuses_what_no_image_is_naming_the_file(tmp_path, monkeypatch, mapped,
                                                             make, error, match):
    """read_image reads as the datasets do (``_native.LocalFile``): a FIFO is
    refused, not waited for; a file over the per-file limit
    (``FASTDECODE_MAX_FILE_BYTES``) is refused from its size."""
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "2KiB")
    monkeypatch.setattr(api, "MMAP_THRESHOLD", 16 if mapped else 1 << 30)
    path = tmp_path / "odd.jpg"
    make(path)
    with pytest.raises(OSError, match=f"{match}: '.*odd.jpg'") as info:
        fd.read_image(path)
    assert info.value.errno == error and os.fspath(info.value.filename) == str(path)
    monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "4KiB")  # raised: read
    if make is _big:
        assert fd.read_image(path).shape == (45, 67, 3)


def test_value_types_and_error_hierarchy():
    # (that every name in __all__ resolves: tests/api/test_public_api.py)
    assert fd.Mode("RGB") is fd.Mode.RGB and fd.Mode.L == "L" and fd.Mode.RGB.channels == 3
    assert issubclass(fd.DecodeError, ValueError) and issubclass(fd.DecodeError, fd.FastDecodeError)
    assert issubclass(fd.UnsupportedFormatError, fd.DecodeError)


FALLBACK_OPTIONS = {
    "scale-3/8": {"scale": 0.375},
    "min_size": {"min_size": (12, 20)},
    "crop-scale-1/2": {"crop": (5, 9, 30, 40), "scale": 0.5},
    "crop-min_size-CHW": {"crop": (3, 1, 33, 50), "min_size": (10, 10), "layout": "CHW"},
    "crop-size-L": {"crop": (3, 1, 33, 50), "size": (7, 9), "mode": "L"},
}


@pytest.mark.parametrize("options", FALLBACK_OPTIONS.values(), ids=FALLBACK_OPTIONS.keys())
@pytest.mark.parametrize("fmt", FALLBACK_FORMATS)
def test_fallback_geometry_is_the_c_planners(fmt, options):
    data = encoded(fmt)
    header = fd.read_header(data)
    planned = fd._native.plan_shape(header.height, header.width, **options)
    got = fd.decode_image(data, **options)
    assert got.shape == planned.shape
    if "size" not in options:  # the crop of the box-filtered image at M/8
        scaled = fd.decode_image(data, scale=planned.scale_num / 8, mode=options.get("mode", "RGB"))
        assert scaled.shape[:2] == planned.scaled_size
        top, left, h, w = planned.region
        want = scaled[top:top + h, left:left + w]
        if options.get("layout") == "CHW":
            want = want.transpose(2, 0, 1)
        np.testing.assert_array_equal(got, want)


def _keywords(fn):
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _stub_keywords(name):
    tree = ast.parse((Path(fd.__file__).parent / "_native.pyi").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [a.arg for a in fn.args.kwonlyargs]


ENTRY_POINTS = {
    "decode_image": (lambda: fd.decode_image, list(DecodeOptions.__annotations__)),
    "decode_jpeg": (lambda: fd.decode_jpeg, list(DecodeOptions.__annotations__)),
    "decode_bmp": (lambda: fd.decode_bmp, list(BMP_OPTIONS)),
    "plan_shape": (lambda: fd._native.plan_shape,
                   ["mode", "scale", "min_size", "crop", "size", "interpolation", "layout",
                    "max_pixels"]),
}


@pytest.mark.parametrize("entry, names", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())
def test_entry_points_take_the_decode_options_with_their_defaults(entry, names):
    keywords = _keywords(entry())
    assert list(keywords) == names
    assert keywords == {name: DEFAULTS[name] for name in names}
    assert list(DEFAULTS) == list(DecodeOptions.__annotations__)


@pytest.mark.parametrize("name", ["decode_jpeg", "decode_bmp", "plan_shape"])
def test_stubs_take_the_decode_options(name):
    assert _stub_keywords(name) == ENTRY_POINTS[name][1]


def test_read_image_options_are_the_decode_options():
    annotation = inspect.signature(fd.read_image).parameters["options"].annotation
    assert annotation == "Unpack[DecodeOptions]"
