"""Mutation fuzzing without atheris: the targets' oracle on randomly mutated seeds.

    python tests/fuzz/mutation.py TARGETS SECONDS [--seed N] [--findings DIR]

TARGETS: comma-separated names of ``fuzz.spec.TARGET_NAMES``; SECONDS per
target. The seeds are the ones ``make fuzz`` writes (``seeds.write``, with
../shared/corpus when present); each execution applies 1-8 random mutations
(bit flips, bytes set to 0x00 / 0xff / 0x7f / 0x80, deletions, insertions,
32-bit fields set to extremes, truncations that keep the option trailer) and
runs the input through ``targets.run``. Not coverage-guided: for machines
without atheris (whose wheel the package index may lack); run it against the
ASan/UBSan copy (build/asan-pkg first on PYTHONPATH, libasan preloaded, as
``make test-sanitize`` runs tests/core) so that a memory error aborts it.
Prints executions and findings per target (findings saved in DIR); exit
status 1 if any. Results: tests/fuzz/RESULTS.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a file: tests/ holds the fuzz package

from fuzz import seeds, targets  # noqa: E402
from fuzz.spec import TARGET_NAMES  # noqa: E402

EXTREMES = (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00")


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data) or bytearray(b"\x00")
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        if not b:
            b = bytearray(b"\x00")
        i, op = rng.randrange(len(b)), rng.random()
        if op < 0.35:
            b[i] ^= 1 << rng.randrange(8)
        elif op < 0.55:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op < 0.65:
            del b[i:i + rng.randrange(1, 64)]
        elif op < 0.75:
            b[i:i] = rng.randbytes(rng.randrange(1, 16))
        elif op < 0.85 and len(b) > 4:
            j = rng.randrange(len(b) - 4)
            b[j:j + 4] = rng.choice(EXTREMES + (rng.randbytes(4),))
        elif len(b) > targets.TRAILER:
            b = b[:i] + b[-targets.TRAILER:]
    return bytes(b)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets")
    ap.add_argument("seconds", type=float)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--findings", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args(argv)
    names = args.targets.split(",")
    unknown = set(names) - set(TARGET_NAMES)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}")
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp())
    seeds.write(root, HERE.parents[2] / "shared" / "corpus")  # ../shared of the checkout
    total_found = 0
    for name in names:
        pool = [p.read_bytes() for p in sorted((root / name).iterdir())]
        n = found = 0
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            data = mutate(rng.choice(pool), rng)
            try:
                targets.run(name, data)
            except targets.Finding as exc:
                found += 1
                path = args.findings / f"mutation-{name}-{args.seed}-{found}.bin"
                path.write_bytes(data)
                print(f"finding: {name}: {exc} ({path})", flush=True)
            n += 1
        print(f"{name}: {n} executions, {found} findings, {len(pool)} seeds", flush=True)
        total_found += found
    return 1 if total_found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
