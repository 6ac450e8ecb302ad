"""The ``fastdecode`` command line (also ``python -m fastdecode``).

Every subcommand lives in its own module and plugs in through a
``register(subparsers)`` function that adds its parser and sets ``run``, the
function that takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from fastdecode.cli import bench, convert
from fastdecode.cli import doctor, tune
from fastdecode._version import __version__
from fastdecode.api import info

EPILOG = """\
examples:
  fastdecode info
  fastdecode convert ~/data/train /fast/train-bmp --to bmp
  fastdecode convert --help
  fastdecode doctor --num-workers 8 --batch-size 256
  fastdecode tune --data ~/data/train --batch-size 256 --step-time 0.25
"""


def run_info(args: argparse.Namespace) -> int:
    details = info()
    if args.json:
        print(json.dumps(details, indent=2))
    else:
        width = max(map(len, details))
        for key, value in details.items():
            print(f"{key:<{width}}  {value}")
    return 0


def register_info(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info",
        help="versions and capabilities of the installed library",
        description="Prints the fastdecode version, the libjpeg-turbo it runs with and its "
        "capabilities, as the running library reports them.",
        epilog="examples:\n  fastdecode info\n  fastdecode info --json > fastdecode-info.json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run_info)


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    register_info,
    convert.register,
    bench.register,
    doctor.register,
    tune.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastdecode",
        description="Fast JPEG/BMP decoding for PyTorch data loading: tools.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fastdecode {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line in ``argv`` (default: sys.argv[1:]); returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: argparse exits, main returns
        return exc.code if isinstance(exc.code, int) else 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
