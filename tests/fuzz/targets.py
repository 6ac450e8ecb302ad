"""The fuzz targets and their oracle, importable without atheris.

Every target takes the raw fuzz input. The option-taking targets read their
options from a fixed-size trailer at the END of the input (so that a seed
file keeps its magic bytes at offset 0 and libFuzzer's mutations of the file
body and of the options are independent); `split` is the one decoder of that
trailer, shared by the fuzzer, the driver's seed writer and the regression
tests, which replay a saved input exactly as the fuzzer ran it.

The oracle (`check`) accepts only what the API documents:
  * fastdecode.DecodeError and its subclasses, for anything the data causes;
  * ValueError / TypeError that is not a DecodeError only when its message is
    one of the argument complaints (the trailer can ask for a crop outside the
    image, a wrong-sized `out=` ...);
  * an `out=` one byte smaller than the result must be refused (a plain
    bytearray: a flat buffer only needs the size);
  * a successful decode must have the shape, dtype and layout the options ask
    for; a crop (without resize) must equal the same slice of the uncropped
    decode.
Anything else raises `Finding`, which the fuzz entry point turns into a
crash (or, in collect mode, records and goes on).
"""

from __future__ import annotations

import importlib
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import fastdecode as fd

from fuzz.spec import TAKES_OPTIONS, TARGET_NAMES, TRAILER

__all__ = ["TAKES_OPTIONS", "TARGETS", "TRAILER", "Finding", "run", "split"]
# Fuzzing decodes thousands of inputs a second: a header may declare up to
# this many pixels before max_pixels refuses it. The API default (179 M)
# would let one 4-byte mutation allocate half a gigabyte per execution, and
# a few bytes of RLE BMP or JPEG really do decode to that many pixels: at
# 4 M, a 150-byte RLE4 BMP of 8 x 262145 resized to 145 x 156 took 1.8 s in
# the release build and over libFuzzer's 10 s under ASan + coverage.
FUZZ_MAX_PIXELS = 1 << 20
MAX_PIXELS_CHOICES = (FUZZ_MAX_PIXELS, 1 << 12, 64, FUZZ_MAX_PIXELS)

# Messages of argument errors (ValueError/TypeError that are not
# DecodeError); anything else from a decode is a finding.
ARGUMENT_MESSAGES = re.compile(
    r"crop \(top=|crop=|outside the|out has|out must|size must|min_size|scale must|"
    r"output buffer has"
)


class Finding(Exception):
    """The oracle's verdict: not a documented outcome."""


@dataclass(frozen=True)
class Options:
    kwargs: dict
    out: str  # "none", "exact" (preallocated, right shape) or "wrong" (a byte short)


def split(data: bytes) -> tuple[bytes, bytes]:
    """(image bytes, option trailer); short inputs get the all-defaults trailer."""
    if len(data) <= TRAILER:
        return data, bytes(TRAILER)
    return data[:-TRAILER], data[-TRAILER:]


