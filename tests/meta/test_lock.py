"""requirements/lock.txt, what make test installs without resolving: it pins
every requirement of requirements/test.txt (and the files it includes) to a
version that requirement admits, once, and nothing twice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

packaging_requirements = pytest.importorskip("packaging.requirements")
from packaging.utils import canonicalize_name  # noqa: E402

REQS = Path(__file__).resolve().parents[2] / "requirements"


def requirement_lines(path: Path) -> list[str]:
    """The requirement lines of ``path``, following ``-r`` includes."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        include = re.match(r"-r\s+(\S+)", line)
        if include:
            lines += requirement_lines(path.parent / include.group(1))
        else:
            lines.append(line)
    return lines


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in requirement_lines(REQS / "lock.txt"):
        name, _, version = line.partition("==")
        key = canonicalize_name(name)
        assert version and key not in found, f"lock.txt: {line!r} is not one pin of its own"
        found[key] = version
    return found


@pytest.mark.parametrize("line", requirement_lines(REQS / "test.txt"))
def test_the_lock_pins_each_requirement_to_a_version_it_admits(line):
    req = packaging_requirements.Requirement(line)
    locked = pins().get(canonicalize_name(req.name))
    assert locked is not None, f"{req.name} is not in requirements/lock.txt: run make lock"
    assert req.specifier.contains(locked, prereleases=True), \
        f"lock.txt pins {req.name}=={locked}, test.txt asks {req.specifier}: run make lock"
