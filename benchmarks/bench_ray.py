"""Scaling-out benchmark: Ray Data (Ray's read_images + torchvision, and
fastdecode.ray's read_images and Decode) and WebDataset shards (PIL decode,
fastdecode's handler and batch collation) against DataLoader(FastImageFolder)
on the same CPUs: steady-state images/s (median of repeats), CPU ms per image
split by process (driver, Ray workers, Ray's own daemons), and the time to
the first batch: on a fresh cluster (the first dataset after the cluster is
up, with what it cost: worker processes started and CPU-seconds by role)
apart from the first batch of each steady row.

    python -m benchmarks.bench_ray [--data PATH] [--quick] [--json PATH] [--cpus N]
                                   [--no-wds] [--warm-up] [--fresh N] [--epoch-repeat K]

The DataLoader rows (the ratios' reference) run in the local cluster's
driver, in the same rounds as the Ray rows (each round one epoch of every
row, in turn), so that a ratio compares moments of the same load; the
WebDataset rows run after. ``--fresh N`` starts N more local clusters that
measure only their first batch, for a median. ``--epoch-repeat K`` makes
each steady epoch of the Ray and DataLoader rows K times the file list (the
generated set is 1,000 images, 15 batches: each epoch's start and the
batches a pipeline holds in flight when the timed window opens weigh on so
short an epoch).

The Ray rows run in a driver that is the first process of a network + PID
namespace with only loopback up (``unshare``, as tests/data/test_ray.py
does): a local cluster of ``--cpus`` CPUs and a 1 GiB object store and, in
the full mode (not ``--quick``), a 2-node cluster (``ray start`` head +
worker, 1 CPU each); when the driver ends the kernel ends every Ray
process. Where no namespace can be made the 1-node rows run on the host's
127.0.0.1 and the 2-node rows are skipped, saying so. Run by ``fastdecode
bench --full`` when ray is installed. Numbers are ratios within one run on a
shared machine; rerun rather than trust one figure.
"""

# Over ~400 lines on purpose: the rows (DataLoader, four Ray pipelines, three
# WebDataset ones), the namespace driver and the two report tables are one
# benchmark's; the cluster code is apart (_ray_cluster.py).

from __future__ import annotations

import contextlib
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
from . import _ray_cluster as cluster

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 64
WARM_BATCHES = 2
EXTENSIONS = ["jpg", "jpeg", "png", "bmp"]
RAY_TIMEOUT = 1500  # seconds for one namespace driver run (cluster start, rows, stop)
FLOAT_ROW = "fastdecode.ray.read_images, float"
RAY_BASELINE = "Ray read_images + torchvision, float"
DL_FLOAT, DL_UINT8 = "DataLoader(FastImageFolder), float", "DataLoader(FastImageFolder), uint8"


def chains() -> dict[str, Any]:
    from torchvision import transforms as T

    head = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    return {"float": T.Compose([*head, T.ToTensor(), T.Normalize(MEAN, STD)]),
            "uint8": T.Compose([*head, T.PILToTensor()])}


# ---------------------------------------------------------------------------
# One row: repeats of an epoch, the warm batches excluded


def epoch(make: Callable[[], Iterable]) -> tuple[float, float, dict[str, float]]:
    """One epoch of a pipeline: images/s after the warm batches, seconds to
    its first batch, CPU ms per image by role."""
    start = time.perf_counter()
    n, first, t0, c0 = 0, None, None, None
    for k, batch in enumerate(make()):
        if first is None:
            first = time.perf_counter() - start
        if k == WARM_BATCHES:
            t0, c0 = time.perf_counter(), cluster.cpu_by_role()
        elif k > WARM_BATCHES:
            n += len(batch[1] if isinstance(batch, (list, tuple)) else batch["image"])
    if t0 is None or c0 is None or first is None or n == 0:
        raise ValueError(f"need more than {WARM_BATCHES + 1} batches of {BATCH} per epoch")
    seconds, c1 = time.perf_counter() - t0, cluster.cpu_by_role()
    return n / seconds, first, {r: (c1.get(r, 0.0) - c0.get(r, 0.0)) * 1000 / n for r in c1}


def _summary(epochs: list[tuple[float, float, dict[str, float]]]) -> dict[str, Any]:
    rates = [e[0] for e in epochs]
    best = rates.index(statistics.median_low(rates))
    return {"images_per_s": statistics.median(rates), "rates": rates,
            "first_batch_s": statistics.median(e[1] for e in epochs),
            "cpu_ms_per_image": epochs[best][2]}