def header_dims(image: bytes, exif: bool) -> tuple[int, int]:
    """(height, width) in the frame crops are given in; (64, 64) if unknown."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = fd.read_header(image)
    except Exception:  # noqa: BLE001 - any failure here only picks crop numbers
        return 64, 64
    height, width = h.height, h.width
    if exif and h.orientation >= 5:
        height, width = width, height
    return max(height, 1), max(width, 1)


def options(image: bytes, t: bytes, *, jpeg_only: bool) -> Options:
    """The keyword options a trailer asks for.

    t[0] bits: flip, CHW, mode L, exif, fast, strict, crop, size
    t[1]: low nibble 0 -> no scale, 1..8 -> scale M/8, 9..15 -> min_size
    t[2]: interpolation (bits 0-1), max_pixels (bits 2-3), out= (bits 4-5),
          crop one pixel too large (bit 6)
    t[3..6]: crop top/left/height/width as fractions of the header size
    t[7]: min_size (nibbles x 8); t[8], t[9]: resize height/width - 1
    t[10], t[11]: spare (mutated, ignored)
    """
    flags = t[0]
    kw: dict[str, Any] = {
        "flip": bool(flags & 1),
        "layout": "CHW" if flags & 2 else "HWC",
        "mode": "L" if flags & 4 else "RGB",
        "interpolation": ("bilinear", "bicubic", "nearest", "bilinear")[t[2] & 3],
        "max_pixels": MAX_PIXELS_CHOICES[(t[2] >> 2) & 3],
    }
    if jpeg_only:
        kw["exif"] = bool(flags & 8)
        kw["fast"] = bool(flags & 16)
        kw["strict"] = bool(flags & 32)
        scaling = t[1] & 15
        if 1 <= scaling <= 8:
            kw["scale"] = scaling / 8
        elif scaling >= 9:
            kw["min_size"] = (1 + (t[7] >> 4) * 8, 1 + (t[7] & 15) * 8)
    if flags & 64:
        height, width = header_dims(image, kw.get("exif", False))
        top = t[3] * height // 256
        left = t[4] * width // 256
        ch = max(1, t[5] * (height - top) // 255)
        cw = max(1, t[6] * (width - left) // 255)
        if t[2] & 64:
            ch += 1
        kw["crop"] = (top, left, ch, cw)
    if flags & 128:
        kw["size"] = (1 + t[8], 1 + t[9])
    out = ("none", "exact", "wrong", "none")[(t[2] >> 4) & 3]
    return Options(kw, out)


def expected_shape(result: np.ndarray, kw: dict) -> None:
    channels = 1 if kw.get("mode") == "L" else 3
    if result.dtype != np.uint8 or result.ndim != 3:
        raise Finding(f"decoded array has dtype {result.dtype} and {result.ndim} dims")
    c_axis = 0 if kw.get("layout") == "CHW" else 2
    if result.shape[c_axis] != channels:
        raise Finding(f"shape {result.shape} has no {channels} channels ({kw})")
    if "size" in kw:
        hw = result.shape[1:] if c_axis == 0 else result.shape[:2]
        if tuple(hw) != tuple(kw["size"]):
            raise Finding(f"shape {result.shape} is not the requested size {kw['size']}")
    if "crop" in kw and "size" not in kw and "scale" not in kw and "min_size" not in kw:
        hw = result.shape[1:] if c_axis == 0 else result.shape[:2]
        if tuple(hw) != tuple(kw["crop"][2:]):
            raise Finding(f"shape {result.shape} is not the crop {kw['crop']}")


def call_with_out(fn: Callable, image: bytes, opts: Options) -> np.ndarray:
    kw = dict(opts.kwargs)
    if opts.out == "none":
        return fn(image, **kw)
    first = fn(image, **kw)
    if opts.out == "wrong":
        # One byte short of the result, whatever its size: a fixed 7 bytes is
        # exactly right for a 1 x 7 gray crop (issue 27's "finding").
        try:
            fn(image, out=bytearray(first.nbytes - 1), **kw)
        except ValueError as exc:
            if isinstance(exc, fd.DecodeError) or not ARGUMENT_MESSAGES.search(str(exc)):
                raise Finding(f"a short out= raised {type(exc).__name__}: {exc}") from exc
            return first
        raise Finding(f"an out= of {first.nbytes - 1} bytes was accepted for a "
                      f"{first.shape} uint8 result")
    out = np.full_like(first, 0x5A)
    got = fn(image, out=out, **kw)
    if got is not out or not np.array_equal(out, first):
        raise Finding("decoding into out= differs from decoding into a new array")
    return first


def same_as_slice(fn: Callable, image: bytes, kw: dict, result: np.ndarray) -> None:
    """A crop without resize is the same slice of the uncropped decode."""
    if "crop" not in kw or "size" in kw:
        return
    full_kw = {k: v for k, v in kw.items() if k != "crop"}
    full_kw.update(flip=False, layout="HWC")
    try:
        full = fn(image, **full_kw)
    except (fd.DecodeError, ValueError):
        return  # e.g. damage after the crop's last row; the crop may stop early
    top, left, ch, cw = kw["crop"]
    m = round(kw["scale"] * 8) if "scale" in kw else 8
    if "min_size" in kw:
        return  # the scale min_size picks for the crop differs from the full image's
    rows = slice(top * m // 8, min(full.shape[0], -(-(top + ch) * m // 8)))
    cols = slice(left * m // 8, min(full.shape[1], -(-(left + cw) * m // 8)))
    want = full[rows, cols]
    got = result.transpose(1, 2, 0) if kw.get("layout") == "CHW" else result
    if kw.get("flip"):
        got = got[:, ::-1]
    if want.shape != got.shape or not np.array_equal(want, got):
        raise Finding(f"crop {kw['crop']} differs from the slice of the full decode ({kw})")


def check_error(exc: BaseException) -> None:
    if isinstance(exc, fd.DecodeError):
        return
    if isinstance(exc, (ValueError, TypeError)) and ARGUMENT_MESSAGES.search(str(exc)):
        return
    raise Finding(f"undocumented {type(exc).__name__}: {exc}") from exc


def decode_target(fn: Callable, data: bytes, *, jpeg_only: bool, slice_check: bool) -> None:
    image, trailer = split(data)
    opts = options(image, trailer, jpeg_only=jpeg_only)
    try:
        result = call_with_out(fn, image, opts)
    except Finding:
        raise
    except Exception as exc:  # noqa: BLE001 - the oracle sorts them
        check_error(exc)
        return
    expected_shape(result, opts.kwargs)
    if slice_check:
        same_as_slice(fn, image, opts.kwargs, result)


def t_read_header(data: bytes) -> None:
    try:
        info = fd.read_header(data)
    except Exception as exc:  # noqa: BLE001
        check_error(exc)
        return
    if info.format in ("jpeg", "bmp") and not (1 <= info.orientation <= 8):
        raise Finding(f"orientation {info.orientation} out of range")


def t_decode_jpeg(data: bytes) -> None:
    decode_target(fd.decode_jpeg, data, jpeg_only=True, slice_check=True)


def t_decode_bmp(data: bytes) -> None:
    decode_target(fd.decode_bmp, data, jpeg_only=False, slice_check=True)


def native_or_skip(name: str) -> Callable:
    """The binding's decoder of format ``name``, or one that refuses every input
    (UnsupportedFormatError) where the extension was built without it."""
    from fastdecode import _native

    return getattr(_native, f"decode_{name}")


def t_decode_png(data: bytes) -> None:
    """decode_png (src_c/fd_png.c): BMP's options and exif."""
    image, trailer = split(data)
    opts = options(image, trailer, jpeg_only=False)
    opts.kwargs["exif"] = bool(trailer[0] & 8)
    decode_options(native_or_skip("png"), image, opts, slice_check=True)


