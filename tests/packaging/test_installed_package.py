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


def test_the_wheel_job_installs_the_locks_torch_and_torchvision():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    steps = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())
                     ["tool"]["cibuildwheel"]["before-test"])
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    for name in ("torch", "torchvision"):
        pinned = re.search(rf"^{name}==(\S+)$", lock, re.M)
        assert pinned and f" {name}=={pinned[1]} " in f" {steps} ", (name, steps)
