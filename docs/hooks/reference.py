"""MkDocs hook: the Reference pages, generated at build time.

One page per public module, listing every name of its ``__all__`` (read from
the source, statically) and rendering each through mkdocstrings under its
public path, and one page for the command line, generated from its argparse
parser. Nothing here is committed as Markdown, so the reference cannot fall
behind the code. Every public path is a real module (a face that re-exports:
docs/decisions/layout.md), so griffe follows each name from it to the module
that defines it, and no table here maps one to the other.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# (public module, page, one-line description).
MODULES = (
    ("fastdecode", "reference/fastdecode.md",
     "The decoders, the image facts and the names re-exported from the modules below."),
    ("fastdecode.datasets", "reference/datasets.md",
     "Drop-in replacements of torchvision's ImageFolder and DatasetFolder, and file lists."),
    ("fastdecode.loader", "reference/loader.md",
     "FastLoader, a torch DataLoader with a shared batch ring, and its collate."),
    ("fastdecode.transforms", "reference/transforms.md",
     "fuse: torchvision transform chains run inside the decode."),
    ("fastdecode.targets", "reference/targets.md",
     "Detection and segmentation: v2 joint chains on encoded images, COCO and VOC datasets."),
    ("fastdecode.errors", "reference/errors.md",
     "The exceptions; every one is a FastDecodeError."),
    ("fastdecode.ray", "reference/ray.md",
     "Ray Data: a datasource and a map_batches decoder (pip install \"fastdecode[ray]\")."),
    ("fastdecode.webdataset", "reference/webdataset.md",
     "WebDataset: a decode handler, a batch collate and a shard writer "
     "(pip install \"fastdecode[webdataset]\")."),
    ("fastdecode.integrations.timm", "reference/timm.md",
     "timm: its training script and dataset factory loading through fastdecode."),
    ("fastdecode.integrations.accelerate", "reference/accelerate.md",
     "Hugging Face Accelerate: a FastLoader kept through prepare(), its position in "
     "save_state/load_state, and skip_first_batches in O(1)."),
)
CLI_PAGE = "reference/cli.md"
# Classes whose __init__ is torchvision's (they subclass its transforms and add
# none): their docstrings document its parameters, which a static reading of
# fastdecode cannot see in a signature, so griffe is not asked to match them.
INHERITED_INIT = {
    "fastdecode.transforms.CenterCrop",
    "fastdecode.transforms.Compose",
    "fastdecode.transforms.RandomHorizontalFlip",
}
# Public names that are another package's object, re-exported as it is: the
# page says whose it is instead of rendering a docstring fastdecode does not own.
EXTERNAL = {
    "fastdecode.transforms.InterpolationMode": (
        "torchvision.transforms.InterpolationMode",
        "torchvision's interpolation enum, re-exported so a chain can be written against "
        "`fastdecode.transforms` alone; loaded from torchvision on first use."),
}


def source_file(module: str) -> Path:
    base = ROOT / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def public_names(module: str) -> list[str]:
    """The module's ``__all__``, read from its source without importing it."""
    tree = ast.parse(source_file(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{module} has no literal __all__")


def canonical_pages() -> dict[str, tuple[str, str]]:
    """name -> (page, identifier) of the submodule page that documents it in
    full; the top-level page links there instead of repeating it."""
    homes: dict[str, tuple[str, str]] = {}
    for public, page, _ in MODULES[1:]:
        for name in public_names(public):
            homes.setdefault(name, (page, f"{public}.{name}"))
    return homes


def module_page(public: str, description: str) -> str:
    lines = [f"# `{public}`", "", description, ""]
    names = public_names(public)
    homes = canonical_pages() if public == "fastdecode" else {}
    here = [n for n in names if n not in homes]
    elsewhere = [n for n in names if n in homes]
    if elsewhere:
        lines += ["Documented on the page of the module that defines them:", "",
                  "| name | documented in |", "|---|---|"]
        for name in sorted(elsewhere, key=str.lower):
            page, ident = homes[name]
            module = next(m[0] for m in MODULES if m[1] == page)
            lines.append(f"| `{public}.{name}` | [`{module}.{name}`][{ident}] |")
        lines.append("")
    for name in here:
        ident = f"{public}.{name}"
        if f"{public}.{name}" in EXTERNAL:
            target, text = EXTERNAL[f"{public}.{name}"]
            lines += [f"## `{public}.{name}` {{#{public}.{name}}}", "", f"`{target}`: {text}", ""]
            continue
        lines += [f"::: {ident}", "    options:", "      heading_level: 2",
                  f"      heading: \"{public}.{name}\"", f"      toc_label: \"{name}\""]
        if f"{public}.{name}" in INHERITED_INIT:
            lines += ["      docstring_options:", "        warn_unknown_params: false"]
        lines.append("")
    return "\n".join(lines) + "\n"


def _option_row(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    names = ", ".join(action.option_strings) or action.dest
    if action.option_strings and action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        names += f" {metavar}" + (" ..." if action.nargs in ("+", "*") else "")
    text = formatter._expand_help(action) if action.help else ""  # argparse's %(default)s
    if action.choices is not None:
        text += " Choices: " + ", ".join(f"`{c}`" for c in action.choices) + "."
    if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS) \
            and "default" not in text.lower():
        text += f" Default: `{action.default}`."
    return f"| `{names}` | {' '.join(text.split()).replace('|', '&#124;')} |"


def cli_page() -> str:
    from fastdecode.cli import COMMANDS
    from fastdecode.cli.__main__ import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = ["# Command line", "",
             "Generated from the `fastdecode` command's own argparse parser "
             "(`fastdecode COMMAND --help` prints the same). "
             "`python -m fastdecode` is the same command.", "",
             "```text", parser.format_usage().strip(), "```", "",
             "| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#{name}) | {command.help} |" for name, command in COMMANDS.items()]
    for name in COMMANDS:
        command = sub.choices[name]
        formatter = command._get_formatter()
        lines += ["", f"## `fastdecode {name}` {{#{name}}}", "",
                  "```text", command.format_usage().strip(), "```", ""]
        if command.description:
            lines += ["```text", command.description.strip(), "```", ""]
        lines += ["| argument | meaning |", "|---|---|"]
        lines += [_option_row(a, formatter) for a in command._actions
                  if not isinstance(a, argparse._HelpAction)]
        if command.epilog:
            lines += ["", "```text", command.epilog.strip(), "```"]
    lines += ["", "The command table itself:", "", "::: fastdecode.cli.COMMANDS", "",
              "::: fastdecode.cli.Command", ""]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/ -> its Markdown."""
    out = {page: module_page(public, text) for public, page, text in MODULES}
    out[CLI_PAGE] = cli_page()
    return out


# Docstrings cross-reference in Sphinx's roles (:func:`fuse`, :class:`~x.Mode`),
# which Markdown renders as the role's name then the code: keep only the code.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):<code>~?([^<]*)</code>")


def _role(match: re.Match) -> str:
    target = match.group(1)
    if match.group(0).split("<code>", 1)[1].startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return SPHINX_ROLE.sub(_role, html)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
