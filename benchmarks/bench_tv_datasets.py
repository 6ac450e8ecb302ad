"""torchvision's built-in datasets swapped one line: fastdecode.datasets' CIFAR10 and Food101 against
torchvision's own, under torchvision's DataLoader.

    python -m benchmarks.bench_tv_datasets [--data PATH] [--quick] [--json PATH] [--rounds N]
                                           [--rows {all,food}]

Rows (issue 52):

- the seed's example, ``CIFAR10`` + ``Resize((224, 224))`` + ``ToTensor`` +
  ``Normalize((0.5,), (0.5,))``, ``DataLoader(batch_size=32, shuffle=True)``:
  per core (num_workers=0, every thread pool at one thread) and end to end
  with num_workers=4 (as written) and 2 (the cores);
  the per-core row again with ``exact=True`` (Pillow's own two-pass
  resample, torchvision's tensors bit for bit);
- CIFAR's train recipe, ``RandomCrop(32, padding=4)`` + flip + ``ToTensor`` +
  ``Normalize``, batch 128, per core (no resample: the same path with or
  without ``exact``);
- a Food101 layout of the photos in ``--data`` (one class per folder, the
  files linked, not copied) with the standard train chain
  (``RandomResizedCrop(224)`` + flip + ``ToTensor`` + ``Normalize``), batch
  32, per core: Food101 against torchvision's, and FastImageFolder against
  ImageFolder on the same files (the acceptance: Food101's speedup within
  10 % of FastImageFolder's). The four loaders run in the same rounds, so
  each round gives one ratio of the two speedups and the figure is their
  median (``--rows food`` runs these rows alone).

The CIFAR10 data is generated in CIFAR's own on-disk format (pickled
batches; its md5 check is what torchvision's tests patch too). Each row is
the median of interleaved rounds (torchvision's, then fastdecode's, reversed
every other round); a ratio is the median of the per-round ratios. The
loaders with workers are persistent and run one untimed epoch first (steady
state, as bench_loader's rows).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import numpy as np

from . import _common as common

MODES: dict[str, dict[str, Any]] = {
    # images per timed pass of each row
    "quick": dict(cifar_files=200, seed_core=64, seed_workers=256, crop_core=1024, rounds=3),
    "default": dict(cifar_files=1000, seed_core=256, seed_workers=1024, crop_core=4096, rounds=5),
}
TARGETS = {"seed example, per core": 4.0, "seed example, num_workers=4": 3.0,
           "seed example, num_workers=2": 3.0, "CIFAR crop recipe, per core": 3.0}
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def seed_chain():
    from torchvision import transforms as T

    return T.Compose([T.Resize((224, 224)), T.ToTensor(), T.Normalize((0.5,), (0.5,))])


def crop_chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(CIFAR_MEAN, CIFAR_STD)])


def train_chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


# ---------------------------------------------------------------------------
# the data


def write_cifar10(root: Path, per_file: int) -> None:
    """CIFAR10's on-disk format: five pickled train batches, a test batch and
    the meta file, of smooth random 32x32 images."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        base = rng.integers(0, 256, (per_file, 3, 8, 8), dtype=np.uint8)
        images = np.repeat(np.repeat(base, 4, 2), 4, 3).astype(np.int16)
        images = np.clip(images + rng.integers(-16, 17, images.shape), 0, 255).astype(np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({"data": images.reshape(per_file, -1),
                         "labels": rng.integers(0, 10, per_file).tolist()}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)


def cifar_pair(root: Path, transform, exact: bool = False) -> tuple[Any, Any]:
    """(torchvision's CIFAR10, fastdecode's) over ``root``; the md5 check
    patched to a file check (the files are generated)."""
    from torchvision import datasets as tvd

    from fastdecode import datasets as fdd

    with mock.patch("torchvision.datasets.cifar.check_integrity",
                    lambda fpath, md5=None: os.path.isfile(fpath)):
        return (tvd.CIFAR10(str(root), train=True, transform=transform),
                fdd.CIFAR10(str(root), train=True, transform=transform, exact=exact))


def food101_layout(photos: Path, root: Path) -> Path:
    """A Food101 tree (``food-101/meta/train.json``, ``images/<class>/<id>.jpg``)
    whose images link to the JPEG files of ``photos``' class folders; the
    images folder is an ImageFolder tree of the same files. Returns it."""
    images = root / "food-101" / "images"
    meta: dict[str, list[str]] = {}
    for cls in sorted(p for p in photos.iterdir() if p.is_dir()):
        for k, src in enumerate(sorted(cls.iterdir())):
            if src.suffix.lower() not in (".jpg", ".jpeg"):
                continue
            (images / cls.name).mkdir(parents=True, exist_ok=True)
            os.symlink(src.resolve(), images / cls.name / f"{k}.jpg")
            meta.setdefault(cls.name, []).append(f"{cls.name}/{k}")
    (root / "food-101" / "meta").mkdir(parents=True)
    (root / "food-101" / "meta" / "train.json").write_text(json.dumps(meta))
    return images


# ---------------------------------------------------------------------------
# measuring


class Row:
    """One loader (a dataset under DataLoader), timed over ``images`` per pass."""

    def __init__(self, name: str, dataset, images: int, batch: int, workers: int):
        import torch
        from torch.utils.data import DataLoader, SubsetRandomSampler

        self.name, self.images, self.workers, self.rates = name, images, workers, []
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))
        indices = [int(i) for i in order[:images]] * -(-images // len(dataset))
        self.loader = DataLoader(dataset, batch_size=batch, num_workers=workers,
                                 sampler=SubsetRandomSampler(indices[:images]),
                                 persistent_workers=workers > 0)
        if workers:
            self.run()  # the untimed epoch: the workers start, their pages settle

    def run(self) -> float:
        start = time.perf_counter()
        n = 0
        for batch, _ in self.loader:
            n += len(batch)
        return n / (time.perf_counter() - start)

    def round(self) -> None:
        from fastdecode import _system

        pinned = _system.one_thread_per_pool() if self.workers == 0 else contextlib.nullcontext()
        with pinned:
            self.rates.append(self.run())

    def close(self) -> None:
        self.loader = None


def _interleave(label: str, rows: tuple[Row, ...], rounds: int, bar) -> None:
    """Times each of ``rows`` once per round, the order reversed every other round."""
    for r in range(rounds):
        for row in common.round_order(rows, r):
            bar.set_postfix_str(f"{label}: {row.name}, round {r + 1}")
            row.round()
            bar.update()
    for row in rows:
        row.close()


def compare(label: str, pair: tuple[Row, Row], rounds: int, bar) -> dict[str, Any]:
    """torchvision's row against fastdecode's, rounds interleaved."""
    _interleave(label, pair, rounds, bar)
    return _result(label, *pair)


def compare_together(labels: tuple[str, str], rows: tuple[Row, Row, Row, Row], rounds: int,
                     bar) -> dict[str, dict[str, Any]]:
    """Two pairs in the same interleaved rounds: each round times all four
    loaders, so a ratio of their speedups is taken per round."""
    _interleave(" / ".join(labels), rows, rounds, bar)
    return {labels[0]: _result(labels[0], *rows[:2]), labels[1]: _result(labels[1], *rows[2:])}


def _result(label: str, base: Row, ours: Row) -> dict[str, Any]:
    speedup = common.paired_ratio(ours.rates, base.rates)
    spread = max((max(r.rates) - min(r.rates)) / statistics.median(r.rates) for r in (base, ours))
    return {"torchvision": base.name, "fastdecode": ours.name,
            "torchvision_images_per_s": statistics.median(base.rates),
            "fastdecode_images_per_s": statistics.median(ours.rates), "speedup": speedup,
            "target_speedup": TARGETS.get(label), "num_workers": base.workers,
            "images_per_pass": base.images, "rates": {"torchvision": base.rates,
                                                      "fastdecode": ours.rates},
            "spread": spread}


FOOD, FOLDER = "Food101 layout, train chain, per core", "the same files as an ImageFolder, per core"


def speedup_ratios(rows: dict[str, dict]) -> list[float]:
    """Per round, Food101's speedup over FastImageFolder's (the acceptance's ratio)."""
    food, folder = rows[FOOD]["rates"], rows[FOLDER]["rates"]
    return [(a / b) / (c / d) for a, b, c, d in zip(food["fastdecode"], food["torchvision"],
                                                    folder["fastdecode"], folder["torchvision"])]


def median_interval(values: list[float]) -> tuple[float, float] | None:
    """The distribution-free 95 % interval of the median of ``values`` (the
    sign test's order statistics), or None for fewer than 6 values."""
    ordered, n = sorted(values), len(values)
    k, below = 0, 0.0  # k: the largest with P(Binomial(n, 1/2) < k) <= 2.5 %
    while below + math.comb(n, k) / 2 ** n <= 0.025:
        below += math.comb(n, k) / 2 ** n
        k += 1
    return (ordered[k - 1], ordered[n - k]) if k else None


def measure(settings: dict, photos: Path, work: Path, bar, only_food: bool = False
            ) -> dict[str, dict]:
    from torchvision import datasets as tvd

    from fastdecode import datasets as fdd

    rounds = settings["rounds"]
    out: dict[str, dict] = {}
    rows: list[tuple[str, Callable[[], tuple[Row, Row]]]] = []
    for label, chain, images, batch, workers, exact in () if only_food else (
            ("seed example, per core", seed_chain, settings["seed_core"], 32, 0, False),
            ("seed example, exact=True, per core", seed_chain, settings["seed_core"], 32, 0, True),
            ("seed example, num_workers=4", seed_chain, settings["seed_workers"], 32, 4, False),
            ("seed example, num_workers=2", seed_chain, settings["seed_workers"], 32, 2, False),
            ("CIFAR crop recipe, per core", crop_chain, settings["crop_core"], 128, 0, False)):
        def make(chain=chain, images=images, batch=batch, workers=workers, exact=exact):
            theirs, ours = cifar_pair(work / "cifar", chain(), exact)
            return (Row("torchvision CIFAR10", theirs, images, batch, workers),
                    Row("fastdecode CIFAR10", ours, images, batch, workers))
        rows.append((label, make))
    if rows:
        write_cifar10(work / "cifar", settings["cifar_files"])
    for label, make in rows:
        bar.set_postfix_str(f"{label}: start-up")
        out[label] = compare(label, make(), rounds, bar)
    images_dir = food101_layout(photos, work / "food")
    count = sum(1 for _ in images_dir.rglob("*.jpg"))
    bar.set_postfix_str("Food101 and ImageFolder: start-up")
    out.update(compare_together((FOOD, FOLDER), (
        Row("torchvision Food101", tvd.Food101(str(work / "food"), transform=train_chain()),
            count, 32, 0),
        Row("fastdecode Food101", fdd.Food101(str(work / "food"), transform=train_chain()),
            count, 32, 0),
        Row("ImageFolder", tvd.ImageFolder(str(images_dir), transform=train_chain()), count, 32, 0),
        Row("FastImageFolder", fdd.FastImageFolder(str(images_dir), transform=train_chain()),
            count, 32, 0)), rounds, bar))
    return out


def table(results: dict[str, dict]) -> str:
    lines = ["| row | torchvision img/s | fastdecode img/s | speedup | target |",
             "|---|---|---|---|---|"]
    for label, r in results.items():
        target = f">= {r['target_speedup']:.0f}x" if r.get("target_speedup") else ""
        noisy = " (noisy)" if r["spread"] > 0.25 else ""
        lines.append(f"| {label} ({r['fastdecode']} vs {r['torchvision']}) | "
                     f"{r['torchvision_images_per_s']:,.0f} | {r['fastdecode_images_per_s']:,.0f} | "
                     f"{r['speedup']:.2f}x{noisy} | {target} |")
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "a folder of JPEG photos, one subfolder per class "
                                "(the Food101 rows; default: ../shared/corpus/photos when it "
                                "exists)", {"rounds": ("interleaved rounds", 5, 3)})
    parser.add_argument("--rows", choices=("all", "food"), default="all",
                        help="'food': the Food101 and ImageFolder rows alone (default: all)")
    return parser.parse_args(argv)


