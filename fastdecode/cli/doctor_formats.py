"""``fastdecode doctor ROOT``'s formats check: which share of a tree's files decode natively.

A sample of the tree's files (evenly spaced over its sorted listing) is
sniffed and, for the formats the C core has, decoded natively once (a
variant it lacks, such as a lossless JPEG or an animated WebP, counts as
Pillow's); the check reports the share per format and path, and warns when
more than ``PILLOW_WARN_SHARE`` of the sample takes Pillow, the share at which
a dataset warns as it loads. See docs/decisions/png-webp.md ("The slow path,
visible").
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from fastdecode import _formats, _native
from fastdecode._decode_paths import PILLOW_WARN_SHARE
from fastdecode.errors import DecodeError, UnsupportedFormatError

__all__ = ["check_formats", "sample_formats"]


def _files(root: Path) -> list[str]:
    out: list[str] = []
    for base, dirs, names in os.walk(root):
        dirs.sort()
        out.extend(os.path.join(base, n) for n in sorted(names) if not n.startswith("."))
    return out


def _path_of(data: bytes) -> tuple[str, str]:
    """(format, 'native' | 'pillow' | 'unreadable') of one file's bytes."""
    row = _formats.native(_native.sniff(data))
    if row is not None:
        try:
            row.decode(data)
            return row.name, "native"
        except UnsupportedFormatError:
            if not row.pillow_variants:
                return row.name, "unreadable"
            return row.name, "pillow"
        except DecodeError:
            return row.name, "unreadable"
    try:
        from fastdecode.api import read_header

        return read_header(data).format, "pillow"
    except DecodeError:
        return "other", "unreadable"


def sample_formats(root: Path, sample: int) -> dict[str, Any]:
    """The formats of up to ``sample`` files of ``root``: counts by
    (format, path), the file count and the native share of those read."""
    files = _files(root)
    step = max(1, len(files) // max(1, sample))
    counts: Counter[tuple[str, str]] = Counter()
    for path in files[::step][:sample]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            counts["unreadable", "unreadable"] += 1
            continue
        counts[_path_of(data)] += 1
    decoded = sum(n for (_, path), n in counts.items() if path != "unreadable")
    native = sum(n for (_, path), n in counts.items() if path == "native")
    return {"files": len(files), "sampled": sum(counts.values()),
            "counts": {f"{fmt}/{path}": n for (fmt, path), n in sorted(counts.items())},
            "native_share": native / decoded if decoded else None,
            "native_formats": list(_native.NATIVE_FORMATS)}


def check_formats(facts: dict, root: Path, sample: int) -> tuple[str, str, str]:
    """(status, finding, recommendation) of the formats under ``root``."""
    found = sample_formats(root, sample)
    facts["formats"] = found
    if not found["sampled"]:
        return "ok", "no files to sample", "nothing to change"
    share = found["native_share"]
    parts = ", ".join(f"{key} {100 * n / found['sampled']:.0f} %"
                      for key, n in found["counts"].items())
    if share is None:
        return "warn", f"{found['sampled']} sampled files: {parts}; none decodes", \
            "check that ROOT holds images"
    finding = (f"{found['sampled']} of {found['files']} files sampled: {parts}; "
               f"{100 * share:.0f} % decode natively")
    if 1 - share > PILLOW_WARN_SHARE:
        return "warn", finding + " (the rest at Pillow's speed)", \
            ("convert the tree (fastdecode convert ROOT OUT) to a native format: "
             f"{', '.join(n.upper() for n in found['native_formats'])}")
    return "ok", finding, "nothing to change"
