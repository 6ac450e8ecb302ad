"""Replays fuzz inputs through the targets in an ordinary Python process.

    python tests/fuzz/replay.py TARGET PATH... [--quiet]

PATH: files or folders (build/fuzz/corpus/TARGET, build/fuzz/findings, a
crash artifact). Uses whatever fastdecode is first on sys.path: the normal
build (check a fix), or a `--coverage` build (measure what a corpus
reaches: see tests/fuzz/RESULTS.md). Prints each finding and a count;
exit status 1 if any.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a file: tests/ holds the fuzz package

from fuzz import targets  # noqa: E402


def inputs(paths):
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(x for x in p.iterdir() if x.is_file() and x.suffix != ".txt")
        else:
            yield p


def main(argv) -> int:
    quiet = "--quiet" in argv
    args = [a for a in argv if a != "--quiet"]
    if len(args) < 2 or args[0] not in targets.TARGETS:
        print(__doc__, file=sys.stderr)
        return 2
    target, paths = args[0], args[1:]
    n = found = 0
    for path in inputs(paths):
        n += 1
        try:
            targets.run(target, path.read_bytes())
        except targets.Finding as finding:
            found += 1
            if not quiet:
                print(f"{path}: {finding}")
    print(f"replay {target}: {n} inputs, {found} findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
