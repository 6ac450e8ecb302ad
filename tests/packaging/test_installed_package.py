"""The package under test is the installed wheel where the run says it is
(FASTDECODE_EXPECT_INSTALLED=1: `make wheel-test`, the wheel job's test step):
imported from the installed distribution, extension included, not from a
checkout beside the tests; and the wheel job installs the torch and
torchvision that requirements/lock.txt pins."""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

import pytest

import fastdecode
from fastdecode import _native

ROOT = Path(__file__).resolve().parents[2]

needs_install = pytest.mark.skipif(os.environ.get("FASTDECODE_EXPECT_INSTALLED") != "1",
                                   reason="the run tests a checkout (FASTDECODE_EXPECT_INSTALLED unset)")


def installed(relative: str) -> Path:
    return Path(importlib.metadata.distribution("fastdecode").locate_file(relative)).resolve()


@needs_install
def test_the_package_is_the_installed_distributions():
    package = Path(fastdecode.__file__).resolve()
    assert package == installed("fastdecode/__init__.py")
    assert package.parent != ROOT / "fastdecode", f"fastdecode imported from the checkout: {package}"


@needs_install
def test_the_extension_is_the_installed_distributions():
    files = [str(f) for f in importlib.metadata.distribution("fastdecode").files or ()]
    extension = Path(_native.__file__).resolve()
    assert any(f.startswith("fastdecode/_native") and installed(f) == extension for f in files), \
        f"{extension} is not a file of the installed distribution"


# What the checkout's packages ship: their modules, stubs, Cython sources and
# scripts (pyproject.toml's package-data; setuptools adds the .pyx/.pxi/.pxd).
SHIPPED = ("*.py", "*.pyi", "py.typed", "*.pyx", "*.pxi", "*.pxd", "*.sh")


def checkout_files() -> dict[str, Path]:
    """The files of the checkout's packages that the wheel must hold, by their
    path inside it: every package under fastdecode/ and benchmarks/ (a folder
    with an __init__.py), what SHIPPED matches in each."""
    out: dict[str, Path] = {}
    for top in ("fastdecode", "benchmarks"):
        for init in (ROOT / top).rglob("__init__.py"):
            package = init.parent
            if any(not (d / "__init__.py").is_file() for d in package.parents if ROOT / top in d.parents):
                continue  # below a folder that is not a package
            for pattern in SHIPPED:
                out.update((f.relative_to(ROOT).as_posix(), f) for f in package.glob(pattern))
    return out


@needs_install
def test_the_wheel_holds_the_checkouts_python_byte_for_byte():
    """Every module, stub and script of the checkout's packages is in the
    installed wheel, and is the same bytes: a subpackage the build leaves out
    (a package list that missed fastdecode.augment) or a stale copy fails here.
    It is also why the wheel tier (tests/helpers/wheel_tier.py) may leave the
    pure-Python fault, endurance and service tests to the checkout's run."""
    if not (ROOT / "fastdecode" / "__init__.py").is_file():
        pytest.skip("no checkout beside the tests")
    wheel = {str(f) for f in importlib.metadata.distribution("fastdecode").files or ()}
    want = checkout_files()
    missing = sorted(set(want) - wheel)
    assert not missing, f"in the checkout, not in the installed wheel: {missing}"
    differ = sorted(name for name, f in want.items() if installed(name).read_bytes() != f.read_bytes())
    assert not differ, f"the installed wheel's copy differs from the checkout's: {differ}"


def test_the_wheel_job_installs_the_locks_torch_and_torchvision():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    steps = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())
                     ["tool"]["cibuildwheel"]["before-test"])
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    for name in ("torch", "torchvision"):
        pinned = re.search(rf"^{name}==(\S+)$", lock, re.M)
        assert pinned and f" {name}=={pinned[1]} " in f" {steps} ", (name, steps)
