"""Detection and segmentation: torchvision's reference presets through CocoDetection, one thread.

Per row, samples/s of torchvision's ``CocoDetection`` + ``wrap_dataset_for_transforms_v2``
(PIL decode, pycocotools masks at full size, v2 on PIL) against fastdecode's
``CocoDetection`` (the same wrapper; the crop decoded once, masks rasterized
at the output), with masks and with boxes only, for each detection preset
(fastdecode.targets.presets); and the segmentation preset on (image, label
PNG) pairs through ``fuse_joint`` against v2; and end to end with 2 workers
(steady state), ssdlite and lsj with masks and segmentation, each with its
references' collate: torchvision's dataset through
DataLoader against fastdecode's through DataLoader and through FastLoader.
Median of interleaved rounds; the ratio is the median of per-round ratios.
``--transfer`` measures instead what moving lsj's samples between processes
costs beside computing them (:func:`transfer_rows`), ``--decode-share`` what
share of hflip's time is the whole-image decode (:func:`decode_share`). Data: a generated COCO set over
the first N photos of ``--data`` (default: ../shared/corpus/photos). See
docs/decisions/detection.md.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from torch.utils._pytree import tree_flatten, tree_map

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


class _SegV2(torch.utils.data.Dataset):
    """torchvision's side of the segmentation rows: (image, label PNG) pairs
    opened with PIL, the v2 chain on (PIL image, Mask)."""

    def __init__(self, pairs: list[tuple[Path, Path]], chain) -> None:
        self.pairs, self.chain = pairs, chain

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int):
        from fastdecode.targets.segmentation import read_label

        image, png = self.pairs[i]
        return self.chain(PIL.Image.open(image).convert("RGB"), read_label(png))


class _SegFused(_SegV2):
    """fastdecode's side: the same pairs through the fused chain on the encoded bytes
    (what ``LabelFolder`` does per item)."""

    def __getitem__(self, i: int):
        from fastdecode.targets.segmentation import read_label

        image, png = self.pairs[i]
        return self.chain(image.read_bytes(), read_label(png))


def _label_pairs(files: list[Path]) -> list[tuple[Path, Path]]:
    """Each photo with a generated label PNG (its grey levels // 12)."""
    tmp = Path(tempfile.mkdtemp(prefix="fd-seg-"))
    pairs = []
    for k, path in enumerate(files):
        with PIL.Image.open(path) as im:
            label = (np.asarray(im.convert("L")) // 12).astype(np.uint8)
        png = tmp / f"{k}.png"
        PIL.Image.fromarray(label).save(png)
        pairs.append((path, png))
    return pairs


def segmentation_row(pairs: list[tuple[Path, Path]], rounds: int, bar) -> dict:
    from fastdecode.targets import fuse_joint, presets

    chain = presets.segmentation()
    sets = {"torchvision": _SegV2(pairs, chain), "fastdecode": _SegFused(pairs, fuse_joint(chain))}
    per: dict[str, list[float]] = {"torchvision": [], "fastdecode": []}
    for r in range(rounds):
        for name in common.round_order(list(per), r):
            torch.manual_seed(r)
            per[name].append(_time(lambda i, ds=sets[name]: ds[i], len(pairs)))
        bar.update(1)
    return {"torchvision": statistics.median(per["torchvision"]),
            "fastdecode": statistics.median(per["fastdecode"]),
            "ratio": common.paired_ratio(per["fastdecode"], per["torchvision"])}


def _epoch_rate(loader) -> float:
    start = time.perf_counter()
    n = sum(len(images) for images, _ in loader)
    return n / (time.perf_counter() - start)


def loader_rows(root: Path, ann: Path, pairs: list[tuple[Path, Path]], rounds: int, bar,
                presets_run=("ssdlite", "lsj")) -> dict:
    """End to end with 2 workers, steady state (persistent workers, one
    warm-up epoch), samples/s per epoch: torchvision's dataset through
    DataLoader against fastdecode's through DataLoader and through
    FastLoader, the three interleaved. Detection with masks takes the
    references' list collate (``fastdecode.targets.collate``); segmentation
    the references' padding one (``segmentation_collate``)."""
    from torch.utils.data import DataLoader
    from torchvision import datasets
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    from fastdecode.loader import FastLoader
    from fastdecode.targets import CocoDetection, collate, fuse_joint, presets, segmentation_collate

    rows: dict = {}
    keys = ("boxes", "labels", "masks")
    cases = []
    for preset in presets_run:
        chain = presets.detection(preset)
        theirs = wrap_dataset_for_transforms_v2(
            datasets.CocoDetection(root, str(ann), transforms=chain), target_keys=set(keys))
        ours = wrap_dataset_for_transforms_v2(
            CocoDetection(root, str(ann), transforms=chain, target_keys=keys))
        cases.append((f"{preset} masks", collate, (theirs, ours)))
    seg = presets.segmentation()
    cases.append(("segmentation", segmentation_collate,
                  (_SegV2(pairs, seg), _SegFused(pairs, fuse_joint(seg)))))
    for label, collate_fn, (theirs, ours) in cases:
        kwargs = dict(batch_size=2, num_workers=2, persistent_workers=True)
        loaders = {
            "torchvision": DataLoader(theirs, collate_fn=collate_fn, **kwargs),
            "fastdecode DataLoader": DataLoader(ours, collate_fn=collate_fn, **kwargs),
            "fastdecode FastLoader": FastLoader(ours, collate_fn=collate_fn, **kwargs),
        }
        for loader in loaders.values():
            for _ in loader:  # warm-up epoch: workers started, files cached
                pass
        per: dict[str, list[float]] = {name: [] for name in loaders}
        for r in range(rounds):
            for name in common.round_order(list(per), r):
                per[name].append(_epoch_rate(loaders[name]))
            bar.update(1)
        for name, how in (("fastdecode DataLoader", "DataLoader"),
                          ("fastdecode FastLoader", "FastLoader")):
            rows[f"{label}, {how} 2 workers"] = {
                "torchvision": statistics.median(per["torchvision"]),
                "fastdecode": statistics.median(per[name]),
                "ratio": common.paired_ratio(per[name], per["torchvision"])}
        del loaders
    return rows


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes ``pids`` so far (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def _shared_bytes(sample) -> int:
    """Bytes of the storages a sample's tensors would move to shared memory."""
    storages = {}
    for leaf in tree_flatten(sample)[0]:
        if isinstance(leaf, torch.Tensor):
            storage = leaf.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


class _Replay(torch.utils.data.Dataset):
    """Samples made once, each handed out as a fresh copy: a dataset's output
    with no compute, for the cost of moving it between processes."""

    def __init__(self, samples: list) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x,
                        self.samples[i])


def transfer_rows(root: Path, ann: Path, preset: str = "lsj", epochs: int = 4) -> dict:
    """The per-sample cost of moving ``preset``'s samples (masks) through
    DataLoader's worker queue (2 persistent workers, the list collate),
    beside each side's compute per sample, in CPU ms: compute (in process,
    median of 3 interleaved rounds); the sample's bytes; the workers' CPU per
    sample for a dataset that only hands out copies of the made samples,
    less the copy (timed in process); the main process's CPU per sample; and
    the ratio that 2 workers on 2 cores allow when every sample costs its
    compute plus that transfer: (C_tv + T_tv) / (C_fd + T_fd). fastdecode's
    samples are moved twice: through DataLoader and through FastLoader (its
    collate's batch in a reused shared slot)."""
    from torch.utils.data import DataLoader
    from torchvision import datasets
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    from fastdecode.loader import FastLoader
    from fastdecode.targets import CocoDetection, collate, presets

    chain = presets.detection(preset)
    keys = ("boxes", "labels", "masks")
    sets = {"torchvision": wrap_dataset_for_transforms_v2(
                datasets.CocoDetection(root, str(ann), transforms=chain), target_keys=set(keys)),
            "fastdecode": wrap_dataset_for_transforms_v2(
                CocoDetection(root, str(ann), transforms=chain, target_keys=keys))}
    n = len(sets["fastdecode"])
    per: dict[str, list[float]] = {name: [] for name in sets}
    for r in range(3):
        for name in common.round_order(list(per), r):
            torch.manual_seed(r)
            per[name].append(1e3 / _time(lambda i, ds=sets[name]: ds[i], n))
    rows: dict = {}
    sides = [("torchvision", sets["torchvision"], DataLoader),
             ("fastdecode", sets["fastdecode"], DataLoader),
             ("fastdecode, FastLoader", sets["fastdecode"], FastLoader)]
    for name, ds, make in sides:
        torch.manual_seed(0)
        replay = _Replay([ds[i] for i in range(n)])
        copy_ms = 1e3 / _time(lambda i, r=replay: r[i], n)
        loader = make(replay, batch_size=2, num_workers=2, collate_fn=collate,
                      persistent_workers=True)
        for _ in loader:  # warm-up epoch: workers started
            pass
        pids = [w.pid for w in loader._iterator._workers]  # type: ignore[union-attr]
        workers, main = _cpu_seconds(pids), time.process_time()
        for _ in range(epochs):
            for _ in loader:
                pass
        samples = n * epochs
        worker_ms = 1e3 * (_cpu_seconds(pids) - workers) / samples - copy_ms
        main_ms = 1e3 * (time.process_time() - main) / samples
        rows[name] = {"compute_ms": statistics.median(per[name.split(",")[0]]),
                      "sample_mb": statistics.mean(_shared_bytes(s) for s in replay.samples) / 2**20,
                      "copy_ms": copy_ms, "worker_transfer_ms": worker_ms,
                      "main_transfer_ms": main_ms, "transfer_ms": worker_ms + main_ms}
        del loader
    tv, fd, fast = rows["torchvision"], rows["fastdecode"], rows["fastdecode, FastLoader"]
    per_core = tv["compute_ms"] / fd["compute_ms"]
    allowed = (tv["compute_ms"] + tv["transfer_ms"]) / (fd["compute_ms"] + fd["transfer_ms"])
    fast_allowed = (tv["compute_ms"] + tv["transfer_ms"]) / (fd["compute_ms"] + fast["transfer_ms"])
    return {"preset": preset, "samples": n, "epochs": epochs, "sides": rows,
            "per_core_ratio": per_core, "allowed_ratio": allowed,
            "allowed_share": allowed / per_core, "fastloader_allowed_ratio": fast_allowed,
            "fastloader_allowed_share": fast_allowed / per_core}


def transfer_table(report: dict) -> str:
    lines = [f"{report['preset']} masks, {report['samples']} samples x {report['epochs']} epochs "
             f"through 2 workers (CPU ms per sample)\n",
             "| side | compute | sample MB | worker transfer | main transfer | transfer |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, row in report["sides"].items():
        lines.append(f"| {name} | {row['compute_ms']:.2f} | {row['sample_mb']:.1f} | "
                     f"{row['worker_transfer_ms']:.2f} | {row['main_transfer_ms']:.2f} | "
                     f"{row['transfer_ms']:.2f} |")
    lines.append(f"\nper core {report['per_core_ratio']:.2f}x; with the transfer, both through "
                 f"DataLoader {report['allowed_ratio']:.2f}x ({report['allowed_share']:.2f} of "
                 f"per core), fastdecode through FastLoader {report['fastloader_allowed_ratio']:.2f}x "
                 f"({report['fastloader_allowed_share']:.2f})")
    return "\n".join(lines) + "\n"


def decode_share(root: Path, ann: Path, rounds: int) -> dict:
    """hflip with boxes only decodes the whole image on both sides (no resize
    in the preset): per sample, ms, median of interleaved rounds, of
    torchvision's sample, its decode alone (``Image.open(path).convert('RGB')``,
    what its CocoDetection loads), fastdecode's sample and its decode alone
    (the file read and ``decode_image(mode='RGB')``); the decode's share of
    torchvision's time, and the ratio fastdecode would reach if everything
    but its decode cost nothing: torchvision's sample / fastdecode's decode."""
    from torchvision import datasets
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    from fastdecode import api
    from fastdecode.targets import CocoDetection, presets

    chain = presets.detection("hflip")
    keys = ("boxes", "labels")
    theirs = wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(root, str(ann), transforms=chain), target_keys=set(keys))
    ours = wrap_dataset_for_transforms_v2(
        CocoDetection(root, str(ann), transforms=chain, target_keys=keys))
    paths = [root / theirs.coco.loadImgs(i)[0]["file_name"] for i in theirs.ids]
    runs = {
        "torchvision sample": lambda i: theirs[i],
        "torchvision decode": lambda i: PIL.Image.open(paths[i]).convert("RGB"),
        "fastdecode sample": lambda i: ours[i],
        "fastdecode decode": lambda i: api.decode_image(paths[i].read_bytes(), mode="RGB"),
    }
    per: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in common.round_order(list(runs), r):
            torch.manual_seed(r)
            per[name].append(1e3 / _time(runs[name], len(paths)))
    ms = {name: statistics.median(v) for name, v in per.items()}
    return {"ms": ms, "decode_share": ms["torchvision decode"] / ms["torchvision sample"],
            "ratio": ms["torchvision sample"] / ms["fastdecode sample"],
            "ceiling": ms["torchvision sample"] / ms["fastdecode decode"]}


def table(rows: dict) -> str:
    lines = ["| preset | torchvision samples/s | fastdecode samples/s | ratio |",
             "|---|---:|---:|---:|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['torchvision']:.1f} | {row['fastdecode']:.1f} | "
                     f"{row['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.BenchParser(__doc__, "a folder of JPEG photos", SIZES)
    parser.add_argument("--transfer", action="store_true",
                        help="only measure lsj's samples moving through 2 workers against "
                             "their compute (transfer_rows)")
    parser.add_argument("--decode-share", action="store_true",
                        help="only measure the share of hflip's whole-image decode (decode_share)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    root, files = _photos(args.data, args.limit)
    tmp = Path(tempfile.mkdtemp(prefix="fd-coco-"))
    ann = make_coco(files, root, tmp / "instances.json", seed=0)
    report = {"command": common.command_line(__name__, argv), "data": str(root),
              "photos": len(files), "rounds": args.rounds, "machine": common.machine_facts(),
              "versions": common.library_versions()}
    if args.transfer or args.decode_share:
        if args.transfer:
            report["transfer"] = transfer_rows(root, ann)
            common.emit("\n### moving samples between processes against computing them\n\n"
                        + transfer_table(report["transfer"]))
        if args.decode_share:
            share = report["decode_share"] = decode_share(root, ann, args.rounds)
            common.emit("\n### hflip, boxes only: the whole-image decode (ms per sample)\n\n"
                        + "\n".join(f"- {k}: {v:.2f}" for k, v in share["ms"].items())
                        + f"\n\ndecode {share['decode_share']:.0%} of torchvision's sample; "
                        f"ratio {share['ratio']:.2f}x, ceiling {share['ceiling']:.2f}x\n")
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0
    pairs = _label_pairs(files)
    with common.progress("detection", args.rounds * 14) as bar:
        rows = detection_rows(root, ann, args.rounds, bar)
        rows["segmentation (label PNG)"] = segmentation_row(pairs, args.rounds, bar)
        rows.update(loader_rows(root, ann, pairs, args.rounds, bar))
    report["rows"] = rows
    common.emit(f"\n### detection and segmentation presets, one thread, {len(files)} photos, "
                f"median of {args.rounds} interleaved rounds\n\n" + table(rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
