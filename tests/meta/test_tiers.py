"""The test tiers (tests/helpers/tiers.py, tests/conftest.py): what the
default tier keeps of a long matrix, that the subset is reproducible, and,
through a pytest run of its own over a generated test file, that `--full`
and FASTDECODE_TEST_FULL=1 run everything and a case named on the command
line always runs."""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import tiers

TESTS = Path(__file__).resolve().parent.parent


class Case:
    """Stands in for a collected pytest item: a node id and a callspec."""

    def __init__(self, func: str, values: tuple, *, idlist: bool = True) -> None:
        self.nodeid = f"tests/x/test_m.py::{func}[{'-'.join(map(str, values))}]"
        params = {f"a{k}": v for k, v in enumerate(values)}
        self.callspec = SimpleNamespace(params=params)
        if idlist:
            self.callspec._idlist = [str(v) for v in values]

    def __repr__(self) -> str:
        return self.nodeid


class Plain:
    def __init__(self, name: str) -> None:
        self.nodeid = f"tests/x/test_m.py::{name}"


def matrix(func: str, *axes: list, idlist: bool = True) -> list[Case]:
    return [Case(func, values, idlist=idlist) for values in itertools.product(*axes)]


INPUTS = [f"img{i}" for i in range(30)]
MATRICES = {
    # inputs x three option axes
    "inputs-modes-layouts-interps": (INPUTS, ["RGB", "L", "CMYK"], ["HWC", "CHW"],
                                     ["nearest", "bilinear", "bicubic", "box"]),
    "inputs-options": (INPUTS, ["a", "b", "c", "d"]),
    "options-only": ([1, 2, 3, 4, 5], [6, 7, 8, 9], [True, False], ["x", "y", "z"]),
    "one-input-list": ([f"photo{i}" for i in range(100)],),
    "two-input-lists": ([f"p{i}" for i in range(12)], [f"q{i}" for i in range(10)]),
}


def kept_of(cases: list) -> list:
    kept, deselected, _ = tiers.sample(cases)
    return kept


@pytest.mark.parametrize("name", MATRICES)
def test_every_value_and_every_option_pair_is_kept(name):
    axes = MATRICES[name]
    cases = matrix("test_f", *axes)
    kept = kept_of(cases)
    values = [c.callspec._idlist for c in kept]
    if len(axes) > 1:
        for k, axis in enumerate(axes):
            assert {v[k] for v in values} == {str(x) for x in axis}, f"axis {k}"
    options = [k for k, axis in enumerate(axes) if len(axis) <= tiers.OPTION_VALUES]
    for a, b in itertools.combinations(options, 2):
        assert {(v[a], v[b]) for v in values} == {
            (str(x), str(y)) for x in axes[a] for y in axes[b]}, f"axes {a}, {b}"
    assert math.ceil(len(cases) * tiers.FRACTION) <= len(kept) < len(cases)


def test_a_one_axis_list_runs_a_seeded_fraction():
    cases = matrix("test_f", [f"photo{i}" for i in range(100)])
    assert len(kept_of(cases)) == math.ceil(100 * tiers.FRACTION)


def test_small_matrices_plain_tests_and_other_functions_are_untouched():
    small = matrix("test_small", range(4), range(6))  # 24 cases: MIN_CASES, run whole
    big = matrix("test_big", INPUTS, ["x", "y"])
    plain = [Plain("test_plain"), Plain("test_other")]
    items = [plain[0], *small, *big, plain[1]]
    kept, deselected, report = tiers.sample(items)
    assert kept[0] is plain[0] and kept[-1] is plain[1]
    assert all(c in kept for c in small)
    assert set(report) == {"tests/x/test_m.py::test_big"}
    assert report["tests/x/test_m.py::test_big"] == (len(big) - len(deselected), len(big))
    # a partition, each list in collection order
    assert sorted(map(id, kept + deselected)) == sorted(map(id, items))
    assert kept == [it for it in items if it in kept]
    assert deselected == [it for it in items if it in deselected]


def test_the_subset_depends_on_the_seed_and_ids_not_the_order():
    cases = matrix("test_f", *MATRICES["inputs-modes-layouts-interps"])
    first = {c.nodeid for c in kept_of(cases)}
    shuffled = cases[:]
    random.Random(5).shuffle(shuffled)
    assert {c.nodeid for c in kept_of(shuffled)} == first
    again = {c.nodeid for c in kept_of(matrix("test_f", *MATRICES["inputs-modes-layouts-interps"]))}
    assert again == first
    other_seed = {c.nodeid for c in tiers.sample(cases, tiers.SEED + 1)[0]}
    assert other_seed != first


