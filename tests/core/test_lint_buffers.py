"""Static check: every Py_buffer the Cython layer acquires is released on
every path.

Acquisitions are `PyObject_GetBuffer(obj, &view, ...)` and calls of
*acquiring helpers*: functions that acquire into a `Py_buffer *` parameter
and hand it to their caller (found automatically, transitively: get_input,
prepare_out). For a view acquired into a local, one of these must hold:

  A. the acquisition is followed by `try:` ... `finally:` whose finally
     releases the view (only statements that cannot raise may come between);
  C. an explicit `PyBuffer_Release(&view)` follows, and nothing between the
     acquisition and it can raise, returns or raises.

A helper acquiring into its parameter must release before every `raise`
after the acquisition, and nothing between the acquisition and its
`return` (the hand-over) may raise unless an `except` clause that releases
and re-raises (B) covers it. An acquisition inside the very `try` whose
`finally` releases the view is an error: a failed acquisition would release
a view it never got.

"Cannot raise" is judged conservatively: a statement may raise if it calls
anything but a C function declared in a `cdef extern` block of the package's
.pxd/.pyx/.pxi files, a `noexcept` cdef function, or PyBuffer_Release; every
method call (`x.f(...)`) may raise. `with nogil:` blocks contain only C.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fastdecode"

TRIPLE_DOUBLE = '"' * 3
TRIPLE_SINGLE = "'" * 3
STRING = re.compile(
    r"(?:\b[rRbBuUfF]{1,2})?(?:"
    + TRIPLE_DOUBLE + r"[\s\S]*?" + TRIPLE_DOUBLE + "|"
    + TRIPLE_SINGLE + r"[\s\S]*?" + TRIPLE_SINGLE + "|"
    + r'"(?:\\.|[^"\\\n])*"' + "|"
    + r"'(?:\\.|[^'\\\n])*'"
    + ")"
)
CALL = re.compile(r"(\.?)\b([A-Za-z_]\w*)\s*\(")
KEYWORDS_NOT_CALLS = {"if", "elif", "while", "for", "in", "and", "or", "not", "return", "with",
                      "except", "raise", "assert", "del", "print", "is", "lambda", "yield",
                      "nogil", "gil", "sizeof"}


@dataclass
class Stmt:
    line: int
    indent: int
    text: str


@dataclass
class Func:
    name: str
    params: list[str]
    body: list[Stmt]
    noexcept: bool
    file: str


@dataclass
class Violation:
    file: str
    line: int
    func: str
    view: str
    what: str
    text: str = field(default="")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.func}: view '{self.view}': {self.what}: {self.text}"


def blank_strings(src: str) -> str:
    """String literals become "" (keeping their newlines, so lines stay put)."""
    return STRING.sub(lambda m: '""' + "\n" * m.group(0).count("\n"), src)


def statements(src: str) -> list[Stmt]:
    """Logical statements: comments dropped, bracketed continuations joined."""
    out: list[Stmt] = []
    pending = None
    depth = 0
    for n, raw in enumerate(blank_strings(src).splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if pending is None:
            pending = Stmt(n, len(line) - len(line.lstrip()), line.strip())
        else:
            pending.text += " " + line.strip()
        depth += line.count("(") + line.count("[") + line.count("{")
        depth -= line.count(")") + line.count("]") + line.count("}")
        if depth <= 0 and not line.endswith("\\"):
            depth = 0
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


DEF = re.compile(r"^(?:async\s+)?(?:def|cpdef|cdef)\s[^=]*?\b([A-Za-z_]\w*)\s*\((.*)\)[^()]*:$")


def split_params(params: str) -> list[str]:
    names, depth, cur = [], 0, ""
    for ch in params + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            item = cur.split("=", 1)[0].strip()
            m = re.search(r"([A-Za-z_]\w*)\s*$", item)
            names.append(m.group(1) if m else "")
            cur = ""
        else:
            cur += ch
    return names


def functions(src: str, file: str) -> list[Func]:
    stmts = statements(src)
    out = []
    for i, s in enumerate(stmts):
        m = DEF.match(s.text)
        if not m:
            continue
        body = []
        for t in stmts[i + 1:]:
            if t.indent <= s.indent:
                break
            body.append(t)
        out.append(Func(m.group(1), split_params(m.group(2)), body,
                        "noexcept" in s.text.split(")")[-1], file))
    return out


def extern_c_functions(src: str) -> set[str]:
    """Names declared inside `cdef extern from` blocks."""
    names: set[str] = set()
    stmts = statements(src)
    for i, s in enumerate(stmts):
        if not s.text.startswith("cdef extern"):
            continue
        for t in stmts[i + 1:]:
            if t.indent <= s.indent:
                break
            m = re.search(r"\b([A-Za-z_]\w*)\s*\(", t.text)
            if m and not t.text.startswith(("ctypedef", "cdef struct", "cdef enum")):
                names.add(m.group(1))
    return names


def release_target(text: str) -> str | None:
    m = re.match(r"^PyBuffer_Release\(\s*&?\s*([A-Za-z_]\w*)\s*\)$", text)
    return m.group(1) if m else None


def call_args(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' is at text[start]."""
    depth, cur, args = 0, "", []
    for ch in text[start:]:
        if ch in "([{":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(cur.strip())
                return args
        if ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return args


