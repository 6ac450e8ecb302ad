"""PNG and WebP, one thread: full decode and the fused train / eval chains against Pillow.

    python -m benchmarks.bench_formats [--data DIR] [--limit N] [--rounds R] [--quick] [--json PATH]

The JPEG photos of ``--data`` (default: the generated ImageNet-like set; the
acceptance runs use ``../shared/corpus/photos``) are re-encoded in memory to
PNG (8-bit RGB, Pillow's default compression), WebP lossy (quality 90) and
WebP lossless. Per format, each row times every image once per round, the
rows of a format taking turns inside each round (``round_order``: A B, then
B A); a row's figure is its median round, its ratio the median of its
per-round ratios to the baseline (``paired_ratio``):

* decode: ``fastdecode.decode_image`` vs Pillow (``Image.open().convert('RGB')``
  and ``np.asarray``, what ImageFolder does), and OpenCV's ``cv2.imdecode``
  where installed (BGR, no conversion: a lower bound of its cost);
* train: RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize,
  ``fuse(chain)`` (exact=False: WebP decodes its crop at libwebp's reduced
  scale) and ``fuse(chain, exact=True)`` vs torchvision on the PIL image;
* eval: Resize(256) + CenterCrop(224) + ToTensor + Normalize, the same three;
* train and eval also time the floor of a fused chain: ``decode_image`` of
  the crop alone (the source pixels the chain keeps, drawn as the chain
  draws them), no resample and no tensor tail. For WebP that is libwebp
  decoding every macroblock of the rows down to the crop's last (its
  coefficients are one arithmetic-coded stream), which bounds the chains'
  ratio (docs/decisions/png-webp.md).

The acceptance targets of issue 53 (docs/decisions/png-webp.md) are in the
JSON: PNG decode >= 1.5x and train >= 1.8x; WebP lossy train and eval >= 2x,
decode >= 1.0x.
"""

from __future__ import annotations

import io
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import _common as common

FORMATS = {  # name: (Pillow format, save options)
    "png": ("PNG", {}),
    "webp-lossy": ("WEBP", {"quality": 90}),
    "webp-lossless": ("WEBP", {"lossless": True}),
}
TARGETS = {("png", "decode"): 1.5, ("png", "train"): 1.8, ("webp-lossy", "train"): 2.0,
           ("webp-lossy", "eval"): 2.0, ("webp-lossy", "decode"): 1.0}


def photos(root: Path, limit: int) -> list[bytes]:
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    step = max(1, len(files) // limit)
    return [p.read_bytes() for p in files[::step][:limit]]


def encode(jpegs: list[bytes], fmt: str, save: dict) -> list[bytes]:
    from PIL import Image

    out = []
    for data in jpegs:
        buf = io.BytesIO()
        with Image.open(io.BytesIO(data)) as im:
            im.convert("RGB").save(buf, fmt, **save)
        out.append(buf.getvalue())
    return out


def rows(kind: str) -> dict[str, Callable[[bytes], Any]]:
    """The row runners of one measurement, the baseline first."""
    import torch
    import torchvision.transforms as T
    from PIL import Image

    import fastdecode
    from fastdecode.transforms import fuse

    def pillow(data: bytes):
        with Image.open(io.BytesIO(data)) as im:
            return im.convert("RGB")

    if kind == "decode":
        out: dict[str, Callable[[bytes], Any]] = {
            "Pillow": lambda d: np.asarray(pillow(d)),
            "fastdecode": fastdecode.decode_image,
        }
        try:
            import cv2

            cv2.setNumThreads(1)
            out["OpenCV imdecode"] = lambda d: cv2.imdecode(np.frombuffer(d, np.uint8),
                                                            cv2.IMREAD_COLOR)
        except ImportError:
            pass
        return out
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    chain = (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
             if kind == "train" else
             T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm]))
    fast, exact = fuse(chain), fuse(chain, exact=True)
    torch.manual_seed(0)
    return {"torchvision+PIL": lambda d: chain(pillow(d)), "fastdecode fuse": fast,
            "fastdecode fuse exact=True": exact, FLOOR: lambda d: crop_alone(kind, d)}


