"""The command line as a whole: only the command that runs is imported, each
command's parser is the same alone as with all, and the library imports stay
light. (The subcommands and their options are recorded with the public API:
tests/api/test_public_api.py.)"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from fastdecode.cli import COMMANDS
from fastdecode.cli.__main__ import build_parser, chosen_command, main


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_parser_is_the_same_alone_and_with_all(name, capsys):
    """`fastdecode NAME --help` (only NAME registered in full) prints what the
    full parser prints."""
    full = subcommands(build_parser())[name].format_help()
    assert main([name, "--help"]) == 0
    alone = capsys.readouterr().out
    assert alone == full and f"usage: fastdecode {name}" in alone


def test_top_level_help_lists_every_command_with_its_help_line(capsys):
    assert main(["--help"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    for name, command in COMMANDS.items():
        assert f" {name} {command.help} " in words


@pytest.mark.parametrize("argv, expected", [
    pytest.param([], "", id="nothing"),
    pytest.param(["--help"], "", id="help"),
    pytest.param(["convert", "a", "b"], "convert", id="command-first"),
    pytest.param(["--version", "doctor"], "doctor", id="after-an-option"),
])
def test_chosen_command(argv, expected):
    assert chosen_command(argv) == expected


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def run_python(code: str) -> dict:
    """Runs ``code`` in a fresh interpreter; it prints one JSON object."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, PYTHONWARNINGS="error"))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


HEAVY = ("tqdm", "matplotlib", "PIL", "torchvision", "ray", "webdataset")
# What a module imported on top of `baseline` brought of HEAVY (torch itself
# imports tqdm, from torch.hub, when it is installed: that is torch's, not ours).
PROBE = """
import json, sys
{baseline}
before = {{m for m in {heavy} if m in sys.modules}}
import {module}
print(json.dumps(sorted({{m for m in {heavy} if m in sys.modules}} - before)))
"""


@pytest.mark.parametrize("module, baseline", [
    pytest.param("fastdecode", "", id="fastdecode"),
    pytest.param("fastdecode.datasets", "import torch", id="datasets"),
    pytest.param("fastdecode.cli.__main__", "", id="cli"),
])
def test_library_imports_stay_light(module, baseline):
    added = run_python(PROBE.format(baseline=baseline, module=module, heavy=HEAVY))
    assert added == []


def test_help_imports_no_subcommand_module():
    loaded = run_python(
        "import json, sys\n"
        "from fastdecode.cli.__main__ import main\n"
        "main(['--help'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fastdecode.cli.'))))")
    assert loaded == ["fastdecode.cli.__main__"]


def test_a_command_imports_only_its_own_module():
    loaded = run_python(
        "import json, sys\n"
        "from fastdecode.cli.__main__ import main\n"
        "main(['info', '--json'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fastdecode.cli.'))))")
    assert loaded == ["fastdecode.cli.__main__", "fastdecode.cli._args", "fastdecode.cli.info"]
