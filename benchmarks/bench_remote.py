"""Remote roots benchmark: DataLoader(FastImageFolder) and FastLoader over
``s3://`` (moto's S3) and ``http://`` (a threaded HTTP/1.1 server keeping
connections alive, as real ones do), each in a process of its own on
127.0.0.1, at 0 and 5 ms of delay per request, against
DataLoader(FastImageFolder) over the same images on the local disk, at
num_workers = the usable CPUs, in steady state.

    python -m benchmarks.bench_remote [--data PATH] [--quick] [--limit N] [--rounds N] [--json PATH]

The images (the first ``--limit`` of the data, class folders kept; hard links
in a temporary tree) are served as they are over HTTP and put into moto's
bucket once. One row per loader and place (the local disk; the HTTP server
and the S3 server, each read by DataLoader and by FastLoader, which fetches
a worker's next batch ahead) keeps its workers alive (persistent_workers); a
server's delay is changed at run time between rounds, so a row at 0 and at
5 ms is the same loader. Train chain RandomResizedCrop(224) + flip -> uint8 (PILToTensor),
batch 64, indices drawn with replacement.

Rounds are bench_loader's (``open_row``, ``run_round``: timed after the ramp
wave, to the wave before the last; CPU of the main process and its workers
per image) and interleaved: per round every place (local, then each server's
rows at 0 and 5 ms; in the reverse order every other round). A place
reports the median images/s of its rounds, its ratio to the same server at
0 ms and to the local disk (medians of per-round ratios: the rounds paired
ran seconds apart), the CPU ms per image of the loader's processes, and the
server's own CPU per image (from /proc/<pid>/stat of its process, over the
round and the idle wait after it: on 2 cores it competes with the decode)
with the requests it served per image.

The issue's target (#29): with 5 ms per request, s3:// and http:// reach
>= 0.9x of the same server at 0 ms (judged for each loader). Without moto or s3fs the s3 places are
left out, and said so.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastdecode import _system

from . import _common as common
from . import _servers
from . import bench_loader as bl

SECRET = "bench-remote-secret"  # moto takes any
LOCAL = "local"
FAST = " FastLoader"  # a row kind "http FastLoader": FastLoader over the http server
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(limit=200, delays=[0, 5], batch=32, batches=4, rounds=3, round_cap_s=0.0),
    # 5 rounds: on this shared 2-core machine (load 8-10) 3 rounds gave http 0.85x where 5
    # gave 1.03x (docs/decisions/storage-remote.md, "Benchmark")
    "default": dict(limit=1000, delays=[0, 5], batch=64, batches=6, rounds=5, round_cap_s=6.0),
}
TARGET = 0.9  # 5 ms >= 0.9x of the same server at 0 ms


@dataclass
class Cell:
    """One place's rounds: images/s, the loader's CPU s per image, the
    server's CPU s per image and its requests per image."""

    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)


Place = tuple[str, Optional[float]]  # (kind, delay in ms; None on the local disk)


def server_of(kind: str) -> str:
    """The place a row kind reads ("http" of "http FastLoader")."""
    return kind.removesuffix(FAST)


