"""Argument helpers shared by the subcommands: the ``register`` each
subcommand's module hands ``fastdecode.cli.__main__`` (:func:`subcommand`),
and the validating ``type=`` functions of its numeric options. Decision
record: docs/decisions/cli.md."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from fastdecode.cli import COMMANDS

__all__ = ["add_command", "count", "number", "subcommand"]

Register = Callable[[argparse._SubParsersAction], None]


def add_command(subparsers: argparse._SubParsersAction, name: str,
                **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``, with its help line from ``COMMANDS``
    and its description and epilog printed as written."""
    return subparsers.add_parser(name, help=COMMANDS[name].help,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def subcommand(name: str, run: Callable[[argparse.Namespace], int],
               options: Callable[[argparse.ArgumentParser], None], *, description: str,
               epilog: str) -> Register:
    """The ``register(subparsers)`` of subcommand ``name``: it adds the
    subcommand's parser (:func:`add_command`), its options (``options(parser)``)
    and its ``run`` (``args.run(args)`` runs it)."""
    def register(subparsers: argparse._SubParsersAction) -> None:
        parser = add_command(subparsers, name, description=description, epilog=epilog)
        options(parser)
        parser.set_defaults(run=run)

    register.__doc__ = f"""Adds the ``{name}`` subcommand to ``subparsers``: its parser, its
    options and its ``run``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The subcommands of the ``fastdecode`` parser.
    """
    return register


def number(kind: Callable[[str], Any], minimum: float,
           strict: bool = False) -> Callable[[str], Any]:
    """A ``type=`` that parses ``kind`` and refuses values below ``minimum``
    (or equal to it, when ``strict``) with argparse's usage error."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if strict else '>='} {minimum}, got {text}")
        return value
    return parse


def count(minimum: int) -> Callable[[str], int]:
    """A ``type=`` for an integer count of at least ``minimum``."""
    return number(int, minimum)
