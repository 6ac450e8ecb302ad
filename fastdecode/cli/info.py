"""``fastdecode info``: the version and capabilities of the installed library,
and the versions of Python and of the libraries it works with."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform

from fastdecode.api import info
from fastdecode.cli._args import subcommand

__all__ = ["PACKAGES", "register", "run", "versions"]

# The distributions whose versions `fastdecode info` prints after its own:
# its dependencies and what its datasets and tests compare with.
PACKAGES = ("numpy", "tqdm", "Pillow", "torch", "torchvision")


def versions() -> dict[str, str]:
    """Python's version and each of :data:`PACKAGES`' (``"not installed"``
    where it is absent), read from the installed distributions: nothing is
    imported.

    Returns
    -------
    dict
        ``python`` then each package's name, in :data:`PACKAGES`' order.
    """
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def run(args: argparse.Namespace) -> int:
    """Runs ``fastdecode info``: prints :func:`fastdecode.info`'s entries
    (its ``version`` as ``fastdecode``) then :func:`versions`', one ``key
    value`` line each, or with ``--json`` one JSON object of them all.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line (``--json``).

    Returns
    -------
    int
        The exit status, always 0.
    """
    details = {**info(), **versions()}
    if args.json:
        print(json.dumps(details, indent=2))
    else:
        lines = {("fastdecode" if key == "version" else key): value
                 for key, value in details.items()}  # whose version it is
        width = max(map(len, lines))
        for key, value in lines.items():
            print(f"{key:<{width}}  {value}")
    return 0


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode info``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")


DESCRIPTION = ("Prints the fastdecode version, the libjpeg-turbo it runs with and whether its "
               "SIMD code is in use, as the running library reports them, then the versions "
               "of Python, numpy, tqdm, Pillow, torch and torchvision ('not installed' for "
               "those that are not).")
EPILOG = "examples:\n  fastdecode info\n  fastdecode info --json > fastdecode-info.json\n"
register = subcommand("info", run, _options, description=DESCRIPTION, epilog=EPILOG)
