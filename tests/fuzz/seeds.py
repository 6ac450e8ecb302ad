"""Seed corpora for the fuzz targets.

Files the tests generate (tests/helpers/jpeg_samples.py's JPEG variants, EXIF
orientations, CMYK; Pillow's BMPs plus a few hand-written BMP layouts Pillow
cannot write: RLE8, RLE4, 16-bit bitfields, OS/2 1.x, top-down; a PNG and a
GIF for the Pillow fallback), plus ../shared/corpus (jpeg-edge, bmpsuite,
photos) when present. Option-taking targets get each seed with the
all-defaults trailer and with one pseudo-random trailer per seed. The
regression inputs (tests/core/regressions/<target>-<name>.bin, raw fuzz
inputs with their trailer) seed their own target as they are, so the
fuzzer starts from every finding fixed so far.
"""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import numpy as np
from PIL import Image

from fuzz.spec import TAKES_OPTIONS, TRAILER

HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE.parent / "core" / "regressions"

MAX_SEED_BYTES = 64 << 10
PHOTOS = 8  # the smallest few photos; the rest add time, not new paths
MAX_OTHER = 12  # files of other formats (Pillow fallback) per target


def bmp_file(width, height, bpp, pixels: bytes, *, header=40, compression=0, palette=b"",
             masks=b"", topdown=False) -> bytes:
    """A BMP from its parts (rows already padded/encoded by the caller)."""
    if header == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bpp)
    else:
        info = struct.pack("<IiiHHIIiiII", header, width, -height if topdown else height, 1, bpp,
                           compression, len(pixels), 2835, 2835,
                           len(palette) // (3 if header == 12 else 4), 0)
        info += bytes(header - 40)
    offset = 14 + len(info) + len(masks) + len(palette)
    return (b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + masks
            + palette + pixels)


def hand_bmps() -> dict[str, bytes]:
    gray_pal = b"".join(bytes((i, i, i, 0)) for i in range(256))
    pal16 = b"".join(bytes((16 * i, 255 - 16 * i, 8 * i, 0)) for i in range(16))
    # runs, an absolute run (padded to a word), a delta, end-of-line, end-of-bitmap
    rle8 = bytes([3, 7, 4, 2, 0, 0,
                  0, 3, 1, 2, 3, 0, 4, 9, 0, 0,
                  0, 2, 2, 0, 5, 200, 0, 0,
                  7, 5, 0, 1])
    rle4 = bytes([8, 0x12, 0, 0,
                  0, 4, 0x34, 0x56, 4, 0x77, 0, 0,
                  8, 0xAB, 0, 0,
                  8, 0x0F, 0, 1])
    px565 = b"".join(struct.pack("<H", (x * 2017 + y * 71) & 0xFFFF) for y in range(5)
                     for x in range(6))
    masks565 = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    bgr = bytes(range(0, 3 * 4 * 3)) + bytes(0)
    os2_pal = b"".join(bytes((i * 60 % 256, i * 30, 255 - i * 20)) for i in range(4))
    return {
        "hand-rle8.bmp": bmp_file(7, 4, 8, rle8, compression=1, palette=gray_pal),
        "hand-rle4.bmp": bmp_file(8, 4, 4, rle4, compression=2, palette=pal16),
        "hand-565.bmp": bmp_file(6, 5, 16, px565, compression=3, masks=masks565),
        "hand-os2-24.bmp": bmp_file(4, 3, 24, bgr, header=12),
        "hand-os2-pal2.bmp": bmp_file(8, 2, 2, bytes([0x1B, 0, 0, 0, 0xE4, 0, 0, 0]),
                                      header=12, palette=os2_pal),
        "hand-topdown-v5.bmp": bmp_file(4, 3, 24, bgr, header=124, topdown=True),
    }


def generated() -> dict[str, bytes]:
    from helpers.jpeg_samples import CJPEG, encode, natural_image, with_exif_orientation

    files: dict[str, bytes] = {}
    for ss in ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"):
        for coding in ("baseline", "progressive", "optimized", "restart", "arithmetic"):
            if CJPEG is None and (coding in ("restart", "arithmetic") or ss in ("4:4:0", "4:1:1")):
                continue
            files[f"gen-{ss.replace(':', '')}-{coding}.jpg"] = encode(19, 37, subsampling=ss,
                                                                     coding=coding)
    if CJPEG is not None:  # an RGB-coded JPEG (no YCbCr transform): Pillow cannot write one
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "in.ppm"
            Image.fromarray(natural_image(19, 37)).save(src)
            files["gen-rgb.jpg"] = subprocess.run([CJPEG, "-rgb", str(src)], check=True,
                                                  capture_output=True).stdout
    base = encode(24, 40)
    for o in range(1, 9):
        files[f"gen-exif{o}.jpg"] = with_exif_orientation(base, o)
    buf = io.BytesIO()
    Image.fromarray(natural_image(16, 24)).convert("CMYK").save(buf, "JPEG", quality=90)
    files["gen-cmyk.jpg"] = buf.getvalue()
    rgb = Image.fromarray(natural_image(11, 23, seed=3))
    for mode in ("1", "L", "P", "RGB", "RGBA"):
        buf = io.BytesIO()
        im = rgb.convert(mode) if mode != "RGBA" else rgb.convert("RGBA")
        im.save(buf, "BMP")
        files[f"gen-pillow-{mode}.bmp"] = buf.getvalue()
    files.update(hand_bmps())
    for fmt in ("PNG", "GIF"):
        buf = io.BytesIO()
        rgb.save(buf, fmt)
        files[f"gen.{fmt.lower()}"] = buf.getvalue()
    # WebP too, so decode_webp has seeds without the shared corpus (lossy and lossless)
    for name, options in (("gen-lossy.webp", {"quality": 80}), ("gen-lossless.webp", {"lossless": True})):
        buf = io.BytesIO()
        rgb.save(buf, "WEBP", **options)
        files[name] = buf.getvalue()
    return files


def shared(corpus: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    photos = []
    for path in sorted(corpus.rglob("*")):
        if not path.is_file() or path.suffix.lower() in (".tsv", ".md", ".txt"):
            continue
        size = path.stat().st_size
        if size > MAX_SEED_BYTES:
            continue
        rel = path.relative_to(corpus)
        if rel.parts[0] == "photos":
            photos.append((size, rel))
            continue
        files[str(rel).replace("/", "__")] = path.read_bytes()
    for _, rel in sorted(photos)[:PHOTOS]:
        files[str(rel).replace("/", "__")] = (corpus / rel).read_bytes()
    return files


def kind(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:2] == b"BM":
        return "bmp"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "other"


def trailers(name: str) -> list[bytes]:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha1(name.encode()).digest()[:8], "little"))
    return [bytes(TRAILER), rng.integers(0, 256, TRAILER, dtype=np.uint8).tobytes()]