class Checker:
    def __init__(self, sources: dict[str, str]):
        self.funcs: list[Func] = []
        self.safe_calls = {"PyBuffer_Release"}
        for name, src in sources.items():
            self.funcs += functions(src, name)
            self.safe_calls |= extern_c_functions(src)
        self.safe_calls |= {f.name for f in self.funcs if f.noexcept}
        self.safe_calls.discard("PyObject_GetBuffer")
        # helper name -> index of its Py_buffer* parameter it acquires into
        self.helpers: dict[str, int] = {}
        changed = True
        while changed:
            changed = False
            for f in self.funcs:
                if f.name in self.helpers:
                    continue
                for _, _, view, _ in self.acquisitions(f):
                    if view in f.params:
                        self.helpers[f.name] = f.params.index(view)
                        changed = True
                        break

    def acquisitions(self, f: Func):
        """(index, stmt, view name, is_pointer_param) of each acquisition in f."""
        for i, s in enumerate(f.body):
            for m in CALL.finditer(s.text):
                if m.group(1):
                    continue
                name = m.group(2)
                if name == "PyObject_GetBuffer":
                    pos = 1
                elif name in self.helpers:
                    pos = self.helpers[name]
                else:
                    continue
                args = call_args(s.text, m.end() - 1)
                if len(args) <= pos:
                    continue
                arg = args[pos]
                view = re.match(r"^&?\s*([A-Za-z_]\w*)$", arg)
                if view:
                    yield i, s, view.group(1), not arg.startswith("&")

    def may_raise(self, text: str) -> bool:
        if re.match(r"^(try|else|finally|with nogil|cdef\s+[^(=]*)\s*:?$", text):
            return False
        for m in CALL.finditer(text):
            dot, name = m.groups()
            if dot:
                return True  # a method call on a Python object
            if name in KEYWORDS_NOT_CALLS or name in self.safe_calls:
                continue
            return True
        return False

    def try_clauses(self, body: list[Stmt], i: int) -> dict[str, list[tuple[int, list[Stmt]]]]:
        """Clauses of the `try:` at body[i]: {'except': [(line, stmts)], 'finally': [...]}."""
        d = body[i].indent
        clauses: dict[str, list] = {"body": [], "except": [], "else": [], "finally": []}
        kind, cur = "body", []
        for t in body[i + 1:]:
            if t.indent < d or (t.indent == d and not re.match(r"^(except\b|else:|finally:)", t.text)):
                break
            if t.indent == d:
                clauses[kind].append(cur)
                kind = "except" if t.text.startswith("except") else t.text[:-1]
                cur = [t]
                continue
            cur.append(t)
        clauses[kind].append(cur)
        return clauses

    def releases_in(self, stmts: list[Stmt], view: str) -> bool:
        return any(release_target(t.text) == view for t in stmts)

    def check(self) -> list[Violation]:
        out: list[Violation] = []
        for f in self.funcs:
            for i, _, view, pointer in self.acquisitions(f):
                out += self.check_one(f, i, view, helper=pointer and view in f.params)
        return out

    def enclosing_tries(self, body: list[Stmt], i: int) -> list[int]:
        """Indexes of the `try:` statements whose bodies hold body[i], innermost first."""
        out = []
        indent = body[i].indent
        for j in range(i - 1, -1, -1):
            t = body[j]
            if t.indent < indent:
                if t.text == "try:":
                    out.append(j)
                elif re.match(r"^(except\b|else:|finally:)", t.text):
                    # inside a handler: skip back over this try statement's clauses
                    indent = t.indent + 1
                    continue
                indent = t.indent
        return out

    def check_one(self, f: Func, i: int, view: str, helper: bool) -> list[Violation]:
        body = f.body
        v = lambda s, what: Violation(f.file, s.line, f.name, view, what, s.text)  # noqa: E731
        for t in self.enclosing_tries(body, i):
            if any(self.releases_in(c, view) for c in self.try_clauses(body, t)["finally"]):
                return [v(body[i], "acquired inside the try whose finally releases it "
                                   "(a failed acquisition would be released)")]
        level = body[i].indent
        released_below: int | None = None  # released inside a nested block at this indent
        found: list[Violation] = []  # every problem on the way, not just the first
        k = i + 1
        while k < len(body):
            s = body[k]
            if s.indent < level and s.text.startswith("except"):
                # a handler of a try around the acquisition: reached only when
                # the acquisition failed (anything after it that may raise was
                # reported on its own)
                k += 1
                while k < len(body) and body[k].indent > s.indent:
                    k += 1
                continue
            level = min(level, s.indent)
            if released_below is not None and s.indent < released_below:
                released_below = None
            if release_target(s.text) == view:
                if s.indent <= level:
                    return found
                released_below = s.indent
                k += 1
                continue
            if released_below is not None:
                k += 1
                continue
            if s.text == "try:":
                cl = self.try_clauses(body, k)
                if any(self.releases_in(c, view) for c in cl["finally"]):
                    return found
                if helper and any(self.releases_in(c, view) and any(x.text == "raise" for x in c)
                                  for c in cl["except"]
                                  if re.match(r"^except(\s+BaseException)?\s*:", c[0].text)):
                    # (B) covered: skip the try body and its handlers
                    last = max(x.line for c in cl["body"] + cl["except"] for x in c)
                    k = next((j for j in range(k + 1, len(body)) if body[j].line > last),
                             len(body))
                    continue
            if s.text.startswith("with nogil"):
                k += 1
                while k < len(body) and body[k].indent > s.indent:
                    k += 1
                continue
            ends_path = s.indent <= level  # nothing after it in this block runs
            if s.text == "raise" or s.text.startswith("raise "):
                found.append(v(s, "raises while the view is held"))
                if ends_path:
                    return found
            elif s.text == "return" or s.text.startswith("return "):
                if not helper:  # a helper's return hands the view to its caller
                    found.append(v(s, "returns while the view is held"))
                if ends_path:
                    return found
            elif self.may_raise(s.text):
                found.append(v(s, "may raise while the view is held, outside try/finally"))
            k += 1
        if not helper:
            found.append(v(body[i], "never released on the fall-through path"))
        return found


