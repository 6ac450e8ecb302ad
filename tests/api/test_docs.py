"""The documentation a user reads: the README, DESIGN.md, the docs site.

- README.md is short, has no time stamps and no development-tree paths, and
  its results table is the generated one (``python -m benchmarks.results``);
- its Python examples, and the Getting started page's, run as written on a
  generated ImageFolder tree;
- every page the site's nav names exists or is generated, the Reference
  covers every public name and every CLI option, and (where MkDocs is
  installed) the site builds in strict mode.
"""

from __future__ import annotations

import argparse
import html
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DESIGN = ROOT / "DESIGN.md"
RESULTS = ROOT / "docs" / "benchmarks" / "results.md"
MKDOCS = ROOT / "mkdocs.yml"

MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")
STAMPS = {
    "an ISO date": r"\b(19|20)\d\d-\d\d-\d\d\b",
    "UTC": r"\bUTC\b",
    "a day and month": rf"\b\d{{1,2}} ({MONTHS})\b",
    "a month and year": rf"\b({MONTHS}) (19|20)\d\d\b",
    "a clock time": r"\b\d{1,2}:\d\d\b",
}
DEV_PATHS = {
    "PYTHONPATH": r"PYTHONPATH=",
    "a parent path": r"\.\./",
    "the test tree": r"\btests/",
    "the shared corpus": r"shared/corpus",
}


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook",
                                                  ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results_module():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import results
    finally:
        sys.path.remove(str(ROOT))
    return results


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"


@pytest.mark.parametrize("path", [README, DESIGN], ids=["README", "DESIGN"])
@pytest.mark.parametrize("kind", sorted(STAMPS))
def test_no_time_stamps(path, kind):
    found = re.findall(r".*" + STAMPS[kind] + r".*", path.read_text())
    assert not found, f"{path.name} has {kind}: {found[:3]}"


@pytest.mark.parametrize("kind", sorted(DEV_PATHS))
def test_readme_has_no_development_paths(kind):
    found = re.findall(r".*" + DEV_PATHS[kind] + r".*", README.read_text())
    assert not found, f"README.md names {kind}: {found[:3]}"


def test_design_is_the_short_overview():
    text = DESIGN.read_text()
    assert len(text.encode()) <= 60_000
    for target in re.findall(r"\]\((docs/[^)#]+)\)", text):
        assert (ROOT / target).exists(), f"DESIGN.md links to a missing {target}"


