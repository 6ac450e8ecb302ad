"""Per-op cost of the native augmentation kernels against Pillow's own calls.

    python -m benchmarks.bench_augment_ops [--data DIR] [--limit N] [--rounds R] [--quick]
                                           [--sizes 224 176] [--layout CHW|HWC] [--json PATH]

Each op of the auto-augment policies (src_c/fd_augment.c, through
``_native.augment``) is timed against the Pillow call it reproduces bit for
bit (docs/decisions/augment.md, "Kernels"), and the blur against
torchvision's gaussian_blur (within 1), on the same RGB pixels: real
photos (--data, default ../shared/corpus/photos when present, else generated
ImageNet-like images) resized to each size in --sizes, the sizes the ops see
after the recipes' crop (224: the ImageNet train crop; 176: torchvision's
--train-crop-size 176). One thread. Pillow's row starts from a PIL image and
ends with the new one; fastdecode's from a uint8 array and copies it into
the working buffer first (the op is in place), so its row includes a copy
the fused chain does not make. A first pass checks both give the same pixels.
--layout picks the working buffer's layout (CHW: the tensor's, HWC: Pillow's).

Methods alternate inside each round (benchmarks._common.round_order); each
row reports the median over rounds of the CPU microseconds per image (the
thread's CPU time: per core, as the recipes' figures, and less disturbed by
a busy machine than wall time), and the speedup as the median of the
per-round ratios.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from . import _common as common


def ops(size: int) -> dict[str, tuple[list, Callable]]:
    """name -> (augment steps, the Pillow call on a PIL image)."""
    from PIL import Image, ImageEnhance, ImageOps

    from fastdecode import _native as n
    from fastdecode.augment.ops import pil_rotate

    rot = pil_rotate(23.0, (size, size), 0, None)[1]  # Image.rotate's matrix, as fuse computes it
    shear = (1, 0.3, 0, 0, 1, 0)
    shear_y = (1, 0, 0, 0.3, 1, 0)
    translate = (1, 0, 0.3 * size, 0, 1, 0)
    fill = (128, 128, 128)
    posterize = bytes(i & 0xF0 for i in range(256))
    solarize = bytes(i if i < 128 else 255 - i for i in range(256))

    def transform(m, resample, fillcolor=None):
        return lambda im: im.transform(im.size, Image.AFFINE, m, resample, fillcolor=fillcolor)

    return {
        "rotate nearest": ([(n.AUG_AFFINE, rot, 0, fill)], transform(rot, 0, fill)),
        "rotate bilinear": ([(n.AUG_AFFINE, rot, 2, fill)], transform(rot, 2, fill)),
        "rotate bicubic": ([(n.AUG_AFFINE, rot, 3, fill)], transform(rot, 3, fill)),
        "shear-x nearest": ([(n.AUG_AFFINE, shear, 0, fill)], transform(shear, 0, fill)),
        "shear-x bilinear": ([(n.AUG_AFFINE, shear, 2, fill)], transform(shear, 2, fill)),
        "shear-x bicubic": ([(n.AUG_AFFINE, shear, 3, fill)], transform(shear, 3, fill)),
        "shear-y bilinear": ([(n.AUG_AFFINE, shear_y, 2, fill)], transform(shear_y, 2, fill)),
        "shear-y bicubic": ([(n.AUG_AFFINE, shear_y, 3, fill)], transform(shear_y, 3, fill)),
        "translate nearest": ([(n.AUG_AFFINE, translate, 0, fill)],
                              transform(translate, 0, fill)),
        "posterize (LUT)": ([(n.AUG_LUT, posterize)], lambda im: im.point(list(posterize) * 3)),
        "solarize (LUT)": ([(n.AUG_LUT, solarize)], lambda im: im.point(list(solarize) * 3)),
        "autocontrast": ([(n.AUG_AUTOCONTRAST,)], ImageOps.autocontrast),
        "equalize": ([(n.AUG_EQUALIZE,)], ImageOps.equalize),
        "sharpness 1.5": ([(n.AUG_SHARPNESS, 1.5)],
                          lambda im: ImageEnhance.Sharpness(im).enhance(1.5)),
        "contrast 1.5": ([(n.AUG_COLOR, n.COLOR_CONTRAST, 1.5)],
                         lambda im: ImageEnhance.Contrast(im).enhance(1.5)),
        "color 0.5": ([(n.AUG_COLOR, n.COLOR_SATURATION, 0.5)],
                      lambda im: ImageEnhance.Color(im).enhance(0.5)),
        "blur 9x9 sigma 1.5 (torchvision)": ([(n.AUG_BLUR, 9, 9, 1.5, 1.5)], blur(9, 1.5)),
    }


def blur(size: int, sigma: float) -> Callable:
    """torchvision's gaussian_blur on a PIL image (one torch thread)."""
    import torch
    from torchvision.transforms import functional

    torch.set_num_threads(1)
    return lambda im: functional.gaussian_blur(im, [size, size], [sigma, sigma])


