"""A text listing of fastdecode's public API, compared by tests/api/test_public_api.py
with the recorded tests/api/public_api.txt.

Lists every name in the ``__all__`` of the public modules (its kind and
signature; for classes fastdecode defines, their public methods and
properties) and every CLI subcommand with its options. Regenerate after a
deliberate API change: ``python -m helpers.public_api > tests/api/public_api.txt``
from ``tests/`` (or with ``tests`` on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys

MODULES = ("fastdecode", "fastdecode.errors", "fastdecode.transforms", "fastdecode.datasets",
           "fastdecode.loader", "fastdecode.ray", "fastdecode.webdataset", "fastdecode.targets")


class _Named:
    """A function or class default, shown by its qualified name (its repr has an address)."""

    def __init__(self, obj) -> None:
        self.text = f"{obj.__module__}.{obj.__qualname__}"

    def __repr__(self) -> str:
        return self.text


def _default(value):
    named = callable(value) and value is not inspect.Parameter.empty and hasattr(value, "__qualname__")
    return _Named(value) if named else value


def _signature(obj) -> str:
    """Parameter names, kinds and defaults; annotations are left out (typing
    them better does not change the API a caller sees)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=empty, default=_default(p.default))
              for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=empty))


def _own_members(cls: type) -> list[str]:
    """Public methods and properties defined by fastdecode classes in cls's MRO."""
    lines = []
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("fastdecode"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, property):
                lines.append(f"    .{name} (property)")
            elif isinstance(value, (staticmethod, classmethod)):
                lines.append(f"    .{name}{_signature(value.__func__)}")
            elif callable(value):
                lines.append(f"    .{name}{_signature(value)}")
            else:
                lines.append(f"    .{name} = {value!r}")
    return sorted(lines)


def _describe(module_name: str, name: str) -> list[str]:
    module = importlib.import_module(module_name)
    value = getattr(module, name)
    where = f"{module_name}.{name}"
    if inspect.isclass(value):
        lines = [f"{where}: class{_signature(value)}"]
        return lines + _own_members(value)
    if callable(value):
        return [f"{where}: function{_signature(value)}"]
    if inspect.ismodule(value):
        return [f"{where}: module"]
    return [f"{where}: {type(value).__name__}" + (f" = {value!r}" if name != "__version__" else "")]


def _parser() -> argparse.ArgumentParser:
    try:
        from fastdecode.cli.__main__ import build_parser
    except ImportError:  # the layout before fastdecode.cli
        from fastdecode.__main__ import build_parser  # type: ignore[no-redef]
    return build_parser()


def _cli() -> list[str]:
    lines = []
    parser = _parser()
    subactions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for sub in subactions:
        for command in sorted(sub.choices):
            lines.append(f"fastdecode {command}")
            for action in sub.choices[command]._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                names = "/".join(action.option_strings) or action.dest
                lines.append(f"    {names} nargs={action.nargs} default={action.default!r} "
                             f"choices={action.choices!r}")
    return lines


def listing() -> str:
    lines = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names = list(module.__all__)
        lines.append(f"# {module_name}.__all__ = {sorted(names)}")
        for name in sorted(names):
            lines += _describe(module_name, name)
    lines += ["# command line"] + _cli()
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(listing())
