"""Data-loading throughput with the transforms real training recipes build:
FastImageFolder vs ImageFolder, one thread and 2 workers (and FastLoader
with workers), and which ops fuse.

    python -m benchmarks.bench_recipes [--data PATH] [--quick | --full] [--json PATH]

The recipes: torchvision's classification reference presets (train and eval,
v1 and v2, written as references/classification/presets.py writes them: a
class holding ``self.transforms = Compose(...)``), the pretrained weights'
``ResNet50_Weights.IMAGENET1K_V2.transforms()`` (no download: the preset
only), and timm's ``create_transform`` for training and evaluation (skipped
without timm), its RandAugment recipe also as ``create_loader(...,
use_prefetcher=True)`` loads it (uint8 samples, ``fast_collate``; the
normalize and erasing its PrefetchLoader runs on the device are not timed).
Each row is the median of >= 3 interleaved rounds in steady state
(persistent workers, an untimed first epoch), as in bench_loader; the
one-thread rows run in this process with every thread pool at one thread.
The auto-augment rows also time, in one thread, the peers a user would pick
instead, where installed (TorchCodec + v2 on tensors; NVIDIA DALI's CPU
pipeline): :mod:`._peers`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Optional

import fastdecode as fd
from fastdecode import _system

from . import _common as common
from . import _peers as peers
from . import bench_loader as loader_bench
from .presets import ClassificationPresetEval, ClassificationPresetTrain

DATASETS = ("ImageFolder+PIL", "FastImageFolder")  # each in a DataLoader


def loaders(name: str, workers: int) -> tuple[str, ...]:
    """The rows of ``name`` at ``workers``: the two datasets in DataLoaders,
    with workers FastLoader too (bench_loader.make_loader's kinds; the
    prefetcher recipe, whose loader is timm's, has no FastLoader row), in
    one thread the peers' rows (:mod:`._peers`)."""
    if not workers:
        return DATASETS + (peers.kinds(*PEERS[name]) if name in PEERS else ())
    return DATASETS + (("FastLoader",) if name not in MAKERS else ())

TARGETS = {"train": 1.8, "eval": 2.0,  # issue 14: FastImageFolder over ImageFolder, 2 cores
           "augment": 2.5}  # issue 50: the auto-augment recipes, per core (one thread)
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(workers=[0, 2], batch=16, batches=2, rounds=3),
    "default": dict(workers=[0, 2], batch=64, batches=4, rounds=3),
    "full": dict(workers=[0, 2], batch=128, batches=8, rounds=5),
}


# ---------------------------------------------------------------------------
# the recipes, written as their projects write them (the reference presets: .presets)


def _weights_eval():
    from torchvision.models import ResNet50_Weights

    return ResNet50_Weights.IMAGENET1K_V2.transforms()


def _timm(is_training: bool, **kwargs):
    from timm.data import create_transform

    return create_transform(224, is_training=is_training, **kwargs)


RECIPES: dict[str, tuple[str, Callable[[], Any]]] = {  # name -> (kind, factory)
    "reference train v1": ("train", lambda: ClassificationPresetTrain(crop_size=224)),
    "reference eval v1": ("eval", lambda: ClassificationPresetEval(crop_size=224)),
    "reference train v2": ("train", lambda: ClassificationPresetTrain(crop_size=224,
                                                                      use_v2=True)),
    "reference eval v2": ("eval", lambda: ClassificationPresetEval(crop_size=224, use_v2=True)),
    "ResNet50_Weights.IMAGENET1K_V2.transforms()": ("eval", _weights_eval),
    "timm create_transform train": ("train", lambda: _timm(True)),
    # RandomErasing after Normalize (issue 50): IMAGENET1K_V2's --random-erase 0.1, timm's 0.25
    "reference train v1 + random erase": ("train", lambda: ClassificationPresetTrain(
        crop_size=224, random_erase_prob=0.1)),
    "reference train v2 + random erase": ("train", lambda: ClassificationPresetTrain(
        crop_size=224, random_erase_prob=0.1, use_v2=True)),
    "timm create_transform train re_prob=0.25": ("train", lambda: _timm(True, re_prob=0.25)),
    "timm create_transform eval": ("eval", lambda: _timm(False)),
}


def _augmenting(policy: str, use_v2: bool):
    """IMAGENET1K_V2's recipe: --auto-augment <policy> --random-erase 0.1 --train-crop-size 176."""
    return lambda: ClassificationPresetTrain(crop_size=176, auto_augment_policy=policy,
                                             random_erase_prob=0.1, use_v2=use_v2)


