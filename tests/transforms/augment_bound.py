"""Measures the default mode's distance from torchvision / timm per augmentation policy on a photo folder.

Not a test (no ``test_`` prefix): the numbers behind the floors in
``test_augment_policies.py`` and docs/decisions/augment.md. Run from the
repository root:

    PYTHONPATH=.:tests python tests/transforms/augment_bound.py /work/shared/corpus/photos [--count N]

Prints, per policy of ``test_augment_policies.POLICIES`` (after
RandomResizedCrop 176 + flip, uint8 result): cases, min / median PSNR (dB),
the share bit-identical, and the ops of the worst case, of ``fuse(chain)``
against the chain on ``Image.open(f).convert('RGB')`` with the same seeds.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import numpy as np
from transforms.test_augment_policies import POLICIES, _chain, _run

from fastdecode.transforms import fuse

from helpers.fusion import pil_of, pixels, psnr


def measure(policy: str, files: list[pathlib.Path], seeds: int) -> dict:
    chain = _chain(policy)
    f = fuse(chain)
    values = []
    for path in files:
        data = path.read_bytes()
        for seed in range(seeds):
            theirs, _ = _run(lambda d: chain(pil_of(d)), data, seed)
            ours, _ = _run(f, data, seed)
            if isinstance(theirs, str):
                continue
            values.append(psnr(pixels(ours), pixels(theirs)))
    finite = [v for v in values if v != float("inf")] or [float("inf")]
    return {"cases": len(values), "min": min(values), "median": statistics.median(values),
            "identical": sum(v == float("inf") for v in values) / len(values),
            "median_finite": statistics.median(finite)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--count", type=int, default=48, help="photos (default 48)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per photo (default 4)")
    args = parser.parse_args(argv)
    files = sorted(args.folder.rglob("*.JPEG"))[:args.count]
    print(f"{len(files)} photos x {args.seeds} seeds, default mode vs the library")
    print("| policy | cases | min PSNR | median PSNR | bit-identical | median of the others |")
    print("|---|---:|---:|---:|---:|---:|")
    for policy in POLICIES:
        r = measure(policy, files, args.seeds)
        print(f"| {policy} | {r['cases']} | {r['min']:.1f} | {r['median']:.1f} | "
              f"{100 * r['identical']:.0f} % | {r['median_finite']:.1f} |")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
