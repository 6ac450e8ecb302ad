"""The files ``fastdecode convert`` writes: the BMP and JPEG writers, the
atomic write through a temporary name, and the completeness check a resumed
run trusts instead of a decode. Decision record: docs/decisions/cli.md."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from fastdecode._atomic import AtomicFile

__all__ = ["COMPLETENESS_CHECKS", "OUTPUT_SUFFIXES", "PARTIAL_SUFFIX", "SUBSAMPLINGS", "WRITERS",
           "EncodeOptions", "is_complete", "is_partial", "partial_path", "write_atomically",
           "write_bmp", "write_jpeg"]

OUTPUT_SUFFIXES = {"bmp": ".bmp", "jpeg": ".jpg"}
SUBSAMPLINGS = ("4:4:4", "4:2:2", "4:2:0")
# The temporary name is fixed per output, so a file left by a killed run is
# overwritten and renamed by the rerun that redoes that output (and removed
# by the next run's plan when nothing redoes it). ImageFolder skips it:
# ".partial" is not an image extension.
PARTIAL_SUFFIX = ".partial"
# BITMAPFILEHEADER (14 bytes) + BITMAPINFOHEADER (40 bytes).
BMP_HEADER = struct.Struct("<2sIHHIIiiHHIIiiII")
BMP_PIXELS_PER_METRE = 2835  # 72 dpi, what most writers put there


@dataclass(frozen=True)
class EncodeOptions:
    """How each image is converted; sent to every worker process."""

    to: str
    quality: int = 90
    subsampling: str = "4:2:0"
    max_side: int | None = None


def bmp_row_stride(width: int) -> int:
    return (width * 3 + 3) & ~3


def write_bmp(file: BinaryIO, pixels: np.ndarray, options: EncodeOptions) -> None:
    """24-bit bottom-up BI_RGB: the BMP variant fastdecode reads fastest."""
    height, width, _ = pixels.shape
    stride = bmp_row_stride(width)
    image_size = stride * height
    file.write(BMP_HEADER.pack(
        b"BM", BMP_HEADER.size + image_size, 0, 0, BMP_HEADER.size,
        40, width, height, 1, 24, 0, image_size,
        BMP_PIXELS_PER_METRE, BMP_PIXELS_PER_METRE, 0, 0,
    ))
    rows = np.zeros((height, stride), np.uint8)  # the zeros are the row padding
    rows[:, : width * 3].reshape(height, width, 3)[...] = pixels[::-1, :, ::-1]
    file.write(rows.data)


def write_jpeg(file: BinaryIO, pixels: np.ndarray, options: EncodeOptions) -> None:
    """Encodes the pixels as a JPEG (Pillow's encoder) into ``file``.

    Parameters
    ----------
    file : BinaryIO
        The open output file.
    pixels : numpy.ndarray
        (H, W, 3) uint8 RGB pixels.
    options : EncodeOptions
        Its ``quality`` and ``subsampling`` are used.
    """
    from PIL import Image

    Image.fromarray(pixels).save(
        file, format="JPEG", quality=options.quality, subsampling=options.subsampling,
        optimize=False,
    )


WRITERS: dict[str, Callable[[BinaryIO, np.ndarray, EncodeOptions], None]] = {
    "bmp": write_bmp,
    "jpeg": write_jpeg,
}


def partial_path(path: Path) -> Path:
    """The temporary name ``path`` is written under before the rename."""
    return path.with_name(f".{path.name}{PARTIAL_SUFFIX}")


def is_partial(name: str) -> bool:
    """Whether ``name`` is a temporary name of :func:`partial_path`."""
    return name.startswith(".") and name.endswith(tuple(
        suffix + PARTIAL_SUFFIX for suffix in OUTPUT_SUFFIXES.values()))


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> int:
    """Writes through a temporary file renamed into place; returns the size.

    No fsync: after a crash a file may be short, and the completeness check
    of the next run catches that at a fraction of the cost of a sync per file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary file removed on any failure, interrupts too: never a half-written file
    with AtomicFile(path, temp=partial_path(path)) as file:
        write(file)
        size = file.tell()
    return size


def is_complete_bmp(file: BinaryIO, size: int) -> bool:
    header = file.read(BMP_HEADER.size)
    if len(header) < BMP_HEADER.size:
        return False
    magic, file_size, _, _, offset, _, width, height, _, bits, *_ = BMP_HEADER.unpack(header)
    expected = offset + bmp_row_stride(width) * abs(height)
    return magic == b"BM" and bits == 24 and file_size == size == expected


def is_complete_jpeg(file: BinaryIO, size: int) -> bool:
    if size < 4:
        return False
    head = file.read(2)
    file.seek(-2, os.SEEK_END)
    return head == b"\xff\xd8" and file.read(2) == b"\xff\xd9"  # SOI ... EOI


COMPLETENESS_CHECKS: dict[str, Callable[[BinaryIO, int], bool]] = {
    "bmp": is_complete_bmp,
    "jpeg": is_complete_jpeg,
}


def is_complete(path: Path, to: str) -> bool:
    """Whether an earlier run finished this output (a cheap check, no decode)."""
    try:
        with open(path, "rb") as file:
            return COMPLETENESS_CHECKS[to](file, os.fstat(file.fileno()).st_size)
    except OSError:  # missing or unreadable: (re)convert, and report it if that fails
        return False
