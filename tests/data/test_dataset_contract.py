"""FastImageFolder keeps ImageFolder's contract: its types, constructor signatures, repr, loader,
and samples/targets/imgs that behave as torchvision's lists, checked the way torchvision's own
dataset tests construct and inspect datasets (signature-driven construction, isinstance, repr)."""

import copy
import inspect
import json
import os
import pickle
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import DatasetFolder, ImageFolder, VisionDataset  # noqa: E402
from torchvision.datasets.folder import default_loader  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode import datasets  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

PAIRS = [pytest.param(fd.FastImageFolder, ImageFolder, {}, id="ImageFolder"),
         pytest.param(fd.FastDatasetFolder, DatasetFolder,
                      {"extensions": datasets.IMG_EXTENSIONS}, id="DatasetFolder")]
EXTRAS = {"exact", "on_error", "max_pixels", "max_work_per_byte", "storage_options", "refresh_index",
          "readahead", "cache"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("tree"))


def build(cls, root, **config):
    """As torchvision's DatasetTestCase does: the positional arguments without
    defaults from the signature, then the defaults it reads with getfullargspec."""
    spec = inspect.getfullargspec(cls.__init__)
    defaults = dict(zip(spec.args[-len(spec.defaults):], spec.defaults))
    required = {"root": root, "loader": default_loader}
    args = [required[name] for name in spec.args[1:] if name not in defaults]
    return cls(*args, **{**defaults, **config})


# ---------------------------------------------------------------------------
# Types, signatures, repr


@pytest.mark.parametrize("ours,theirs,config", PAIRS)
def test_is_an_instance_of_the_torchvision_classes(tree, ours, theirs, config):
    ds = build(ours, tree, **config)
    assert isinstance(ds, theirs) and isinstance(ds, VisionDataset)
    assert isinstance(ds, DatasetFolder) and isinstance(ds, torch.utils.data.Dataset)


