"""The CUDA path's one prepared check, for a session that is lent a GPU.

    bash benchmarks/gpu_check.sh [--json PATH] [--images N] [--batch N] ...
    python -m benchmarks.gpu_check ...          (PYTHONPATH = the checkout)

Its no-CUDA line, its argument parsing and its pure helpers are tested in
``tests/data/test_gpu_check.py`` on machines without a GPU. Its last run on a
GPU is committed as ``docs/benchmarks/gpu_check.json`` and rendered into the
results page's GPU section; after a new run, copy its JSON there and run
``python -m benchmarks.results --gpu docs/benchmarks/gpu_check.json``.

On a machine where ``torch.cuda.is_available()`` it runs, within a few
minutes and with no network, four steps, each recorded even when another
fails:

1. ``tests``: ``python -m pytest -q`` over ``CUDA_TESTS`` (the tests that run
   only where CUDA is), its pass / fail / skip counts.
2. ``parity``: on a generated 512-image ImageFolder tree (fastdecode's own
   datagen, in a temporary folder), ``FastLoader(device='cuda')`` batches of
   a train chain (RandomResizedCrop, flip) and an eval chain (Resize +
   CenterCrop), both ending ToTensor + Normalize, against FastLoader's CPU
   path with the same workers and generator seed (the same random draws).
   The GPU applies the very per-channel table the CPU applies
   (docs/decisions/fused-transforms.md, "Same random draws as torchvision,
   one plan per image, the tensor tail"), so the check is bit-identity; the
   largest difference is reported too.
3. ``throughput``: steady-state images/s of ``FastLoader(device='cuda')``,
   of the CPU path (batches on the host, pinned) and of the CPU path plus the
   user's own ``.to('cuda')`` (eval chain): persistent workers, each epoch
   ``--epochs`` shuffled passes over the images; an untimed warm-up epoch
   whose time to the first batch (worker start, the ring) is the start-up
   figure, then one epoch per round, rounds (>= 3) taken in turns,
   the median reported with its spread. ``copies``: host-to-device GB/s (torch.cuda.Event
   timing) of the ring's copy (a slot of a registered :class:`CudaRing`,
   ``.to(device, non_blocking=True)`` as the ring does it) against a plain
   ``copy_`` from a ``pin_memory=True`` tensor of the same bytes and from a
   pageable one; the step passes when the ring is registered and its copy
   reaches at least 0.9x the pinned ``copy_``.
4. ``doctor``: ``fastdecode doctor --json``, its ``torch_cuda`` check and the
   ``pinned_memory`` fact.

Without CUDA it prints one line, writes ``{"status": "skipped: no CUDA"}``
and exits 0; with CUDA it exits 0 when every step passed, else 1. The JSON
goes to ``--json`` or, when unset, ``$OUT/gpu_check.json`` where $OUT is set
(rewritten after each step, status "incomplete: ..." until the end); the
compact report goes to stdout, each step's start and end to stderr.
"""

# One file on purpose (a little over ~400 lines): a session lent a GPU runs it
# as one prepared script; its steps share only the helpers written above them.

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
# Every test that runs only where CUDA is: the ring's module, and the single
# CUDA cases of other modules (pinned batches, a CUDA ``out=``, the GPU guide);
# and the fault trials that take another path there.
CUDA_TESTS = [
    "tests/data/test_loader_cuda.py",
    "tests/data/test_shared_pool.py::test_pinned_batches_equal_the_samples_kept_or_dropped",
    "tests/data/test_loader.py::test_pin_memory_degrades_without_cuda",
    "tests/core/test_out_tensor.py::test_a_cuda_tensor_is_refused",
    "tests/api/test_guide_examples.py::test_guide_blocks_run[gpu]",
    # not CUDA-only, but only with CUDA does a killed worker's batch go
    # through torch's pin-memory thread (loader/_workers.py, PinSideQueue)
    "tests/data/test_faults.py::test_a_worker_killed_at_the_hand_over_is_named",
    # and only with CUDA do persistent workers pin (torch 2.11 kept their
    # process objects, and four descriptors, until exit: WorkerIter's shutdown)
    *(f"tests/data/test_faults.py::test_a_worker_killed_at_random_is_named[{c}-persistent-t{n}]"
      for c in ("uint8", "float") for n in (0, 1)),
]
SKIPPED = "skipped: no CUDA"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
NOISY_SPREAD = 0.10  # (max - min) / median of the rounds above this: say so
LAST_RUN = "not checked on this machine; the last GPU run: docs/benchmarks/gpu_check.json"
# The device of the steps; only a CPU rehearsal of the steps' code (by hand,
# where no GPU is lent) sets it to "cpu".
DEVICE = "cuda"


