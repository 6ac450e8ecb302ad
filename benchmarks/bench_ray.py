"""Scaling-out benchmark: Ray Data (Ray's read_images + torchvision, and
fastdecode.ray's read_images and Decode) and WebDataset shards (PIL decode,
fastdecode's handler and batch collation) against DataLoader(FastImageFolder)
on the same CPUs: steady-state images/s (median of repeats), CPU ms per image
split by process (driver, Ray workers, Ray's own daemons), and the time to
the first batch, apart from the cluster's start-up.

    python -m benchmarks.bench_ray [--data PATH] [--quick] [--json PATH] [--cpus N]

Starts a local Ray cluster on 127.0.0.1 (``--cpus`` CPUs, a 1 GiB object
store) and stops it at the end. Run by ``fastdecode bench --full`` when ray
is installed. Numbers are ratios within one run on a shared machine; rerun
rather than trust one figure.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

from . import _common as common

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 64
WARM_BATCHES = 2
EXTENSIONS = ["jpg", "jpeg", "png", "bmp"]


def chains() -> dict[str, Any]:
    from torchvision import transforms as T

    head = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    return {"float": T.Compose([*head, T.ToTensor(), T.Normalize(MEAN, STD)]),
            "uint8": T.Compose([*head, T.PILToTensor()])}


# ---------------------------------------------------------------------------
# CPU time of this process tree, by role


def _role(proc) -> str:
    if proc.pid == os.getpid():
        return "driver"
    name = " ".join(proc.cmdline()[:1]) or proc.name()
    if name.startswith("ray::") or "default_worker.py" in " ".join(proc.cmdline()):
        return "ray workers"
    if "torch" in name or proc.name().startswith("pt_"):
        return "loader workers"
    return "ray daemons" if any(k in name for k in ("raylet", "gcs_server", "ray", "dashboard",
                                                    "log_monitor", "monitor")) else "other"


def cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of this process, its live descendants by role, and
    its reaped children (DataLoader workers that have exited: RUSAGE_CHILDREN)."""
    import resource

    import psutil

    me = psutil.Process()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    totals: dict[str, float] = {"loader workers": reaped.ru_utime + reaped.ru_stime}
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            role = _role(proc)
            if role == "other" and proc.ppid() == me.pid:
                role = "loader workers"  # DataLoader / WebLoader workers
            totals[role] = totals.get(role, 0.0) + times.user + times.system
        except psutil.Error:
            continue
    return totals


# ---------------------------------------------------------------------------
# One row: repeats of an epoch, the warm batches excluded


def measure(make: Callable[[], Iterable], repeats: int) -> dict[str, Any]:
    rates, firsts, cpu = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        it = iter(make())
        n, first, t0, c0 = 0, None, None, None
        for k, batch in enumerate(it):
            if first is None:
                first = time.perf_counter() - start
            if k == WARM_BATCHES:
                t0, c0 = time.perf_counter(), cpu_by_role()
            elif k > WARM_BATCHES:
                n += len(batch[1] if isinstance(batch, (list, tuple)) else batch["image"])
        if t0 is None or n == 0:
            raise ValueError(f"need more than {WARM_BATCHES + 1} batches of {BATCH} per epoch")
        seconds, c1 = time.perf_counter() - t0, cpu_by_role()
        rates.append(n / seconds)
        firsts.append(first)
        cpu.append({r: (c1.get(r, 0.0) - c0.get(r, 0.0)) * 1000 / n for r in c1})
    best = rates.index(statistics.median_low(rates))
    return {"images_per_s": statistics.median(rates), "rates": rates,
            "first_batch_s": statistics.median(firsts), "cpu_ms_per_image": cpu[best]}


# ---------------------------------------------------------------------------
# The pipelines


def dataloader(root: str, chain, workers: int):
    from torch.utils.data import DataLoader

    from fastdecode import FastImageFolder

    ds = FastImageFolder(root, chain)
    return lambda: DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                              drop_last=True)


class _TorchvisionRows:
    """What Ray users write today: the chain per row on Ray's decoded arrays."""

    def __init__(self, chain):
        self.chain = chain

    def __call__(self, batch):
        import numpy as np
        from PIL import Image

        batch["image"] = np.stack([self.chain(Image.fromarray(a)).numpy()
                                   for a in batch["image"]])
        return batch


