"""Shrinks an oracle finding (a Python-level bug) to a small input.

    python tests/fuzz/minimize.py TARGET INPUT OUTPUT

Runs in the normal build (no sanitizer needed: the bug is a Python
exception, a wrong shape or a crop that is not a slice). Delta debugging
over byte ranges, then byte simplification (each byte to 0), keeping the
same kind of finding: the same exception type and the same message with
digits ignored. Native crashes are minimized by libFuzzer instead
(run.py --minimize).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a file: tests/ holds the fuzz package

from fuzz import targets  # noqa: E402


def signature(target: str, data: bytes) -> str | None:
    try:
        targets.run(target, data)
    except targets.Finding as finding:
        cause = finding.__cause__
        kind = type(cause).__name__ if cause is not None else "Finding"
        return kind + ":" + re.sub(r"\d+", "N", str(finding))[:60]
    return None


def minimize(target: str, data: bytes) -> bytes:
    want = signature(target, data)
    if want is None:
        raise SystemExit("the input does not reproduce a finding")

    def same(candidate: bytes) -> bool:
        return signature(target, candidate) == want

    chunk = max(1, len(data) // 2)
    while chunk >= 1:
        i = 0
        changed = False
        while i < len(data):
            candidate = data[:i] + data[i + chunk:]
            if candidate and same(candidate):
                data = candidate
                changed = True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    for i in range(len(data)):
        if data[i] != 0:
            candidate = data[:i] + b"\0" + data[i + 1:]
            if same(candidate):
                data = candidate
    return data


def main() -> int:
    target, src, dst = sys.argv[1:4]
    data = Path(src).read_bytes()
    small = minimize(target, data)
    Path(dst).write_bytes(small)
    print(f"{len(data)} -> {len(small)} bytes: {signature(target, small)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