# --------------------------------------------------------------------------
# The command line.

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="where the JSON goes (default "
                        "$OUT/gpu_check.json when $OUT is set, else nowhere)")
    parser.add_argument("--images", type=int, default=512, help="generated images (512)")
    parser.add_argument("--classes", type=int, default=8, help="their classes (8)")
    parser.add_argument("--batch", type=int, default=64, help="batch size (64)")
    parser.add_argument("--size", type=int, default=224, help="output side in pixels (224)")
    parser.add_argument("--workers", type=int, help="num_workers (default: the usable CPUs)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per row (3)")
    parser.add_argument("--epochs", type=int, default=8,
                        help="passes over the images per timed round, one sampler (8)")
    parser.add_argument("--copies", type=int, default=20, help="timed copies per kind (20)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (0)")
    parser.add_argument("--data", type=Path, help="an ImageFolder tree instead of generating one")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["tests", "parity", "throughput", "copies", "doctor"],
                        help="leave a step out (repeatable)")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be >= 3 (a median of fewer says little)")
    for name in ("images", "classes", "batch", "size", "epochs", "copies"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be >= 1 (the CUDA ring needs worker processes)")
    if args.json is None and os.environ.get("OUT"):
        args.json = Path(os.environ["OUT"]) / "gpu_check.json"
    return args


# --------------------------------------------------------------------------
# Pure helpers: statistics, parsing, the report.

def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and spread ((max - min) / median) of timed rounds."""
    if not values:
        raise ValueError("summarize: no values")
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    spread = (hi - lo) / med if med else float("inf")
    return {"median": med, "min": lo, "max": hi, "spread": spread, "n": len(values),
            "noisy": spread > NOISY_SPREAD}


def gb_per_s(nbytes: int, ms: float) -> float:
    """Decimal GB/s of ``nbytes`` moved in ``ms`` milliseconds."""
    if ms <= 0:
        raise ValueError(f"gb_per_s: {ms} ms is not a duration")
    return nbytes / (ms / 1e3) / 1e9


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("3 passed, 1 skipped in 2s")."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    lines = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)",
                                                            ln)]
    if lines:
        for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", lines[-1]):
            counts["error" if word.startswith("error") else word] += int(n)
    return counts


def status_of(result: dict[str, Any]) -> str:
    """'ok' when every step that ran passed, else 'failed: <steps>'."""
    bad = [name for name, step in result.get("steps", {}).items() if not step.get("ok", False)]
    return "ok" if not bad else "failed: " + ", ".join(bad)


def format_report(result: dict[str, Any]) -> str:
    """The compact text report of one run's JSON."""
    lines = [f"gpu_check: {result['status']}  ({result.get('device', '?')}, "
             f"torch {result.get('torch', '?')}, {result.get('wall_s', 0):.0f} s)"]
    steps = result.get("steps", {})
    for name, step in steps.items():
        mark = "ok  " if step.get("ok") else "FAIL"
        lines.append(f"[{mark}] {name}: {step.get('summary', step.get('error', ''))}")
    for row in steps.get("throughput", {}).get("rows", []):
        r = row["images_per_s"]
        lines.append(f"    {row['name']:<16} {r['median']:>9.0f} img/s  "
                     f"(min {r['min']:.0f}, max {r['max']:.0f}, spread {r['spread']:.1%}"
                     f"{', noisy' if r['noisy'] else ''})  start-up {row['startup_s']:.2f} s")
    for kind in steps.get("copies", {}).get("kinds", []):
        g = kind["gb_per_s"]
        lines.append(f"    {kind['name']:<16} {g['median']:>9.2f} GB/s "
                     f"(min {g['min']:.2f}, max {g['max']:.2f})")
    return "\n".join(lines)


def step(name: str, fn: Callable[[], dict[str, Any]], steps: dict[str, Any]) -> None:
    """Runs one step; an exception becomes its failed record, not the run's end.
    Says on stderr when it starts and ends (a run cut short by the time budget
    shows where)."""
    print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        steps[name] = fn()
    except Exception as exc:  # recorded: the other steps still run
        steps[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)}
    steps[name]["wall_s"] = round(time.perf_counter() - t0, 2)
    print(f"gpu_check: {name} {'ok' if steps[name].get('ok') else 'FAILED'} "
          f"({steps[name]['wall_s']} s)", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The steps (these need CUDA).

def run_tests(timeout: float = 240) -> dict[str, Any]:
    missing = [t for t in CUDA_TESTS if not (ROOT / t.split("::")[0]).exists()]
    if missing:
        return {"ok": False, "error": f"{', '.join(missing)} not in {ROOT} (run from a checkout)"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CUDA_TESTS]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    counts = pytest_counts(out)
    ok = proc.returncode == 0 and counts["passed"] > 0 and not counts["skipped"]
    return {"ok": ok, "returncode": proc.returncode, "counts": counts,
            "summary": ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no summary",
            "tail": out[-3000:]}


def chains(size: int) -> dict[str, Any]:
    from torchvision import transforms as T

    tail = [T.ToTensor(), T.Normalize(MEAN, STD)]
    return {
        "train": T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *tail]),
        "eval": T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), *tail]),
    }


