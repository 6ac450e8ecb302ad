"""The closing lines of a test run against an installed wheel (`make
wheel-test`, the wheel job's test step): from pytest's JUnit XML, the tests
passed, skipped and failed per folder of tests/, and the three groups a wheel
must run, not skip: the fused transforms (tests/transforms), the datasets and
the loaders (tests/data/test_dataset*, test_loader*).

    python tests/helpers/wheel_summary.py junit.xml

Exit 1 when a group ran no test, unless torch is not installed for this
platform (no wheel of the pinned torch for it): then every test that needs
torch skips, and the closing line says so and counts them.
"""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

GROUPS = {
    "transforms": lambda path: path.startswith("tests/transforms/"),
    "datasets": lambda path: path.startswith(("tests/data/test_dataset", "tests/data/test_datasets")),
    "loaders": lambda path: path.startswith("tests/data/test_loader"),
}


def outcome(case: ET.Element) -> str:
    for kind in ("failure", "error", "skipped"):
        if case.find(kind) is not None:
            return {"failure": "failed", "error": "failed"}.get(kind, kind)
    return "passed"


def test_path(case: ET.Element) -> str:
    """tests/<folder>/<module>.py of a case, from its dotted classname
    (pytest writes core.test_bmp or tests.core.test_bmp, by rootdir)."""
    parts = case.get("classname", "").split(".")
    parts = parts[1:] if parts and parts[0] == "tests" else parts
    modules = [i for i, p in enumerate(parts) if p.startswith("test_")]
    if not modules:
        return "tests/?"
    return "tests/" + "/".join(parts[:modules[0] + 1]) + ".py"


def summary(junit: Path) -> tuple[list[str], int]:
    """The closing lines and the exit code."""
    counts: Counter[tuple[str, str]] = Counter()
    groups: Counter[tuple[str, str]] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        path, got = test_path(case), outcome(case)
        folder = "/".join(path.split("/")[:2]) if path.count("/") > 1 else "tests"
        counts[folder, got] += 1
        for name, member in GROUPS.items():
            if member(path):
                groups[name, got] += 1
    lines = ["wheel test, per folder (passed / skipped / failed):"]
    for folder in sorted({f for f, _ in counts}):
        lines.append(f"  {folder}: {counts[folder, 'passed']} / {counts[folder, 'skipped']} / "
                     f"{counts[folder, 'failed']}")
    has_torch = importlib.util.find_spec("torch") is not None
    code = 0
    for name in GROUPS:
        ran = groups[name, "passed"] + groups[name, "failed"]
        lines.append(f"  {name}: {ran} run, {groups[name, 'skipped']} skipped")
        if ran == 0 and has_torch:
            lines.append(f"wheel test: no {name} test ran against the installed wheel")
            code = 1
    if not has_torch:
        skipped = sum(n for (_, got), n in counts.items() if got == "skipped")
        lines.append(f"wheel test: torch is not installed here (no wheel of the pinned torch "
                     f"for this platform): {skipped} tests skipped, the transforms, datasets "
                     "and loaders among them")
    return lines, code


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    lines, code = summary(Path(argv[0]))
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
