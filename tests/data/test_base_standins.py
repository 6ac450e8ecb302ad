"""The stand-ins fastdecode/datasets/_base.py defines for torchvision's
VisionDataset and StandardTransform when torchvision is not importable:
loaded here from the module's source with torchvision blocked, and held to
what torchvision's own classes do (init, the transforms, the repr). Also
is_pil_loader. test_dataset_contract.py runs the datasets without
torchvision in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

pytest.importorskip("torch")
tv_datasets = pytest.importorskip("torchvision.datasets")

from torchvision.datasets import folder as tv_folder  # noqa: E402

from fastdecode.datasets import _base  # noqa: E402


@pytest.fixture(scope="module")
def standins():
    """_base.py executed with torchvision blocked, as its own module."""
    saved = {name: mod for name, mod in sys.modules.items()
             if name == "torchvision" or name.startswith("torchvision.")}
    for name in saved:
        del sys.modules[name]
    sys.modules["torchvision"] = None  # import torchvision raises ImportError
    try:
        spec = importlib.util.spec_from_file_location("_base_without_torchvision", _base.__file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del sys.modules["torchvision"]
        sys.modules.update(saved)
    assert not module.HAVE_TORCHVISION and module.TV_DEFAULT_LOADER is None
    return module


def _sized(base):
    class Sized(base):
        def __len__(self):
            return 3
    Sized.__name__ = Sized.__qualname__ = "Sized"
    return Sized


class Multi:
    """A transform whose repr has several lines."""

    def __call__(self, x):
        return x * 2

    def __repr__(self):
        return "Multi(\n  double\n)"


def negate(y):
    return -y


def swap(x, y):
    return y, x


CASES = {
    "nothing": {},
    "root-only": {"root": "/data/train"},
    "transform": {"root": "/data", "transform": Multi()},
    "target-transform": {"transform": None, "target_transform": negate},
    "both": {"root": "/data", "transform": Multi(), "target_transform": negate},
    "transforms": {"root": "/data", "transforms": swap},
}


@pytest.mark.parametrize("kwargs", list(CASES.values()), ids=list(CASES))
def test_the_standin_dataset_is_torchvisions(standins, kwargs):
    ours = _sized(standins.ImageFolder)(**kwargs)
    theirs = _sized(tv_datasets.VisionDataset)(**kwargs)
    assert repr(ours) == repr(theirs)
    assert (ours.root, ours.transform, ours.target_transform) == \
        (theirs.root, theirs.transform, theirs.target_transform)
    if ours.transforms is None:
        assert theirs.transforms is None
    else:
        assert ours.transforms(5, 7) == theirs.transforms(5, 7)


def test_the_standin_expands_a_home_root(standins):
    assert standins.VisionDataset("~/data").root == os.path.expanduser("~/data")


def test_the_standin_refuses_transforms_with_transform(standins):
    with pytest.raises(ValueError, match="Only transforms or transform/target_transform can be "
                                         "passed as argument"):
        standins.DatasetFolder("/data", transforms=Multi(), transform=Multi())


def test_the_standin_standard_transform_runs_what_it_has(standins):
    assert standins._StandardTransform()(1, 2) == (1, 2)
    assert standins._StandardTransform(Multi())(1, 2) == (2, 2)
    assert standins._StandardTransform(None, negate)(1, 2) == (1, -2)
    assert repr(standins._StandardTransform()) == "StandardTransform"


def test_without_torchvision_no_loader_is_pils(standins):
    assert standins.is_pil_loader(None) is False
    assert standins.is_pil_loader(tv_folder.pil_loader) is False


@pytest.mark.parametrize("loader, expected", [
    (None, False), (tv_folder.pil_loader, True), (tv_folder.default_loader, True),
    (lambda path: path, False)], ids=["none", "pil-loader", "default-loader", "custom"])
def test_is_pil_loader(loader, expected):
    assert _base.is_pil_loader(loader) is expected