def t_decode_webp(data: bytes) -> None:
    """decode_webp (src_c/fd_webp.c): JPEG's options but fast and strict (its
    scales are libwebp's rescaler: the slice check holds at full scale)."""
    image, trailer = split(data)
    opts = options(image, trailer, jpeg_only=True)
    del opts.kwargs["fast"], opts.kwargs["strict"]
    decode_options(native_or_skip("webp"), image, opts,
                   slice_check="scale" not in opts.kwargs and "min_size" not in opts.kwargs)


def decode_options(fn: Callable, image: bytes, opts: Options, *, slice_check: bool) -> None:
    try:
        result = call_with_out(fn, image, opts)
    except Finding:
        raise
    except Exception as exc:  # noqa: BLE001 - the oracle sorts them
        check_error(exc)
        return
    expected_shape(result, opts.kwargs)
    if slice_check:
        same_as_slice(fn, image, opts.kwargs, result)


def t_decode_image(data: bytes) -> None:
    # The Pillow fallback's slices follow Pillow's own rounding; the native
    # decoders' crop/slice agreement is checked by the two targets above.
    decode_target(fd.decode_image, data, jpeg_only=True, slice_check=False)


# --------------------------------------------------------------------------
# The code above the decoders (issue 27): the colour kernel, a fused chain as
# the WebDataset handler runs it, a detached plan against the FusedTransform it
# came from, and a dataset item read through the storage path. Their inputs
# are image bytes + the same 12-byte trailer; t[0] picks the chain. torch and
# torchvision load on the first execution (the driver's seeds need neither).

# fd_color.c's argument complaints all start "color: "; the binding's name the step
COLOR_MESSAGES = re.compile(r"^color: |^colour step \d+|^at most \d+ colour steps")


