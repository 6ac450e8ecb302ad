"""Detection and segmentation: torchvision's reference presets through CocoDetection, one thread.

Per row, samples/s of torchvision's ``CocoDetection`` + ``wrap_dataset_for_transforms_v2``
(PIL decode, pycocotools masks at full size, v2 on PIL) against fastdecode's
``CocoDetection`` (the same wrapper; the crop decoded once, masks rasterized
at the output), with masks and with boxes only, for each detection preset
(fastdecode.targets.presets); and the segmentation preset on (image, label
PNG) pairs through ``fuse_joint`` against v2; and two presets end to end
through DataLoader with 2 workers and the references' list collate (steady
state). Median of interleaved rounds;
the ratio is the median of per-round ratios. Data: a generated COCO set over
the first N photos of ``--data`` (default: ../shared/corpus/photos). See
docs/decisions/detection.md.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image
import torch

from benchmarks import _common as common
from benchmarks._coco_data import make_coco

SIZES = {"limit": ("photos", 24, 6), "rounds": ("interleaved rounds", 5, 2)}


def _photos(data: Path | None, limit: int) -> tuple[Path, list[Path]]:
    root = data or Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "photos"
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:limit]
    if not files:
        raise SystemExit(f"no JPEG photos under {root}")
    return root, files


def _time(run, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        run(i)
    return n / (time.perf_counter() - start)


def detection_rows(root: Path, ann: Path, rounds: int, bar) -> dict:
    from torchvision import datasets
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    from fastdecode.targets import CocoDetection, presets

    rows: dict = {}
    for preset in presets.DETECTION:
        for keys in (("boxes", "labels", "masks"), ("boxes", "labels")):
            chain = presets.detection(preset)
            theirs = wrap_dataset_for_transforms_v2(
                datasets.CocoDetection(root, str(ann), transforms=chain), target_keys=set(keys))
            ours = wrap_dataset_for_transforms_v2(
                CocoDetection(root, str(ann), transforms=chain, target_keys=keys))
            n = len(theirs)
            per = {"torchvision": [], "fastdecode": []}
            for r in range(rounds):
                for name in common.round_order(list(per), r):
                    ds = theirs if name == "torchvision" else ours
                    torch.manual_seed(r)
                    per[name].append(_time(lambda i, ds=ds: ds[i], n))
                bar.update(1)
            rows[f"{preset} {'masks' if 'masks' in keys else 'boxes'}"] = {
                "torchvision": statistics.median(per["torchvision"]),
                "fastdecode": statistics.median(per["fastdecode"]),
                "ratio": common.paired_ratio(per["fastdecode"], per["torchvision"])}
    return rows


def _collate(batch):
    """torchvision's references' ``utils.collate_fn``: detection batches are lists."""
    return tuple(zip(*batch))


def loader_rows(root: Path, ann: Path, rounds: int, bar, presets_run=("ssdlite", "lsj")) -> dict:
    """DataLoader(num_workers=2, the references' collate) end to end, steady
    state (persistent workers, one warm-up epoch), samples/s per epoch."""
    from torch.utils.data import DataLoader
    from torchvision import datasets
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    from fastdecode.targets import CocoDetection, presets

    rows: dict = {}
    keys = ("boxes", "labels", "masks")
    for preset in presets_run:
        chain = presets.detection(preset)
        loaders = {
            "torchvision": wrap_dataset_for_transforms_v2(
                datasets.CocoDetection(root, str(ann), transforms=chain), target_keys=set(keys)),
            "fastdecode": wrap_dataset_for_transforms_v2(
                CocoDetection(root, str(ann), transforms=chain, target_keys=keys)),
        }
        iters = {name: DataLoader(ds, batch_size=2, num_workers=2, collate_fn=_collate,
                                  persistent_workers=True)
                 for name, ds in loaders.items()}
        for loader in iters.values():
            for _ in loader:  # warm-up epoch: workers started, files cached
                pass
        per: dict[str, list[float]] = {"torchvision": [], "fastdecode": []}
        for r in range(rounds):
            for name in common.round_order(list(per), r):
                start = time.perf_counter()
                n = sum(len(images) for images, _ in iters[name])
                per[name].append(n / (time.perf_counter() - start))
            bar.update(1)
        rows[f"{preset} masks, DataLoader 2 workers"] = {
            "torchvision": statistics.median(per["torchvision"]),
            "fastdecode": statistics.median(per["fastdecode"]),
            "ratio": common.paired_ratio(per["fastdecode"], per["torchvision"])}
        del iters
    return rows


def segmentation_row(files: list[Path], rounds: int, bar) -> dict:
    from fastdecode.targets import fuse_joint, presets
    from fastdecode.targets.segmentation import read_label

    chain = presets.segmentation()
    fused = fuse_joint(chain)
    tmp = Path(tempfile.mkdtemp(prefix="fd-seg-"))
    pairs = []
    for k, path in enumerate(files):
        with PIL.Image.open(path) as im:
            label = (np.asarray(im.convert("L")) // 12).astype(np.uint8)
        png = tmp / f"{k}.png"
        PIL.Image.fromarray(label).save(png)
        pairs.append((path, png))

    def theirs(i):
        image, png = pairs[i]
        return chain(PIL.Image.open(image).convert("RGB"), read_label(png))

    def ours(i):
        image, png = pairs[i]
        return fused(image.read_bytes(), read_label(png))

    per = {"torchvision": [], "fastdecode": []}
    for r in range(rounds):
        for name in common.round_order(list(per), r):
            torch.manual_seed(r)
            per[name].append(_time(theirs if name == "torchvision" else ours, len(pairs)))
        bar.update(1)
    return {"torchvision": statistics.median(per["torchvision"]),
            "fastdecode": statistics.median(per["fastdecode"]),
            "ratio": common.paired_ratio(per["fastdecode"], per["torchvision"])}


def table(rows: dict) -> str:
    lines = ["| preset | torchvision samples/s | fastdecode samples/s | ratio |",
             "|---|---:|---:|---:|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['torchvision']:.1f} | {row['fastdecode']:.1f} | "
                     f"{row['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.BenchParser(__doc__, "a folder of JPEG photos", SIZES)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    root, files = _photos(args.data, args.limit)
    tmp = Path(tempfile.mkdtemp(prefix="fd-coco-"))
    ann = make_coco(files, root, tmp / "instances.json", seed=0)
    with common.progress("detection", args.rounds * 13) as bar:
        rows = detection_rows(root, ann, args.rounds, bar)
        rows["segmentation (label PNG)"] = segmentation_row(files, args.rounds, bar)
        rows.update(loader_rows(root, ann, args.rounds, bar))
    report = {"command": common.command_line(__name__, argv), "data": str(root),
              "photos": len(files), "rounds": args.rounds, "machine": common.machine_facts(),
              "versions": common.library_versions(), "rows": rows}
    common.emit(f"\n### detection and segmentation presets, one thread, {len(files)} photos, "
                f"median of {args.rounds} interleaved rounds\n\n" + table(rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