@pytest.mark.parametrize("ours,theirs,config", PAIRS)
def test_signature_is_torchvisions_plus_keyword_only_extras(ours, theirs, config):
    mine, tvs = inspect.signature(ours), inspect.signature(theirs)
    positional = [p for p in mine.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    extras = {n for n, p in mine.parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert positional == list(tvs.parameters.values())
    assert extras == EXTRAS
    assert inspect.getfullargspec(ours.__init__).args == inspect.getfullargspec(
        theirs.__init__).args


@pytest.mark.parametrize("ours,theirs,config", PAIRS)
def test_signature_driven_construction_matches(tree, ours, theirs, config):
    a, b = build(ours, tree, **config), build(theirs, tree, **config)
    assert a.samples == b.samples and a.targets == b.targets and a.classes == b.classes
    assert a.loader is b.loader is default_loader and a.extensions == b.extensions
    image, target = a[0]
    assert isinstance(image, Image.Image) and type(target) is int


@pytest.mark.parametrize("transform", [None, T.Compose([T.Resize(40), T.ToTensor()])],
                         ids=["none", "compose"])
def test_repr_is_torchvisions(tree, transform):
    def relabel(target):
        return target

    ours = fd.FastImageFolder(tree, transform, target_transform=relabel)
    theirs = ImageFolder(tree, transform, target_transform=relabel)
    assert repr(ours) == repr(theirs).replace("ImageFolder", "FastImageFolder", 1)
    assert str(ours).startswith("Dataset FastImageFolder\n    Number of datapoints: 12")


def test_wrap_for_transforms_v2_dispatches_on_the_type(tree):
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    wrapped = wrap_dataset_for_transforms_v2(fd.FastImageFolder(tree))
    assert len(wrapped) == 12 and wrapped[0][1] == 0


def test_loader_returns_what_default_loader_returns(tree):
    ds = fd.FastImageFolder(tree)
    path = ds.samples[5][0]
    ours, theirs = datasets.default_loader(path), default_loader(path)
    assert callable(ds.loader) and ds.loader(path).mode == "RGB"
    assert ours.mode == theirs.mode == "RGB" and ours.size == theirs.size
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    folder = fd.FastDatasetFolder(tree, datasets.default_loader, datasets.IMG_EXTENSIONS)
    assert folder._fast_loader() and folder.loader is datasets.default_loader


def test_a_custom_loader_is_called_as_torchvision_calls_it(tree):
    calls = []

    def loader(path):
        calls.append(path)
        return Image.new("RGB", (4, 4))

    ds = fd.FastImageFolder(tree, loader=loader)
    assert ds[0][0].size == (4, 4) and calls == [ds.samples[0][0]]
    assert "custom loader" in ds.explain()


# ---------------------------------------------------------------------------
# samples / targets / imgs: torchvision's separate lists


@pytest.fixture
def pair(tree):
    return fd.FastImageFolder(tree), ImageFolder(tree)


def test_attributes_are_what_torchvision_has(pair):
    ours, theirs = pair
    assert ours.imgs is ours.samples and theirs.imgs is theirs.samples
    assert type(ours.targets) is list and ours.targets == theirs.targets
    assert json.dumps(ours.targets) == json.dumps(theirs.targets)
    assert ours.targets + [1] == theirs.targets + [1]


def test_targets_can_be_reassigned_and_stay_separate_from_samples(pair):
    for ds in pair:
        ds.targets = [t + 1 for t in ds.targets]
    ours, theirs = pair
    assert ours.targets == theirs.targets and ours.samples == theirs.samples
    assert ours[4][1] == theirs[4][1] == 1  # items come from samples, as in torchvision
    assert ours.samples.compact


MUTATIONS = {
    "append": lambda s: s.append((s[0][0], 2)),
    "setitem": lambda s: s.__setitem__(1, (s[2][0], 1)),
    "setslice": lambda s: s.__setitem__(slice(0, 2), [s[5], s[6]]),
    "delitem": lambda s: s.__delitem__(0),
    "delslice": lambda s: s.__delitem__(slice(None, None, 2)),
    "insert": lambda s: s.insert(3, s[-1]),
    "extend": lambda s: s.extend(s[:2]),
    "iadd": lambda s: s.__iadd__(s[:1]),
    "imul": lambda s: s.__imul__(2),
    "pop": lambda s: s.pop(4),
    "remove": lambda s: s.remove(s[3]),
    "sort": lambda s: s.sort(key=lambda item: item[0][::-1]),
    "reverse": lambda s: s.reverse(),
    "clear-extend": lambda s: (s.clear(), s.extend([("x.jpg", 0)])),
    "shuffle": lambda s: random.Random(0).shuffle(s),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_samples_mutations_do_what_they_do_to_a_list(pair, name):
    ours, theirs = pair
    MUTATIONS[name](ours.samples)
    MUTATIONS[name](theirs.samples)
    assert ours.samples == theirs.samples and list(ours.samples) == theirs.samples
    assert ours.imgs == theirs.imgs and len(ours) == len(theirs)
    assert not ours.samples.compact  # the first change made a real list
    assert ours.targets == theirs.targets  # separate: untouched, as in torchvision


READS = {
    "len": len,
    "index": lambda s: s[-1],
    "slice": lambda s: s[1:8:3],
    "reversed": lambda s: list(reversed(s)),
    "contains": lambda s: s[2] in s and ("nope", 0) not in s,
    "index-of": lambda s: s.index(s[4]),
    "count": lambda s: s.count(s[0]),
    "copy": lambda s: s.copy(),
    "add": lambda s: s + [("a", 1)],
    "radd": lambda s: [("a", 1)] + s,
    "mul": lambda s: s * 2,
    "rmul": lambda s: 2 * s,
    "eq": lambda s: (s == list(s), s != list(s), s == tuple(s)),
    "lt": lambda s: (s < s[:1], s <= list(s), s > [], s >= list(s)),
    "sorted": lambda s: sorted(s, reverse=True),
    "repr": repr,
    "json": lambda s: json.dumps(list(s)),
    "bool": bool,
    "out-of-range": lambda s: pytest.raises(IndexError, s.__getitem__, 99).typename,
}


@pytest.mark.parametrize("name", sorted(READS))
def test_samples_reads_match_a_list_and_keep_the_compact_store(pair, name):
    ours, theirs = pair
    assert READS[name](ours.samples) == READS[name](theirs.samples)
    assert ours.samples.compact


def test_samples_can_be_reassigned_like_torchvisions(pair):
    for ds in pair:
        ds.samples = ds.samples[:3]
    ours, theirs = pair
    assert ours.samples == theirs.samples and len(ours) == len(theirs) == 3
    assert len(ours.imgs) == len(theirs.imgs) == 12  # imgs is still the old list there too
    assert len(ours.targets) == 12
    ours.samples.append(ours.samples[0])  # the assigned object is the list in use
    assert len(ours) == 4 and ours[3][1] == ours[0][1]


def test_copies_and_pickles_keep_the_list(pair):
    ours, _ = pair
    for clone in (copy.copy(ours.samples), copy.deepcopy(ours.samples),
                  pickle.loads(pickle.dumps(ours.samples))):
        assert clone == ours.samples and clone.compact and clone is not ours.samples
    ours.samples.append(("x.jpg", 0))
    clone = copy.copy(ours.samples)
    clone.append(("y.jpg", 0))
    assert len(clone) == len(ours.samples) + 1
    again = pickle.loads(pickle.dumps(ours))
    assert again.samples == ours.samples and again.imgs is again.samples


def test_pickled_dataset_keeps_changed_targets(pair):
    ours, _ = pair
    ours.targets[0] = 7
    clone = pickle.loads(pickle.dumps(ours))
    assert clone.targets[0] == 7 and clone.targets == ours.targets


# ---------------------------------------------------------------------------
# Light import, lazy classes


LIGHT = textwrap.dedent("""
    import sys, pickle
    import fastdecode.datasets as ds
    heavy = sorted(m for m in ("torchvision", "PIL") if m in sys.modules)
    assert heavy == [], heavy
    import torchvision.datasets as tvd
    assert issubclass(ds.FastImageFolder, tvd.ImageFolder)
    assert pickle.loads(pickle.dumps(ds.FastImageFolder)) is ds.FastImageFolder
    from fastdecode.datasets import FastDatasetFolder
    assert FastDatasetFolder is ds.FastDatasetFolder and "FastImageFolder" in dir(ds)
    print("ok")
""")


@pytest.mark.slow  # a subprocess; make test keeps tests/cli's light-import probe of datasets
def test_import_is_light_and_the_classes_come_on_first_use():
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


class Relabelled(fd.FastImageFolder):
    """A user's subclass, made after the class was first used."""

    def find_classes(self, directory):
        classes, mapping = super().find_classes(directory)
        return classes[::-1], {name: len(classes) - 1 - i for name, i in mapping.items()}


def test_user_subclasses_work_and_pickle_by_reference(tree):
    ds = Relabelled(tree, T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()]))
    clone = pickle.loads(pickle.dumps(ds))
    assert type(clone) is Relabelled and isinstance(clone, ImageFolder)
    assert clone.targets[0] == 2 and clone[0][1] == 2 and clone[0][0].shape == (3, 32, 32)


# ---------------------------------------------------------------------------
# Without torchvision


NO_TORCHVISION = textwrap.dedent("""
    import sys, importlib.abc

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                raise ImportError("blocked: " + name)

    sys.meta_path.insert(0, Block())
    import warnings
    warnings.simplefilter("error")
    import fastdecode as fd
    import fastdecode.datasets
    from fastdecode.datasets import _base
    assert not _base.HAVE_TORCHVISION
    assert "PIL" not in sys.modules  # (torch itself imports tqdm)
    root = sys.argv[1]
    ds = fd.FastImageFolder(root)
    image, target = ds[len(ds) - 1]
    assert image.mode == "RGB" and target == 2, (image, target)
    assert ds.imgs is ds.samples and type(ds.targets) is list and len(ds) == 12
    assert ds.loader is fd.datasets.default_loader
    text = repr(fd.FastImageFolder(root, target_transform=abs))
    assert text.startswith("Dataset FastImageFolder\\n    Number of datapoints: 12\\n"), text
    assert "StandardTransform\\nTarget transform: <built-in function abs>" in text, text
    try:
        fd.FastImageFolder(root, transform=lambda im: im.size)
    except RuntimeWarning as w:
        assert "torchvision is not importable" in str(w), w
    else:
        raise AssertionError("no warning")
    warnings.simplefilter("ignore")
    assert fd.FastImageFolder(root, transform=lambda im: im.size)[0][0] == ds[0][0].size
    assert "torchvision" not in sys.modules
    print("ok")
""")


def test_works_without_torchvision(tree):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", NO_TORCHVISION, str(tree)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