# recipe -> (its torchvision --auto-augment policy, whether it is the reference preset): the
# one-thread rows time the peers on these (benchmarks/_peers.py)
PEERS: dict[str, tuple[str, bool]] = {}
# The recipes people train with today (issue 50): the policies fuse into the decode.
for _policy in ("ta_wide", "ra", "imagenet", "augmix"):
    for _v2 in (False, True):
        _name = f"reference train {'v2' if _v2 else 'v1'} {_policy} + random erase, 176"
        RECIPES[_name] = ("augment", _augmenting(_policy, _v2))
        if _v2:  # one peer row per policy (the peers draw their own: v1 and v2 are alike)
            PEERS[_name] = (_policy, True)
# timm's rand-m9-mstd0.5-inc1 under Pillow 13 raises on 2 % of its posterize draws (magnitude
# noise clamped at 10 asks for 0 bits, which Pillow refuses, in timm as in fuse): mmax9 is
# the nearest policy timm runs
_TIMM_RAND = dict(auto_augment="rand-m9-mstd0.5-inc1-mmax9", re_prob=0.25, interpolation="random")
RECIPES["timm train rand-m9-mstd0.5-inc1-mmax9 re_prob=0.25 interpolation=random"] = (
    "augment", lambda: _timm(True, **_TIMM_RAND))
PEERS["timm train rand-m9-mstd0.5-inc1-mmax9 re_prob=0.25 interpolation=random"] = ("ra", False)
RECIPES["timm train augmix-m5-w4-d2 re_prob=0.25"] = (
    "augment", lambda: _timm(True, auto_augment="augmix-m5-w4-d2", re_prob=0.25))
# the same RandAugment recipe as timm's create_loader(use_prefetcher=True) runs it: the
# samples' transform ends in uint8 (ToNumpy), fast_collate makes the batch; the
# PrefetchLoader's normalize and re_prob erasing run on the batch on the device, outside
# these rows (_prefetcher_loader)
_PREFETCHER = "timm train rand-m9-mstd0.5-inc1-mmax9 re_prob=0.25 interpolation=random, prefetcher"
RECIPES[_PREFETCHER] = ("augment", lambda: _timm(True, use_prefetcher=True, **_TIMM_RAND))


def _prefetcher_loader(kind: str, root, chain, workers: int, batch: int, samples: int):
    """The DataLoader under timm's PrefetchLoader (``create_loader(...,
    use_prefetcher=True)``: ``collate_fn=fast_collate``, no pinning without
    CUDA) over ``kind``'s dataset, with the rows' sampler.
    ``fastdecode.integrations.timm.install()`` is on, as for a timm user of
    fastdecode: its fast_collate takes FastImageFolder's uint8 batch as it
    is and gives ImageFolder's arrays to timm's own."""
    from timm.data import loader as timm_loader
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    import fastdecode.integrations.timm as fd_timm

    if not fd_timm.installed():
        fd_timm.install()
    ds = ImageFolder(root, chain) if kind == "ImageFolder+PIL" else fd.FastImageFolder(root, chain)
    sampler = loader_bench.Draws(ds, samples)
    return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True,
                      collate_fn=timm_loader.fast_collate, persistent_workers=workers > 0), sampler


MAKERS: dict[str, Callable] = {_PREFETCHER: _prefetcher_loader}  # name -> open_row's make


def _make(name: str, kind: str) -> Optional[Callable]:
    """open_row's ``make`` for ``kind``'s row of recipe ``name`` (None: make_loader's)."""
    if kind in peers.KINDS:
        return peers.maker(kind, PEERS[name][0])
    return MAKERS.get(name)


def fusion(transform) -> dict[str, Any]:
    """Which ops fuse(transform) fused (decode-time geometry, the tensor tail)
    and which run unfused after it; its repr says the same in words."""
    fused = fd.fuse(transform)

    def names(steps) -> list[str]:  # transforms
        return [type(s).__name__ for s in steps or ()]

    def op_names(ops) -> list[str]:  # the fused ops, each holding its transform
        return names(op.transform for op in ops or ())

    return {"decode": op_names(getattr(fused, "geo_ops", ()))
            + op_names(getattr(fused, "color_ops", ())),
            "tensor": names(fused.plan["tensor"]),  # the table's steps and the erasing
            "unfused": names(getattr(fused, "trailing", ())), "repr": repr(fused)}


# ---------------------------------------------------------------------------
# measuring