def write(root: Path, corpus: Path | None) -> dict[str, int]:
    """Writes root/<target>/ for every target; returns files per target."""
    files = generated()
    if corpus is not None and corpus.is_dir():
        files.update(shared(corpus))
    wanted = {
        "read_header": ("jpeg", "bmp", "png", "webp", "other"),
        "decode_jpeg": ("jpeg",),
        "decode_bmp": ("bmp",),
        "decode_png": ("png",),
        "decode_webp": ("webp",),
        "decode_image": ("jpeg", "bmp", "png", "webp", "other"),
        # the pipelines above the decoders: fewer seeds (each execution runs a chain)
        "wds_handler": ("jpeg", "bmp", "other"),
        "detached_plan": ("jpeg", "bmp", "other"),
        "dataset_item": ("jpeg", "bmp", "other"),
    }
    counts = {}
    for target, kinds in wanted.items():
        out = root / target
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        n = others = 0
        for name, data in files.items():
            k = kind(data)
            if k not in kinds:
                continue
            if k == "other":  # PNG references etc.: a few exercise the fallback
                others += 1
                if others > MAX_OTHER:
                    continue
            if target in TAKES_OPTIONS:
                for i, t in enumerate(trailers(name)):
                    (out / f"{name}.{i}").write_bytes(data + t)
                    n += 1
            else:
                (out / name).write_bytes(data)
                n += 1
        for found in sorted(REGRESSIONS.glob(f"{target}-*.bin")):
            (out / f"regression-{found.name}").write_bytes(found.read_bytes())
            n += 1
        counts[target] = n
    counts["adjust_colors"] = color_seeds(root / "adjust_colors")
    counts["augment"] = augment_seeds(root / "augment")
    counts["raster"] = raster_seeds(root / "raster")
    return counts


