"""Measures the default mode's distance from torchvision per op combination on a photo folder.

Not a test (no ``test_`` prefix): the numbers behind the bound in ``fuse``'s
docstring. Run from the repository root:

    PYTHONPATH=.:tests python tests/transforms/bound_matrix.py /work/shared/corpus/photos

Prints, per combination: images, min / median PSNR (dB) and max abs error
(levels, uint8 pixels) of ``fuse(chain)(data)`` against
``chain(Image.open(f).convert('RGB'))`` with the same seed. ``--webp Q``
measures the photos re-encoded by Pillow to WebP at quality Q instead
(docs/decisions/png-webp.md).
"""

from __future__ import annotations

import argparse
import io
import pathlib
import statistics
import sys

import numpy as np
import torch
from PIL import Image

from fastdecode.transforms import fuse

from helpers.fusion import COMBINATIONS, pil_of, psnr


def webp(path: pathlib.Path, quality: int) -> bytes:
    """The photo at ``path`` re-encoded by Pillow to lossy WebP."""
    buf = io.BytesIO()
    with Image.open(path) as im:
        im.convert("RGB").save(buf, "WEBP", quality=quality)
    return buf.getvalue()


def measure(name: str, files: list[pathlib.Path], exact: bool = False,
            webp_quality: int | None = None, **options) -> dict:
    chain = COMBINATIONS[name]()
    f = fuse(chain, exact=exact, **options)
    values, worst = [], 0
    for i, path in enumerate(files):
        data = path.read_bytes() if webp_quality is None else webp(path, webp_quality)
        torch.manual_seed(i)
        ours = f(data).as_subclass(torch.Tensor).numpy().astype(np.int32)
        torch.manual_seed(i)
        theirs = chain(pil_of(data)).as_subclass(torch.Tensor).numpy().astype(np.int32)
        values.append(psnr(ours.astype(float), theirs.astype(float)))
        worst = max(worst, int(np.abs(ours - theirs).max()))
    finite = [v for v in values if v != float("inf")] or [float("inf")]
    return {"name": name, "n": len(files), "min": min(values), "median": statistics.median(values),
            "max_abs": worst, "exact_share": sum(v == float("inf") for v in values) / len(files),
            "worst_finite": min(finite)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--dct-margin", type=float, default=None)
    parser.add_argument("--webp", type=int, default=None, metavar="QUALITY",
                        help="re-encode each photo to lossy WebP at this quality first")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    files = sorted(p for p in args.folder.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg"))
    if args.limit:
        files = files[:args.limit]
    print(f"{'combination':26s} {'n':>4s} {'min dB':>7s} {'median':>7s} {'max|d|':>6s} "
          f"{'bit-exact':>9s}")
    for name in args.only or COMBINATIONS:
        options = {} if args.dct_margin is None else {"dct_margin": args.dct_margin}
        r = measure(name, files, exact=args.exact, webp_quality=args.webp, **options)
        print(f"{r['name']:26s} {r['n']:4d} {r['min']:7.2f} {r['median']:7.2f} "
              f"{r['max_abs']:6d} {r['exact_share']:9.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
