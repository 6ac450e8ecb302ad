"""fastdecode.integrations.timm at its edges: a folder with no image (timm's
own error), a root that is not a folder (timm's own dataset, unchanged), a
second install (new options, timm's classes still restored), an uninstall
with nothing installed, the module's help. test_timm_integration.py covers
the datasets and loaders."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("timm")

from timm.data import create_dataset, dataset_factory  # noqa: E402
from timm.data.dataset import ImageDataset  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from fastdecode.integrations import timm as fd_timm  # noqa: E402


@pytest.fixture
def installed():
    fd_timm.install()
    yield
    fd_timm.uninstall()


def test_a_folder_without_images_raises_timms_error(tmp_path, installed):
    (tmp_path / "train" / "empty_class").mkdir(parents=True)
    (tmp_path / "train" / "empty_class" / "notes.txt").write_text("no image here")
    with pytest.raises(RuntimeError, match=r"Found 0 images in subfolders of .*train\. "
                                           r"Supported image extensions are .*\.jpg"):
        create_dataset("", root=str(tmp_path), split="train")


def test_a_root_that_is_no_folder_is_timms_own_dataset(tmp_path, installed):
    with pytest.raises(Exception) as ours:
        fd_timm._image_dataset(str(tmp_path / "nothing-here"))
    with pytest.raises(Exception) as theirs:
        ImageDataset(str(tmp_path / "nothing-here"))
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def test_a_second_install_changes_the_options_and_keeps_timms_classes():
    fd_timm.install(exact=False)
    try:
        fd_timm.install(exact=True, on_error="skip")
        assert fd_timm._OPTIONS == {"exact": True, "on_error": "skip"}
        assert fd_timm._ORIGINAL["ImageDataset"] is ImageDataset
    finally:
        fd_timm.uninstall()
    assert dataset_factory.ImageDataset is ImageDataset
    assert dataset_factory.ImageFolder is ImageFolder and not fd_timm.installed()


def test_uninstall_without_install_changes_nothing():
    fd_timm.uninstall()
    assert dataset_factory.ImageDataset is ImageDataset and not fd_timm.installed()


@pytest.mark.parametrize("argv", [[], ["-h"], ["--help"]], ids=["none", "-h", "--help"])
def test_the_module_says_how_to_run_it(capsys, argv):
    assert fd_timm.main(argv) is None
    out = capsys.readouterr().out
    assert out.endswith("usage: python -m fastdecode.integrations.timm SCRIPT [ARGS...]\n")
    assert out.startswith(fd_timm.__doc__.split("\n\n")[0])
    assert not fd_timm.installed()
