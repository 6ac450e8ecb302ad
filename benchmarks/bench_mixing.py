"""MixUp/CutMix on the batches (issue 50): end to end with 2 workers, steady
state, torchvision's reference collate_fn against fastdecode's in-place
mixing; and the mixing alone, per batch, on one thread.

    python -m benchmarks.bench_mixing [--data PATH] [--quick | --full] [--json PATH]

End to end, per recipe (a training chain and the mixing its project pairs it
with), four loaders of the same images, each the median of interleaved rounds
in steady state (persistent workers, an untimed first epoch, bench_loader's
rounds): ``DataLoader(ImageFolder, collate_fn=lambda b: mix(*default_collate(b)))``
(torchvision's reference), the same collate_fn over FastImageFolder,
FastImageFolder with ``collate_fn=fastdecode.augment.MixCollate(mix)`` and
``FastLoader(FastImageFolder, batch_transform=mix)`` (its CPU ring). The
mixing alone: ``mix(images, labels)`` against ``fastdecode.augment.mix_batch``
on the same float batch (a fresh copy each call, outside the timing),
milliseconds per batch, one thread, median of interleaved rounds.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, default_collate

import fastdecode as fd
from fastdecode import _system
from fastdecode.augment import MixCollate, mix_batch

from . import _common as common
from . import bench_loader as loader_bench
from .presets import ClassificationPresetTrain

LOADERS = ("ImageFolder + collate_fn", "FastImageFolder + collate_fn",
           "FastImageFolder + MixCollate", "FastLoader batch_transform")
BASELINE = LOADERS[0]
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(workers=2, batch=16, batches=4, rounds=3, round_cap_s=0.0, alone_batch=32,
                  alone_rounds=5),
    "default": dict(workers=2, batch=64, batches=8, rounds=3, round_cap_s=8.0, alone_batch=128,
                    alone_rounds=7),
    "full": dict(workers=2, batch=128, batches=12, rounds=5, round_cap_s=8.0, alone_batch=128,
                 alone_rounds=11),
}


def _tv_mix(classes: int):
    from torchvision.transforms import v2

    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=classes),
                            v2.CutMix(alpha=1.0, num_classes=classes)])


def _timm_mix(classes: int):
    from timm.data import Mixup

    return Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=classes)


def _timm_train():
    from timm.data import create_transform

    return create_transform(224, is_training=True, re_prob=0.25)


# name -> (training chain, mixing for n classes): torchvision's reference with
# IMAGENET1K_V2's flags (--auto-augment ta_wide --random-erase 0.1 --mixup-alpha
# 0.2 --cutmix-alpha 1.0 --train-crop-size 176, --use-v2), timm's train.py with
# --reprob 0.25 --mixup 0.8 --cutmix 1.0 (its RandAugment policies: bench_recipes)
RECIPES: dict[str, tuple[Callable[[], Any], Callable[[int], Any]]] = {
    "IMAGENET1K_V2 recipe (v2, ta_wide, random erase 0.1, 176), MixUp/CutMix": (
        lambda: ClassificationPresetTrain(crop_size=176, auto_augment_policy="ta_wide",
                                          random_erase_prob=0.1, use_v2=True),
        _tv_mix),
    "timm train re_prob=0.25, Mixup/CutMix": (_timm_train, _timm_mix),
}


class ReferenceCollate:
    """torchvision's reference: ``mix(*default_collate(batch))``."""

    def __init__(self, mix) -> None:
        self.mix = mix

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


def loader_maker(mix) -> Callable:
    """bench_loader's ``make`` for the rows of LOADERS, with ``mix``."""
    def make(kind: str, root, chain, workers: int, batch: int, samples: int):
        from torchvision.datasets import ImageFolder

        ds = ImageFolder(root, chain) if kind == BASELINE else fd.FastImageFolder(root, chain)
        sampler = loader_bench.Draws(ds, samples)
        kwargs: dict[str, Any] = dict(batch_size=batch, sampler=sampler, num_workers=workers,
                                      drop_last=True, pin_memory=False,
                                      persistent_workers=workers > 0)
        if kind == "FastLoader batch_transform":
            return fd.FastLoader(ds, batch_transform=mix, **kwargs), sampler
        collate = MixCollate(mix) if kind == "FastImageFolder + MixCollate" else \
            ReferenceCollate(mix)
        return DataLoader(ds, collate_fn=collate, **kwargs), sampler

    return make


def classes_of(data) -> int:
    return sum(1 for p in data.iterdir() if p.is_dir())


def measure(data, recipes: dict[str, tuple[Any, Any]], settings: dict, bar) -> dict[str, list]:
    """Per recipe: its rows alive together, rounds interleaved among them."""
    out: dict[str, list] = {}
    workers, batch = settings["workers"], settings["batch"]
    batches = math.ceil(settings["batches"] / workers) * workers  # whole waves
    for name, (chain, mix) in recipes.items():
        rows = []
        for kind in LOADERS:
            bar.set_postfix_str(f"{name}: {kind}, start-up")
            # 3 waves in the untimed epoch; then bench_loader's round length (what
            # FastLoader made ahead and the ramp wave on top of the timed batches)
            row = loader_bench.open_row(name, kind, data, chain, workers, batch,
                                        max(batches, 3 * workers) * batch, loader_maker(mix))
            row.sampler.count = batch * loader_bench.round_batches(
                row, batch, batches, settings["round_cap_s"])
            rows.append(row)
            bar.update()
        for r in range(settings["rounds"]):
            for row in common.round_order(rows, r):
                bar.set_postfix_str(f"{name}: {row.loader}, round {r + 1}")
                with warnings.catch_warnings():
                    # as bench_loader: the rounds' length is set after the first epoch,
                    # so the first round's batches drawn ahead are dropped, on purpose
                    warnings.filterwarnings("ignore", "FastLoader dropped the next epoch",
                                            RuntimeWarning)
                    loader_bench.run_round(row)
                bar.update()
        for row in rows:
            row.source = None  # ends its persistent workers
        out[name] = rows
    return out


