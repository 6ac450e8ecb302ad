"""The wheel test's two helpers: the tier's list (tests/helpers/wheel_tier.py)
names tests that exist and leaves the three groups a wheel must run in it; the
closing lines (tests/helpers/wheel_summary.py) count per folder and fail when
a group ran nothing."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import wheel_summary, wheel_tier

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def defined_tests(module: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


@pytest.mark.parametrize("prefix", wheel_tier.prefixes())
def test_each_left_out_prefix_names_a_test_that_exists(prefix):
    path, _, name = prefix.partition("::")
    target = ROOT / path
    assert target.exists(), f"{prefix}: no {path}"
    if path.endswith("/"):
        assert target.is_dir() and any(target.glob("test_*.py")), prefix
    elif name:
        assert name in defined_tests(target), f"{prefix}: {path} has no {name}"


@pytest.mark.parametrize("group", list(wheel_summary.GROUPS))
def test_the_tier_keeps_tests_of_each_group_a_wheel_must_run(group):
    member = wheel_summary.GROUPS[group]
    whole = [p for p in wheel_tier.prefixes() if "::" not in p]
    kept = [m for m in TESTS.rglob("test_*.py")
            if member(m.relative_to(ROOT).as_posix())
            and not m.relative_to(ROOT).as_posix().startswith(tuple(whole))]
    assert kept, f"the wheel tier leaves out every module of {group}"


def test_the_options_are_deselects_of_every_prefix():
    out = subprocess.run([sys.executable, str(TESTS / "helpers" / "wheel_tier.py")],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [f"--deselect={p}" for p in wheel_tier.prefixes()]
    assert len(set(out)) == len(out)


def junit(tmp_path: Path, cases: list[tuple[str, str]]) -> Path:
    """A JUnit file of (classname, outcome) cases, as pytest writes it."""
    body = {"passed": "", "skipped": '<skipped message="s"/>', "failed": '<failure message="f"/>'}
    rows = "".join(f'<testcase classname="{cls}" name="test_{i}" time="0">{body[got]}</testcase>'
                   for i, (cls, got) in enumerate(cases))
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')
    return path


EVERY_GROUP = [("tests.transforms.test_parity", "passed"), ("tests.data.test_dataset_parity", "passed"),
               ("tests.data.test_loader", "failed"), ("tests.core.test_jpeg", "skipped")]


def test_the_summary_counts_each_folder_and_group(tmp_path):
    lines, code = wheel_summary.summary(junit(tmp_path, EVERY_GROUP))
    assert "  tests/core: 0 / 1 / 0" in lines
    assert "  tests/data: 1 / 0 / 1" in lines
    assert "  loaders: 1 run, 0 skipped" in lines
    assert code == 0


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="without torch it only counts")
def test_the_summary_fails_when_a_group_only_skipped(tmp_path):
    cases = EVERY_GROUP[:2] + [("tests.data.test_loader_threads", "skipped")]
    lines, code = wheel_summary.summary(junit(tmp_path, cases))
    assert code == 1
    assert "wheel test: no loaders test ran against the installed wheel" in lines
