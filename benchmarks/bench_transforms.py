"""Single-thread throughput of fused decode + ImageNet transforms vs its peers.

    python -m benchmarks.bench_transforms [--data DIR] [--limit N] [--rounds R] [--quick]
                                          [--json PATH] [--simd-python PATH | --no-simd]

Every method produces the same output per image -- the ImageNet train chain
(RandomResizedCrop(224) + RandomHorizontalFlip) or eval chain (Resize(256) +
CenterCrop(224)) as uint8 (3, 224, 224), or as float32 normalized with the
ImageNet mean/std -- from the encoded bytes, in memory. Random parameters are
drawn from torch's RNG as torchvision draws them, reseeded identically for
every method in every round, so all methods crop the same boxes.

Methods:
  torchvision + PIL          Image.open + convert('RGB') + torchvision v1 (the baseline)
  torchvision + pillow-simd  the same in .venv-simd (benchmarks/setup_pillow_simd.sh),
                             timed in a helper process that takes its turn each round
  fastdecode fuse            fastdecode.transforms.fuse(chain)(data)
  fastdecode decode_into     fuse's batch path: decode_into(data, out) + finish(out, out=)
                             into reused buffers (what FastImageFolder does per slot)
  fastdecode fuse exact      fuse(chain, exact=True): full-resolution decode, Pillow-exact
  simplejpeg + OpenCV        DCT-scaled decode (min_height/min_width) + cv2.resize INTER_AREA
  full decode + OpenCV AREA  FFCV's method: full decode, crop, cv2.resize INTER_AREA

The methods take turns inside each round (so the noise of a shared machine hits
them alike); each reports its best round, the CPU time it used per image over
all rounds, and the process's peak RSS over one more, untimed, pass. A first
untimed pass checks every method on every file, records PSNR against
torchvision + PIL (uint8 output), and the timed rounds use only the files every
method decodes. torch and OpenCV run single-threaded, as in DataLoader workers.
"""

# Over ~400 lines on purpose: one table, one runner per method (torchvision, pillow-simd,
# fuse, OpenCV recipes) timed in one interleaved loop; they stay together.

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np

from . import _common as common

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp"}
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SIZE = 224
RESIZE = 256
TARGET_SPEEDUP = 3.0
CHAINS = ("train", "eval")
OUTPUTS = ("uint8", "float")
KEYS = [(c, o) for c in CHAINS for o in OUTPUTS]  # a table each
BASELINE = "torchvision + PIL"
SIMD = "torchvision + pillow-simd"
DEFAULT_SIMD_VENV = common.ROOT / ".venv-simd"


# --------------------------------------------------------------------------
# Data.


def find_images(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def pick(paths: list[Path], limit: int) -> list[Path]:
    """An evenly spread, deterministic subset (every class, not the first few)."""
    if len(paths) <= limit:
        return paths
    step = len(paths) / limit
    return [paths[int(i * step)] for i in range(limit)]


# --------------------------------------------------------------------------
# The methods. Each maker returns {(chain, output): fn(data) -> result}.


def torchvision_chains(T, torch):
    """The torchvision pipelines every method reproduces."""
    geo = {
        "train": [T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip()],
        "eval": [T.Resize(RESIZE), T.CenterCrop(SIZE)],
    }
    tail = {"uint8": [T.PILToTensor()], "float": [T.ToTensor(), T.Normalize(MEAN, STD)]}
    return {(c, o): T.Compose(geo[c] + tail[o]) for c in CHAINS for o in OUTPUTS}


def make_torchvision() -> dict:
    import torch
    from PIL import Image
    from torchvision import transforms as T

    chains = torchvision_chains(T, torch)

    def bind(chain):
        def run(data):
            with Image.open(io.BytesIO(data)) as im:
                return chain(im.convert("RGB"))
        return run

    return {key: bind(chain) for key, chain in chains.items()}


def make_fuse(**options) -> dict:
    import torch
    from torchvision import transforms as T

    from fastdecode.transforms import fuse

    return {key: fuse(chain, **options) for key, chain in torchvision_chains(T, torch).items()}


def make_decode_into() -> dict:
    import torch
    from torchvision import transforms as T

    from fastdecode.transforms import fuse

    methods = {}
    for key, chain in torchvision_chains(T, torch).items():
        f = fuse(chain)
        pixels = torch.empty(f.output_shape, dtype=torch.uint8)
        slot = pixels.numpy()
        result = None if f.tail.identity else torch.empty(f.output_shape, dtype=f.tail.dtype)

        def run(data, f=f, pixels=pixels, slot=slot, result=result):
            f.decode_into(data, slot)
            return f.finish(pixels) if result is None else f.finish(pixels, out=result)

        methods[key] = run
    return methods


class _Draws:
    """torchvision's parameter draws (same RNG calls) for the peers that do
    their own geometry, and the float step they all share."""

    def __init__(self):
        import torch
        from torchvision import transforms as T

        self.torch = torch
        self.rrc = T.RandomResizedCrop(SIZE)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def train(self, height: int, width: int) -> tuple[tuple[int, int, int, int], bool]:
        standin = self.torch.zeros(1, dtype=self.torch.uint8).expand(3, height, width)
        box = self.rrc.get_params(standin, self.rrc.scale, self.rrc.ratio)
        return box, bool(self.torch.rand(1) < 0.5)

    @staticmethod
    def eval(height: int, width: int) -> tuple[int, int, int, int]:
        """The source box of Resize(256) + CenterCrop(224), as FFCV-style
        loaders crop it: the centred square of 224/256 of the shorter side."""
        side = round(min(height, width) * SIZE / RESIZE)
        return (height - side) // 2, (width - side) // 2, side, side

    def finish(self, hwc: np.ndarray, flip: bool, output: str):
        if flip:
            hwc = hwc[:, ::-1]
        chw = self.torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)))
        if output == "uint8":
            return chw
        return chw.float().div_(255).sub_(self.mean).div_(self.std)


