"""Lazy module attributes (PEP 562): public names whose defining module is
imported on first access, so that importing a package stays light (no torch,
no torchvision until a name that needs them is used)."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

__all__ = ["lazy_attributes"]


def lazy_attributes(namespace: dict[str, Any], table: Mapping[str, str]
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a module whose globals are
    ``namespace``: ``table`` maps each lazy name to the module that defines
    it. A name is imported once, then kept in ``namespace`` (later accesses
    never reach ``__getattr__``); any other name raises the AttributeError
    Python raises for a missing module attribute."""
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
