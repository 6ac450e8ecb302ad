"""PNG and WebP samples and their oracle for tests/core/test_png.py and test_webp.py.

The oracle is what torchvision's ImageFolder loads: ``PIL.Image.open(f)
.convert(mode)`` (a palette with byte-string transparency through RGBA, as
fastdecode's Pillow path has it, the same pixels). A chunk writer crafts the
corrupt PNGs (bad CRCs, truncated IDAT, huge IHDR, zlib bombs), and
``photos`` re-encodes the shared photo corpus.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.corpus import CORPUS


def pillow_pixels(data: bytes, mode: str = "RGB"):
    """Pillow's pixels as (H, W, C) uint8, or None where Pillow refuses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a bomb warning counts as a refusal
            with Image.open(io.BytesIO(data)) as im:
                if im.mode == "P" and isinstance(im.info.get("transparency"), bytes):
                    im = im.convert("RGBA")
                arr = np.asarray(im.convert(mode))
    except Exception:  # noqa: BLE001 - anything Pillow raises is a refusal
        return None
    return arr[..., None] if arr.ndim == 2 else arr


def pillow_image(data: bytes):
    """The RGB PIL image torchvision's loader makes of ``data``."""
    with Image.open(io.BytesIO(data)) as im:
        if im.mode == "P" and isinstance(im.info.get("transparency"), bytes):
            return im.convert("RGBA").convert("RGB")  # the same pixels, without the warning
        return im.convert("RGB")


def corpus_files(kind: str, suffix: str):
    """pytest params of every file under corpus/<kind> (id: its path there);
    one skipped param when the corpus is absent."""
    base = CORPUS / kind
    files = sorted(base.rglob(f"*{suffix}")) if base.is_dir() else []
    if not files:
        return [pytest.param(None, id=f"{kind}-absent",
                             marks=pytest.mark.skip(reason=f"shared corpus {kind!r} not present"))]
    return [pytest.param(f, id=str(f.relative_to(base))) for f in files]


def photos(fmt: str, count: int, **save) -> list[bytes]:
    """The first ``count`` photos of the shared corpus re-encoded to ``fmt``."""
    files = sorted(p for p in (CORPUS / "photos").rglob("*") if p.suffix.lower() in
                   (".jpeg", ".jpg", ".png"))[:count]
    if not files:
        pytest.skip("shared corpus 'photos' not present")
    out = []
    for path in files:
        buf = io.BytesIO()
        with Image.open(path) as im:
            im.convert("RGB").save(buf, fmt, **save)
        out.append(buf.getvalue())
    return out


# --- a PNG chunk writer -------------------------------------------------------

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunk(kind: bytes, body: bytes, crc: int | None = None, length: int | None = None) -> bytes:
    """One chunk; ``crc`` / ``length`` override the right ones."""
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body) if length is None else length) + kind + body + \
        struct.pack(">I", crc & 0xFFFFFFFF)


def ihdr(width: int, height: int, depth: int = 8, color_type: int = 2, interlace: int = 0):
    return chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0,
                                      interlace))


def png(width: int, height: int, rows: bytes, color_type: int = 2, depth: int = 8,
        extra: bytes = b"", idat: bytes | None = None) -> bytes:
    """A PNG of filtered ``rows`` (each starting with its filter byte)."""
    stream = zlib.compress(rows, 9) if idat is None else idat
    return (SIGNATURE + ihdr(width, height, depth, color_type) + extra + chunk(b"IDAT", stream)
            + chunk(b"IEND", b""))


def rgb_rows(width: int, height: int, seed: int = 0) -> bytes:
    """Random 8-bit RGB rows, filter 0."""
    pix = np.random.default_rng(seed).integers(0, 256, (height, width * 3), dtype=np.uint8)
    return b"".join(b"\x00" + row.tobytes() for row in pix)


def read(path: Path) -> bytes:
    return path.read_bytes()