# the ops reproduced within 1 level rather than bit for bit
WITHIN_ONE = {"blur 9x9 sigma 1.5 (torchvision)"}


def load_images(data: Path | None, limit: int, size: int) -> list[np.ndarray]:
    """`limit` RGB images resized (Pillow, bilinear) to size x size."""
    from PIL import Image

    if data is None:
        shared = common.ROOT.parent / "shared" / "corpus" / "photos"
        data = shared if shared.is_dir() else common.default_data()
    files = sorted(p for p in data.rglob("*")
                   if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"})[:limit]
    if not files:
        sys.exit(f"{data}: no images")
    out = []
    for path in files:
        with Image.open(path) as im:
            out.append(np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR)))
    return out


def time_pass(run: Callable[[int], None], count: int) -> float:
    """CPU microseconds (this thread's) per image of one pass over `count` images."""
    start = time.thread_time()
    for i in range(count):
        run(i)
    return (time.thread_time() - start) / count * 1e6


def measure(images: list[np.ndarray], size: int, rounds: int, layout: str) -> list[dict]:
    from PIL import Image

    from fastdecode import _native

    pils = [Image.fromarray(a, "RGB") for a in images]
    if layout == "CHW":
        images = [np.ascontiguousarray(a.transpose(2, 0, 1)) for a in images]
    work = np.empty_like(images[0])
    rows = []
    for name, (steps, pillow) in ops(size).items():
        for a, im in zip(images, pils):  # same pixels first
            np.copyto(work, a)
            got = _native.augment(work, layout, steps)
            if layout == "CHW":
                got = got.transpose(1, 2, 0)
            diff = np.abs(got.astype(np.int16) - np.asarray(pillow(im)).astype(np.int16))
            if diff.max() > (1 if name in WITHIN_ONE else 0):
                sys.exit(f"{name} at {size}: fastdecode and Pillow differ")

        def ours(i: int, steps=steps) -> None:
            np.copyto(work, images[i])
            _native.augment(work, layout, steps)

        def theirs(i: int, pillow=pillow) -> None:
            pillow(pils[i])

        times: dict[str, list[float]] = {"Pillow": [], "fastdecode": []}
        methods = {"Pillow": theirs, "fastdecode": ours}
        for r in range(rounds):
            for method in common.round_order(list(methods), r):
                times[method].append(time_pass(methods[method], len(images)))
        rows.append({"op": name, "size": size, "layout": layout,
                     "pillow_us": statistics.median(times["Pillow"]),
                     "fastdecode_us": statistics.median(times["fastdecode"]),
                     "speedup": common.paired_ratio(times["Pillow"], times["fastdecode"])})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| op | size | Pillow CPU µs/img | fastdecode CPU µs/img | speedup |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['size']} {r['layout']} | {r['pillow_us']:.1f} | "
                     f"{r['fastdecode_us']:.1f} | {r['speedup']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = common.BenchParser(__doc__, "a folder of images (any layout)",
                                {"limit": ("images per size", 64, 16),
                                 "rounds": ("interleaved rounds", 9, 3)})
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 176],
                        help="square sizes the ops run at (default 224 176)")
    parser.add_argument("--layout", choices=("CHW", "HWC"), default="CHW",
                        help="fastdecode's working layout (default CHW)")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        rows += measure(load_images(args.data, args.limit, size), size, args.rounds, args.layout)
    header = common.command_line(__name__, argv)
    common.emit(f"`{header}`\n\n{table(rows)}\n")
    if args.json:
        args.json.write_text(json.dumps({"command": header, "machine": common.machine_facts(),
                                         "versions": common.library_versions(), "rows": rows},
                                        indent=1))


if __name__ == "__main__":
    main()