def mixing_alone(mixes: dict[str, Any], batch: int, rounds: int) -> dict[str, dict]:
    """ms per batch of ``mix(images, labels)`` and of mix_batch on a (batch,
    3, 224, 224) float batch, one thread, interleaved rounds, each on a fresh
    copy made outside the timing."""
    g = torch.Generator().manual_seed(0)
    images = torch.randn((batch, 3, 224, 224), generator=g)
    labels = torch.randint(0, 1000, (batch,), generator=g)
    out = {}
    with _system.one_thread_per_pool():
        for name, mix in mixes.items():
            times: dict[str, list[float]] = {"theirs": [], "in place": []}
            for r in range(rounds):
                for who in common.round_order(list(times), r):
                    x = images.clone()
                    torch.manual_seed(r)
                    start = time.perf_counter()
                    if who == "theirs":
                        mix(x, labels)
                    else:
                        mix_batch(mix, x, labels)
                    times[who].append((time.perf_counter() - start) * 1e3)
            theirs, ours = statistics.median(times["theirs"]), statistics.median(times["in place"])
            out[name] = {"batch": batch, "theirs_ms": theirs, "in_place_ms": ours,
                         "speedup": theirs / ours,
                         "ratio_of_rounds": common.paired_ratio(times["theirs"],
                                                                times["in place"])}
    return out


def _mixes_alone() -> dict[str, Any]:
    from torchvision.transforms import v2

    mixes: dict[str, Any] = {"torchvision MixUp": v2.MixUp(alpha=0.2, num_classes=1000),
                             "torchvision CutMix": v2.CutMix(alpha=1.0, num_classes=1000)}
    try:
        from timm.data import Mixup
    except ImportError:
        return mixes
    mixes["timm Mixup (mixup)"] = Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, num_classes=1000)
    mixes["timm Mixup (cutmix)"] = Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, num_classes=1000)
    return mixes


def result(rows: list) -> dict:
    """Per loader: images/s and CPU ms per image (medians), the median of
    per-round ratios to the baseline's rate, the rounds' spread and rates."""
    base = next(r for r in rows if r.loader == BASELINE).rates
    return {r.loader: {"images_per_s": statistics.median(r.rates),
                       "cpu_ms_per_image": statistics.median(r.cpu) * 1e3,
                       "speedup": common.paired_ratio(r.rates, base),
                       "spread": (max(r.rates) - min(r.rates)) / statistics.median(r.rates),
                       "rates": list(r.rates)}
            for r in rows}


def table(results: dict[str, dict], alone: dict[str, dict], settings: dict) -> str:
    head = "| recipe | " + " | ".join(f"{k}: img/s (x), CPU ms/img" for k in LOADERS) + " |"
    lines = [f"\n### MixUp/CutMix end to end, {settings['workers']} workers, batch "
             f"{settings['batch']}, median of {settings['rounds']} interleaved rounds "
             "(x: the median of per-round ratios to the first column; CPU: every process "
             "of the loader, per image)\n", head,
             "|" + "---|" * (1 + len(LOADERS))]
    for name, r in results.items():
        cells = [name] + [
            f"{r[k]['images_per_s']:,.0f} ({r[k]['speedup']:.2f}x), {r[k]['cpu_ms_per_image']:.1f}"
            + (" (noisy)" if r[k]["spread"] > loader_bench.NOISY_SPREAD else "") for k in LOADERS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"### The mixing alone, one thread, ms per batch of "
              f"{next(iter(alone.values()))['batch'] if alone else 0} (3x224x224 float32)\n",
              "| mixing | its own call | fastdecode in place | speedup |", "|---|---|---|---|"]
    for name, a in alone.items():
        lines.append(f"| {name} | {a['theirs_ms']:.1f} | {a['in_place_ms']:.1f} | "
                     f"{a['speedup']:.2f}x |")
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder")
    parser.add_argument("--full", action="store_true", help="larger rounds, five of them")
    args = parser.parse_args(argv)
    if args.quick and args.full:
        parser.error("--quick and --full exclude each other")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    settings = dict(MODES[mode])
    data = args.data or common.default_data()
    classes = classes_of(data)
    recipes, skipped = {}, {}
    for name, (chain, mix) in RECIPES.items():
        try:
            recipes[name] = (chain(), mix(classes))
        except ImportError as exc:  # timm is optional
            skipped[name] = f"skipped ({exc})"
    report: dict[str, Any] = {
        "command": common.command_line(__name__, argv), "data": str(data), "mode": mode,
        "settings": settings, "machine": common.machine_facts(),
        "versions": common.library_versions(), "recipes": {}, "alone": {}, "skipped": skipped}
    ticks = len(recipes) * len(LOADERS) * (1 + settings["rounds"])
    with common.progress("mixing", ticks) as bar:
        rows = measure(data, recipes, settings, bar)
    report["alone"] = mixing_alone(_mixes_alone(), settings["alone_batch"],
                                   settings["alone_rounds"])
    for name in recipes:
        report["recipes"][name] = result(rows[name])
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(table(report["recipes"], report["alone"], settings)
                + "".join(f"\n- {name}: {why}" for name, why in skipped.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