def make_opencv_peer(scaled: bool) -> dict:
    """scaled: simplejpeg decodes at the smallest DCT scale keeping the box >=
    224 (min_height/min_width), else a full decode (FFCV's method); then the box
    is resized with cv2.INTER_AREA."""
    import cv2

    cv2.setNumThreads(1)
    if scaled:
        import simplejpeg
    else:
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = None
    draws = _Draws()

    def decode(data, min_h=0, min_w=0):
        if simplejpeg is not None:
            return simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=min_h,
                                          min_width=min_w)
        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if arr is None:
            raise ValueError("cv2.imdecode failed")
        return cv2.cvtColor(arr, cv2.COLOR_BGR2RGB)

    def header(data):
        if simplejpeg is not None:
            h, w, _, _ = simplejpeg.decode_jpeg_header(data)
            return h, w
        arr = decode(data)
        return arr.shape[:2]

    def run(data, chain, output):
        h, w = header(data)
        if chain == "train":
            (top, left, bh, bw), flip = draws.train(h, w)
        else:
            (top, left, bh, bw), flip = draws.eval(h, w), False
        if scaled:
            img = decode(data, math.ceil(SIZE * h / bh), math.ceil(SIZE * w / bw))
        else:
            img = decode(data)
        fy, fx = img.shape[0] / h, img.shape[1] / w
        y0, x0 = int(top * fy), int(left * fx)
        y1 = max(y0 + 1, min(img.shape[0], round((top + bh) * fy)))
        x1 = max(x0 + 1, min(img.shape[1], round((left + bw) * fx)))
        out = cv2.resize(img[y0:y1, x0:x1], (SIZE, SIZE), interpolation=cv2.INTER_AREA)
        return draws.finish(out, flip, output)

    return {(c, o): (lambda data, c=c, o=o: run(data, c, o)) for c in CHAINS for o in OUTPUTS}


# --------------------------------------------------------------------------
# torchvision + pillow-simd: a helper process in .venv-simd.


