"""No leak on any path: 100,000 decodes through every error path and every
option leave RSS within 2 MB, and every input buffer is released after
every call.

The buffer check is direct: the input is a bytearray, which refuses to
resize while any Py_buffer on it is held (BufferError), so a call that
leaked its PyObject_GetBuffer would make the next resize fail. `out=`
buffers are bytearrays too, checked the same way.
"""

from __future__ import annotations

import gc
import io
import os
import struct
import sys

import numpy as np
import pytest
from PIL import Image

import fastdecode as fd
from fastdecode import _native

from fuzz.bounded import bounded, hang_guard  # noqa: F401
from fuzz.seeds import hand_bmps
from helpers.jpeg_samples import encode, natural_image, with_exif_orientation

CALLS = 100_000
RSS_BOUND = 2 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sof_pos(data: bytes) -> int:
    return next(data.index(m) for m in (b"\xff\xc0", b"\xff\xc2") if m in data)


def jpeg_files() -> dict[str, bytes]:
    base = encode(8, 16)
    prog = encode(8, 16, subsampling="4:4:4", coding="progressive")
    s = sof_pos(base)
    first_scan = prog.index(b"\xff\xda")
    dht = base.index(b"\xff\xc4")
    buf = io.BytesIO()
    Image.fromarray(natural_image(8, 16)).convert("CMYK").save(buf, "JPEG")
    # the first AC scan of the progressive file, repeated past the scan limit
    starts = [i for i in range(len(prog) - 1) if prog[i:i + 2] == b"\xff\xda"]
    scan = prog[starts[1]:starts[2]]
    return {
        "ok": base,
        "progressive": prog,
        "exif": with_exif_orientation(base, 6),
        "cmyk": buf.getvalue(),
        "empty": b"",
        "zeros": bytes(64),
        "cut-header": base[:s + 6],
        "cut-data": base[:-40],
        "cut-progressive": prog[:first_scan + 60],
        "giant": base[:s + 5] + struct.pack(">HH", 65500, 65500) + base[s + 9:],
        "bad-huffman": base[:dht + 5] + bytes([0] * 8 + [255, 255] + [0] * 6) + base[dht + 21:],
        "lossless": base[:s + 1] + b"\xc3" + base[s + 2:],
        "no-quant": base[:base.index(b"\xff\xdb") + 5] + bytes(64) + base[base.index(b"\xff\xdb") + 69:],
        "extraneous": base[:base.index(b"\xff\xda")] + b"\0\0" + base[base.index(b"\xff\xda"):],
        "scan-bomb": prog[:starts[2]] + scan * 1001 + prog[starts[2]:],
    }


def bmp_files() -> dict[str, bytes]:
    buf = io.BytesIO()
    Image.fromarray(natural_image(8, 16, seed=2)).save(buf, "BMP")
    ok = buf.getvalue()
    rle8 = hand_bmps()["hand-rle8.bmp"]
    giant = ok[:18] + struct.pack("<ii", 65500, 65500) + ok[26:]
    return {
        "ok": ok,
        "rle8": rle8,
        "rle8-cut": rle8[:-6],
        "cut-header": ok[:30],
        "cut-data": ok[:-50],
        "bad-bits": ok[:28] + struct.pack("<H", 7) + ok[30:],
        "giant": giant,
    }


def other_files() -> dict[str, bytes]:
    out = {}
    for fmt in ("PNG", "GIF"):
        buf = io.BytesIO()
        Image.fromarray(natural_image(8, 16, seed=3)).save(buf, fmt)
        out[fmt.lower()] = buf.getvalue()
    out["garbage"] = b"\x89PNX" + bytes(40)
    return out


