"""A new user's first errors say what is wrong (issue 51, item 9): a
zero-byte image is an "Empty input file" as decode_jpeg says it, `doctor` on
a missing path names it once and says it does not exist, `tune` counts the
unreadable files (not the draws that met them), and a name that needs torch,
used without torch, names the extra that installs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastdecode
from fastdecode.cli.__main__ import main
from fastdecode.errors import DecodeError, ImageFileError


@pytest.fixture(scope="module")
def one_bad_of_five(tmp_path_factory):
    """Two classes, four small JPEGs and one zero-byte .jpg."""
    from PIL import Image

    root = tmp_path_factory.mktemp("five") / "tree"
    rng = np.random.default_rng(0)
    for i in range(4):
        folder = root / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
    (root / "cat" / "empty.jpg").write_bytes(b"")
    return root


@pytest.mark.parametrize("data", [b"", bytearray(), np.zeros(0, np.uint8)],
                         ids=["bytes", "bytearray", "array"])
def test_empty_data_is_an_empty_input_file(data):
    with pytest.raises(DecodeError, match="^Empty input file$"):
        fastdecode.decode_image(data)
    with pytest.raises(DecodeError, match="^Empty input file$"):
        fastdecode.read_header(data)


def test_empty_data_says_what_decode_jpeg_says():
    with pytest.raises(DecodeError, match="^Empty input file$"):
        fastdecode.decode_jpeg(b"")


def test_a_zero_byte_jpg_names_the_file(one_bad_of_five):
    path = one_bad_of_five / "cat" / "empty.jpg"
    with pytest.raises(DecodeError, match=f"^{path}: Empty input file$"):
        fastdecode.read_image(path)


@pytest.mark.parametrize("fused", [False, True], ids=["no-transform", "fused-chain"])
def test_a_zero_byte_sample_is_an_empty_input_file(one_bad_of_five, fused):
    pytest.importorskip("torch")
    from torchvision import transforms as T

    chain = T.Compose([T.RandomResizedCrop(16), T.ToTensor()]) if fused else None
    ds = fastdecode.FastImageFolder(one_bad_of_five, chain)
    index = [os.path.basename(p) for p, _ in ds.samples].index("empty.jpg")
    with pytest.raises(ImageFileError, match=rf"empty\.jpg: sample {index}: Empty input file$"):
        ds[index]
    with pytest.raises(ImageFileError, match=rf"empty\.jpg: sample {index}: Empty input file$"):
        ds.__getitems__([index])


def test_doctor_on_a_missing_path_names_it_once(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["doctor", str(missing)]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("[FAIL] storage:"))
    assert line == f"[FAIL] storage: {missing}: does not exist"
    assert out.count(str(missing)) == 1


def test_doctor_on_a_file_says_it_is_not_a_folder(one_bad_of_five, capsys):
    path = one_bad_of_five / "dog" / "0.jpg"
    assert main(["doctor", str(path)]) == 1
    assert f"[FAIL] storage: {path}: not a folder\n" in capsys.readouterr().out


def test_tune_counts_one_bad_file_of_five_once(one_bad_of_five, capsys):
    pytest.importorskip("torch")
    args = ["tune", "--data", str(one_bad_of_five), "--batch-size", "8", "--batches", "2",
            "--workers", "0"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["images"] == 5
    assert result["skipped_images"] == 1  # the draws that met it were dozens
    assert len(result["unreadable"]) == 1
    assert result["unreadable"][0].endswith("empty.jpg: sample 2: Empty input file")
    assert main(args) == 0
    assert ("- 1 unreadable image(s) of the 5 in the tree, each replaced by another while "
            "measuring (on_error='skip'): ") in capsys.readouterr().out


# Python without torch: an import finder that answers as for a package that
# is not installed.
WITHOUT_TORCH = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "torch":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    import fastdecode, fastdecode.datasets
    try:
        NAME
    except ModuleNotFoundError as exc:
        print(type(exc).__name__, exc.name, exc, sep="|")
""")


@pytest.mark.parametrize("name, used", [
    *[(name, name) for name in ("fastdecode.FastImageFolder", "fastdecode.FastLoader",
                                "fastdecode.collate", "fastdecode.datasets.FastImageList")],
    ("fastdecode.loader", "__import__('fastdecode.loader')")])
def test_a_name_that_needs_torch_names_the_extra(name, used):
    out = subprocess.run([sys.executable, "-c", WITHOUT_TORCH.replace("NAME", used)],
                         capture_output=True, text=True, check=True).stdout.strip()
    kind, missing, message = out.split("|")
    assert (kind, missing) == ("ModuleNotFoundError", "torch")
    assert message == (f"{name} needs torch, which is not installed: pip install "
                       "'fastdecode[torch]' (from a checkout: pip install '.[torch]')")


def test_the_extra_named_is_pyprojects():
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    from fastdecode._lazy import EXTRAS

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for package, extra in EXTRAS.items():
        assert package in extras[extra]
