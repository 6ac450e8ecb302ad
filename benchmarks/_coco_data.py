"""Generated COCO annotations over real photos, for tests/targets and bench_detection.

Per image 3 to 8 instances inside the image: polygons (one or two star-shaped
rings, fractional vertices), uncompressed RLE for crowd instances and
compressed RLE (pycocotools' string) for some others, each with its bbox,
area, category and iscrowd. Deterministic for a seed. See
docs/decisions/detection.md.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import PIL.Image

__all__ = ["make_coco", "rle_string"]


def rle_string(counts: list[int]) -> str:
    """pycocotools' compressed RLE string (rleToString) of run lengths."""
    out = []
    for i, c in enumerate(counts):
        x = int(c) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = (x != -1) if (ch & 0x10) else (x != 0)
            if more:
                ch |= 0x20
            out.append(chr(ch + 48))
    return "".join(out)


def _star(rng: random.Random, cx: float, cy: float, r: float, w: int, h: int) -> list[float]:
    n = rng.randint(5, 14)
    pts = []
    for k in range(n):
        a = 2 * math.pi * k / n
        rr = r * rng.uniform(0.45, 1.0)
        pts += [min(max(cx + rr * math.cos(a), 0.0), w - 0.01),
                min(max(cy + rr * math.sin(a), 0.0), h - 0.01)]
    return [round(v, 2) for v in pts]


def _runs(mask: np.ndarray) -> list[int]:
    flat = mask.T.reshape(-1)  # column-major
    change = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(edges).tolist()
    return ([0] + runs) if flat[0] else runs


def make_coco(files: list[Path], root: Path, out: Path, seed: int = 0) -> Path:
    """Writes a COCO instances JSON for ``files`` (paths under ``root``) to ``out``.

    Parameters
    ----------
    files : list of Path
        The images.
    root : Path
        The folder ``file_name`` is relative to.
    out : Path
        The JSON written.
    seed : int, default 0
        The seed of the instances.

    Returns
    -------
    Path
        ``out``.
    """
    rng = random.Random(seed)
    images, anns = [], []
    for image_id, path in enumerate(files, 1):
        with PIL.Image.open(path) as im:
            w, h = im.size
        images.append({"id": image_id, "file_name": str(path.relative_to(root)), "height": h,
                       "width": w})
        for _ in range(rng.randint(3, 8)):
            r = rng.uniform(0.05, 0.3) * min(w, h)
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            kind = rng.random()
            crowd = 0
            if kind < 0.6:
                seg: object = [_star(rng, cx, cy, r, w, h)]
                if rng.random() < 0.3:
                    seg.append(_star(rng, min(cx + r, w - r / 3), cy, r / 3, w, h))  # type: ignore[attr-defined]
            else:
                yy, xx = np.mgrid[:h, :w]
                mask = ((yy - cy) ** 2 / (r * r) + (xx - cx) ** 2 / (r * r * 2.0)) <= 1.0
                runs = _runs(mask.astype(np.uint8))
                crowd = int(kind < 0.8)
                seg = {"size": [h, w], "counts": runs if crowd else rle_string(runs)}
            x0, y0 = max(0.0, cx - r * 1.5), max(0.0, cy - r)
            x1, y1 = min(float(w), cx + r * 1.5), min(float(h), cy + r)
            anns.append({"id": len(anns) + 1, "image_id": image_id,
                         "category_id": rng.randint(1, 90), "iscrowd": crowd,
                         "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
                         "area": round((x1 - x0) * (y1 - y0), 2), "segmentation": seg})
    categories = [{"id": i, "name": f"c{i}"} for i in range(1, 91)]
    out.write_text(json.dumps({"images": images, "annotations": anns, "categories": categories}))
    return out
