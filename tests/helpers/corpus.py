"""The optional shared corpora (``../shared/corpus`` from the project root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# ../shared from the project root, when the checkout has it (CI does; a
# user's clone usually does not, and those tests skip).
SHARED = Path(os.environ.get("FASTDECODE_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"


def corpus_dir(name: str) -> Path | None:
    path = CORPUS / name
    return path if path.is_dir() else None


def read_manifest(name: str) -> list[dict[str, str]]:
    """Rows of corpus/<name>/MANIFEST.tsv as dicts; [] when absent."""
    base = corpus_dir(name)
    if base is None or not (base / "MANIFEST.tsv").exists():
        return []
    lines = (base / "MANIFEST.tsv").read_text().splitlines()
    header = lines[0].lstrip("#").split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:] if line.strip()]


def corpus_params(name: str, rows, id_key: str):
    """pytest params for corpus rows, or one skipped param when absent."""
    if not rows:
        return [pytest.param(None, id=f"{name}-absent",
                             marks=pytest.mark.skip(reason=f"shared corpus {name!r} not present"))]
    return [pytest.param(row, id=row[id_key]) for row in rows]
