"""``fastdecode info``: the version and capabilities of the installed library."""

from __future__ import annotations

import argparse
import json

from fastdecode.api import info
from fastdecode.cli._args import subcommand

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    """Runs ``fastdecode info``: prints :func:`fastdecode.info`'s entries, one
    ``key  value`` line each, or with ``--json`` one JSON object.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line (``--json``).

    Returns
    -------
    int
        The exit status, always 0.
    """
    details = info()
    if args.json:
        print(json.dumps(details, indent=2))
    else:
        width = max(map(len, details))
        for key, value in details.items():
            print(f"{key:<{width}}  {value}")
    return 0


def _options(parser: argparse.ArgumentParser) -> None:
    """The arguments and options of ``fastdecode info``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")


DESCRIPTION = ("Prints the fastdecode version, the libjpeg-turbo it runs with and its "
               "capabilities, as the running library reports them.")
EPILOG = "examples:\n  fastdecode info\n  fastdecode info --json > fastdecode-info.json\n"
register = subcommand("info", run, _options, description=DESCRIPTION, epilog=EPILOG)
