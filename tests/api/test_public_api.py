"""The public API: every name in every ``__all__`` resolves, and the listing
(names, signatures, CLI subcommands and options) equals the recorded one."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from helpers import public_api

RECORDED = Path(__file__).with_name("public_api.txt")


@pytest.mark.parametrize("module_name", public_api.MODULES)
def test_every_name_in_all_resolves(module_name):
    module = importlib.import_module(module_name)
    assert module.__all__ and all(isinstance(name, str) for name in module.__all__)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what the module lacks: {missing}"
    assert len(set(module.__all__)) == len(module.__all__)


def test_public_api_listing_is_the_recorded_one():
    """A deliberate API change regenerates tests/api/public_api.txt in the same
    commit (see helpers/public_api.py); anything else is an accident."""
    got = public_api.listing()
    want = RECORDED.read_text()
    if got != want:
        import difflib

        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            "recorded", "now"))
        pytest.fail(f"the public API changed:\n{diff}")