def cases():
    """(name, data, call): call(data) runs one decode; its exception is ignored."""
    J, B, Other = jpeg_files(), bmp_files(), other_files()
    out = []

    def add(name, data, fn, **kw):
        out.append((name, data, lambda d, fn=fn, kw=kw: fn(d, **kw)))

    def add_out(name, data, fn, make_out, **kw):
        # out= is a fresh object per call, checked for release like the input
        def call(d, fn=fn, kw=kw, make_out=make_out):
            target = make_out()
            try:
                return fn(d, out=target, **kw)
            finally:
                if isinstance(target, bytearray):
                    target.append(0)  # BufferError if still exported
        out.append((name, data, call))

    # JPEG: every option on a good file
    add("jpeg", J["ok"], fd.decode_jpeg)
    for m in range(1, 9):
        add(f"jpeg-scale-{m}", J["ok"], fd.decode_jpeg, scale=m / 8)
    add("jpeg-min-size", J["ok"], fd.decode_jpeg, min_size=(3, 3))
    add("jpeg-crop", J["ok"], fd.decode_jpeg, crop=(1, 2, 5, 9))
    for interp in ("bilinear", "bicubic", "nearest"):
        add(f"jpeg-size-{interp}", J["ok"], fd.decode_jpeg, size=(5, 7), interpolation=interp)
    add("jpeg-flip-chw-l", J["ok"], fd.decode_jpeg, flip=True, layout="CHW", mode="L")
    add("jpeg-exif", J["exif"], fd.decode_jpeg, exif=True, crop=(1, 1, 9, 5))
    add("jpeg-fast-strict", J["ok"], fd.decode_jpeg, fast=True, strict=True)
    add("jpeg-cmyk", J["cmyk"], fd.decode_jpeg, mode="L")
    add("jpeg-progressive", J["progressive"], fd.decode_jpeg, crop=(0, 0, 4, 4))
    add_out("jpeg-out", J["ok"], fd.decode_jpeg, lambda: bytearray(8 * 16 * 3))
    add_out("jpeg-out-numpy", J["ok"], fd.decode_jpeg, lambda: np.empty((3, 8, 16), np.uint8),
            layout="CHW")
    add("jpeg-header", J["ok"], fd.read_header)
    # JPEG: every error path
    for name in ("empty", "zeros", "cut-header", "cut-data", "cut-progressive", "giant",
                 "bad-huffman", "lossless", "no-quant", "scan-bomb"):
        add(f"jpeg-{name}", J[name], fd.decode_jpeg)
        add(f"jpeg-{name}-header", J[name], fd.read_header)
    add("jpeg-cut-data-crop", J["cut-data"], fd.decode_jpeg, crop=(4, 0, 4, 16))
    add("jpeg-strict", J["extraneous"], fd.decode_jpeg, strict=True)
    add("jpeg-max-pixels", J["ok"], fd.decode_jpeg, max_pixels=10)
    add("jpeg-crop-outside", J["ok"], fd.decode_jpeg, crop=(0, 0, 9, 16))
    add_out("jpeg-out-size", J["ok"], fd.decode_jpeg, lambda: bytearray(5))
    add_out("jpeg-out-dtype", J["ok"], fd.decode_jpeg, lambda: np.empty((8, 16, 3), np.float32))
    add_out("jpeg-out-readonly", J["ok"], fd.decode_jpeg, lambda: bytes(8 * 16 * 3))
    add_out("jpeg-out-bomb", J["scan-bomb"], fd.decode_jpeg, lambda: bytearray(8 * 16 * 3))
    add("jpeg-bad-mode", J["ok"], fd.decode_jpeg, mode="RGBA")
    add("jpeg-bad-scale", J["ok"], fd.decode_jpeg, scale=0.3)
    add("jpeg-bad-crop", J["ok"], fd.decode_jpeg, crop="top")
    add("jpeg-bad-size", J["ok"], fd.decode_jpeg, size=(0, 3))
    add("jpeg-bad-interp", J["ok"], fd.decode_jpeg, size=(3, 3), interpolation="lanczos")
    # BMP
    add("bmp", B["ok"], fd.decode_bmp)
    add("bmp-options", B["ok"], fd.decode_bmp, crop=(1, 1, 5, 5), flip=True, layout="CHW",
        mode="L")
    add("bmp-size", B["ok"], fd.decode_bmp, size=(3, 20), interpolation="bicubic")
    add("bmp-rle8", B["rle8"], fd.decode_bmp)
    add_out("bmp-out", B["ok"], fd.decode_bmp, lambda: bytearray(8 * 16 * 3))
    add("bmp-header", B["ok"], fd.read_header)
    for name in ("rle8-cut", "cut-header", "cut-data", "bad-bits", "giant"):
        add(f"bmp-{name}", B[name], fd.decode_bmp)
        add(f"bmp-{name}-header", B[name], fd.read_header)
    add("bmp-crop-outside", B["ok"], fd.decode_bmp, crop=(0, 0, 9, 9))
    add_out("bmp-out-size", B["ok"], fd.decode_bmp, lambda: bytearray(7))
    add("bmp-max-pixels", B["ok"], fd.decode_bmp, max_pixels=3)
    # decode_image: dispatch, the scale fallback for BMP, Pillow formats
    add("image-jpeg", J["ok"], fd.decode_image, size=(4, 4))
    add("image-lossless", J["lossless"], fd.decode_image)
    add("image-bmp-scale", B["ok"], fd.decode_image, scale=0.5)
    add("image-png", Other["png"], fd.decode_image, crop=(1, 1, 4, 4), flip=True)
    add_out("image-png-out", Other["png"], fd.decode_image, lambda: bytearray(8 * 16 * 3))
    add("image-gif", Other["gif"], fd.decode_image, size=(4, 4))
    add("image-garbage", Other["garbage"], fd.decode_image)
    add("image-png-header", Other["png"], fd.read_header)
    add("sniff", J["ok"], _native.sniff)
    # the other buffer users of the binding
    rgb = natural_image(8, 16)
    out.append(("resize", b"", lambda d: _native.resize(rgb, (4, 5), interpolation="bicubic")))
    out.append(("resize-bad", b"", lambda d: _native.resize(rgb, (0, 5))))
    chw = np.ascontiguousarray(rgb.transpose(2, 0, 1))
    lut = np.linspace(0, 1, 3 * 256, dtype=np.float32).reshape(3, 256)
    out.append(("lut-to-float", b"", lambda d: _native.lut_to_float(chw, lut)))
    out.append(("lut-to-float-bad", b"", lambda d: _native.lut_to_float(chw, lut[:2])))
    out.append(("non-contiguous", b"", lambda d: fd.decode_jpeg(memoryview(J["ok"])[::2])))
    out.append(("not-bytes", b"", lambda d: fd.decode_jpeg("a string")))
    return out


