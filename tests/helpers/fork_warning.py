"""Python's fork warning, which the loader tests that count warnings leave out.

Python 3.12 and later warn (DeprecationWarning) at each fork of a process that
runs more than one thread. A test process that has used CUDA runs the driver's
threads from then on, so on a GPU machine every worker start warns: a warning
about the environment, not one of the loader's, which those tests count.
pyproject.toml's filterwarnings ignores it for the same reason.
"""

from __future__ import annotations

import warnings

FORK_WARNING = r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"


def ignore_fork_warning() -> None:
    """Inside a ``catch_warnings(record=True)`` or ``pytest.warns`` block:
    the fork warning is not recorded there."""
    warnings.filterwarnings("ignore", message=FORK_WARNING, category=DeprecationWarning)