def test_readme_results_block_is_the_generated_one():
    results = _results_module()
    readme_block = results.extract_block(README.read_text())
    page_block = results.extract_block(RESULTS.read_text())
    assert readme_block == page_block, "rerun: python -m benchmarks.results bench.json"
    rows = [line for line in readme_block.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 2, "the results table has no rows"


def _report() -> dict:
    """A small report in the shape ``fastdecode bench --json`` writes."""
    def row(name, ips, speedup, **extra):
        return {"name": name, "status": "ok", "images_per_s": ips, "ms_per_image": 1000 / ips,
                "cpu_ms_per_image": 1000 / ips, "speedup": speedup, **extra}

    def loader_row(loader, ips, speedup):
        return {"loader": loader, "num_workers": 2, "images_per_s": ips, "min_images_per_s": ips * 0.9,
                "max_images_per_s": ips * 1.1, "spread": 0.2, "noisy": loader == "FastLoader",
                "cpu_s_per_image": 0.001, "efficiency": ips / 1000, "speedup": speedup}

    return {
        "mode": "quick", "date": "the run's date", "command": "fastdecode bench --quick",
        "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "cpu_count": 4, "python": "3.x"},
        "versions": {"fastdecode": "0"}, "summary": ["decode: ..."], "skipped": {"ray": "needs ray"},
        "sections": {
            "decode": {"settings": {"rounds": 3, "slice": 50,
                                    "statistic": "sum over slices of each slice's best round"},
                       "sections": [{"key": "jpeg_full", "title": "JPEG", "baseline": "Pillow",
                                     "rows": [row("fastdecode", 600, 1.5), row("Pillow", 400, 1.0)]}]},
            "transforms": {"settings": {"rounds": 3, "statistic": "best round"},
                           "sections": [{"key": "train_float", "title": "train float", "rows": [
                               row("torchvision + PIL", 300, 1.0), row("fastdecode fuse", 750, 2.5),
                               row("fastdecode fuse exact", 420, 1.4)]}]},
            "loader": {"batch_size": 256, "settings": {"rounds": 3}, "chains": {"train": {
                "rows": [loader_row("ImageFolder+PIL", 200, 1.0), loader_row("FastImageFolder", 800, 4.0),
                         loader_row("FastLoader", 900, 4.5)],
                "summary": {"num_workers": 2},
                "limit": {"usable_cpus": 2, "fused_ms_per_image": 2.0, "images_per_s": 1000,
                          "noisy": False}}}},
        },
    }


def test_results_generator_renders_every_section(tmp_path):
    results = _results_module()
    report = tmp_path / "bench.json"
    report.write_text(json.dumps(_report()))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{results.START}\nold\n{results.END}\nend\n")
    page, figure = tmp_path / "results.md", tmp_path / "results.png"
    assert results.main([str(report), "--page", str(page), "--figure", str(figure),
                         "--readme", str(readme)]) == 0
    text = page.read_text()
    assert results.extract_block(readme.read_text()) == results.extract_block(text)
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("\nend\n")
    for expected in ("the run's date", "`fastdecode bench --quick`", "Test CPU", "1.50x", "2.50x",
                     "4.00x", "4.50x", "900 (noisy)", "ray: needs ray"):
        assert expected in text
    assert "medians of rounds" not in text
    if importlib.util.find_spec("matplotlib") is not None:
        assert figure.read_bytes().startswith(b"\x89PNG")


def test_results_table_names_each_rows_estimator_and_mode():
    """Each summary row says which of its rounds it reports (decode and fused:
    best rounds, loaders: the median) and each fused row its mode, the
    exact=True row beside the default one (issue 55)."""
    results = _results_module()
    rows = [line.split(" | ") for line in results.summary_block(_report()).splitlines()
            if line.startswith("| ") and "---" not in line]
    assert rows[0][:2] == ["| measured", "estimator"]
    by_what = {r[0][2:]: r[1:] for r in rows[1:]}
    assert by_what["JPEG decode, one thread (images/s)"][0] == \
        "each 50-image slice's best of 3 rounds, summed"
    fused = [what for what in by_what if what.startswith("decode + train chain")]
    assert fused == ["decode + train chain to float, one thread, default mode (ms/image)",
                     "decode + train chain to float, one thread, exact=True (ms/image)"]
    assert [by_what[what][0] for what in fused] == ["best of 3 rounds"] * 2
    assert [by_what[what][-1] for what in fused] == ["2.50x |", "1.40x |"]
    assert by_what["FastLoader, train chain, 2 workers (images/s)"][0] == "median of 3 rounds"
    page = results.page(_report(), Path("bench.json"), "results.png")
    assert "| fastdecode fuse (default mode) |" in page and "| fastdecode fuse (exact=True) |" in page


def test_results_refuses_a_statistic_it_cannot_name():
    results = _results_module()
    report = _report()
    report["sections"]["transforms"]["settings"]["statistic"] = "trimmed mean"
    with pytest.raises(ValueError, match="'trimmed mean' of their rounds"):
        results.summary_block(report)


def test_results_page_gpu_section_is_the_generated_one():
    """The page's GPU section is rendered from the committed GPU run's JSON."""
    results = _results_module()
    gpu_json = ROOT / results.GPU
    gpu = json.loads(gpu_json.read_text()) if gpu_json.is_file() else None
    section = results.extract_block(RESULTS.read_text(), results.GPU_START, results.GPU_END)
    assert section == results.gpu_block(gpu), \
        "rerun: python -m benchmarks.results --gpu docs/benchmarks/gpu_check.json"


def _gpu_report() -> dict:
    """A small report in the shape benchmarks/gpu_check.py writes."""
    def stats(median):
        return {"median": median, "min": median * 0.9, "max": median * 1.1, "spread": 0.2,
                "n": 3, "noisy": True}

    return {"date": "the GPU run's date", "command": "bash benchmarks/gpu_check.sh",
            "device": "Test GPU", "torch": "9.9", "cuda": "99", "usable_cpus": 3,
            "args": {"images": 10, "batch": 2, "size": 8, "workers": 3}, "status": "ok",
            "steps": {"tests": {"ok": True, "summary": "8 passed"},
                      "parity": {"ok": False, "error": "RuntimeError: boom"},
                      "throughput": {"ok": True, "summary": "x", "rows": [
                          {"name": "cuda", "images_per_s": stats(1234), "startup_s": 0.5,
                           "rates": [1, 2, 3]}]},
                      "copies": {"ok": True, "summary": "y", "bytes": 2_000_000, "kinds": [
                          {"name": "pinned copy_", "gb_per_s": stats(42.0)}]}}}


@pytest.mark.parametrize("with_markers", [True, False], ids=["gpu-section-replaced",
                                                             "gpu-section-appended"])
def test_results_gpu_section_alone_rewrites_only_that_section(tmp_path, with_markers):
    results = _results_module()
    gpu = tmp_path / "gpu_check.json"
    gpu.write_text(json.dumps(_gpu_report()))
    page = tmp_path / "results.md"
    before = "# Benchmark results\n\nthe bench run's tables\n"
    page.write_text(before + (f"\n{results.GPU_START}\nold\n{results.GPU_END}\n"
                              if with_markers else ""))
    assert results.main(["--gpu", str(gpu), "--page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith(before) and "old" not in text and text.count(results.GPU_START) == 1
    for expected in ("Test GPU", "the GPU run's date", "| parity | FAILED | RuntimeError: boom |",
                     "FastLoader(device='cuda') | 1,234 (noisy)", "| pinned copy_ | 42.00 |",
                     "2.0 MB"):
        assert expected in text


def test_results_without_a_report_needs_the_gpu_json(tmp_path, capsys):
    results = _results_module()
    with pytest.raises(SystemExit):
        results.main(["--gpu", str(tmp_path / "missing.json"), "--page", str(tmp_path / "p.md")])
    assert "no bench report given and no GPU report" in capsys.readouterr().err


def _nav_pages() -> list[str]:
    return re.findall(r":\s*([\w./-]+\.md)\s*$", MKDOCS.read_text(), re.M)


def test_nav_pages_exist():
    generated = set(_hook().pages())
    pages = _nav_pages()
    assert len(pages) >= 30
    missing = [p for p in pages if p not in generated and not (ROOT / "docs" / p).is_file()]
    assert not missing, f"mkdocs.yml names pages that do not exist: {missing}"


def test_every_docs_page_is_in_the_nav():
    pages = set(_nav_pages())
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert not on_disk - pages, f"pages left out of the nav: {sorted(on_disk - pages)}"


def test_reference_covers_every_public_module():
    """Every module tests/helpers/public_api.py records has a Reference page."""
    from helpers.public_api import MODULES

    hook = _hook()
    assert set(MODULES) <= {public for public, *_ in hook.MODULES}


def test_reference_lists_every_public_name():
    hook = _hook()
    pages = hook.pages()
    for public, page, _ in hook.MODULES:
        for name in hook.public_names(public):
            assert f"{public}.{name}" in pages[page], f"{public}.{name} is missing from {page}"


def test_reference_names_every_cli_option():
    from fastdecode.cli import COMMANDS
    from fastdecode.cli.__main__ import build_parser

    text = _hook().pages()["reference/cli.md"]
    parser = build_parser()
    for name in COMMANDS:
        assert f"`fastdecode {name}`" in text
    for action in parser._actions:
        choices = getattr(action, "choices", None) or {}
        for sub in choices.values() if isinstance(choices, dict) else ():
            for option in sub._actions:
                if option.help == argparse.SUPPRESS or option.dest == "help":
                    continue
                for flag in option.option_strings:
                    assert re.search(rf"[`,] ?{re.escape(flag)}[ `,]", text), \
                        f"{flag} is missing from the CLI reference"


def _python_blocks(path: Path) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))


@pytest.fixture(scope="module")
def example_tree(tmp_path_factory):
    """An ImageFolder tree at data/train (2 classes x 40 JPEGs) and a photo.jpg."""
    image = pytest.importorskip("PIL.Image")
    np = pytest.importorskip("numpy")
    base = tmp_path_factory.mktemp("examples")
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        folder = base / "data" / "train" / label
        folder.mkdir(parents=True)
        for i in range(40):
            pixels = rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)
            image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    (base / "photo.jpg").write_bytes((base / "data" / "train" / "cat" / "000.jpg").read_bytes())
    return base