def run_case(data: bytearray, call) -> None:
    try:
        call(data)
    except (ValueError, TypeError, MemoryError):  # DecodeError is a ValueError
        pass
    data.append(0)  # BufferError here: the call still holds a view of its input
    del data[-1]


@pytest.mark.slow  # ~9 s: make test-full
@pytest.mark.no_sanitize  # measures memory; ASan's quarantine holds freed memory by design
@bounded(300)
def test_100k_decodes_through_every_path_do_not_leak():
    all_cases = cases()
    assert len(all_cases) > 80
    inputs = [(name, bytearray(data), call) for name, data, call in all_cases]
    # Every case behaves as its name says before its cost is measured.
    outcomes = {}
    for name, data, call in inputs:
        try:
            call(data)
            outcomes[name] = "ok"
        except Exception as exc:  # noqa: BLE001
            outcomes[name] = type(exc).__name__
    assert outcomes["jpeg"] == outcomes["bmp"] == outcomes["image-png"] == "ok"
    assert outcomes["jpeg-scan-bomb"] == outcomes["jpeg-out-bomb"] == "DecodeError"
    assert outcomes["jpeg-giant"] == outcomes["bmp-giant"] == "ImageTooLargeError"
    assert outcomes["jpeg-out-size"] == outcomes["jpeg-crop-outside"] == "ValueError"
    assert outcomes["jpeg-out-dtype"] == outcomes["jpeg-out-readonly"] == "ValueError"
    assert outcomes["not-bytes"] == "TypeError"
    assert sum(o != "ok" for o in outcomes.values()) > 40

    for _ in range(100):  # warm up: thread-local decoders, scratch, caches
        for _, data, call in inputs:
            run_case(data, call)
    gc.collect()
    rss0, blocks0 = rss_bytes(), sys.getallocatedblocks()
    n = 0
    while n < CALLS:
        for _, data, call in inputs:
            run_case(data, call)
        n += len(inputs)
    gc.collect()
    rss_growth = rss_bytes() - rss0
    blocks_growth = sys.getallocatedblocks() - blocks0
    assert rss_growth < RSS_BOUND, f"RSS grew by {rss_growth} bytes over {n} calls"
    # Python objects: a leaked reference (e.g. a Py_buffer never released
    # keeps its exporter alive) shows as ever more allocated blocks.
    assert blocks_growth < 1000, f"{blocks_growth} more Python blocks after {n} calls"


def test_out_with_non_ascii_buffer_format_is_released():
    """A structured dtype with a non-ASCII field name has format 'T{B:é:}':
    the out= check must refuse it with ValueError and release its view (the
    view holds a reference to `out`)."""
    data = encode(8, 16)
    out = np.zeros((8, 16, 3), dtype=[("\u00e9", "u1")])
    refs = sys.getrefcount(out)
    for _ in range(3):
        with pytest.raises(ValueError, match=r"out must have dtype uint8"):
            fd.decode_jpeg(data, out=out)
    assert sys.getrefcount(out) == refs


def test_exported_buffer_check_is_real():
    """The check the leak test relies on: a held view blocks the resize."""
    data = bytearray(b"abc")
    view = memoryview(data)
    with pytest.raises(BufferError, match="[Ee]xisting exports"):
        data.append(0)
    view.release()
    data.append(0)