def check_sources(sources: dict[str, str]) -> list[Violation]:
    return Checker(sources).check()


def package_sources() -> dict[str, str]:
    files = sorted(PACKAGE.glob("*.pyx")) + sorted(PACKAGE.glob("*.pxi")) + \
        sorted(PACKAGE.glob("*.pxd"))
    return {p.name: p.read_text() for p in files}


# ---------------------------------------------------------------------------
# The package itself

# Functions with violations found in the package and reported
# (tests/fuzz/RESULTS.md), by (file, function). Remove an entry once fixed:
# this test then fails with "fixed", so the list cannot go stale.
KNOWN_UNFIXED: set[tuple[str, str]] = set()


def test_package_releases_every_buffer():
    sources = package_sources()
    assert "PyObject_GetBuffer" in "".join(sources.values())
    violations = check_sources(sources)
    new = [x for x in violations if (x.file, x.func) not in KNOWN_UNFIXED]
    assert not new, "buffer not released on every path:\n" + "\n".join(map(str, new))
    fixed = KNOWN_UNFIXED - {(x.file, x.func) for x in violations}
    assert not fixed, f"fixed: remove from KNOWN_UNFIXED: {sorted(fixed)}"


def test_removing_any_release_from_the_package_is_caught():
    """Mutation check of the checker on the real sources: delete each
    PyBuffer_Release line in turn; every deletion must be reported."""
    sources = package_sources()
    baseline = {str(x).split(": ", 1)[1] for x in check_sources(sources)}
    releases = [(name, n) for name, src in sources.items()
                for n, line in enumerate(src.splitlines())
                if line.strip().startswith("PyBuffer_Release(")]
    assert len(releases) >= 8
    for name, n in releases:
        lines = sources[name].splitlines()
        indent = lines[n][:len(lines[n]) - len(lines[n].lstrip())]
        lines[n] = indent + "pass"
        mutated = dict(sources, **{name: "\n".join(lines) + "\n"})
        found = {str(x).split(": ", 1)[1] for x in check_sources(mutated)}
        assert found - baseline, f"deleting {name}:{n + 1} ({sources[name].splitlines()[n].strip()}) " \
                                 f"went unnoticed"