def loader(root: Path, chain: Any, args: argparse.Namespace, device: Optional[str],
           persistent: bool = False):
    """FastLoader over ``root``; a persistent one (the throughput rows) draws
    ``args.epochs`` passes of the images per epoch, so that one round is many
    waves of batches, not a pipeline filled and drained."""
    import torch
    from torch.utils.data import RandomSampler

    import fastdecode as fd

    ds = fd.FastImageFolder(root, chain)
    sampler = RandomSampler(ds, num_samples=args.epochs * len(ds),
                            generator=torch.Generator().manual_seed(args.seed)) \
        if persistent else None
    return fd.FastLoader(ds, batch_size=args.batch, num_workers=args.workers, device=device,
                         sampler=sampler, generator=torch.Generator().manual_seed(args.seed),
                         persistent_workers=persistent)


def check_parity(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"chains": {}}
    for name, chain in chains(args.size).items():
        gpu_loader = loader(root, chain, args, DEVICE)
        ring = gpu_loader._ring is not None and gpu_loader._ring.registered
        gpu = [(x.cpu(), y.cpu(), x.device.type == DEVICE) for x, y in gpu_loader]
        gpu_loader.close()
        cpu = [(x, y) for x, y in loader(root, chain, args, None)]
        diff, equal, targets = 0.0, len(gpu) == len(cpu), len(gpu) == len(cpu)
        for (a, ya, on_gpu), (b, yb) in zip(gpu, cpu):
            equal = equal and on_gpu and a.dtype == b.dtype and torch.equal(a, b)
            targets = targets and torch.equal(ya, yb)
            if a.shape == b.shape:
                diff = max(diff, float((a.double() - b.double()).abs().max()))
        out["chains"][name] = {"batches": len(gpu), "ring_registered": ring,
                               "bit_identical": equal, "targets_equal": targets,
                               "max_abs_diff": diff}
    out["ok"] = all(c["bit_identical"] and c["targets_equal"] and c["ring_registered"]
                    for c in out["chains"].values())
    out["summary"] = "; ".join(
        f"{n}: {c['batches']} batches, " + ("bit-identical" if c["bit_identical"] else
                                            f"NOT identical, max |diff| {c['max_abs_diff']:.3g}")
        + ("" if c["ring_registered"] else ", ring NOT registered")
        for n, c in out["chains"].items())
    return out


def epoch(it: Any, move: bool) -> tuple[int, float]:
    """Images of one epoch of ``it``, and seconds to its first batch."""
    import torch

    n, t0, first = 0, time.perf_counter(), 0.0
    for images, _ in it:
        if move:
            images = images.to(DEVICE, non_blocking=True)
        if not n:
            first = time.perf_counter() - t0
        n += images.shape[0]
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return n, first