class SimdWorker:
    """Runs this module with --worker in the pillow-simd venv; it loads the
    same files and times one round per request."""

    def __init__(self, python: Path, files_json: Path):
        path = [str(common.package_parent(__file__, __package__)),
                *filter(None, [os.environ.get("PYTHONPATH")])]
        self.proc = subprocess.Popen(
            [str(python), "-m", f"{__package__}.bench_transforms", "--worker", str(files_json)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(path)},
        )
        try:
            hello = self._read()
        except (RuntimeError, ValueError):
            self.close()
            raise
        self.version = hello["pil_version"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()[-2000:]
            raise RuntimeError(f"pillow-simd helper died: {err.strip() or 'no output'}")
        return json.loads(line)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        """Ends the helper (EOF on its stdin) and closes every pipe."""
        try:
            self.proc.communicate(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.communicate()


def worker_main(files_json: Path) -> int:
    """--worker: runs in the pillow-simd venv (no fastdecode import needed)."""
    import PIL
    import torch

    torch.set_num_threads(1)
    files = [Path(p).read_bytes() for p in json.loads(files_json.read_text())]
    methods = make_torchvision()
    print(json.dumps({"pil_version": PIL.__version__}), flush=True)
    for line in sys.stdin:
        try:
            reply = worker_reply(json.loads(line), methods, files)
        except Exception as exc:  # report, keep serving
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


def worker_reply(req: dict, methods: dict, files: list[bytes]) -> dict:
    """One request: "check" saves the outputs, "time" times a round (wall and
    this process's CPU seconds), "peak" gives this process's peak RSS."""
    import torch

    fn = methods[(req["chain"], req["output"])]
    chosen = [files[i] for i in req["indices"]]
    if req["op"] == "check":
        outs = []
        for i, data in zip(req["indices"], chosen):
            torch.manual_seed(req["seed"] + i)
            outs.append(fn(data).numpy())
        np.savez(req["path"], *outs)
        return {"ok": True}
    if req["op"] == "peak":
        return {"peak_rss_mib": common.peak_rss_mib(partial(timed_pass, fn, chosen, req["seed"]))}
    seconds, cpu = timed_pass(fn, chosen, req["seed"])
    return {"seconds": seconds, "cpu_seconds": cpu}


# --------------------------------------------------------------------------
# Timing.


def timed_pass(fn, chosen: list[bytes], seed: int) -> tuple[float, float]:
    """Wall and process CPU seconds of one method over the files, its draws
    seeded, without the collector (its pauses would land on whoever runs)."""
    import torch

    torch.manual_seed(seed)
    gc.disable()
    try:
        cpu, start = time.process_time(), time.perf_counter()
        for data in chosen:
            fn(data)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        gc.enable()


@dataclass
class Method:
    name: str
    note: str
    fns: dict = field(default_factory=dict)  # (chain, output) -> fn(data)
    status: str = "ok"
    worker: Optional[SimdWorker] = None
    failed: dict = field(default_factory=dict)  # key -> set of file indices
    psnr: dict = field(default_factory=dict)  # key -> list of dB
    seconds: dict = field(default_factory=dict)  # key -> [round seconds]
    cpu_seconds: dict = field(default_factory=dict)  # key -> CPU seconds over all rounds
    peak_rss: dict = field(default_factory=dict)  # key -> MiB (None: not measurable)

    def time(self, key, indices: list[int], files: list[bytes], seed: int) -> None:
        """One timed round over files[indices] (pillow-simd: in its helper)."""
        if self.worker is not None:
            reply = self.worker.ask(op="time", chain=key[0], output=key[1], indices=indices,
                                    seed=seed)
            seconds, cpu = reply["seconds"], reply["cpu_seconds"]
        else:
            seconds, cpu = timed_pass(self.fns[key], [files[i] for i in indices], seed)
        self.seconds.setdefault(key, []).append(seconds)
        self.cpu_seconds[key] = self.cpu_seconds.get(key, 0.0) + cpu

    def measure_peak_rss(self, key, indices: list[int], files: list[bytes], seed: int) -> None:
        """The peak RSS of the process that runs the method, over one pass."""
        if self.worker is not None:
            self.peak_rss[key] = self.worker.ask(op="peak", chain=key[0], output=key[1],
                                                 indices=indices, seed=seed)["peak_rss_mib"]
        else:
            chosen = [files[i] for i in indices]
            self.peak_rss[key] = common.peak_rss_mib(
                partial(timed_pass, self.fns[key], chosen, seed))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def check(methods: list[Method], files: list[bytes], seed: int, tmp: Path, bar) -> None:
    """Untimed: every method on every file once; failures, warm-up, PSNR."""
    import torch

    base = next(m for m in methods if m.name == BASELINE)
    for key in KEYS:
        reference = []
        for i, data in enumerate(files):
            torch.manual_seed(seed + i)
            reference.append(base.fns[key](data).numpy().copy())
        for m in methods:
            if m.status != "ok":
                continue
            m.failed[key], m.psnr[key] = set(), []
            if m.worker is not None:
                path = tmp / f"simd-{key[0]}-{key[1]}.npz"
                m.worker.ask(op="check", chain=key[0], output=key[1],
                             indices=list(range(len(files))), seed=seed, path=str(path))
                with np.load(path) as npz:
                    outs = [npz[f"arr_{i}"] for i in range(len(files))]
            else:
                outs = []
                for i, data in enumerate(files):
                    torch.manual_seed(seed + i)
                    try:
                        # a copy: the batch-path method reuses its output buffers
                        outs.append(m.fns[key](data).numpy().copy())
                    except Exception:  # each peer has its own error types
                        m.failed[key].add(i)
                        outs.append(None)
            for ref, out in zip(reference, outs):
                if out is None:
                    continue
                if key[1] == "float":  # compare in 0..255 pixel units
                    ref_px = ref * np.array(STD)[:, None, None] * 255
                    out_px = out * np.array(STD)[:, None, None] * 255
                    m.psnr[key].append(psnr(out_px, ref_px))
                else:
                    m.psnr[key].append(psnr(out, ref))
            bar.update()


def time_rounds(methods: list[Method], files: list[bytes], rounds: int, seed: int, bar) -> dict:
    """Per (chain, output), the methods take turns round by round (the order
    reversed every other round), then each makes one pass for its peak RSS.
    Returns, per key, the indices of the files every method decoded."""
    usable = {}
    active = [m for m in methods if m.status == "ok"]
    for key in KEYS:
        bad = set().union(*(m.failed.get(key, set()) for m in active))
        usable[key] = [i for i in range(len(files)) if i not in bad]
        for r in range(rounds):
            for m in common.round_order(active, r):
                m.time(key, usable[key], files, seed + r)
                bar.update()
        for m in active:
            m.measure_peak_rss(key, usable[key], files, seed)
            bar.update()
    return usable


# --------------------------------------------------------------------------
# Report.


def load_methods(simd_python: Optional[Path], files_json: Path) -> list[Method]:
    methods = [Method(BASELINE, "Image.open + convert('RGB') + torchvision v1 transforms",
                      make_torchvision())]

    simd = Method(SIMD, "the same chain with pillow-simd (helper process in .venv-simd)")
    if simd_python is None:
        simd.status = "skipped: --no-simd"
    elif not simd_python.exists():
        failed = simd_python.parent.parent / "BUILD-FAILED"
        simd.status = ("skipped: pillow-simd could not be built here: "
                       + failed.read_text().strip().splitlines()[0]) if failed.exists() else (
            f"skipped: {simd_python} not found (run benchmarks/setup_pillow_simd.sh)")
    else:
        try:
            simd.worker = SimdWorker(simd_python, files_json)
            if ".post" not in simd.worker.version:
                simd.note += f"; WARNING: PIL {simd.worker.version} is not pillow-simd"
            else:
                simd.note = f"pillow-simd {simd.worker.version}, same torchvision chain"
        except (OSError, RuntimeError, ValueError) as exc:
            simd.status = f"skipped: pillow-simd helper failed: {exc}"
    methods.append(simd)

    methods.append(Method("fastdecode fuse", "fuse(chain)(data): native decode + resample, one "
                          "table pass; DCT-scaled when the box is >= 2.5x the output", make_fuse()))
    methods.append(Method("fastdecode decode_into", "fuse's batch path into reused buffers: "
                          "decode_into + finish(out=)", make_decode_into()))
    methods.append(Method("fastdecode fuse exact", "fuse(chain, exact=True): full-resolution "
                          "decode, Pillow-exact resample", make_fuse(exact=True)))
    for name, note, scaled in (
        ("simplejpeg + OpenCV", "simplejpeg min_height/min_width (DCT-scaled) + cv2.resize "
         "INTER_AREA", True),
        ("full decode + OpenCV AREA", "FFCV's method: full decode (simplejpeg), crop, "
         "cv2.resize INTER_AREA", False),
    ):
        m = Method(name, note)
        try:
            m.fns = make_opencv_peer(scaled)
        except ImportError as exc:
            m.status = f"skipped: {exc.name or exc} not installed"
        methods.append(m)
    return methods


def section_result(methods: list[Method], key, n_files: int) -> dict:
    base = next(m for m in methods if m.name == BASELINE)
    base_best = min(base.seconds[key]) if base.seconds.get(key) else None
    rows = []
    for m in methods:
        row = {"name": m.name, "note": m.note, "status": m.status}
        secs = m.seconds.get(key)
        if m.status == "ok" and secs:
            best = min(secs)
            row.update(
                images_per_s=round(n_files / best, 1),
                ms_per_image=round(best / n_files * 1e3, 3),
                median_images_per_s=round(n_files / statistics.median(secs), 1),
                cpu_ms_per_image=round(m.cpu_seconds[key] / (n_files * len(secs)) * 1e3, 3),
                speedup=round(base_best / best, 2) if base_best else None,
                peak_rss_mib=m.peak_rss.get(key),
                round_seconds=[round(s, 4) for s in secs],
                files_failed=len(m.failed.get(key, ())),
            )
            ps = m.psnr.get(key) or []
            if m.name != BASELINE and ps:
                row.update(psnr_mean=round(statistics.mean(ps), 2), psnr_min=round(min(ps), 2))
        rows.append(row)
    return {"key": f"{key[0]}_{key[1]}", "chain": key[0], "output": key[1], "files": n_files,
            "title": TITLES[key], "rows": rows}


TITLES = {
    ("train", "uint8"): "train: RandomResizedCrop(224) + RandomHorizontalFlip -> uint8 "
                        "(3, 224, 224)",
    ("train", "float"): "train: RandomResizedCrop(224) + RandomHorizontalFlip -> float32 "
                        "normalized",
    ("eval", "uint8"): "eval: Resize(256) + CenterCrop(224) -> uint8 (3, 224, 224)",
    ("eval", "float"): "eval: Resize(256) + CenterCrop(224) -> float32 normalized",
}


def markdown_table(section: dict) -> str:
    lines = [f"### {section['title']} ({section['files']} images)", "",
             f"| method | images/s | ms/image | CPU ms/image | speedup vs {BASELINE} | "
             "peak RSS MiB | PSNR vs torchvision mean / min (dB) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in section["rows"]:
        if "images_per_s" not in row:
            lines.append(f"| {row['name']} | - | - | - | - | - | {row['status']} |")
            continue
        quality = (f"{row['psnr_mean']:.1f} / {row['psnr_min']:.1f}" if "psnr_mean" in row
                   else "reference")
        peak = "n/a" if row["peak_rss_mib"] is None else f"{row['peak_rss_mib']:,.0f}"
        lines.append(f"| {row['name']} | {row['images_per_s']:.0f} | {row['ms_per_image']:.2f} | "
                     f"{row['cpu_ms_per_image']:.2f} | {row['speedup']:.2f}x | {peak} | "
                     f"{quality} |")
    return "\n".join(lines)


def targets(sections: list[dict]) -> list[dict]:
    """fuse >= 3x torchvision + PIL, and ahead of every other measured row."""
    out = []
    for s in sections:
        rows = {r["name"]: r for r in s["rows"] if "images_per_s" in r}
        ours = rows.get("fastdecode fuse")
        if not ours:
            continue
        others = [r for n, r in rows.items() if not n.startswith("fastdecode")]
        best_other = max(others, key=lambda r: r["images_per_s"]) if others else None
        out.append({
            "section": s["key"],
            "speedup": ours["speedup"],
            "meets_3x": ours["speedup"] is not None and ours["speedup"] >= TARGET_SPEEDUP,
            "fastest_peer": best_other["name"] if best_other else None,
            "ahead_of_every_peer": best_other is None
            or ours["images_per_s"] > best_other["images_per_s"],
            "margin_over_fastest_peer": round(ours["images_per_s"] / best_other["images_per_s"], 2)
            if best_other else None,
        })
    return out


def in_short_table(rows: list[dict]) -> str:
    """fuse's speedup per chain and how it stands against the fastest other
    method, as measured (the JSON keeps the project's threshold)."""
    lines = ["### In short (fastdecode fuse)", "",
             "| chain | speedup vs torchvision + PIL | fastest other method | "
             "fuse / fastest other method |", "|---|---:|---|---:|"]
    for r in rows:
        margin = r["margin_over_fastest_peer"]
        lines.append(f"| {r['section']} | {r['speedup']:.2f}x | {r['fastest_peer']} | "
                     + ("" if margin is None else f"{margin:.2f}x") + " |")
    return "\n".join(lines)


def describe(files: list[Path], blobs: list[bytes], source: str, root: Path) -> dict:
    import fastdecode

    infos = [fastdecode.read_header(b) for b in blobs]
    kinds: dict[str, int] = {}
    for info in infos:
        kind = f"{info.format}:{info.subsampling or info.color_space}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"path": str(root), "source": source, "files": len(files),
            "mean_kb": round(statistics.mean(len(b) for b in blobs) / 1024, 1),
            "median_width": statistics.median(i.width for i in infos),
            "median_height": statistics.median(i.height for i in infos),
            "kinds": dict(sorted(kinds.items()))}


def render_markdown(report: dict) -> str:
    d, m = report["dataset"], report["machine"]
    kinds = ", ".join(f"{k} {v}" for k, v in d["kinds"].items())
    head = [
        f"`{report['command']}`", "",
        f"Data: {d['files']} images ({d['source']}: {d['path']}), mean {d['mean_kb']} KB, median "
        f"{d['median_width']:.0f}x{d['median_height']:.0f} ({kinds}). Machine: {m['cpu_model']}, "
        f"{len(m['affinity'] or [])} of {m['cpu_count']} cores, one thread per method; best of "
        f"{report['settings']['rounds']} interleaved rounds, same random boxes for every method.",
        "",
        "Columns: 'CPU ms/image' = the CPU time of the process running the method (pillow-simd: "
        f"its helper process) per image over all rounds. 'peak RSS MiB' = the "
        f"{common.PEAK_RSS_NOTE}; pillow-simd's is that of its helper process, which imports "
        "torch, torchvision and pillow-simd but no other peer.",
    ]
    notes = ["Methods:"] + [f"- {r['name']}: {r['note']}" + (
        "" if r["status"] == "ok" else f" ({r['status']})") for r in report["sections"][0]["rows"]]
    body = [markdown_table(s) for s in report["sections"]]
    return "\n\n".join(["\n".join(head), "\n".join(notes), *body,
                        in_short_table(report["targets"])]) + "\n"


def parse_args(argv):
    parser = common.BenchParser(__doc__, "folder of images, searched recursively", {
        "limit": ("at most N images", 500, 100),
        "rounds": ("timed rounds", 5, 2),
    })
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", help="comma-separated substrings: measure only the methods "
                        "whose name contains one (the baseline always runs)")
    simd = parser.add_mutually_exclusive_group()
    simd.add_argument("--simd-python", type=Path, default=DEFAULT_SIMD_VENV / "bin" / "python",
                      help="python of the pillow-simd venv (default .venv-simd/bin/python)")
    simd.add_argument("--no-simd", action="store_true", help="skip the pillow-simd row")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker_main(args.worker)
    import torch

    torch.set_num_threads(1)
    root, source = (args.data, "--data") if args.data else (
        common.default_data(), "fastdecode.cli.datagen ImageNet-like set")
    files = pick(find_images(root), args.limit)
    if not files:
        sys.exit(f"no images under {root}")
    blobs = [p.read_bytes() for p in files]
    report = {
        "command": common.command_line(__name__, argv),
        "dataset": describe(files, blobs, source, root),
        "machine": common.machine_facts(),
        "versions": common.library_versions(),
        "settings": {"rounds": args.rounds, "statistic": "best round", "seed": args.seed,
                     "threads": 1, "size": SIZE, "resize": RESIZE},
    }
    with tempfile.TemporaryDirectory() as tmp:
        methods = chosen_methods(args, files, Path(tmp))
        try:
            usable = measure(methods, blobs, args, Path(tmp))
        finally:
            for m in methods:
                if m.worker is not None:
                    m.worker.close()
    report["sections"] = [section_result(methods, key, len(usable[key])) for key in usable]
    report["targets"] = targets(report["sections"])
    report["machine"]["load_average_end"] = common.load_average()
    common.emit(render_markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def chosen_methods(args, files: list[Path], tmp: Path) -> list[Method]:
    """The baseline and the methods --methods names; the pillow-simd helper
    is started only when its row is wanted."""
    files_json = tmp / "files.json"
    files_json.write_text(json.dumps([str(p.resolve()) for p in files]))
    wanted = [w.strip() for w in (args.methods or "").split(",") if w.strip()]
    simd_python = None if args.no_simd or (wanted and not any(w in SIMD for w in wanted)) \
        else args.simd_python
    methods = load_methods(simd_python, files_json)
    if wanted:
        methods = [m for m in methods if m.name == BASELINE or any(w in m.name for w in wanted)]
    return methods


def measure(methods: list[Method], blobs: list[bytes], args, tmp: Path) -> dict:
    """The check pass, then the timed rounds, under one progress bar."""
    active = sum(m.status == "ok" for m in methods)
    with common.progress("transforms", total=len(KEYS) * active * (args.rounds + 2)) as bar:
        check(methods, blobs, args.seed, tmp, bar)
        return time_rounds(methods, blobs, args.rounds, args.seed, bar)


if __name__ == "__main__":
    sys.exit(main())