def test_a_named_case_is_kept_and_not_counted():
    cases = matrix("test_f", [f"photo{i}" for i in range(100)])
    dropped = tiers.sample(cases)[1]
    named = frozenset(c.nodeid for c in dropped[:3])
    kept, _, report = tiers.sample(cases, keep_ids=named)
    assert named <= {c.nodeid for c in kept}
    assert report["tests/x/test_m.py::test_f"][1] == 97


def test_values_fall_back_to_the_parameters_reprs():
    with_ids = matrix("test_f", INPUTS, ["a", "b", "c"])
    without = matrix("test_f", INPUTS, ["a", "b", "c"], idlist=False)
    assert tiers.axes(without[0]) == ("a0='img0'", "a1='a'")
    kept = kept_of(without)
    assert {c.callspec.params["a0"] for c in kept} == set(INPUTS)
    assert len(kept) == len(kept_of(with_ids))


# -- a pytest run of its own --------------------------------------------------

TEST_FILE = '''
import pytest

@pytest.mark.parametrize("option", ["a", "b"])
@pytest.mark.parametrize("image", [f"img{i}" for i in range(20)])
def test_matrix(image, option):
    pass

@pytest.mark.parametrize("n", range(5))
def test_small(n):
    pass

def test_plain():
    pass
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project with this suite's conftest and tiers module and one test file
    of a 40-case matrix, a 5-case one and a plain test (46 tests)."""
    root = tmp_path_factory.mktemp("tiers")
    tests = root / "tests"
    (tests / "helpers").mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    shutil.copy(TESTS / "helpers" / "tiers.py", tests / "helpers" / "tiers.py")
    shutil.copy(TESTS / "helpers" / "loader_iters.py", tests / "helpers" / "loader_iters.py")
    (tests / "helpers" / "__init__.py").write_text("")
    (tests / "test_m.py").write_text(TEST_FILE)
    (root / "pytest.ini").write_text("[pytest]\npythonpath = tests\n")
    return root


def run_pytest(root: Path, *args: str, cwd: Path | None = None, env: dict | None = None):
    full_env = {k: v for k, v in os.environ.items() if k != "FASTDECODE_TEST_FULL"}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--rootdir", str(root), "-c", str(root / "pytest.ini"), *args],
                          cwd=cwd or root, env=full_env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def default_run(project) -> str:
    """The project's default-tier run, verbose (one run, shared)."""
    return run_pytest(project, "-v")


def counts(out: str) -> tuple[int, int]:
    passed = re.search(r"(\d+) passed", out)
    deselected = re.search(r"(\d+) deselected", out)
    return (int(passed.group(1)) if passed else 0,
            int(deselected.group(1)) if deselected else 0)


def test_default_tier_samples_the_long_matrix(default_run):
    out = default_run
    assert "fastdecode tier: default" in out
    passed, deselected = counts(out)
    assert passed + deselected == 46 and deselected > 0
    kept = set(re.findall(r"test_matrix\[(img\d+)-(\w)\] PASSED", out))
    assert {image for image, _ in kept} == {f"img{i}" for i in range(20)}  # every image once
    assert {option for _, option in kept} == {"a", "b"}
    assert passed == len(kept) + 5 + 1  # the small matrix and the plain test whole


@pytest.mark.parametrize("how", ["option", "environment"])
def test_full_tier_runs_everything(project, how):
    out = run_pytest(project, *(["--full"] if how == "option" else []),
                     env={"FASTDECODE_TEST_FULL": "1"} if how == "environment" else None)
    assert "fastdecode tier: full" in out
    assert counts(out) == (46, 0)


def test_another_seed_keeps_other_cases(project, default_run):
    first = set(re.findall(r"test_matrix\[\S+\] PASSED", default_run))
    other = set(re.findall(r"test_matrix\[\S+\] PASSED",
                           run_pytest(project, "-v", "--sample-seed", "3")))
    assert first != other


@pytest.mark.parametrize("how", ["relative", "absolute", "from-tests-dir", "with-others"])
def test_a_named_case_runs_though_the_sample_leaves_it_out(project, default_run, how):
    ran = set(re.findall(r"test_matrix\[(\S+)\] PASSED", default_run))
    left_out = sorted({f"img{i}-{o}" for i in range(20) for o in "ab"} - ran)[:3]
    assert left_out
    names = [f"test_m.py::test_matrix[{case}]" for case in left_out]
    cwd = project / "tests"
    if how == "relative":
        cwd = project
        args = [f"tests/{n}" for n in names]
    elif how == "absolute":
        args = [str(project / "tests" / n) for n in names]
    elif how == "from-tests-dir":
        args = names
    else:  # named cases next to a whole file: the file is sampled, the named cases run
        cwd = project
        args = [f"tests/{n}" for n in names] + ["tests/test_m.py"]
    out = run_pytest(project, "-v", *args, cwd=cwd)
    for case in left_out:
        assert f"test_matrix[{case}] PASSED" in out, out