def measure(make: Callable[[], Iterable], repeats: int) -> dict[str, Any]:
    return _summary([epoch(make) for _ in range(repeats)])


def measure_rounds(makes: dict[str, Callable[[], Iterable]], repeats: int) -> dict[str, Any]:
    """Each round one epoch of every pipeline, in turn: the rows a ratio
    compares see the same moments of a shared machine's load."""
    epochs: dict[str, list] = {name: [] for name in makes}
    for _ in range(repeats):
        for name, make in makes.items():
            epochs[name].append(epoch(make))
    return {name: _summary(e) for name, e in epochs.items()}


# ---------------------------------------------------------------------------
# The pipelines


def dataloader(root: str, chain, workers: int, repeat: int = 1):
    from torch.utils.data import ConcatDataset, DataLoader

    from fastdecode import FastImageFolder

    ds: Any = FastImageFolder(root, chain)
    if repeat > 1:
        ds = ConcatDataset([ds] * repeat)
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


def ray_pipelines(root: str, c: dict[str, Any], nodes: int,
                  repeat: int = 1) -> dict[str, Callable[[], Iterable]]:
    import ray.data

    import fastdecode.ray as fray
    from fastdecode.storage._listing import list_images

    files = list_images(root).paths
    source: Any = root if repeat == 1 else files * repeat  # (the labels are then -1)

    def batches(ds, batch_size=BATCH):
        return lambda: ds.iter_torch_batches(batch_size=batch_size)

    def blocks(ds):  # fastdecode's blocks are batches: zero-copy views of the object store
        return batches(ds, None)

    if nodes > 1:
        where = f", {nodes} nodes x 1 CPU"
        return {f"{FLOAT_ROW}{where}": blocks(fray.read_images(source, c["float"])),
                f"fastdecode.ray.read_images, uint8{where}": blocks(fray.read_images(source,
                                                                                    c["uint8"]))}
    baseline = ray.data.read_images(source, mode="RGB", file_extensions=EXTENSIONS).map_batches(
        _TorchvisionRows(c["float"]), batch_size=BATCH)
    # blocks of a batch and no batch_size: the decode runs fused in the read tasks
    decode = ray.data.read_binary_files(
        source, file_extensions=EXTENSIONS,
        override_num_blocks=max(1, -(-len(files) * repeat // BATCH))
    ).map_batches(fray.Decode(c["float"], column="bytes", output_column="image"),
                  batch_format="pyarrow")
    return {
        FLOAT_ROW: blocks(fray.read_images(source, c["float"])),
        RAY_BASELINE: batches(baseline),
        "fastdecode.ray.read_images, uint8": blocks(fray.read_images(source, c["uint8"])),
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
# The Ray rows on a fresh cluster (started and stopped by _ray_cluster)


def fresh_first_batch(root: str, chain, up_at: float, warm: bool) -> dict[str, Any]:
    """The first dataset of a fresh cluster: seconds from the cluster being
    up (``up_at``, time.time()) to read_images returning and to its first
    batch (after ``fastdecode.ray.warm_up()`` has finished, with ``warm``),
    with the processes started since and each role's CPU seconds."""
    import ray

    import fastdecode.ray as fray

    warmed = None
    if warm:
        ray.get(fray.warm_up())
        warmed = time.time() - up_at
    ds = fray.read_images(root, chain)
    planned = time.time() - up_at
    first, then, driver_cpu = None, {}, 0.0
    for _ in ds.iter_torch_batches(batch_size=None):  # the whole epoch: an early stop would
        if first is None:                              # cancel tasks and end their workers
            first = time.time() - up_at
            then, driver_cpu = cluster.snapshot(), time.process_time()
    cost = cluster.startup_cost(then, cluster.snapshot(), driver_cpu, up_at)
    return {"warm_up_s": warmed, "read_images_s": planned, "first_batch_s": first, **cost}


def ray_section(root: str, repeats: int, cpus: int, nodes: int,
                warm: bool = False, epoch_repeat: int = 1) -> dict[str, Any]:
    """The Ray rows on a fresh cluster of ``nodes`` nodes (1: a local cluster
    of ``cpus`` CPUs; more: ``ray start`` nodes of 1 CPU), always stopped."""
    import ray
    import ray.data

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="ray")
    import fastdecode.ray  # noqa: F401  # the driver's own imports before the cluster starts

    c = chains()
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:  # unwinds: ray.shutdown, then the nodes stop
        nodes_up = (stack.enter_context(cluster.ray_start_cluster(
            nodes, object_store_bytes=512 * 2**20)) if nodes > 1 else None)
        stack.callback(ray.shutdown)
        if nodes_up is None:
            ray.init(num_cpus=cpus, object_store_memory=2**30, include_dashboard=False,
                     _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=nodes_up.address, _node_ip_address="127.0.0.1",
                     log_to_driver=False, configure_logging=False)
            cluster.wait_for_nodes(ray, nodes)
        up_at, cluster_up = time.time(), time.perf_counter() - start
        ray.data.DataContext.get_current().enable_progress_bars = False
        fresh = fresh_first_batch(root, c["float"], up_at, warm)
        # the DataLoader rows (the ratios' reference) in the same rounds as the Ray rows
        loaders = ({} if nodes > 1 else
                   {f"DataLoader(FastImageFolder), {kind}": dataloader(root, c[kind], cpus,
                                                                       epoch_repeat)
                    for kind in ("float", "uint8")})
        rows = (measure_rounds({**loaders, **ray_pipelines(root, c, nodes, epoch_repeat)},
                               repeats)
                if repeats else {})  # 0: the first batch of a fresh cluster only
        return {"cluster_up_s": cluster_up, "fresh": fresh, "rows": rows}


def ray_in_namespace(prefix: list[str], root: str, repeats: int, cpus: int, nodes: int,
                     warm: bool, epoch_repeat: int = 1) -> dict[str, Any]:
    """:func:`ray_section` run by this module as the namespace's first process."""
    spec = globals().get("__spec__")
    module = spec.name if spec is not None else __name__
    parent = common.package_parent(__file__, __package__ or "benchmarks")
    return cluster.run_in_namespace(prefix, module, parent, [
        "--data", root, "--repeats", str(repeats), "--cpus", str(cpus), "--nodes", str(nodes),
        "--epoch-repeat", str(epoch_repeat), *(["--warm-up"] if warm else [])], RAY_TIMEOUT)


def ray_driver(argv: list[str]) -> int:
    """Entry point inside the namespace: loopback up, the section, its JSON."""
    import argparse

    parser = argparse.ArgumentParser()
    for name, kind in (("--ray-driver", Path), ("--data", str), ("--repeats", int),
                       ("--cpus", int), ("--nodes", int), ("--epoch-repeat", int)):
        parser.add_argument(name, type=kind, required=True)
    parser.add_argument("--warm-up", action="store_true")
    args = parser.parse_args(argv)
    rc = 0
    try:
        cluster.loopback_up()
        result = ray_section(args.data, args.repeats, args.cpus, args.nodes, args.warm_up,
                             args.epoch_repeat)
        args.ray_driver.write_text(json.dumps(result))
    except BaseException:
        import traceback

        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # the namespace's first process: its exit ends every Ray process left (a plain
    # interpreter exit there was seen to hang after ray.shutdown)
    os._exit(rc)


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


def fresh_report(clusters: dict[str, dict]) -> str:
    lines = ["| cluster | up s | warm_up() done s | read_images() returned s | first batch s | processes "
             "started (task workers / Ray Data actors) | CPU-s from each process's start to "
             "the first batch: driver / task workers / Ray Data actors / Ray daemons |",
             "|---|---:|---:|---:|---:|---|---|"]
    for name, sec in clusters.items():
        f, cpu = sec["fresh"], sec["fresh"]["cpu_s"]
        lines.append(
            f"| {name} | {sec['cluster_up_s']:.1f} | {_s(f['warm_up_s'])} | {f['read_images_s']:.2f} | "
            f"{f['first_batch_s']:.2f} | {f['processes'].get('task workers', 0)} / "
            f"{f['processes'].get('Ray Data actors', 0)} | {cpu['driver']:.1f} / "
            f"{cpu.get('task workers', 0):.1f} / {cpu.get('Ray Data actors', 0):.1f} / "
            f"{cpu.get('Ray daemons', 0):.1f} |")
    local = [sec["fresh"]["first_batch_s"] for name, sec in clusters.items()
             if name.startswith("local")]
    if len(local) > 1:
        lines.append(f"\nFirst batch on the {len(local)} fresh local clusters: median "
                     f"{statistics.median(local):.2f} s (min {min(local):.2f}, max "
                     f"{max(local):.2f})")
    return "\n".join(lines)


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}"


def ratios(rows: dict[str, dict]) -> dict[str, float]:
    """The issue's two targets, as ratios of steady rates in this run."""
    rate = {name: r["images_per_s"] for name, r in rows.items()}
    return {f"{FLOAT_ROW} / {DL_FLOAT} (target >= 0.80)": rate[FLOAT_ROW] / rate[DL_FLOAT],
            f"{FLOAT_ROW} / {RAY_BASELINE} (target >= 3)": rate[FLOAT_ROW] / rate[RAY_BASELINE]}


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["--ray-driver"]:
        return ray_driver(given)
    parser = common.BenchParser(__doc__, "an ImageFolder tree",
                                {"repeats": ("epochs per row, median taken", 3, 1)})
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the cluster and loader "
                        "workers of the DataLoader rows (default 2)")
    parser.add_argument("--no-wds", action="store_true", help="leave out the WebDataset rows")
    parser.add_argument("--warm-up", action="store_true", help="call fastdecode.ray.warm_up() "
                        "on each fresh cluster, and wait for it, before its first dataset")
    parser.add_argument("--fresh", type=int, default=0, metavar="N", help="N more fresh local "
                        "clusters that measure only their first batch (the fresh table's "
                        "median is then over N + 1)")
    parser.add_argument("--epoch-repeat", type=int, default=1, metavar="K", help="steady "
                        "epochs of the Ray and DataLoader rows K times the file list "
                        "(default 1)")
    args = parser.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        print(f"bench_ray: skipped: {exc} (pip install fastdecode[ray])", file=sys.stderr)
        return 0
    root = str(args.data or common.default_data())
    c = chains()
    rows: dict[str, dict] = {}
    bar = common.progress("bench_ray", 1 + (0 if args.no_wds else 1) + (0 if args.quick else 1))
    prefix = cluster.namespace_prefix()
    clusters: dict[str, dict] = {}
    notes = []
    name = f"local, {args.cpus} CPUs"
    if prefix is None:
        notes.append("no network namespace could be made (unshare --net needs CAP_SYS_ADMIN): "
                     "the local cluster ran on the host's 127.0.0.1, the 2-node rows skipped")
        clusters[name] = ray_section(root, args.repeats, args.cpus, 1, args.warm_up,
                                     args.epoch_repeat)
    else:
        clusters[name] = ray_in_namespace(prefix, root, args.repeats, args.cpus, 1, args.warm_up,
                                          args.epoch_repeat)
    bar.update()
    for i in range(args.fresh if prefix is not None else 0):
        clusters[f"{name}, fresh #{i + 2}"] = ray_in_namespace(
            prefix, root, 0, args.cpus, 1, args.warm_up)
    if not args.quick and prefix is not None:
        clusters["2 nodes x 1 CPU (ray start head + worker)"] = ray_in_namespace(
            prefix, root, args.repeats, args.cpus, 2, args.warm_up, args.epoch_repeat)
        bar.update()
    for sec in clusters.values():
        rows.update(sec["rows"])
    if not args.no_wds:
        with tempfile.TemporaryDirectory() as tmp:
            for wname, make in wds_pipelines(root, c, args.cpus, Path(tmp)).items():
                rows[wname] = measure(make, args.repeats)
        bar.update()
    bar.close()
    targets = ratios(rows)
    common.emit(
        f"{common.command_line(__name__, argv)}\n\nbatch {BATCH}, {args.cpus} CPUs; steady "
        f"state: the first {WARM_BATCHES} batches of each epoch left out, median of "
        f"{args.repeats}; epochs of {args.epoch_repeat} x the file list (Ray and DataLoader "
        f"rows); Ray rows on a cluster that has run a dataset\n\n"
        f"{report(rows, DL_FLOAT, DL_UINT8)}\n\n"
        + "\n".join(f"- {k.split(' (target')[0]}: {v:.2f}x" for k, v in targets.items())
        + "\n\nFirst batch of the first dataset on a fresh cluster (fastdecode.ray.read_images, "
        "float), seconds after the cluster is up:\n\n" + fresh_report(clusters) + "\n"
        + "".join(f"\n{n}\n" for n in notes))
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "clusters": clusters, "ratios": targets,
                                         "batch_size": BATCH, "cpus": args.cpus,
                                         "notes": notes, "machine": common.machine_facts(),
                                         "versions": common.library_versions()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
