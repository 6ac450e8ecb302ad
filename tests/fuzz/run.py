"""Runs every fuzz target for a fixed time and prints one summary line.

    python tests/fuzz/run.py --pkg build/fuzz-pkg [--seconds 60] [--targets a,b]
    python tests/fuzz/run.py --pkg build/fuzz-pkg --minimize TARGET FILE

`make fuzz` builds the package this needs (ASan + UBSan +
-fsanitize=fuzzer-no-link, by clang) and calls the first form. Each target
runs as `fuzz.py TARGET` under atheris' preloaded ASan+libFuzzer runtime.
Work files go under build/fuzz/: seeds/ (rewritten each run), corpus/ (kept,
so later runs start from what earlier runs found), artifacts/ (libFuzzer's
crash-/timeout-/oom- files), findings/ (oracle findings), logs/, and
summary.json. The last line printed is

    fuzz: N executions, T targets, C crashes

where crashes counts distinct failing inputs: native crashes, timeouts and
OOMs (libFuzzer artifacts) plus oracle findings. Exit status 1 if C > 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # run as a file: tests/ holds the fuzz package

from fuzz import seeds  # noqa: E402
from fuzz.spec import TARGET_NAMES as TARGETS  # noqa: E402
from fuzz.spec import TRAILER  # noqa: E402

TIMEOUT_S = 20  # one input; libFuzzer's timeout- artifact beyond this
RSS_LIMIT_MB = 3072
RESTARTS = 3  # after a native crash, fuzz on for the remaining time


def runtime() -> Path:
    import atheris

    lib = Path(atheris.path()) / "asan_with_fuzzer.so"
    if not lib.exists():
        sys.exit(f"atheris' ASan+libFuzzer runtime is missing ({lib}); reinstall atheris")
    return lib


def fuzz_env(pkg: Path, collect: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(pkg.resolve()),
        LD_PRELOAD=str(runtime()),
        # Python itself leaks by design; allocation failures must come back
        # as NULL (-> FD_ERR_NOMEM) rather than abort, like a real process.
        ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:"
                     "malloc_context_size=20:symbolize=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        PYTHONWARNINGS="ignore",
    )
    env.pop("FD_FUZZ_COLLECT", None)
    if collect is not None:
        env["FD_FUZZ_COLLECT"] = str(collect)
    return env


def executions(log: str) -> int:
    m = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    if m:
        return int(m[-1])
    m = re.findall(r"^#(\d+)\s", log, re.M)
    return int(m[-1]) if m else 0


def coverage(log: str) -> tuple[int, int]:
    """(cov, ft) of the last status line: edges and features libFuzzer saw."""
    m = re.findall(r"cov: (\d+) ft: (\d+)", log)
    return (int(m[-1][0]), int(m[-1][1])) if m else (0, 0)


def fuzz_target(target: str, seconds: int, pkg: Path, work: Path, max_len: int) -> dict:
    corpus = work / "corpus" / target
    artifacts = work / "artifacts" / target
    findings = work / "findings"
    logs = work / "logs"
    for d in (corpus, artifacts, findings, logs):
        d.mkdir(parents=True, exist_ok=True)
    total = 0
    log_text = ""
    deadline = time.monotonic() + seconds
    for attempt in range(1 + RESTARTS):
        left = int(deadline - time.monotonic())
        if left < 3 and attempt:
            break
        cmd = [sys.executable, str(HERE / "fuzz.py"), target, str(corpus),
               str(work / "seeds" / target), f"-max_total_time={max(left, 1)}",
               f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={max_len}",
               "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
        proc = subprocess.run(cmd, env=fuzz_env(pkg, findings), cwd=work,
                              capture_output=True, text=True, errors="replace",
                              timeout=seconds + 600)
        log_text += f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n"
        total += executions(proc.stderr)
        if proc.returncode == 0:
            break
        # A unit that crashes, hangs or runs out of memory while the corpus
        # loads would end every restart at once: keep it out of the corpus
        # (libFuzzer names corpus files by the SHA-1 it puts in the artifact's
        # name; the artifact itself stays).
        for unit in re.findall(r"Test unit written to \S*?-([0-9a-f]{40})\b", proc.stderr):
            (corpus / unit).unlink(missing_ok=True)
    (logs / f"{target}.log").write_text(log_text)
    new = sorted({Path(p).name for p in re.findall(r"Test unit written to (\S+)", log_text)})
    cov, ft = coverage(log_text)
    found = sorted(set(re.findall(r"^FINDING (\S+):", log_text, re.M)))
    return {"target": target, "executions": total, "seconds": seconds, "cov": cov, "ft": ft,
            "artifacts": new, "findings": found}


def minimize(target: str, path: Path, pkg: Path, work: Path) -> int:
    """libFuzzer's -minimize_crash on one input (oracle findings raise here)."""
    out = work / "minimized"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE / "fuzz.py"), target, "-minimize_crash=1",
           "-max_total_time=120", f"-exact_artifact_path={out / (path.name + '.min')}",
           str(path.resolve())]
    return subprocess.run(cmd, env=fuzz_env(pkg, None), cwd=work).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkg", type=Path, required=True,
                    help="folder holding the fuzz-instrumented fastdecode package")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", 60)))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz")
    ap.add_argument("--corpus", type=Path,
                    default=Path(os.environ.get("FASTDECODE_SHARED", ROOT.parent / "shared"))
                    / "corpus")
    ap.add_argument("--minimize", nargs=2, metavar=("TARGET", "FILE"))
    args = ap.parse_args(argv)
    work = args.work.resolve()
    if args.minimize:
        return minimize(args.minimize[0], Path(args.minimize[1]), args.pkg, work)

    names = [t for t in args.targets.split(",") if t]
    unknown = set(names) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; known: {sorted(TARGETS)}")
    counts = seeds.write(work / "seeds", args.corpus)
    max_len = seeds.MAX_SEED_BYTES + TRAILER
    print(f"fuzz: seeds per target {counts}; {args.seconds}s per target; "
          f"shared corpus {'used' if args.corpus.is_dir() else 'absent'}", flush=True)
    results = []
    for name in names:
        r = fuzz_target(name, args.seconds, args.pkg, work, max_len)
        results.append(r)
        print(f"fuzz: {name}: {r['executions']} executions, cov {r['cov']} ft {r['ft']}, "
              f"artifacts {r['artifacts'] or 'none'}, findings {len(r['findings'])}",
              flush=True)
    (work / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    execs = sum(r["executions"] for r in results)
    crashes = sum(len(r["artifacts"]) + len(r["findings"]) for r in results)
    print(f"fuzz: {execs} executions, {len(results)} targets, {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