def ray_pipelines(root: str, c: dict[str, Any]) -> dict[str, Callable[[], Iterable]]:
    import ray.data

    import fastdecode.ray as fray

    def batches(ds, batch_size=BATCH):
        return lambda: ds.iter_torch_batches(batch_size=batch_size)

    def blocks(ds):  # fastdecode's blocks are batches: zero-copy views of the object store
        return batches(ds, None)

    baseline = ray.data.read_images(root, mode="RGB", file_extensions=EXTENSIONS).map_batches(
        _TorchvisionRows(c["float"]), batch_size=BATCH)
    decode = ray.data.read_binary_files(root, file_extensions=EXTENSIONS).map_batches(
        fray.Decode(c["float"], column="bytes", output_column="image"), batch_format="pyarrow",
        batch_size=BATCH)
    # fastdecode first: its first batch is the cold one (Ray Data's start-up on a fresh cluster)
    return {
        "fastdecode.ray.read_images, float": blocks(fray.read_images(root, c["float"])),
        "Ray read_images + torchvision, float": batches(baseline),
        "fastdecode.ray.read_images, uint8": blocks(fray.read_images(root, c["uint8"])),
        "read_binary_files + fastdecode.ray.Decode, float": blocks(decode),
    }


def wds_pipelines(root: str, c: dict[str, Any], workers: int, tmp: Path):
    import webdataset as wds

    import fastdecode.webdataset as fwds

    fwds.write_shards(root, tmp / "wds", shard_count=max(2, 2 * workers), workers=1)
    urls = [str(p) for p in sorted((tmp / "wds").glob("shard-*.tar"))]

    def loader(pipeline):
        return lambda: wds.WebLoader(pipeline, batch_size=None, num_workers=workers)

    def base():
        return wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node)

    pil = base().decode("pil").to_tuple("jpg;png", "cls").map_tuple(c["float"], int).batched(
        BATCH, partial=False)
    handler = base().decode(fwds.handler(c["float"])).to_tuple("jpg;png", "cls").batched(
        BATCH, partial=False)
    collate = base().to_tuple("jpg;png", "cls").batched(
        BATCH, collation_fn=fwds.collate(c["float"]), partial=False)
    return {"WebDataset, PIL decode + torchvision, float": loader(pil),
            "WebDataset, fastdecode.webdataset.handler, float": loader(handler),
            "WebDataset, fastdecode.webdataset.collate, float": loader(collate)}


# ---------------------------------------------------------------------------


def report(rows: dict[str, dict], base: str, base_u8: str) -> str:
    lines = ["| pipeline | img/s | vs DataLoader(FastImageFolder) | first batch s | "
             "CPU ms/img (driver / workers / Ray daemons) |", "|---|---:|---:|---:|---|"]
    for name, r in rows.items():
        ref = rows[base_u8 if "uint8" in name else base]["images_per_s"]
        cpu = r["cpu_ms_per_image"]
        workers = cpu.get("ray workers", 0.0) + cpu.get("loader workers", 0.0)
        lines.append(f"| {name} | {r['images_per_s']:.0f} | {r['images_per_s'] / ref:.2f}x | "
                     f"{r['first_batch_s']:.2f} | {cpu.get('driver', 0):.2f} / {workers:.2f} / "
                     f"{cpu.get('ray daemons', 0):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = common.BenchParser(__doc__, "an ImageFolder tree",
                                {"repeats": ("epochs per row, median taken", 3, 1)})
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the cluster and loader "
                        "workers of the DataLoader rows (default 2)")
    parser.add_argument("--no-wds", action="store_true", help="leave out the WebDataset rows")
    args = parser.parse_args(argv)
    try:
        import ray
    except ImportError as exc:
        print(f"bench_ray: skipped: {exc} (pip install fastdecode[ray])", file=sys.stderr)
        return 0
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="ray")
    root = str(args.data or common.default_data())
    c = chains()
    rows: dict[str, dict] = {}
    bar = common.progress("bench_ray", 9)
    for kind in ("float", "uint8"):
        rows[f"DataLoader(FastImageFolder), {kind}"] = measure(
            dataloader(root, c[kind], args.cpus), args.repeats)
        bar.update()
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, object_store_memory=2**30, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
    cluster_up = time.perf_counter() - start
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        for name, make in ray_pipelines(root, c).items():
            rows[name] = measure(make, args.repeats)
            bar.update()
    finally:
        ray.shutdown()
    if not args.no_wds:
        with tempfile.TemporaryDirectory() as tmp:
            for name, make in wds_pipelines(root, c, args.cpus, Path(tmp)).items():
                rows[name] = measure(make, args.repeats)
                bar.update()
    bar.close()
    table = report(rows, "DataLoader(FastImageFolder), float", "DataLoader(FastImageFolder), "
                   "uint8")
    common.emit(f"{common.command_line(__file__, argv)}\n\nbatch {BATCH}, {args.cpus} CPUs, "
                f"local Ray cluster up in {cluster_up:.1f} s; steady state: the first "
                f"{WARM_BATCHES} batches of each epoch left out, median of {args.repeats}\n\n"
                f"{table}\n")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "cluster_up_s": cluster_up,
                                         "batch_size": BATCH, "cpus": args.cpus,
                                         "machine": common.machine_facts(),
                                         "versions": common.library_versions()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
