"""Lazy module attributes (PEP 562): public names whose defining module is
imported on first access, so that importing a package stays light (no torch,
no torchvision until a name that needs them is used). A name whose module
needs a package that is not installed raises ModuleNotFoundError naming the
name and the extra that installs it (:func:`needs_extra`)."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Optional

__all__ = ["EXTRAS", "lazy_attributes", "needs_extra"]

# A package some public names need -> the extra of pyproject.toml that installs it.
EXTRAS = {"torch": "torch"}


def needs_extra(exc: ModuleNotFoundError, what: str) -> Optional[ModuleNotFoundError]:
    """The error to raise for ``exc``, which importing ``what`` (a public
    name or module, as the user wrote it) raised: for a package of
    :data:`EXTRAS`, one that names ``what``, the package and the install
    line of its extra; None for any other (``exc`` stands)."""
    package = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(package)
    if extra is None:
        return None
    return ModuleNotFoundError(
        f"{what} needs {package}, which is not installed: pip install 'fastdecode[{extra}]' "
        f"(from a checkout: pip install '.[{extra}]')", name=exc.name)


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
        try:  # the getattr too: ``source`` may be a package with lazy names of its own
            value = getattr(importlib.import_module(source), name)
        except ModuleNotFoundError as exc:
            error = needs_extra(exc, f"{module}.{name}")
            if error is None:
                raise
            raise error from exc
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