def subset(data: Path, limit: int, into: Path) -> Path:
    """The first ``limit`` images of ``data`` (ImageFolder's order, spread over
    its classes) hard-linked (copied across filesystems) into ``into/tree``."""
    from torchvision.datasets import ImageFolder

    samples = ImageFolder(str(data)).samples
    picked = [samples[i * len(samples) // min(limit, len(samples))]
              for i in range(min(limit, len(samples)))]
    tree = into / "tree"
    for path, _ in picked:
        target = tree / Path(path).relative_to(data)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            target.write_bytes(Path(path).read_bytes())
    return tree


def make_loader_for(kind: str, url: str, options: Optional[dict]):
    """bench_loader's ``make``: DataLoader(FastImageFolder(url)) with the
    draws, or FastLoader for a kind ending in FAST."""
    import torch
    from torch.utils.data import DataLoader

    import fastdecode as fd

    def make(_kind, root, chain, workers, batch, samples):
        ds = fd.FastImageFolder(url if kind != LOCAL else str(root), chain,
                                storage_options=options)
        sampler = bl.Draws(ds, samples)
        loader = fd.FastLoader if kind.endswith(FAST) else DataLoader
        return loader(ds, batch_size=batch, sampler=sampler, num_workers=workers,
                      drop_last=True, pin_memory=torch.cuda.is_available(),
                      persistent_workers=workers > 0), sampler
    return make


def measure(rows: dict[str, Any], servers: dict[str, Any], places: list[Place],
            settings: dict, bar) -> dict[Place, Cell]:
    """``settings['rounds']`` interleaved rounds of every place: its row (one
    per kind, alive throughout) after its server's delay is set."""
    cells: dict[Place, Cell] = {place: Cell() for place in places}
    for r in range(settings["rounds"]):
        for place in common.round_order(places, r):
            kind, delay = place
            row, server = rows[kind], servers.get(server_of(kind))
            if server is not None:
                server.set_delay((delay or 0) / 1000)
            bar.set_postfix_str(f"{kind} {delay if delay is not None else ''} ms, round {r + 1}")
            cpu0 = server.cpu_seconds() if server is not None else 0.0
            req0 = server.requests() if server is not None else 0
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "FastLoader dropped the next epoch",
                                        RuntimeWarning)
                bl.run_round(row)
            images = row.sampler.count
            cell = cells[place]
            cell.rates.append(row.rates[-1])
            cell.cpu.append(row.cpu[-1])
            if server is not None:
                cell.server_cpu.append((server.cpu_seconds() - cpu0) / images)
                cell.requests.append((server.requests() - req0) / images)
            bar.update()
    return cells


def results(cells: dict[Place, Cell]) -> list[dict]:
    """A row per place: its rate, its ratios to its server at 0 ms and to the
    local disk, its CPU, the server's CPU and requests per image."""
    local = cells.get((LOCAL, None))
    out = []
    for (kind, delay), cell in cells.items():
        zero = cells.get((kind, 0)) if delay is not None else None
        out.append({
            "place": kind, "delay_ms": delay,
            "images_per_s": statistics.median(cell.rates), "round_images_per_s": cell.rates,
            "vs_0ms": common.paired_ratio(cell.rates, zero.rates) if zero is not None else None,
            "vs_local": (common.paired_ratio(cell.rates, local.rates)
                         if local is not None and kind != LOCAL else None),
            "cpu_ms_per_image": statistics.median(cell.cpu) * 1000,
            "server_cpu_ms_per_image": (statistics.median(cell.server_cpu) * 1000
                                        if cell.server_cpu else None),
            "requests_per_image": (statistics.median(cell.requests)
                                   if cell.requests else None),
        })
    out.sort(key=lambda r: (r["place"] != LOCAL, r["place"], r["delay_ms"] or 0))
    return out


def summary(rows: list[dict]) -> dict[str, Any]:
    """The issue's ratios (5 ms vs 0 ms per server) and whether each meets its target."""
    out: dict[str, Any] = {}
    met: dict[str, Optional[bool]] = {}
    for kind in ("http", "s3", "http" + FAST, "s3" + FAST):
        row = next((r for r in rows if r["place"] == kind and r["delay_ms"] == 5), None)
        ratio = row["vs_0ms"] if row is not None else None
        out[f"{kind}_5ms_vs_0ms"] = ratio
        met[f"{kind} 5 ms >= {TARGET}x of 0 ms"] = None if ratio is None else ratio >= TARGET
    out["targets_met"] = met
    return out


