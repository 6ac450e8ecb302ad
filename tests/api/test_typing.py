"""Typical user code type-checks against the stubs and annotations (mypy), with
the inferred types stated in the file; and mypy catches the usual mistakes.
Revealed class names are where the class is defined (user_code.py states them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastdecode

pytest.importorskip("mypy")

HERE = Path(__file__).with_name("typing")
CHECKOUT = Path(fastdecode.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory) -> list[str]:
    """One mypy run over both files (most of its time is reading torch:
    incremental, in the checkout's cache, which `make lint`, run first by
    `make test`, has filled with the same options)."""
    # a checkout is put on mypy's path; an installed wheel is found in site-packages
    # (mypy refuses site-packages on MYPYPATH), where there is no mypy cache to use
    checkout = (CHECKOUT / "pyproject.toml").is_file()
    env = {**os.environ, "MYPYPATH": str(CHECKOUT)} if checkout else dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports",
         "--python-version", "3.11", "--hide-error-context", "--no-error-summary",
         "--show-error-codes", str(HERE / "user_code.py"), str(HERE / "misuse.py")],
        capture_output=True, text=True, env=env, timeout=300,
        cwd=CHECKOUT if checkout else tmp_path_factory.mktemp("mypy"))
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def marked_lines(path: Path) -> dict[int, str]:
    marks = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = re.search(r"#\s*E(?::\s*(.*))?$", line)
        if match:
            marks[number] = (match.group(1) or "").strip()
    return marks


def test_user_code_type_checks_with_the_stated_types(mypy_output):
    path = HERE / "user_code.py"
    revealed = {}
    problems = []
    for line in mypy_output:
        match = re.match(rf"(?:.*/)?{re.escape(path.name)}:(\d+): (\w+): (.*)", line)
        if not match:
            continue
        number, kind, text = int(match.group(1)), match.group(2), match.group(3)
        note = re.match(r'Revealed type is "(.*)"', text)
        if kind == "note" and note:
            revealed[number] = note.group(1)
        elif kind == "error":
            problems.append(line)
    assert not problems, "\n".join(problems)
    want = marked_lines(path)
    assert revealed == want


def test_mypy_catches_the_usual_mistakes(mypy_output):
    path = HERE / "misuse.py"
    errors = {}
    for line in mypy_output:
        match = re.match(rf"(?:.*/)?{re.escape(path.name)}:(\d+): error: (.*)", line)
        if match:
            errors.setdefault(int(match.group(1)), []).append(match.group(2))
    assert sorted(errors) == sorted(marked_lines(path)), errors
