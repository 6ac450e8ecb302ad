"""`make coverage`'s verdict: python tests/helpers/coverage_gate.py PYTHON_JSON C_JSON.

PYTHON_JSON: coverage.py's JSON report of fastdecode/; C_JSON: gcovr's JSON
summary of src_c/. Prints the totals (Python lines, branches, both; C lines)
and every public function (no part of its module path or qualified name
starts with an underscore, dunder methods aside) that no test ran, and exits
1 when Python is under PYTHON_MIN (lines and branches together, as
coverage.py counts them), C lines under C_MIN, or a public function is
unrun. The thresholds are issue 27's.
"""

from __future__ import annotations

import json
import sys
from pathlib import PurePosixPath

PYTHON_MIN = 95.0
C_MIN = 90.0


def public(path: str, qualname: str) -> bool:
    parts = [p for p in PurePosixPath(path).with_suffix("").parts if p != "__init__"]
    names = qualname.split(".") if qualname else []
    if not names:
        return False
    return not any(p.startswith("_") for p in parts) and not any(
        n.startswith("_") and not (n.startswith("__") and n.endswith("__")) for n in names)


def unrun_public(report: dict) -> list[str]:
    out = []
    for path, data in sorted(report["files"].items()):
        for qualname, fn in sorted(data.get("functions", {}).items()):
            summary = fn["summary"]
            if public(path, qualname) and summary["num_statements"] and not summary["covered_lines"]:
                out.append(f"{path}:{qualname}")
    return out


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        py = json.load(f)
    with open(argv[2]) as f:
        c = json.load(f)
    t = py["totals"]
    lines = 100.0 * t["covered_lines"] / max(t["num_statements"], 1)
    branches = 100.0 * t.get("covered_branches", 0) / max(t.get("num_branches", 0), 1)
    both = t["percent_covered"]
    c_lines = c["line_percent"]
    unrun = unrun_public(py)
    print(f"coverage: Python {lines:.1f} % lines, {branches:.1f} % branches, {both:.1f} % both "
          f"(>= {PYTHON_MIN}); C {c_lines:.1f} % lines (>= {C_MIN}); "
          f"{len(unrun)} public functions never run")
    for name in unrun:
        print(f"  never run: {name}")
    ok = both >= PYTHON_MIN and c_lines >= C_MIN and not unrun
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