def _photos(args) -> Path:
    if args.data is not None:
        return args.data
    shared = common.package_parent(__file__, "benchmarks").parent / "shared" / "corpus" / "photos"
    return shared if shared.is_dir() else common.default_data()


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "default"
    settings = dict(MODES[mode], rounds=args.rounds)
    photos = _photos(args)
    report: dict[str, Any] = {"command": common.command_line(__name__, argv), "data": str(photos),
                              "mode": mode, "settings": settings,
                              "machine": common.machine_facts(),
                              "versions": common.library_versions()}
    with tempfile.TemporaryDirectory(prefix="fastdecode-tv-datasets-") as tmp:
        only_food = args.rows == "food"
        with common.progress("tv-datasets", (4 if only_food else 14) * settings["rounds"]) as bar:
            report["rows"] = measure(settings, photos, Path(tmp), bar, only_food)
    rows = report["rows"]
    ratios = speedup_ratios(rows)
    report["food101_vs_fastimagefolder"] = statistics.median(ratios)
    report["food101_vs_fastimagefolder_rounds"] = ratios
    interval = median_interval(ratios)
    report["food101_vs_fastimagefolder_interval"] = interval
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(f"\n### torchvision datasets swapped one line, median of {settings['rounds']} "
                "interleaved rounds\n\n" + table(rows)
                + f"\n\nFood101's speedup / FastImageFolder's on the same files, per round: "
                  f"median {report['food101_vs_fastimagefolder']:.3f}"
                  + (f" (95 % interval of the median {interval[0]:.3f}-{interval[1]:.3f})"
                     if interval else "")
                  + f", range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rounds "
                  "(acceptance: >= 0.90)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
