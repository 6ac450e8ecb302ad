"""A per-test time bound that also stops a hang inside C code.

pytest-timeout's thread method (a watchdog thread that dumps every stack and
ends the run) works even while the main thread is stuck in a nogil C loop,
which the signal method cannot interrupt. Without pytest-timeout the same is
done with faulthandler.dump_traceback_later(exit=True); a test module that
uses bounded() then imports `hang_guard` too, so that pytest finds the fixture.
"""

from __future__ import annotations

import faulthandler
import sys

import pytest

try:
    import pytest_timeout  # noqa: F401

    HAVE_PYTEST_TIMEOUT = True
except ImportError:  # pragma: no cover - requirements/test.txt installs it
    HAVE_PYTEST_TIMEOUT = False

# The faulthandler fallback's bound, whatever bounded() was given.
FALLBACK_SECONDS = 300


def bounded(seconds: float):
    """Mark: the test fails, and the run ends, past `seconds` (a hang guard)."""
    if HAVE_PYTEST_TIMEOUT:
        return pytest.mark.timeout(seconds, method="thread")
    return pytest.mark.usefixtures("hang_guard")


@pytest.fixture
def hang_guard():
    faulthandler.dump_traceback_later(FALLBACK_SECONDS, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
