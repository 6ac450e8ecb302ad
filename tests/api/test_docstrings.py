"""Every public name has a complete docstring, in one style (NumPy's sections).

Walks the ``__all__`` of the public modules (``helpers.public_api.MODULES``):
each function, class, public method and property fastdecode defines has a
summary line; a callable's parameters are each named in its ``Parameters``
section (a class's in the class docstring, where its ``__init__`` is
defined); a function that returns something has ``Returns``; the sections
are NumPy's (``Parameters`` over a line of dashes). The native decoders'
docstrings are the stubs' (``_native.pyi``, what documentation tools read),
word for word, and the stubs' defaults are the binding's.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
from pathlib import Path

import pytest

import fastdecode as fd
from fastdecode._options import BMP_OPTIONS, DEFAULTS

from helpers.public_api import MODULES

SECTIONS = ("Parameters", "Returns", "Yields", "Raises", "Warns", "Attributes", "Examples",
            "Notes", "See Also", "Methods")
# Functions that raise nothing of their own (every other public function has a Raises section).
RAISES_NOTHING = {"fastdecode.info", "fastdecode.datasets.is_image_file",
                  "fastdecode.datasets.has_file_allowed_extension",
                  "fastdecode.errors.file_error",  # returns the error it builds
                  "fastdecode.worker_init_fn"}  # a pool or kernel that says no is left as it is


# Not yet in the NumPy style with every parameter named (issue 31: done, none left; a name
# added here is xfailed). strict: one documented fails here until removed.
PENDING: set[str] = set()


def _public() -> dict[str, object]:
    """'module.name' -> object, for every name in the public modules' __all__
    that fastdecode defines (re-exports of torchvision's are its own business)."""
    names, seen = {}, set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen or not callable(obj):
                continue  # re-exported under a shorter path already; constants
            if getattr(obj, "__module__", "").startswith("fastdecode"):
                seen.add(id(obj))
                names[f"{module_name}.{name}"] = obj
    return names


PUBLIC = _public()


def _members(cls: type) -> dict[str, object]:
    """The public methods and properties fastdecode classes in ``cls``'s MRO define."""
    members: dict[str, object] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("fastdecode"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in members:
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property) or inspect.isfunction(value):
                members[name] = value
    return members


def _all_members() -> dict[str, tuple[type, object]]:
    """'class path.member' -> (class, member), each member once (under the
    first public class that has it: a base's methods are the subclasses' too)."""
    members, seen = {}, set()
    for where, cls in PUBLIC.items():
        if not inspect.isclass(cls) or issubclass(cls, enum.Enum):
            continue
        for name, value in _members(cls).items():
            if id(value) not in seen:
                seen.add(id(value))
                members[f"{where}.{name}"] = (cls, value)
    return members


MEMBERS = _all_members()


def sections(doc: str) -> dict[str, str]:
    """NumPy-style sections of a docstring: title -> body ('' -> the text before them)."""
    parts: dict[str, str] = {}
    title, lines = "", []
    rows = doc.splitlines()
    i = 0
    while i < len(rows):
        if rows[i].strip() in SECTIONS and i + 1 < len(rows) and re.fullmatch(r"\s*-{3,}\s*",
                                                                                rows[i + 1]):
            parts[title] = "\n".join(lines)
            title, lines = rows[i].strip(), []
            i += 2
            continue
        lines.append(rows[i])
        i += 1
    parts[title] = "\n".join(lines)
    return parts


def documented_names(body: str) -> set[str]:
    """The names a Parameters/Attributes section documents: its unindented
    'name : type' or 'name' lines ('a, b : int' names both)."""
    names = set()
    for line in body.splitlines():
        if not line or line[0].isspace():
            continue
        head = line.split(" : ")[0]
        for name in head.split(","):
            names.add(name.strip().lstrip("*"))
    return names


def parameters(obj) -> list[str]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # pragma: no cover - every public callable has one
        return []
    return [p.name for p in sig.parameters.values() if p.name not in ("self", "cls")]


def _init_owner(cls: type) -> type:
    """The class whose docstring documents ``cls``'s constructor: the first in
    the MRO that defines ``__init__`` (or ``__new__``), when fastdecode's; else ``cls``."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass) or "__new__" in vars(klass):
            return klass if klass.__module__.startswith("fastdecode") else cls
    return cls  # pragma: no cover


def _check(where: str, obj, doc: str | None, params: list[str], returns: bool) -> None:
    assert doc and doc.strip(), f"{where} has no docstring"
    summary = doc.strip().splitlines()[0]
    assert summary.strip() and not summary.startswith(" "), f"{where}: no summary line"
    parts = sections(inspect.cleandoc(doc))
    for title in parts:
        assert title == "" or title in SECTIONS, f"{where}: unknown section {title!r}"
    if params:
        assert "Parameters" in parts, f"{where}: no Parameters section for {params}"
        missing = [p for p in params if p not in documented_names(parts["Parameters"])]
        assert not missing, f"{where}: parameters not documented: {missing}"
    if returns:
        assert "Returns" in parts or "Yields" in parts, f"{where}: no Returns section"


def _returns_something(fn) -> bool:
    annotation = inspect.signature(fn).return_annotation
    return annotation not in (None, "None", inspect.Signature.empty) or \
        annotation is inspect.Signature.empty and not inspect.isclass(fn)


@pytest.mark.parametrize("where", sorted(PUBLIC))
def test_every_public_name_has_a_complete_docstring(where):
    obj = PUBLIC[where]
    if where in PENDING:
        with pytest.raises(AssertionError):  # strict: a finished one must leave PENDING
            _complete(where, obj)
        pytest.xfail("docstring not yet complete (PENDING)")
    _complete(where, obj)


def _complete(where: str, obj) -> None:
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum):
            doc = obj.__doc__
            _check(where, obj, doc, [], returns=False)
            assert "Attributes" in sections(inspect.cleandoc(doc)), f"{where}: members undocumented"
            return
        owner = _init_owner(obj)
        params = parameters(obj)
        if issubclass(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple: its fields
            assert set(obj._fields) <= documented_names(
                sections(inspect.cleandoc(obj.__doc__ or "")).get("Attributes", "")), where
            params = []
        _check(where, obj, obj.__doc__, [], returns=False)
        if params:
            _check(f"{where} (constructor, documented by {owner.__qualname__})", owner,
                   owner.__doc__, params, returns=False)
        return
    _check(where, obj, obj.__doc__, parameters(obj), returns=_returns_something(obj))
    if where not in RAISES_NOTHING:
        assert "Raises" in sections(inspect.cleandoc(obj.__doc__)), f"{where}: no Raises section"


@pytest.mark.parametrize("where", sorted(MEMBERS))
def test_every_public_method_and_property_has_a_docstring(where):
    cls, value = MEMBERS[where]
    if where in PENDING:
        with pytest.raises(AssertionError):  # strict: a finished one must leave PENDING
            _member_complete(where, value)
        pytest.xfail("docstring not yet complete (PENDING)")
    _member_complete(where, value)


def _member_complete(where: str, value) -> None:
    if isinstance(value, property):
        _check(where, value, value.__doc__, [], returns=False)
        return
    _check(where, value, value.__doc__, parameters(value), returns=_returns_something(value))


def test_the_walk_finds_the_api():
    assert {"fastdecode.decode_jpeg", "fastdecode.read_header", "fastdecode.fuse",
            "fastdecode.FastImageFolder", "fastdecode.FastLoader",
            "fastdecode.ImageFileError", "fastdecode.transforms.FusedTransform"} <= set(PUBLIC)
    assert "fastdecode.transforms.FusedTransform.decode_into" in MEMBERS
    assert "fastdecode.transforms.InterpolationMode" not in PUBLIC  # torchvision's own


def test_the_section_parser_reads_numpy_style():
    doc = "Summary.\n\nParameters\n----------\na, b : int\n    Two.\n*args\n    More.\n\nReturns\n" \
          "-------\nint\n    The sum.\n"
    parts = sections(doc)
    assert set(parts) == {"", "Parameters", "Returns"}
    assert documented_names(parts["Parameters"]) == {"a", "b", "args"}


# --------------------------------------------------------------------------
# The stubs: what documentation tools read for the native functions.

STUB = ast.parse((Path(fd.__file__).parent / "_native.pyi").read_text())
STUB_OPTIONS = {"decode_jpeg": list(DEFAULTS), "decode_bmp": list(BMP_OPTIONS)}


def _stub(name: str) -> ast.FunctionDef:
    return next(n for n in STUB.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", sorted(STUB_OPTIONS))
def test_the_stub_docstring_is_the_binding_docstring(name):
    stub_doc = ast.get_docstring(_stub(name))
    assert stub_doc == inspect.cleandoc(getattr(fd._native, name).__doc__)


@pytest.mark.parametrize("name", sorted(STUB_OPTIONS))
def test_the_stub_defaults_are_the_binding_defaults(name):
    fn = _stub(name)
    defaults = {a.arg: ast.literal_eval(d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)}
    assert defaults == {k: DEFAULTS[k] for k in STUB_OPTIONS[name]}


def test_decode_jpeg_says_what_each_option_means():
    doc = fd.decode_jpeg.__doc__
    assert "(top, left, height, width)" in doc and "full-resolution" in doc
    for option in ("fast", "strict", "exif", "out", "scale", "mode", "min_size", "size"):
        assert re.search(rf"^\s*{option} : ", doc, re.M), option
    assert "torch.uint8" in doc  # out= takes a CPU tensor


def test_fuse_quotes_the_tested_bound():
    helpers_fusion = pytest.importorskip("helpers.fusion")
    doc = fd.fuse.__doc__
    assert "see above" not in doc
    assert f"{helpers_fusion.MIN_PSNR:.0f} dB" in doc and "42 dB" not in doc
