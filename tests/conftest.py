"""Test-wide settings and the test tiers; the shared helpers live in the ``helpers`` package.

Plain `pytest` (`make test`) is the default tier: each long parameter matrix
runs a seeded pairwise subset (helpers/tiers.py). `pytest --full`
(`make test-full`) runs every case.
"""

from __future__ import annotations

import os

import pytest

from helpers import loader_iters, tiers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastdecode tiers")
    group.addoption("--full", action="store_true", default=os.environ.get("FASTDECODE_TEST_FULL") == "1",
                    help="run every case of every parameter matrix (make test-full); "
                         "without it, long matrices run a seeded pairwise subset")
    group.addoption("--sample-seed", type=int, default=tiers.SEED,
                    help=f"seed of the default tier's subset (default {tiers.SEED})")


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("full"):
        return "fastdecode tier: full (every case of every matrix)"
    return (f"fastdecode tier: default (matrices over {tiers.MIN_CASES} cases run a pairwise "
            f"subset, seed {config.getoption('sample_seed')}; --full runs every case)")


def named_cases(config: pytest.Config) -> frozenset[tuple[str, str]]:
    """(real path, test id) of every case named on the command line
    (``path::test[id]``, ``path::Class::test[id]``), relative to where
    pytest was started."""
    out = set()
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep and "[" in rest:
            out.add((os.path.realpath(os.path.join(config.invocation_params.dir, path)), rest))
    return frozenset(out)


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("full"):
        return
    named = named_cases(config)
    keep_ids = frozenset(it.nodeid for it in items
                         if (os.path.realpath(it.path), it.nodeid.partition("::")[2]) in named)
    kept, deselected, _ = tiers.sample(items, config.getoption("sample_seed"), keep_ids=keep_ids)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_runtest_setup(item: pytest.Item) -> None:
    loader_iters.track()  # from the first test after torch's import on


@pytest.hookimpl(tryfirst=True)  # before the fixtures' teardown: a mount's unmount waits for
def pytest_runtest_teardown(item: pytest.Item) -> None:  # the files workers hold open
    """When each test ends, the DataLoader workers it left alive stop
    (helpers/loader_iters.py: otherwise a later test's garbage collection
    stalls 5 s per worker)."""
    loader_iters.shut_down_left_alive()
