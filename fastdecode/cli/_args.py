"""Argument helpers shared by the subcommands: adding a subcommand's parser
and the validating ``type=`` functions of its numeric options."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from fastdecode.cli import COMMANDS

__all__ = ["add_command", "count", "number"]


def add_command(subparsers: argparse._SubParsersAction, name: str,
                **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``, with its help line from ``COMMANDS``
    and its description and epilog printed as written."""
    return subparsers.add_parser(name, help=COMMANDS[name].help,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


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