def raster_seeds(out: Path) -> int:
    """raster's inputs (targets.t_raster): a triangle, a star and two rings
    inside and across the image, the same scaled past the bound, an RLE
    string of pycocotools' encoding and a truncated one, runs that cover the
    image and runs that do not."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    polygons = {
        "triangle": [(1, 1), (30, 3), (12, 25)],
        "star": [(20 + 15 * np.cos(a) * (1 if k % 2 else 0.4),
                  16 + 14 * np.sin(a) * (1 if k % 2 else 0.4))
                 for k, a in enumerate(np.linspace(0, 2 * np.pi, 10, endpoint=False))],
        "across": [(-5, -3), (45, 2), (40, 40), (3, 36)],
        "two": [(2, 2), (10, 2), (10, 10), (2, 10), (14, 14), (30, 14), (30, 30), (14, 30)],
    }
    n = 0
    for name, pts in polygons.items():
        body = (np.array(pts, np.float64).reshape(-1) * 8).round().astype("<i2").tobytes()
        for mode in (0, 4, 24) if name == "two" else (0, 4):  # 24: two polygons
            (out / f"{name}-{mode}").write_bytes(bytes([31, 39, mode, 17, 23]) + body)
            n += 1
    (out / "rle-string").write_bytes(bytes([15, 11, 1, 9, 7]) + b"52203`0g1M1O1O0O2N0O1O2N1O0N3M1")
    (out / "rle-truncated").write_bytes(bytes([15, 11, 1, 9, 7]) + b"0o")
    runs = np.array([5, 40, 30, 70, 47], "<u2")  # 12 x 16 = 192
    (out / "rle-exact").write_bytes(bytes([11, 15, 2, 5, 6]) + runs.tobytes())
    (out / "rle-short").write_bytes(bytes([11, 15, 2, 5, 6]) + runs[:3].tobytes())
    return n + 4


def color_seeds(out: Path) -> int:
    """adjust_colors' inputs (targets.t_adjust_colors): each op alone, the
    four together, factors at 0, 1, large, negative, NaN and inf, over a
    natural image."""
    from helpers.jpeg_samples import natural_image

    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    pixels = natural_image(7, 9).tobytes()
    factors = (0.0, 0.5, 1.0, 1.7, 40.0, -0.3, float("nan"), float("inf"))
    shifts = (0.0, 1.0, 13.0, 128.0, 255.0, -1.0, 2.5, float("nan"))  # hue: a uint8 shift
    n = 0
    for op in range(4):  # brightness, contrast, saturation, hue
        for f in (factors if op < 3 else shifts):
            step = bytes([op + 1]) + struct.pack("<f", f)
            (out / f"op{op}-{n}").write_bytes(bytes([6, 8, 1]) + step + pixels)
            n += 1
    chain = b"".join(bytes([op + 1]) + struct.pack("<f", f)
                     for op, f in ((0, 1.3), (1, 0.6), (2, 1.9), (3, 20.0)))
    (out / "all-four").write_bytes(bytes([6, 8, 4]) + chain + pixels)
    (out / "unknown-op").write_bytes(bytes([0, 0, 1, 0]) + struct.pack("<f", 1.0))
    return n + 2


def augment_step(kind: int, params: bytes = b"", resample: int = 0, fill: int | None = None) -> bytes:
    """One of t_augment's 13-byte step records (targets.augment_steps)."""
    b = (kind + 1) | ({0: 0, 1: 1, 2: 2, 3: 3}[resample] << 3)
    if fill is not None:
        b |= 32 | (fill << 6)
    return bytes([b]) + params.ljust(12, b"\0")[:12]


