"""Measures the default mode's distance from torchvision / timm per augmentation policy on a photo folder.

Not a test (no ``test_`` prefix): the numbers behind the floors in
``test_augment_policies.py`` and docs/decisions/augment.md. Run from the
repository root:

    PYTHONPATH=.:tests python tests/transforms/augment_bound.py /work/shared/corpus/photos [--count N]

Prints, per policy of ``test_augment_policies.POLICIES`` (after
RandomResizedCrop of ``--size`` + flip, uint8 result), then per op of the
vocabulary (a single-op class applied every time): cases, min / median PSNR
(dB), the share bit-identical and the median of the others, of
``fuse(chain)`` against the chain on ``Image.open(f).convert('RGB')`` with
the same seeds.
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


def _op_chain(make, size: int):
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(size), make(), T.PILToTensor()])


def _single_ops() -> dict:
    """One op of the vocabulary per chain, applied every time (p=1)."""
    from torchvision import transforms as T

    B = T.InterpolationMode.BILINEAR
    return {
        "rotate (bilinear)": lambda: T.RandomRotation(30, interpolation=B),
        "translate (bilinear)": lambda: T.RandomAffine(0, translate=(0.3, 0.3),
                                                       interpolation=B),
        "shear (bilinear)": lambda: T.RandomAffine(0, shear=(-17, 17, -17, 17),
                                                   interpolation=B),
        "rotate (nearest)": lambda: T.RandomRotation(30),
        "brightness / contrast / colour": lambda: T.ColorJitter(0.9, 0.9, 0.9),
        "sharpness": lambda: T.RandomAdjustSharpness(1.9, p=1.0),
        "posterize 4 bits": lambda: T.RandomPosterize(4, p=1.0),
        "solarize 128": lambda: T.RandomSolarize(128, p=1.0),
        "autocontrast": lambda: T.RandomAutocontrast(p=1.0),
        "equalize": lambda: T.RandomEqualize(p=1.0),
        "invert": lambda: T.RandomInvert(p=1.0),
    }


def measure(policy: str, files: list[pathlib.Path], seeds: int, chain=None,
            size: int = 176) -> dict:
    chain = _chain(policy, size) if chain is None else chain
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
    parser.add_argument("--size", type=int, default=176,
                        help="the crop's size (default 176; smaller: more reduced decodes)")
    args = parser.parse_args(argv)
    files = sorted(args.folder.rglob("*.JPEG"))[:args.count]
    print(f"{len(files)} photos x {args.seeds} seeds, crop {args.size}, default mode vs "
          "the library")
    print("| policy | cases | min PSNR | median PSNR | bit-identical | median of the others |")
    print("|---|---:|---:|---:|---:|---:|")
    for policy in POLICIES:
        r = measure(policy, files, args.seeds, size=args.size)
        print(f"| {policy} | {r['cases']} | {r['min']:.1f} | {r['median']:.1f} | "
              f"{100 * r['identical']:.0f} % | {r['median_finite']:.1f} |")
    print("\nPer op (RandomResizedCrop, the op, PILToTensor):")
    print("| op | cases | min PSNR | median PSNR | bit-identical | median of the others |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in _single_ops().items():
        r = measure(name, files, args.seeds, _op_chain(make, args.size))
        print(f"| {name} | {r['cases']} | {r['min']:.1f} | {r['median']:.1f} | "
              f"{100 * r['identical']:.0f} % | {r['median_finite']:.1f} |")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