def measure_throughput(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    chain = chains(args.size)["eval"]
    rows = [("cuda", DEVICE, False), ("cpu", None, False), ("cpu+to(cuda)", None, True)]
    live = []
    for name, device, move in rows:
        ld = loader(root, chain, args, device, persistent=True)
        t0 = time.perf_counter()
        _, first = epoch(ld, move)  # warm-up: worker start, first batches, the ring
        live.append({"name": name, "loader": ld, "move": move, "startup_s": first,
                     "warmup_epoch_s": time.perf_counter() - t0, "rates": []})
    for _ in range(args.rounds):
        for row in live:  # in turns, so that noise hits every row alike
            t0 = time.perf_counter()
            n, _ = epoch(row["loader"], row["move"])
            row["rates"].append(n / (time.perf_counter() - t0))
    result = [{"name": r["name"], "startup_s": round(r["startup_s"], 3),
               "warmup_epoch_s": round(r["warmup_epoch_s"], 3),
               "images_per_s": summarize(r["rates"]), "rates": r["rates"]} for r in live]
    for r in live:
        r["loader"].close()
    by = {r["name"]: r["images_per_s"]["median"] for r in result}
    return {"ok": True, "rows": result, "images": args.images, "batch": args.batch,
            "size": args.size, "workers": args.workers,
            "summary": f"cuda / cpu = {by['cuda'] / by['cpu']:.2f}x, "
                       f"cuda / cpu+to(cuda) = {by['cuda'] / by['cpu+to(cuda)']:.2f}x"}


def time_copies(fn: Callable[[], Any], reps: int) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn``, by CUDA events on the
    current stream, after one untimed call."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_copies(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from fastdecode.loader._cuda_ring import CudaRing

    shape = (args.batch, 3, args.size, args.size)
    ring = CudaRing(2, shape)
    try:
        ring.ring.random_(0, 256)
        pinned = torch.empty(shape, dtype=torch.uint8, pin_memory=DEVICE == "cuda")
        pinned.copy_(ring.ring[0])
        pageable = ring.ring[0].clone()
        dst = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
        kinds = {
            "ring .to()": lambda: ring.ring[1].to(DEVICE, non_blocking=True),
            "ring copy_": lambda: dst.copy_(ring.ring[1], non_blocking=True),
            "pinned copy_": lambda: dst.copy_(pinned, non_blocking=True),
            "pageable copy_": lambda: dst.copy_(pageable, non_blocking=True),
        }
        nbytes = pinned.numel()
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.copies // 5 or 1):  # in turns, five at a time
            for k, fn in kinds.items():
                times[k] += time_copies(fn, 5)
        out: list[dict[str, Any]] = [{"name": k, "ms": summarize(v),
                                      "gb_per_s": summarize([gb_per_s(nbytes, ms) for ms in v])}
                                     for k, v in times.items()]
        registered, pinned_seen = ring.registered, ring.ring.is_pinned()
    finally:
        ring.close()
    by = {k["name"]: k["gb_per_s"]["median"] for k in out}
    ratio = by["ring .to()"] / by["pinned copy_"]
    return {"ok": registered and ratio > 0.9, "bytes": nbytes, "kinds": out,
            "ring_registered": registered, "ring_is_pinned": pinned_seen,
            "summary": f"{nbytes / 1e6:.1f} MB: ring {by['ring .to()']:.2f} GB/s = "
                       f"{ratio:.2f}x pinned copy_ ({by['pinned copy_']:.2f} GB/s); pageable "
                       f"{by['pageable copy_']:.2f} GB/s"
                       + ("" if registered else "; ring NOT registered")}


def run_doctor(timeout: float = 60) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fastdecode", "doctor", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    report = json.loads(proc.stdout)
    check = next((c for c in report["checks"] if c["name"] == "torch_cuda"), None)
    pinned = report["facts"].get("pinned_memory")
    return {"ok": pinned == "ok" and check is not None and check["status"] == "ok",
            "exit_code": proc.returncode, "doctor_status": report["status"],
            "pinned_memory": pinned, "torch_cuda": check,
            "summary": f"pinned memory {pinned}; torch_cuda "
                       f"{check['status'] if check else 'missing'}; doctor {report['status']}"}


# --------------------------------------------------------------------------

def no_cuda_reason() -> Optional[str]:
    """None where CUDA is usable, else why not (one line)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU"
    return None


def write_json(path: Optional[Path], result: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    reason = no_cuda_reason()
    if reason is not None:
        print(f"gpu_check: {SKIPPED} ({reason}); the CUDA path is {LAST_RUN}")
        write_json(args.json, {"status": SKIPPED, "reason": reason, "note": LAST_RUN})
        return 0
    import torch

    from fastdecode._system import usable_cpus

    if args.workers is None:
        args.workers = usable_cpus()
    t0 = time.perf_counter()
    command = "bash benchmarks/gpu_check.sh " + " ".join(
        sys.argv[1:] if argv is None else argv)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d", time.gmtime()),
                              "command": command.strip(),
                              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "cuda": torch.version.cuda, "usable_cpus": usable_cpus(),
                              "args": vars(args), "steps": {}}
    steps = result["steps"]

    def run_step(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if name not in args.skip:
            step(name, fn, steps)
            # after each step: a run the time budget cuts short leaves what it measured
            write_json(args.json, {**result, "status": "incomplete: " + ", ".join(steps)})

    with tempfile.TemporaryDirectory(prefix="gpu_check.") as tmp:
        run_step("tests", run_tests)
        root = args.data
        if root is None and not {"parity", "throughput"} <= set(args.skip):
            from fastdecode.cli.datagen import generate_imagenet_like

            t1 = time.perf_counter()
            root = generate_imagenet_like(Path(tmp) / "data", n_images=args.images,
                                          n_classes=args.classes, seed=args.seed, progress=False)
            result["datagen_s"] = round(time.perf_counter() - t1, 2)
        run_step("parity", lambda: check_parity(root, args))
        run_step("throughput", lambda: measure_throughput(root, args))
    run_step("copies", lambda: measure_copies(args))
    run_step("doctor", run_doctor)
    result["wall_s"] = time.perf_counter() - t0
    result["status"] = status_of(result)
    write_json(args.json, result)
    print(format_report(result))
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
