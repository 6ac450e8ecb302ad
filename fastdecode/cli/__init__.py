"""The ``fastdecode`` command line: the table of subcommands (name, module,
one-line help). Each module is imported only when its command runs; see
``fastdecode.cli.__main__``. Decision record: docs/decisions/cli.md."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COMMANDS", "Command"]


class Command(NamedTuple):
    """One subcommand of the ``fastdecode`` command line.

    Attributes
    ----------
    module : str
        The module that implements it: its ``register(subparsers)`` adds the
        full parser and sets ``run``.
    help : str
        The line ``fastdecode --help`` lists for it.
    """

    module: str  # defines register(subparsers), which adds the full parser and sets run
    help: str  # the line `fastdecode --help` lists


# In the order `fastdecode --help` lists them.
COMMANDS: dict[str, Command] = {
    "info": Command("fastdecode.cli.info",
                    "versions of fastdecode, its libjpeg-turbo and the libraries it works with"),
    "convert": Command("fastdecode.cli.convert",
                       "re-encode an ImageFolder tree as BMP, JPEG or WebDataset shards"),
    "bench": Command("fastdecode.cli.bench",
                     "benchmark decoding, fused transforms and loaders against their peers"),
    "doctor": Command("fastdecode.cli.doctor", "check this machine for what stalls data loading"),
    "tune": Command("fastdecode.cli.tune",
                    "measure decode speed on your data and recommend num_workers"),
}
