"""The package's layout holds (docs/architecture.md, docs/decisions/layout.md):
imports between fastdecode's modules go one way (no circle, lazy imports
inside functions counted, the ``TYPE_CHECKING`` block aside), each subpackage
imports only the layers below it, modules and subpackages stay small enough to
read, no module swaps itself in ``sys.modules``, and only the reader factory
asks whether a root is a URL."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fastdecode"

MAX_MODULE_LINES = 600
MAX_SUBPACKAGE_LINES = 4000
MAX_SUBPACKAGE_MODULES = 14
MAX_IS_URL_CALLS = 4

# What each subpackage may import, besides itself and the decode core (the
# top-level private modules, ``api`` and ``errors``): the layers below it.
LAYERS = {
    "augment": set(),
    "transforms": {"augment"},
    "storage": set(),
    "batching": {"transforms", "augment"},
    "datasets": {"transforms", "augment", "storage", "batching"},
    "loader": {"transforms", "augment", "storage", "batching"},
    "targets": {"transforms", "augment"},
    "conversion": {"storage"},
    "integrations": {"transforms", "augment", "storage", "batching", "datasets", "loader",
                     "conversion", "targets"},
    "cli": {"transforms", "augment", "storage", "batching", "datasets", "loader", "conversion",
            "integrations", "targets"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@lru_cache(maxsize=None)
def known_modules() -> frozenset[str]:
    """The Python modules and the extension (``_native``, named by its stub)."""
    return frozenset(modules()) | {_module_name(p) for p in PACKAGE.rglob("*.pyi")}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks (imports for type checkers only)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@lru_cache(maxsize=None)
def edges() -> dict[str, set[str]]:
    """Module -> the fastdecode modules it imports (anywhere in it)."""
    known = known_modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_lines(tree)
        out: set[str] = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, path.name == "__init__.py", node)
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                           for alias in node.names]
            elif isinstance(node, ast.Dict):  # a lazy-attribute table: name -> its module
                targets = [v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
                targets = [a.value for a in node.args if isinstance(a, ast.Constant)]
            else:
                continue
            out.update(t for t in targets if t in known and t != name)
        graph[name] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else "core"


def test_the_import_graph_has_no_circle():
    cycles = _cycles(edges())
    assert not cycles, "import circles (lazy imports counted):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_subpackage_imports_only_the_layers_below_it(layer):
    allowed = LAYERS[layer] | {layer, "core"}
    wrong = sorted(f"{src} -> {dst}" for src, dsts in edges().items() if _layer(src) == layer
                   for dst in dsts if _layer(dst) not in allowed)
    assert not wrong, f"{layer} imports above itself:\n" + "\n".join(wrong)


def test_the_core_imports_no_subpackage():
    """The top-level modules below the faces (the decode core) import no subpackage;
    the faces (the package's ``__init__``, ``ray``, ``webdataset``) may."""
    faces = {"fastdecode", "fastdecode.ray", "fastdecode.webdataset", "fastdecode.__main__"}
    wrong = sorted(f"{src} -> {dst}" for src, dsts in edges().items()
                   if _layer(src) == "core" and src not in faces
                   for dst in dsts if _layer(dst) != "core")
    assert not wrong, "the core imports a subpackage:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_is_at_most_600_lines(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines"


def _subpackages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("package", _subpackages(), ids=lambda p: p.name)
def test_a_subpackage_stays_small(package):
    files = sorted(package.glob("*.py"))
    lines = sum(len(p.read_text().splitlines()) for p in files)
    assert len(files) <= MAX_SUBPACKAGE_MODULES, f"{package.name}: {len(files)} modules"
    assert lines <= MAX_SUBPACKAGE_LINES, f"{package.name}: {lines} lines"


def test_no_module_swaps_itself_in_sys_modules():
    swaps = [name for name, path in modules().items()
             if re.search(r"sys\.modules\[\s*__name__\s*\]\s*=", path.read_text())]
    assert not swaps


def test_only_the_reader_factory_asks_whether_a_root_is_a_url():
    calls = {name: len(re.findall(r"\bis_url\(", path.read_text())) for name, path in modules().items()}
    calls = {name: n for name, n in calls.items() if n}
    assert sum(calls.values()) <= MAX_IS_URL_CALLS, calls


def test_the_graph_sees_lazy_imports():
    """The checks above would pass vacuously if the walk missed imports inside
    functions: fastdecode's package face imports its datasets only lazily."""
    graph = edges()
    assert "fastdecode.datasets" in graph["fastdecode"]  # lazy_attributes' table
    assert "fastdecode.datasets._folder" in graph["fastdecode.datasets"]
    assert "fastdecode.integrations._wds_dataset" in graph["fastdecode.webdataset"]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