@pytest.mark.no_sanitize
@pytest.mark.parametrize("path", [
    pytest.param(README, id="README"),
    # the same kind of run as the README's (make test keeps that one): make test-full
    pytest.param(ROOT / "docs" / "getting-started.md", id="getting-started",
                 marks=pytest.mark.slow),
])
def test_examples_run_as_written(path, example_tree):
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    script = example_tree / f"{path.stem}_examples.py"
    script.write_text(_python_blocks(path))
    done = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=example_tree,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch.Size([" in done.stdout


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (strict mode), once for this module."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs is not installed (requirements/docs.txt; make docs installs it)")
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return site


@pytest.mark.no_sanitize
def test_docs_build_strict(built_site):
    """What `make docs` runs once its requirements are installed."""
    text = (built_site / "reference" / "fastdecode.html").read_text()
    assert "decode_jpeg" in text and "read_header" in text
    assert (built_site / "reference" / "cli.html").is_file()
    assert (built_site / "search" / "search_index.json").is_file()


def _plain(html_text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", html_text)).split())


def _summary_words(doc: str | None, count: int = 4) -> str | None:
    """The first words of a docstring's summary as the site renders them:
    roles (``:func:``) and the ``~`` of their targets dropped, code and
    emphasis marks gone."""
    if not doc:
        return None
    summary = " ".join(doc.strip().split("\n\n")[0].split())
    summary = re.sub(r":\w+:`~?", "`", summary)
    words = re.sub(r"[`*]", "", summary).split()
    return " ".join(words[:count]) if len(words) >= count else None


def _reference_entries() -> list:
    hook = _hook()
    homes = hook.canonical_pages()
    entries = []
    for public, page, _ in hook.MODULES:
        for name in hook.public_names(public):
            if public == "fastdecode" and name in homes:
                continue  # documented in full on its own module's page, linked from here
            entries.append(pytest.param(public, page, name, f"{public}.{name}", id=f"{public}.{name}"))
    return entries


@pytest.mark.no_sanitize
@pytest.mark.parametrize("public, page, name, ident", _reference_entries())
def test_built_site_shows_every_public_name_with_its_docstring(built_site, public, page, name, ident):
    """Every public name has its entry on its built Reference page, and the
    entry shows the start of the object's own docstring."""
    pytest.importorskip("torch")
    text = (built_site / page.replace(".md", ".html")).read_text()
    anchor = f'id="{ident}"'
    assert anchor in text, f"{public}.{name} has no entry on {page}"
    obj = getattr(importlib.import_module(public), name)
    own = obj.__doc__ if (callable(obj) or isinstance(obj, type)) and \
        obj.__doc__ != type(obj).__doc__ else None
    words = _summary_words(own)
    if words is None or f"{public}.{name}" in _hook().EXTERNAL:
        return
    entry = text[text.index(anchor):][:20000]
    # compared without spaces: the page spaces out its code spans ("( f() )")
    assert words.replace(" ", "") in _plain(entry).replace(" ", ""), \
        f"{public}.{name}'s entry lacks its docstring ({words!r})"


DOC_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "```python" in p.read_text())


@pytest.mark.parametrize("path", DOC_PAGES, ids=[str(p.relative_to(ROOT / "docs")) for p in DOC_PAGES])
def test_docs_python_blocks_compile(path):
    """Every Python block of the docs is valid Python (the README's and Getting
    started's also run, above; the guides' run in test_guide_examples.py, slow tier)."""
    for number, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
        compile(block, f"{path.name}[block {number}]", "exec")