def test_package_helpers_and_acquisitions_are_found():
    checker = Checker(package_sources())
    assert {"get_input", "prepare_out"} <= set(checker.helpers)
    acquiring = {f.name for f in checker.funcs if list(checker.acquisitions(f))}
    assert {"run_decode", "sniff", "read_native_header", "fill_out", "resize"} <= acquiring
    assert {"fd_plan", "fd_decode", "fd_sniff"} <= checker.safe_calls


# ---------------------------------------------------------------------------
# The checker on snippets: it must catch each way of getting it wrong.

PRELUDE = '''
cdef extern from "fd_common.h" nogil:
    int c_work(const void *p)

cdef int get_view(object data, Py_buffer *view) except -1:
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except BufferError:
        raise ValueError("not contiguous") from None
    return 0
'''

GOOD = {
    "try-finally": '''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    try:
        return bytes(data)
    finally:
        PyBuffer_Release(&view)
''',
    "c-only-then-release": '''
def f(data):
    cdef Py_buffer view
    cdef int r
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    r = c_work(<const void *>view.buf)
    with nogil:
        r = c_work(view.buf)
    PyBuffer_Release(&view)
    return r
''',
    "helper-releases-before-raise": '''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE)
    if view.len != 3:
        PyBuffer_Release(view)
        raise ValueError("size")
    return out
''',
    "helper-except-release-reraise": '''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE)
    try:
        check(out)
    except BaseException:
        PyBuffer_Release(view)
        raise
    return out
''',
    "nested-try": '''
def f(data, out):
    cdef Py_buffer a
    cdef Py_buffer b
    get_view(data, &a)
    try:
        get_view(out, &b)
        try:
            work(a, b)
        finally:
            PyBuffer_Release(&b)
    finally:
        PyBuffer_Release(&a)
''',
}

BAD = {
    "python-call-before-release": ('''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    n = len(data)
    PyBuffer_Release(&view)
''', "may raise while the view is held"),
    "finally-without-release": ('''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    try:
        work(view)
    finally:
        cleanup()
''', "may raise while the view is held"),
    "statement-between-acquire-and-try": ('''
def f(data):
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    x = str(data)
    try:
        work(view)
    finally:
        PyBuffer_Release(&view)
''', "may raise while the view is held"),
    "acquired-inside-the-try": ('''
def f(data):
    cdef Py_buffer view
    try:
        get_view(data, &view)
        work(view)
    finally:
        PyBuffer_Release(&view)
''', "acquired inside the try whose finally releases it"),
    "raise-without-release": ('''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    if c_work(view.buf):
        raise ValueError("bad")
    PyBuffer_Release(&view)
''', "raises while the view is held"),
    "return-without-release": ('''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    if c_work(view.buf):
        return None
    PyBuffer_Release(&view)
''', "returns while the view is held"),
    "never-released": ('''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)
    c_work(view.buf)
''', "never released on the fall-through path"),
    "released-on-one-branch-only": ('''
def f(data, flag):
    cdef Py_buffer view
    get_view(data, &view)
    if flag:
        PyBuffer_Release(&view)
''', "never released on the fall-through path"),
    "helper-raises-holding": ('''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE)
    if view.len != 3:
        raise ValueError("size")
    return out
''', "raises while the view is held"),
    "helper-method-call-holding": ('''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE | PyBUF_FORMAT)
    fmt = view.format.decode("ascii")
    return out
''', "may raise while the view is held"),
    "caller-of-derived-helper": ('''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE)
    return out

def f(out):
    cdef Py_buffer view
    arr = out_view(out, &view)
    return arr
''', "returns while the view is held"),
    "except-handler-without-reraise": ('''
cdef object out_view(object out, Py_buffer *view):
    PyObject_GetBuffer(out, view, PyBUF_WRITABLE)
    try:
        check(out)
    except Exception:
        PyBuffer_Release(view)
    return out
''', "may raise while the view is held"),
}


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GOOD])
def test_checker_accepts_correct_patterns(name):
    assert check_sources({"snippet.pyx": PRELUDE + GOOD[name]}) == []


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in BAD])
def test_checker_catches_broken_snippet(name):
    src, what = BAD[name]
    found = check_sources({"snippet.pyx": PRELUDE + src})
    assert found and {x.func for x in found} <= {"f", "out_view"}, found
    assert what in found[0].what, "\n".join(map(str, found))


def test_checker_ignores_strings_and_comments():
    src = PRELUDE + '''
def f(data):
    cdef Py_buffer view
    get_view(data, &view)  # PyBuffer_Release(&view) in a comment is no release
    s = "PyBuffer_Release(&view)"
'''
    found = check_sources({"snippet.pyx": src})
    assert [x.what for x in found] == ["never released on the fall-through path"]