def fmt(value: Optional[float], spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def table(rows: list[dict]) -> str:
    lines = ["| place | delay | images/s | vs 0 ms | vs local | loader CPU ms/img | "
             "server CPU ms/img | requests/img |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['place']} | {fmt(r['delay_ms'], 'g', ' ms')} | {r['images_per_s']:.0f} | "
            f"{fmt(r['vs_0ms'], '.2f', 'x')} | {fmt(r['vs_local'], '.2f', 'x')} | "
            f"{r['cpu_ms_per_image']:.2f} | {fmt(r['server_cpu_ms_per_image'], '.2f')} | "
            f"{fmt(r['requests_per_image'], '.2f')} |")
    return "\n".join(lines)


def parse_args(argv):
    parser = common.BenchParser(__doc__, "an ImageFolder (served over HTTP and S3)")
    parser.add_argument("--limit", type=int, help="images served (default 1000; quick 200)")
    parser.add_argument("--rounds", type=int,
                        help="timed rounds per place (default 5; quick 3; at least 3)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be >= 3 (a median needs three)")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    return args


def start_servers(stack: ExitStack, tree: Path) -> tuple[dict[str, Any], dict[str, str],
                                                          dict[str, Optional[dict]], list[str]]:
    """The HTTP server over ``tree`` and moto's S3 holding a copy of it, each
    in its process: (servers, root URLs, storage options, notes)."""
    notes = []
    servers: dict[str, Any] = {"http": stack.enter_context(_servers.HttpProcess(str(tree.parent)))}
    urls = {"http": servers["http"].url + "/tree"}
    options: dict[str, Optional[dict]] = {LOCAL: None, "http": None}
    reason = _servers.s3_unavailable()
    if reason is None:
        s3 = stack.enter_context(_servers.S3Server())
        urls["s3"] = s3.upload(tree, "bench/tree", SECRET)
        servers["s3"], options["s3"] = s3, s3.options(SECRET)
    else:
        notes.append(f"s3 left out: {reason}")
    return servers, urls, options, notes


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "default"
    settings = dict(MODES[mode])
    settings["usable"] = workers = _system.usable_cpus()
    settings["limit"] = args.limit or settings["limit"]
    settings["rounds"] = args.rounds or settings["rounds"]
    data = Path(args.data or common.default_data()).resolve()
    report: dict[str, Any] = {"command": common.command_line(__name__, argv), "mode": mode,
                              "settings": settings, "data": str(data),
                              "machine": common.machine_facts(),
                              "versions": common.library_versions()}
    chain = bl.chains(["train_uint8"])["train_uint8"]
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp, ExitStack() as stack:
        # the listing indexes of this run's roots, not the user's cache
        stack.callback(_restore_env, "FASTDECODE_CACHE", os.environ.get("FASTDECODE_CACHE"))
        os.environ["FASTDECODE_CACHE"] = str(Path(tmp) / "cache")
        tree = subset(data, settings["limit"], Path(tmp))
        settings["images"] = sum(1 for p in tree.rglob("*") if p.is_file())  # data may hold fewer
        servers, urls, options, notes = start_servers(stack, tree)
        kinds = [LOCAL, *urls, *(k + FAST for k in urls)]
        places: list[Place] = [(LOCAL, None)] + [(k, float(d)) for k in kinds[1:]
                                                 for d in settings["delays"]]
        wave = max(workers, 1)
        batches = -(-settings["batches"] // wave) * wave
        with common.progress("remote", len(kinds) + settings["rounds"] * len(places)) as bar:
            rows = {}
            for kind in kinds:
                bar.set_postfix_str(f"{kind}: start-up")
                row = bl.open_row("train_uint8", kind, tree, chain, workers, settings["batch"],
                                  max(batches, 3 * wave) * settings["batch"],
                                  make=make_loader_for(kind, urls.get(server_of(kind), ""),
                                                       options[server_of(kind)]))
                row.sampler.count = settings["batch"] * bl.round_batches(
                    row, settings["batch"], batches, settings["round_cap_s"])
                rows[kind] = row
                bar.update()
            cells = measure(rows, servers, places, settings, bar)
            for row in rows.values():
                row.source = None  # ends its persistent workers
    report["rows"] = out = results(cells)
    report["summary"] = summary(out)
    report["notes"] = notes
    report["machine"]["load_average_end"] = common.load_average()
    lines = [f"{k}: {v:.2f}x" for k, v in report["summary"].items() if isinstance(v, float)]
    common.emit(f"\n### remote roots on loopback (s3:// moto, http:// threaded HTTP/1.1 server, each in "
                f"its process; DataLoader(FastImageFolder), and FastLoader where named) "
                f"against the local disk, train chain -> uint8, batch "
                f"{settings['batch']}, num_workers {workers}, {settings['images']} images, median "
                f"of {settings['rounds']} interleaved rounds\n\n" + table(out) + "\n\n"
                + "\n".join(f"- {n}" for n in lines + notes))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _restore_env(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


if __name__ == "__main__":
    sys.exit(main())