def augment_seeds(out: Path) -> int:
    """augment's inputs (targets.t_augment): each kind alone with typical and
    edge parameters (rotations, shears, translations, each resample, a fill;
    LUTs of each length; sharpness factors; colour steps; blur kernels and
    sigmas, refused ones included), a policy-like
    sequence, and refusals, over a natural image and a 1 x 1 one."""
    from helpers.jpeg_samples import natural_image

    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    pixels = natural_image(9, 11).tobytes()
    c, s = np.cos(0.5), np.sin(0.5)
    matrices = [(1, 0, 0, 0, 1, 0), (1, 0.3, -2, 0, 1, 0), (1, 0, 0, -0.3, 1, 1.5),
                (1, 0, 4.5, 0, 1, -3), (c, s, -2, -s, c, 3), (-1, 0, 11, 0, -1, 9),
                (2, 0, 0, 0, 0.5, 0), (60000, 1, 0, 0, 1, 0), (0.5, 0.1, 40000, 0.1, 1, 0),
                (1, 0, float("inf"), 0, 1, 0), (float("nan"), 0, 0, 0, 1, 0)]
    records = []
    for m in matrices:
        params = np.array(m, "<f2").tobytes()
        records += [augment_step(1, params, r, f) for r in (0, 2, 3) for f in (None, 2)]
    records.append(augment_step(1, np.array(matrices[1], "<f2").tobytes(), 1))
    records += [augment_step(2, bytes([p0, p1, p2, sel, 100]))
                for p0, p1, p2, sel in ((1, 0, 0, 0), (3, 7, 255, 1), (0, 0, 0, 2), (5, 9, 3, 0))]
    records += [augment_step(3), augment_step(4)]
    records += [augment_step(5, struct.pack("<f", f))
                for f in (0.0, 0.1, 1.0, 1.9, 5.0, -2.0, float("nan"))]
    records += [augment_step(0, bytes([op]) + struct.pack("<f", f))
                for op, f in ((1, 1.5), (2, 0.3), (3, 0.0), (4, 13.0), (4, 2.5), (7, 1.0))]
    records += [augment_step(6, bytes([kx, ky]) + np.array(sig, "<f2").tobytes())
                for kx, ky, sig in ((3, 3, (0.5, 0.5)), (5, 1, (1.7, 0.3)), (1, 7, (2.0, 9.0)),
                                    (4, 3, (1.0, 1.0)), (15, 15, (1.0, 1.0)),
                                    (3, 3, (0.0, 1.0)), (3, 3, (float("nan"), 1.0)))]
    records += [augment_step(-1)]
    n = 0
    for rec in records:
        for head, body in ((bytes([8, 10, 1]), pixels), (bytes([0, 0, 1]), pixels[:3])):
            (out / f"step-{n}").write_bytes(head + rec + body)
            n += 1
    policy = b"".join([augment_step(1, np.array(matrices[4], "<f2").tobytes(), 2, 2),
                       augment_step(5, struct.pack("<f", 1.6)), augment_step(4),
                       augment_step(0, bytes([2]) + struct.pack("<f", 0.55)),
                       augment_step(2, bytes([1, 0, 0xF0, 0])), augment_step(3),
                       augment_step(1, np.array(matrices[2], "<f2").tobytes(), 3)])
    (out / "policy").write_bytes(bytes([8, 10, 7]) + policy + pixels)
    return n + 1