def measure(data, recipes: dict[str, Any], settings: dict, bar) -> dict[str, list]:
    """Per recipe: its rows (dataset x num_workers) alive together, rounds
    interleaved among them in common.round_order's order."""
    out: dict[str, list] = {}
    for name, transform in recipes.items():
        rows = []
        for workers in settings["workers"]:
            wave = max(workers, 1)
            # the timed batches in whole waves, then the ramp wave and the
            # final wave that bench_loader.run_round leaves out of the timing
            batches = (math.ceil(settings["batches"] / wave) + 2) * wave
            for kind in loaders(name, workers):
                bar.set_postfix_str(f"{name}: {kind}, num_workers={workers}, start-up")
                with pinned(workers):
                    rows.append(loader_bench.open_row(name, kind, data, transform, workers,
                                                      settings["batch"],
                                                      batches * settings["batch"],
                                                      make=_make(name, kind)))
                ahead = getattr(rows[-1], "ahead", 0)
                if ahead:  # FastLoader: the batches it makes ahead come on top (its first
                    # round is given none: they were drawn for the shorter epoch, and dropped)
                    rows[-1].sampler.count = (batches + ahead) * settings["batch"]
                bar.update()
        for r in range(settings["rounds"]):
            for row in common.round_order(rows, r):
                bar.set_postfix_str(f"{name}: {row.loader}, num_workers={row.num_workers}, "
                                    f"round {r + 1}")
                with pinned(row.num_workers), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "FastLoader dropped the next epoch",
                                            RuntimeWarning)  # the first round's, above
                    cpu = time.process_time()
                    loader_bench.run_round(row)
                    if row.num_workers == 0:  # per core: this process's CPU time per image
                        per_image = (time.process_time() - cpu) / (batches * settings["batch"])
                        row.__dict__.setdefault("cpu_per_image", []).append(per_image)
                bar.update()
        for row in rows:
            row.source = None  # ends its persistent workers
        out[name] = rows
    return out


def pinned(workers: int):
    """One thread per pool for the in-process rows (workers pin their own)."""
    import contextlib

    return _system.one_thread_per_pool() if workers == 0 else contextlib.nullcontext()


def recipe_result(kind: str, rows: list, fused: dict) -> dict:
    def rate(dataset: str, workers: int) -> float:
        row = next(r for r in rows if r.loader == dataset and r.num_workers == workers)
        return statistics.median(row.rates)

    settings = []
    for workers in sorted({r.num_workers for r in rows}):
        base, ours = rate("ImageFolder+PIL", workers), rate("FastImageFolder", workers)
        spreads = [(max(r.rates) - min(r.rates)) / statistics.median(r.rates)
                   for r in rows if r.num_workers == workers]
        setting = {"num_workers": workers, "imagefolder_images_per_s": base,
                   "fastimagefolder_images_per_s": ours, "speedup": ours / base,
                   "spread": max(spreads), "noisy": max(spreads) > loader_bench.NOISY_SPREAD}
        if any(r.loader == "FastLoader" and r.num_workers == workers for r in rows):
            fast = rate("FastLoader", workers)
            setting.update(fastloader_images_per_s=fast, fastloader_speedup=fast / base)
        cpu = cpu_per_image(rows, workers)
        if cpu is not None:  # one thread: CPU time per image, the ratio of each round's pair
            setting.update(cpu)
        peer_rows = [r for r in rows if r.num_workers == workers and r.loader not in
                     (*DATASETS, "FastLoader")]
        if peer_rows:
            setting["peers"] = {r.loader: peer_result(r, rows) for r in peer_rows}
        settings.append(setting)
    return {"kind": kind, "target_speedup": TARGETS[kind], "fusion": fused, "settings": settings}


def peer_result(peer, rows: list) -> dict:
    """A peer row (one thread): its rate, its CPU time per image, and
    FastImageFolder's per-core speedup over it (the median of the rounds'
    ratios, as for ImageFolder)."""
    ours = next(r for r in rows if r.loader == "FastImageFolder" and r.num_workers == 0)
    theirs, mine = peer.__dict__["cpu_per_image"], ours.__dict__["cpu_per_image"]
    return {"images_per_s": statistics.median(peer.rates),
            "cpu_ms_per_image": 1e3 * statistics.median(theirs),
            "fastimagefolder_cpu_speedup": statistics.median(
                p / o for p, o in zip(theirs, mine))}


def cpu_per_image(rows: list, workers: int):
    """The one-thread rows' CPU time per image (ms, median of rounds) and the
    median of the rounds' ratios (ImageFolder's over FastImageFolder's: per
    core, what a loaded machine's wall clock blurs); None for worker rows."""
    pair = [next((r for r in rows if r.loader == kind and r.num_workers == workers), None)
            for kind in DATASETS]
    if any(r is None or not r.__dict__.get("cpu_per_image") for r in pair):
        return None
    base, ours = (r.__dict__["cpu_per_image"] for r in pair)
    return {"imagefolder_cpu_ms_per_image": 1e3 * statistics.median(base),
            "fastimagefolder_cpu_ms_per_image": 1e3 * statistics.median(ours),
            "cpu_speedup": statistics.median(b / o for b, o in zip(base, ours))}