def t_adjust_colors(data: bytes) -> None:
    """fd_color.c through _native.adjust_colors: a small image, up to 6 steps.

    data: h-1, w-1 (low 5 bits each), number of steps (low 3 bits), then
    5 bytes a step (op byte, float32 factor: NaN, inf and negatives included),
    then the pixels (repeated to fill). Oracle: a documented ValueError or
    the image changed in place; HWC and CHW give the same pixels; applying
    the same steps to a copy gives the same pixels (no uninitialized reads).
    """
    from fastdecode import _native

    if len(data) < 3:
        return
    h, w, n = (data[0] & 31) + 1, (data[1] & 31) + 1, data[2] & 7
    body = data[3:]
    steps = []
    for k in range(n):
        chunk = body[5 * k:5 * k + 5]
        if len(chunk) < 5:
            break
        steps.append((chunk[0] % 6 - 1, float(np.frombuffer(chunk[1:], "<f4")[0])))
    pixels = body[5 * len(steps):] or b"\x80"
    raw = np.frombuffer((pixels * (3 * h * w // len(pixels) + 1))[:3 * h * w], np.uint8)
    hwc = raw.reshape(h, w, 3).copy()
    chw = hwc.transpose(2, 0, 1).copy()  # a copy even where the transpose is contiguous (1 x 1)
    again = hwc.copy()
    try:
        got = _native.adjust_colors(hwc, steps, "HWC")
    except ValueError as exc:
        if not COLOR_MESSAGES.search(str(exc)):
            raise Finding(f"undocumented ValueError: {exc}") from exc
        for image, layout in ((chw, "CHW"), (again, "HWC")):
            try:
                _native.adjust_colors(image, steps, layout)
            except ValueError:
                continue
            raise Finding(f"steps {steps} refused in HWC, accepted in {layout}") from exc
        return
    if got is not hwc:
        raise Finding("adjust_colors did not return its image")
    _native.adjust_colors(chw, steps, "CHW")
    _native.adjust_colors(again, steps, "HWC")
    if not np.array_equal(chw.transpose(1, 2, 0), hwc):
        raise Finding(f"steps {steps}: CHW differs from HWC")
    if not np.array_equal(again, hwc):
        raise Finding(f"steps {steps}: the same call gave different pixels")


# fd_augment.c's complaints start "augment: "; the binding's name the step
AUGMENT_MESSAGES = re.compile(r"^augment: |^augment step \d+|^at most \d+ augment steps")
AUGMENT_STEP = 13  # a kind byte and 12 bytes of parameters


def augment_steps(body: bytes, n: int) -> list:
    """t_augment's steps from 13-byte records: kind byte (low 3 bits: kind
    + 1, so 0 is an unknown kind; bits 3-4: resample 0, 1 (refused), 2, 3;
    bit 5: a fill colour, grey (bits 6-7) * 85), then the parameters: colour
    op byte and float32 factor; six float16 matrix entries (inf and NaN
    included); LUT seed bytes (p[3] % 3: 256, 768 or p[4] bytes); sharpness
    float32; blur kernel sizes p[0] % 16, p[1] % 16 (even ones refused) and
    two float16 sigmas."""
    from fastdecode import _native

    steps: list = []
    for k in range(n):
        rec = body[AUGMENT_STEP * k:AUGMENT_STEP * (k + 1)]
        if len(rec) < AUGMENT_STEP:
            break
        b, p = rec[0], rec[1:]
        kind = (b & 7) - 1
        if kind == _native.AUG_COLOR:
            steps.append((kind, p[0] % 6 - 1, float(np.frombuffer(p[1:5], "<f4")[0])))
        elif kind == _native.AUG_AFFINE:
            matrix = tuple(float(v) for v in np.frombuffer(p[:12], "<f2"))
            fill = (b >> 6) * 85
            steps.append((kind, matrix, (0, 1, 2, 3)[(b >> 3) & 3],
                          (fill, fill, fill) if b & 32 else None))
        elif kind == _native.AUG_LUT:
            size = (256, 768, p[4])[p[3] % 3]
            steps.append((kind, bytes((i * (p[0] | 1) + p[1] ^ p[2]) & 255
                                      for i in range(size))))
        elif kind == _native.AUG_SHARPNESS:
            steps.append((kind, float(np.frombuffer(p[:4], "<f4")[0])))
        elif kind == _native.AUG_BLUR:
            sx, sy = (float(v) for v in np.frombuffer(p[2:6], "<f2"))
            steps.append((kind, p[0] % 16, p[1] % 16, sx, sy))
        else:  # AUTOCONTRAST, EQUALIZE, or an unknown kind
            steps.append((kind,))
    return steps


def pillow_augment(hwc: np.ndarray, steps: list) -> np.ndarray | None:
    """Each step as the Pillow call it reproduces; None without Pillow, or
    with a blur step (torchvision's, reproduced within 1: test_augment.py)."""
    from fastdecode import _native

    if any(step[0] == _native.AUG_BLUR for step in steps):
        return None
    try:
        from PIL import Image, ImageEnhance, ImageOps
    except ImportError:
        return None

    img = Image.fromarray(hwc, "RGB")
    enhancers = {_native.COLOR_BRIGHTNESS: ImageEnhance.Brightness,
                 _native.COLOR_CONTRAST: ImageEnhance.Contrast,
                 _native.COLOR_SATURATION: ImageEnhance.Color}
    for step in steps:
        kind = step[0]
        if kind == _native.AUG_COLOR and step[1] == _native.COLOR_HUE:
            arr = np.array(img)  # fd_color.c's hue: checked against Pillow in test_color.py
            img = Image.fromarray(_native.adjust_colors(arr, [step[1:]], "HWC"), "RGB")
        elif kind == _native.AUG_COLOR:
            img = enhancers[step[1]](img).enhance(step[2])
        elif kind == _native.AUG_AFFINE:
            img = img.transform(img.size, Image.AFFINE, step[1], step[2], fillcolor=step[3])
        elif kind == _native.AUG_LUT:
            img = img.point(list(step[1]) * (3 if len(step[1]) == 256 else 1))
        elif kind == _native.AUG_AUTOCONTRAST:
            img = ImageOps.autocontrast(img)
        elif kind == _native.AUG_EQUALIZE:
            img = ImageOps.equalize(img)
        else:
            img = ImageEnhance.Sharpness(img).enhance(step[1])
    return np.asarray(img)


def t_augment(data: bytes) -> None:
    """fd_augment.c through _native.augment: a small image, up to 7 steps.

    data: h-1, w-1 (low 5 bits each), number of steps (low 3 bits), then
    13 bytes a step (augment_steps), then the pixels (repeated to fill).
    Oracle: a documented ValueError/TypeError, refused alike in both
    layouts and with the image untouched; or the image changed in place,
    HWC and CHW the same, the same call twice the same (no uninitialized
    reads), and Pillow's own calls giving the same pixels (but for a blur).
    """
    from fastdecode import _native

    if len(data) < 3:
        return
    h, w, n = (data[0] & 31) + 1, (data[1] & 31) + 1, data[2] & 7
    body = data[3:]
    steps = augment_steps(body, n)
    pixels = body[AUGMENT_STEP * len(steps):] or b"\x80"
    raw = np.frombuffer((pixels * (3 * h * w // len(pixels) + 1))[:3 * h * w], np.uint8)
    hwc = raw.reshape(h, w, 3).copy()
    chw = hwc.transpose(2, 0, 1).copy()  # a copy even where the transpose is contiguous (1 x 1)
    again, before = hwc.copy(), hwc.copy()
    try:
        got = _native.augment(hwc, "HWC", steps)
    except (ValueError, TypeError) as exc:
        if not AUGMENT_MESSAGES.search(str(exc)):
            raise Finding(f"undocumented {type(exc).__name__}: {exc}") from exc
        if not np.array_equal(hwc, before):
            raise Finding(f"steps {steps} refused after writing pixels") from exc
        try:
            _native.augment(chw, "CHW", steps)
        except (ValueError, TypeError):
            return
        raise Finding(f"steps {steps} refused in HWC, accepted in CHW") from exc
    if got is not hwc:
        raise Finding("augment did not return its pixels")
    _native.augment(chw, "CHW", steps)
    _native.augment(again, "HWC", steps)
    if not np.array_equal(chw.transpose(1, 2, 0), hwc):
        raise Finding(f"steps {steps}: CHW differs from HWC")
    if not np.array_equal(again, hwc):
        raise Finding(f"steps {steps}: the same call gave different pixels")
    expected = pillow_augment(before, steps)
    if expected is not None and not np.array_equal(expected, hwc):
        raise Finding(f"steps {steps} on {h}x{w}: Pillow gives other pixels")


_CHAINS: list = []


def chains() -> list:
    """The fused chains the pipeline targets pick from (t[0] % len)."""
    if not _CHAINS:
        import torch
        from torchvision import transforms as T
        from torchvision.transforms import v2 as T2

        mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
        _CHAINS.extend([
            T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize(mean, std)]),
            T.Compose([T.Resize(20), T.CenterCrop(16), T.PILToTensor()]),
            T.Compose([T.RandomResizedCrop(16), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       T.PILToTensor()]),
            T2.Compose([T2.RandomResizedCrop(16), T2.RandomHorizontalFlip(),
                        T2.ColorJitter(0.3, 0.2, 0.5, 0.1), T2.RandomGrayscale(0.5),
                        T2.PILToTensor(), T2.ToDtype(torch.float32, scale=True)]),
            T.Compose([T.CenterCrop(40), T.RandomResizedCrop(12), T.PILToTensor()]),
        ])
    return _CHAINS


_HANDLERS: dict = {}


def t_wds_handler(data: bytes) -> None:
    """fastdecode.webdataset.handler (a fused chain on one sample's bytes).

    Oracle: a FastDecodeError, or a tensor of the chain's output shape."""
    image, t = split(data)
    k = t[0] % len(chains())
    if k not in _HANDLERS:
        from fastdecode.webdataset import handler

        _HANDLERS[k] = handler(chains()[k])
    h = _HANDLERS[k]
    import torch

    torch.manual_seed(int.from_bytes(t[1:5], "little"))
    try:
        result = h("sample.jpg", image)
    except Exception as exc:  # noqa: BLE001 - the oracle sorts them
        if not isinstance(exc, fd.FastDecodeError):
            raise Finding(f"handler raised undocumented {type(exc).__name__}: {exc}") from exc
        return
    shape = h.fused.output_shape
    if shape is not None and tuple(result.shape) != tuple(shape):
        raise Finding(f"handler gave shape {tuple(result.shape)}, the chain fixes {shape}")


_DECODERS: dict = {}


def t_detached_plan(data: bytes) -> None:
    """A BatchDecoder's detached plan (what a Ray worker unpickles) against
    the FusedTransform it was detached from, under the same row seed.

    Oracle: both give the same rows, or both raise the same FastDecodeError type."""
    import pickle

    image, t = split(data)
    k = t[0] % len(chains())
    if k not in _DECODERS:
        from fastdecode.batching._rows import BatchDecoder

        local = BatchDecoder(chains()[k])
        _DECODERS[k] = (local, pickle.loads(pickle.dumps(local)))
    local, shipped = _DECODERS[k]
    seeds = np.array([int.from_bytes(t[1:9], "little") & (2**62 - 1)], np.int64)
    outcomes = []
    for decoder in (local, shipped):
        try:
            outcomes.append(decoder.decode([image], seeds).copy())
        except Exception as exc:  # noqa: BLE001 - the oracle sorts them
            if not isinstance(exc, fd.FastDecodeError):
                raise Finding(f"{type(decoder.fused).__name__} raised undocumented "
                              f"{type(exc).__name__}: {exc}") from exc
            outcomes.append(type(exc))
    a, b = outcomes
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape or not np.array_equal(a, b):
            raise Finding(f"chain {k}: the detached plan's row differs from the fused one's")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or a is not b:
        raise Finding(f"chain {k}: fused gave {getattr(a, '__name__', 'a row')}, "
                      f"detached gave {getattr(b, '__name__', 'a row')}")


_TREE: dict = {}


def tree() -> dict:
    """A 4-file ImageFolder tree in a temporary folder (under /dev/shm when
    there is one): b/zz.jpg is rewritten with each input, the other three are
    valid images. Datasets over it per chain: 'raise' and 'skip'."""
    if not _TREE:
        import atexit
        import io
        import shutil
        import tempfile
        from pathlib import Path

        from PIL import Image

        shm = Path("/dev/shm")
        root = Path(tempfile.mkdtemp(prefix="fd-fuzz-tree-",
                                     dir=shm if shm.is_dir() else None))
        atexit.register(shutil.rmtree, root, True)
        for cls in ("a", "b"):
            (root / cls).mkdir()
        rng = np.random.default_rng(27)
        for name, fmt in (("a/x.jpg", "JPEG"), ("a/y.bmp", "BMP"), ("b/w.png", "PNG")):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (21, 33, 3), dtype=np.uint8)).save(buf, fmt)
            (root / name).write_bytes(buf.getvalue())
        (root / "b" / "zz.jpg").write_bytes(b"")
        _TREE.update(root=root, odd=root / "b" / "zz.jpg", datasets={})
    return _TREE


def t_dataset_item(data: bytes) -> None:
    """FastImageFolder's item and batch paths with a fused chain, reading the
    file through the storage path (read-ahead window, then the file).

    Oracle: under 'raise', ds[i] gives the chain's result or an ImageFileError
    (an OSError naming the file); under 'skip', __getitems__ over the whole
    tree never raises and gives 4 samples of the chain's shape."""
    from fastdecode.datasets import FastImageFolder

    image, t = split(data)
    tr = tree()
    k = t[0] % len(chains())
    if k not in tr["datasets"]:
        tr["datasets"][k] = tuple(FastImageFolder(str(tr["root"]), transform=chains()[k],
                                                  on_error=policy, readahead=2)
                                  for policy in ("raise", "skip"))
    strict, skip = tr["datasets"][k]
    tr["odd"].write_bytes(image)
    index = next(i for i, (p, _) in enumerate(strict.samples) if p.endswith("zz.jpg"))
    import torch

    torch.manual_seed(t[1])
    try:
        sample, target = strict[index]
    except Exception as exc:  # noqa: BLE001 - the oracle sorts them
        if not isinstance(exc, fd.ImageFileError) or "zz.jpg" not in str(exc):
            raise Finding(f"ds[i] raised {type(exc).__name__}, not an ImageFileError naming "
                          f"the file: {exc}") from exc
    else:
        fused = strict._batch_fused()
        shape = None if fused is None else tuple(fused.output_shape)
        if shape is not None and tuple(sample.shape) != shape:
            raise Finding(f"ds[i] gave shape {tuple(sample.shape)}, the chain fixes {shape}")
    try:
        batch = skip.__getitems__(list(range(len(skip))))
    except Exception as exc:  # noqa: BLE001
        raise Finding(f"on_error='skip' batch raised {type(exc).__name__}: {exc}") from exc
    if len(batch) != len(skip):
        raise Finding(f"on_error='skip' batch has {len(batch)} samples, not {len(skip)}")


RASTER_MESSAGES = re.compile(r"^raster: ")


def _raster_full_and_sampled(call, h: int, w: int, rows, cols) -> None:
    """One raster call at every pixel and at (rows x cols): the sampled one is
    the same pixels of the full one (-1: left zero)."""
    full = np.zeros((h, w), np.uint8)
    call(np.arange(h), np.arange(w), full)
    part = np.zeros((len(rows), len(cols)), np.uint8)
    call(rows, cols, part)
    want = full[np.maximum(rows, 0)][:, np.maximum(cols, 0)]
    want[rows < 0] = 0
    want[:, cols < 0] = 0
    if not np.array_equal(part, want):
        raise Finding("a sampled raster differs from the full one at those pixels")
    return full


def t_raster(data: bytes) -> None:
    """fd_raster.c through _native.raster_polygons / raster_rle / rle_from_string.

    data: h-1, w-1 (low 6 bits each), mode (% 3: 0 polygons, 1 RLE string,
    2 RLE counts; bit 2: coordinates x 2^24, past the bound; bit 3: two
    polygons), the number of
    sampled rows and columns, then the body: polygon coordinates as int16
    eighths, or the RLE string or counts. Oracle: only the documented
    errors ('raster: ' messages, a DecodeError for a truncated string); the
    sampled raster equals the full one at those pixels; the full one equals
    pycocotools' (when importable, and for RLE only when the runs cover the
    image exactly: pycocotools writes past its buffer otherwise).
    """
    from fastdecode import _native

    if len(data) < 5:
        return
    h, w, mode = (data[0] & 63) + 1, (data[1] & 63) + 1, data[2]
    rng = np.random.default_rng(list(data[:5]))
    rows = np.sort(rng.integers(-1, h, (data[3] & 31) + 1))
    cols = rng.integers(-1, w, (data[4] & 31) + 1)
    body = data[5:]
    try:
        import pycocotools.mask as coco
    except ImportError:
        coco = None
    try:
        if mode % 3 == 0:
            values = np.frombuffer(body[:len(body) // 2 * 2], "<i2").astype(np.float64) / 8
            if mode & 4:
                values = values * (1 << 24)
            values = values[:len(values) // 2 * 2]
            half = len(values) // 4 * 2  # bit 3: two polygons, the halves
            parts = (values[:half], values[half:]) if mode & 8 else (values,)
            polys = [p.tolist() for p in parts if len(p) >= 6]
            if not polys:
                return
            full = _raster_full_and_sampled(
                lambda r, c, out: _native.raster_polygons(polys, h, w, r, c, out), h, w, rows, cols)
            if coco is not None and all(len(p) > 4 for p in polys):
                want = coco.decode(coco.merge(coco.frPyObjects(polys, h, w)))
                if not np.array_equal(full, want):
                    raise Finding(f"polygons {polys} on {h} x {w} differ from pycocotools")
            return
        if mode % 3 == 1:
            counts = _native.rle_from_string(body)
        else:
            counts = np.frombuffer(body[:len(body) // 2 * 2], "<u2").astype(np.uint32)
        full = _raster_full_and_sampled(
            lambda r, c, out: _native.raster_rle(counts, h, w, r, c, out), h, w, rows, cols)
        if coco is not None and int(counts.sum()) == h * w and len(counts):
            rle = {"size": [h, w], "counts": [int(c) for c in counts]}
            want = coco.decode(coco.frPyObjects(rle, h, w))
            if not np.array_equal(full, want):
                raise Finding(f"RLE {counts.tolist()} on {h} x {w} differs from pycocotools")
    except fd.DecodeError as exc:
        if "RLE string truncated" not in str(exc):
            raise Finding(f"undocumented DecodeError: {exc}") from exc
    except ValueError as exc:
        if not RASTER_MESSAGES.search(str(exc)):
            raise Finding(f"undocumented ValueError: {exc}") from exc


TARGETS: dict[str, Callable[[bytes], None]] = {
    "read_header": t_read_header,
    "decode_jpeg": t_decode_jpeg,
    "decode_bmp": t_decode_bmp,
    "decode_image": t_decode_image,
    "adjust_colors": t_adjust_colors,
    "augment": t_augment,
    "wds_handler": t_wds_handler,
    "detached_plan": t_detached_plan,
    "dataset_item": t_dataset_item,
    "raster": t_raster,
    "decode_png": t_decode_png,
    "decode_webp": t_decode_webp,
}
assert tuple(TARGETS) == TARGET_NAMES


# The module each pipeline target imports on its first unit, beside torch and
# torchvision (chains()).
FIRST_IMPORTS = {"wds_handler": "fastdecode.webdataset", "detached_plan": "fastdecode.batching._rows",
                 "dataset_item": "fastdecode.datasets"}


def warm_up(target: str) -> None:
    """Imports what ``target``'s first unit would, so that libFuzzer's
    per-unit timeout does not count it: under ASan on a busy machine torch's
    import alone ran past the 20 s (detached_plan and dataset_item in a
    ``FUZZ_SECONDS=20 make fuzz``, tests/fuzz/RESULTS.md, issue 53)."""
    if target in FIRST_IMPORTS:
        chains()
        importlib.import_module(FIRST_IMPORTS[target])


def run(target: str, data: bytes) -> None:
    """Runs one input the way the fuzzer does; raises Finding on a bug."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's bomb / EXIF warnings in the fallback
        TARGETS[target](data)
