"""The ``fastdecode`` command line (also ``python -m fastdecode``): builds the
parser and runs the chosen subcommand.

Only the module of the command that runs is imported: the others are
registered by name and help line (``fastdecode.cli.COMMANDS``), which is all
``fastdecode --help`` shows. ``build_parser()`` with no argument builds every
command's full parser. Decision record: docs/decisions/cli.md.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from fastdecode._version import __version__
from fastdecode.cli import COMMANDS

__all__ = ["build_parser", "main"]

EPILOG = """\
examples:
  fastdecode info
  fastdecode convert ~/data/train /fast/train-bmp --to bmp
  fastdecode convert ~/data/train /fast/train-wds --to wds   # WebDataset shards
  fastdecode convert --help
  fastdecode doctor --num-workers 8 --batch-size 256
  fastdecode tune --data ~/data/train --batch-size 256 --step-time 0.25
"""


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that command gets its full parser (its
    module is imported) and the others their name and help line."""
    parser = argparse.ArgumentParser(
        prog="fastdecode",
        description="Fast JPEG/BMP decoding for PyTorch data loading: tools.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fastdecode {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(command.module).register(subparsers)
        else:
            subparsers.add_parser(name, help=command.help)
    return parser


def chosen_command(argv: Sequence[str]) -> str:
    """The command ``argv`` names: its first word that is not an option (the
    top-level options take no value). "" when there is none."""
    return next((arg for arg in argv if not arg.startswith("-")), "")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line in ``argv`` (default: sys.argv[1:]); returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(only=chosen_command(argv)).parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: argparse exits, main returns
        return exc.code if isinstance(exc.code, int) else 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