def cpu_table(results: dict[str, dict]) -> str:
    """Per core: the one-thread rows' CPU time per image."""
    # the project's targets stay in the JSON (target_speedup), not in what users read
    lines = ["| recipe | ImageFolder CPU ms / image | FastImageFolder | per-core speedup | "
             "peers: CPU ms / image (FastImageFolder's speedup over it) |",
             "|---|---|---|---|---|"]
    for name, r in results.items():
        for s in r["settings"]:
            if "cpu_speedup" in s:
                others = "; ".join(f"{kind} {p['cpu_ms_per_image']:.2f} "
                                   f"({p['fastimagefolder_cpu_speedup']:.2f}x)"
                                   for kind, p in s.get("peers", {}).items()) or "-"
                lines.append(f"| {name} | {s['imagefolder_cpu_ms_per_image']:.2f} | "
                             f"{s['fastimagefolder_cpu_ms_per_image']:.2f} | "
                             f"{s['cpu_speedup']:.2f}x | {others} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def table(results: dict[str, dict]) -> str:
    workers = sorted({s["num_workers"] for r in results.values() for s in r["settings"]})
    head = "| recipe | fused at decode | fused tensor tail | unfused |"
    columns = 4
    for w in workers:
        label = "1 thread" if w == 0 else f"{w} workers"
        head += f" {label}: ImageFolder img/s | FastImageFolder | speedup |"
        columns += 3
        if w:
            head += " FastLoader | speedup |"
            columns += 2
    lines = [head, "|" + "---|" * columns]
    for name, r in results.items():
        f = r["fusion"]
        cells = [name, " + ".join(f["decode"]) or "-", " + ".join(f["tensor"]) or "-",
                 " + ".join(f["unfused"]) or "-"]
        for s in r["settings"]:
            mark = " (noisy)" if s["noisy"] else ""
            cells += [f"{s['imagefolder_images_per_s']:,.0f}",
                      f"{s['fastimagefolder_images_per_s']:,.0f}",
                      f"{s['speedup']:.2f}x{mark}"]
            if s["num_workers"]:
                cells += ([f"{s['fastloader_images_per_s']:,.0f}",
                           f"{s['fastloader_speedup']:.2f}x{mark}"]
                          if "fastloader_speedup" in s else ["-", "-"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder")
    parser.add_argument("--full", action="store_true", help="larger rounds, five of them")
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), metavar="NAME",
                        help="only these recipes (default: all)")
    parser.add_argument("--workers", nargs="+", type=int, metavar="N",
                        help="only these num_workers settings (0: one thread in this process; "
                             "default: the mode's, 0 and 2)")
    args = parser.parse_args(argv)
    if args.quick and args.full:
        parser.error("--quick and --full exclude each other")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    settings = dict(MODES[mode])
    if args.workers:
        settings["workers"] = sorted(set(args.workers))
    data = args.data or common.default_data()
    recipes, skipped = {}, {}
    for name in args.recipes or RECIPES:
        try:
            recipes[name] = RECIPES[name][1]()
        except ImportError as exc:  # timm is optional
            skipped[name] = f"skipped ({exc})"
    report = {"command": common.command_line(__name__, argv), "data": str(data), "mode": mode,
              "settings": settings, "machine": common.machine_facts(),
              "versions": {**common.library_versions(), "timm": _version("timm"),
                           "nvidia-dali": _version("nvidia-dali-cuda120")
                           or _version("nvidia-dali-cuda130"),
                           "torchcodec": _version("torchcodec")},
              "recipes": {}, "skipped": skipped}
    ticks = sum(len(loaders(name, w)) for name in recipes
                for w in settings["workers"]) * (1 + settings["rounds"])
    fused = {name: fusion(t) for name, t in recipes.items()}
    with common.progress("recipes", ticks) as bar:
        rows = measure(data, recipes, settings, bar)
    for name in recipes:
        report["recipes"][name] = recipe_result(RECIPES[name][0], rows[name], fused[name])
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(f"\n### recipes, batch {settings['batch']}, median of {settings['rounds']} "
                "interleaved rounds\n\n"
                + table(report["recipes"])
                + ("\n\n### per core: CPU time per image, one thread, median of the rounds' "
                   "ratios\n\n" + cpu_table(report["recipes"])
                   if cpu_table(report["recipes"]) else "")
                + "".join(f"\n- {name}: {why}" for name, why in skipped.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _version(dist: str):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