FLOOR = "fastdecode crop decode alone (floor)"


def kept_box(kind: str, height: int, width: int) -> tuple[int, int, int, int]:
    """The source crop (top, left, height, width) of the pixels ``kind``'s
    chain keeps: RandomResizedCrop's draw (torchvision's get_params, on the
    torch RNG as the chain draws it), or the centre square that Resize(256) +
    CenterCrop(224) keeps, rounded out to whole pixels."""
    import torch
    import torchvision.transforms as T

    if kind == "train":
        stand_in = torch.empty((1, 1), dtype=torch.uint8).expand(height, width)
        top, left, h, w = T.RandomResizedCrop.get_params(stand_in, [0.08, 1.0], [3 / 4, 4 / 3])
        torch.rand(1)  # RandomHorizontalFlip's draw
        return top, left, h, w
    side = min(height, width, math.ceil(224 * min(height, width) / 256))
    return (height - side) // 2, (width - side) // 2, side, side


def crop_alone(kind: str, data: bytes):
    """The floor of ``kind``'s fused chain: the native decode of its kept crop."""
    import fastdecode

    info = fastdecode.read_header(data)
    return fastdecode.decode_image(data, crop=kept_box(kind, info.height, info.width))


def measure(images: list[bytes], runners: dict[str, Callable], rounds: int) -> dict[str, Any]:
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    for name in names:  # warm-up, untimed
        runners[name](images[0])
    for r in range(rounds):
        for name in common.round_order(names, r):
            common.collect()
            start = time.perf_counter()
            for data in images:
                runners[name](data)
            times[name].append((time.perf_counter() - start) / len(images))
    base = times[names[0]]
    return {name: {"ms_per_image": 1e3 * statistics.median(t),
                   "vs_baseline": common.paired_ratio(base, t)} for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = common.BenchParser(__doc__, "an ImageFolder tree of JPEG photos",
                              {"limit": ("photos per format", 48, 12),
                               "rounds": ("interleaved rounds", 7, 3)}).parse_args(argv)
    data = args.data if args.data is not None else common.default_data()
    jpegs = photos(data, args.limit)
    if not jpegs:
        sys.exit(f"no JPEG photos under {data}")
    report: dict[str, Any] = {"command": common.command_line(__name__, argv),
                              "dataset": {"root": str(data), "photos": len(jpegs)},
                              "machine": common.machine_facts(),
                              "versions": {**common.library_versions(),
                                           **{k: v for k, v in __import__("fastdecode").info()
                                              .items() if k in ("libspng", "libwebp")}},
                              "settings": {"rounds": args.rounds, "threads": 1,
                                           "statistic": "median round; ratio: median of the "
                                                        "per-round ratios to the first row"},
                              "formats": {}}
    lines = ["| format | measure | row | ms/image | vs first row |", "|---|---|---|---:|---:|"]
    for name, (fmt, save) in FORMATS.items():
        images = encode(jpegs, fmt, save)
        report["formats"][name] = {"mean_bytes": int(np.mean([len(d) for d in images]))}
        for kind in ("decode", "train", "eval"):
            result = measure(images, rows(kind), args.rounds)
            report["formats"][name][kind] = result
            for row, r in result.items():
                ratio = r["vs_baseline"]
                lines.append(f"| {name} | {kind} | {row} | {r['ms_per_image']:.2f} | "
                             f"{'' if ratio is None else f'{ratio:.2f}x'} |")
    report["targets"] = {f"{fmt} {kind} >= {want}x": {
        "measured": report["formats"][fmt][kind][
            "fastdecode" if kind == "decode" else "fastdecode fuse"]["vs_baseline"],
        "target": want,
        **({} if kind == "decode" else
           {"floor": report["formats"][fmt][kind][FLOOR]["vs_baseline"]})}
        for (fmt, kind), want in TARGETS.items()}
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(f"`{report['command']}`\n\n" + "\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
