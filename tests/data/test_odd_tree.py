"""A tree holding one of each input that is not a plain image
(tests/helpers/odd_images.py), through FastImageFolder / FastDatasetFolder:
with on_error='raise' each bad file raises an ImageFileError (an OSError)
naming it, from ``ds[i]`` and from the ``__getitems__`` batch path, with a
fused chain and without; the odd but valid ones give ImageFolder's tensors;
'skip' loads every item (in-process, through a stock DataLoader with 2
workers, through FastLoader's threads) and 'warn' names each file. A
transform or target_transform that raises for one sample is the policy's
too (issue 27: one odd file, or one sample's transform, must not end a run).
"""

import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode import errors  # noqa: E402
from fastdecode.datasets import FastDatasetFolder, FastImageFolder, default_loader  # noqa: E402

from helpers.odd_images import DECODES, ERRORS, ODD, params  # noqa: E402
from helpers.trees import write_image  # noqa: E402

pytestmark = [pytest.mark.timeout(300),
              # the chains with a user step say once that it stopped fusion
              pytest.mark.filterwarnings("ignore:fastdecode stopped fusion:RuntimeWarning"),
              # most of the odd tree's files take Pillow: a dataset says so once
              # (docs/decisions/png-webp.md), counted in FastLoader's threads too
              pytest.mark.filterwarnings("ignore:fastdecode. .* took the Pillow path:RuntimeWarning")]

# The tree's odd files; each filter-dependent bomb case is the same bytes
# either way, so one file holds both.
IN_TREE = [n for n in ODD if not ODD[n].skip and n != "png-bomb-warning-ignored"]
BAD_IN_TREE = [n for n in IN_TREE if ODD[n].error is not None]
SUFFIXES = tuple(sorted({ODD[n].suffix for n in IN_TREE}))
FILE_ERROR = {fd.DecodeError: errors.ImageFileError,
              fd.UnsupportedFormatError: errors.UnsupportedImageFileError,
              fd.ImageTooLargeError: errors.ImageFileTooLargeError}
# ImageFolder's loader meets Pillow's bomb warning in the decoders' budget
QUIET_BOMB = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")


class RaiseOnMagenta:
    """A user transform that fails for one image of the tree (a flat magenta one)."""

    def __call__(self, img):
        r, g, b = np.asarray(img.convert("RGB"), dtype=np.float64).mean(axis=(0, 1))
        if r > 200 and g < 60 and b > 200:
            raise RuntimeError("RaiseOnMagenta: this one is magenta")
        return img

    def __repr__(self):
        return "RaiseOnMagenta()"


def raise_on_class_1(target):
    if target == 1:
        raise KeyError(f"no label for class {target}")
    return target


CHAINS = {
    # everything fused, a fixed output shape: the batched decode-in-place path
    "fused": lambda: T.Compose([T.RandomResizedCrop(24), T.ToTensor()]),
    # fused up to a user step, which runs unfused (a stop), then the rest
    "stop": lambda: T.Compose([T.Resize(24), T.CenterCrop(24), RaiseOnMagenta(), T.ToTensor()]),
    # the user step first: nothing fuses, the whole image is decoded
    "unfused": lambda: T.Compose([RaiseOnMagenta(), T.Resize(24), T.CenterCrop(24),
                                  T.ToTensor()]),
}
CHAIN_IDS = list(CHAINS)
PATHS = ["getitem", "getitems"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """good/: five ordinary images (one of them flat magenta); odd/: one file
    of each odd case."""
    root = tmp_path_factory.mktemp("oddtree")
    for i, (fmt, suffix) in enumerate([("JPEG", "jpg"), ("PNG", "png"), ("JPEG", "jpg"),
                                       ("BMP", "bmp")]):
        write_image(root / "good" / f"g{i}.{suffix}", fmt, size=(30 + 7 * i, 40 + 5 * i), seed=i)
    Image.new("RGB", (40, 30), (255, 0, 255)).save(root / "good" / "magenta.png")
    for name in IN_TREE:
        (root / "odd").mkdir(exist_ok=True)
        (root / "odd" / f"{name}{ODD[name].suffix}").write_bytes(ODD[name].make())
    return root


def make(tree, chain, cls="FastImageFolder", **kwargs):
    transform = CHAINS[chain]() if chain is not None else None
    if cls == "FastImageFolder":
        return FastImageFolder(tree, transform, **kwargs)
    return FastDatasetFolder(tree, default_loader, SUFFIXES, transform, **kwargs)


def index_of(ds, name):
    return [os.path.basename(p) for p, _ in ds.samples].index(f"{name}{ODD[name].suffix}")


def good_indices(ds):
    return [i for i, (p, _) in enumerate(ds.samples) if os.sep + "good" + os.sep in p
            and not p.endswith("magenta.png")]


def load(ds, indices, path):
    if path == "getitem":
        return [ds[i] for i in indices]
    return ds.__getitems__(list(indices))


def test_the_tree_holds_every_case(tree):
    ds = make(tree, None)
    assert len(ds) == 5 + len(IN_TREE)
    assert len(make(tree, None, "FastDatasetFolder")) == len(ds)


# -- 'raise': each bad file is an ImageFileError naming it -------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cls, chain", [("FastImageFolder", c) for c in CHAIN_IDS]
                         + [("FastImageFolder", None), ("FastDatasetFolder", "fused")],
                         ids=[f"ImageFolder-{c}" for c in CHAIN_IDS]
                         + ["ImageFolder-none", "DatasetFolder-fused"])
@pytest.mark.parametrize("name", params([n for n in ERRORS if n in IN_TREE]
                                        + ["png-bomb-warning-ignored"]))
def test_raise_names_the_file(tree, name, cls, chain, path):
    odd = ODD[name]
    ds = make(tree, chain, cls)
    file_name = "png-bomb-warning-as-error" if name == "png-bomb-warning-ignored" else name
    index = index_of(ds, file_name)
    with pytest.raises(FILE_ERROR[odd.error], match=odd.match) as info:
        load(ds, [good_indices(ds)[0], index], path)
    exc = info.value
    assert isinstance(exc, OSError) and isinstance(exc, odd.error)
    assert exc.filename == ds.samples[index][0] and exc.filename in str(exc)
    assert f"sample {index}:" in str(exc)


# -- the odd but valid files: ImageFolder's results ---------------------------

@pytest.mark.parametrize("chain", ["fused", None], ids=["fused", "none"])
@pytest.mark.parametrize("name", params([n for n in DECODES if n in IN_TREE]))
def test_valid_odd_files_load_as_imagefolder_loads_them(tree, name, chain):
    ours = make(tree, chain, exact=True)
    theirs = ImageFolder(tree, CHAINS[chain]() if chain else None)
    index = index_of(ours, name)
    for seed in range(3):
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PIL's own P + bytes-transparency warning
            want, want_target = theirs[index]
        torch.manual_seed(seed)
        got, target = ours[index]
        assert target == want_target
        if chain is None:
            assert np.array_equal(np.asarray(got), np.asarray(want))
        else:
            assert torch.equal(got, want)


# -- 'skip' and 'warn': every item loads, len is kept --------------------------

@QUIET_BOMB
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cls, chain", [("FastImageFolder", "fused"), ("FastImageFolder", None),
                                        ("FastDatasetFolder", "stop")],
                         ids=["ImageFolder-fused", "ImageFolder-none", "DatasetFolder-stop"])
def test_skip_loads_every_item(tree, cls, chain, path):
    ds = make(tree, chain, cls, on_error="skip")
    n = len(ds)
    items = load(ds, range(n), path) if path == "getitem" else [
        s for start in range(0, n, 8) for s in load(ds, range(start, min(n, start + 8)), path)]
    assert len(items) == n == len(ds)
    # each bad file (and the magenta one, when the chain looks at it) was replaced
    assert ds.skipped >= len(BAD_IN_TREE) + (chain != "fused" and chain is not None)


@QUIET_BOMB
def test_skip_substitutes_the_same_sample_every_time(tree):
    ds = make(tree, "stop", on_error="skip")
    reference = make(tree, "stop")
    for name in BAD_IN_TREE:
        index = index_of(ds, name)
        first, second = ds[index], ds[index]
        assert torch.equal(first[0], second[0]) and first[1] == second[1]
        stand_in = ds._replacement(index, 0)
        if stand_in in good_indices(ds):  # a good file stands in: it is that file's sample
            want = reference[stand_in]
            assert torch.equal(first[0], want[0]) and first[1] == want[1]


@QUIET_BOMB
def test_warn_names_each_bad_file(tree):
    ds = make(tree, "fused", on_error="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in BAD_IN_TREE:
            ds[index_of(ds, name)]
    said = "\n".join(str(w.message) for w in caught if w.category is RuntimeWarning)
    for name in BAD_IN_TREE:
        assert f"{name}{ODD[name].suffix}" in said


@QUIET_BOMB
@pytest.mark.parametrize("chain", ["fused", "stop"])
def test_skip_through_a_stock_dataloader_with_2_workers(tree, chain):
    ds = make(tree, chain, on_error="skip")
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
    batches = list(loader)
    assert sum(len(targets) for _, targets in batches) == len(ds)
    assert all(images.shape[1:] == (3, 24, 24) for images, _ in batches)


@QUIET_BOMB
@pytest.mark.parametrize("chain", ["fused", "stop", "unfused"])
def test_skip_through_fastloader_threads(tree, chain):
    ds = make(tree, chain, on_error="skip")
    loader = fd.FastLoader(ds, batch_size=8, threads=2, generator=torch.Generator().manual_seed(0))
    batches = list(loader)
    assert sum(len(targets) for _, targets in batches) == len(ds)
    again = list(fd.FastLoader(ds, batch_size=8, threads=2,
                               generator=torch.Generator().manual_seed(0)))
    for (a, x), (b, y) in zip(batches, again):
        assert torch.equal(a, b) and torch.equal(x, y)


@pytest.mark.parametrize("chain", ["fused", "unfused"])
def test_raise_through_fastloader_threads_names_the_file(tree, chain):
    ds = make(tree, chain)
    index = index_of(ds, "stub-bufr-jfif")
    loader = fd.FastLoader(ds, batch_size=2, sampler=[good_indices(ds)[0], index], threads=2)
    with pytest.raises(errors.UnsupportedImageFileError, match="BUFR: Pillow identifies") as info:
        list(loader)
    assert info.value.filename == ds.samples[index][0]


# -- a transform that raises for one sample ----------------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("chain", ["stop", "unfused"])
def test_a_transform_error_is_raised_as_it_is(tree, chain, path):
    ds = make(tree, chain)
    magenta = [i for i, (p, _) in enumerate(ds.samples) if p.endswith("magenta.png")]
    with pytest.raises(RuntimeError, match="RaiseOnMagenta"):
        load(ds, [good_indices(ds)[0]] + magenta, path)


@pytest.mark.parametrize("policy", ["skip", "warn"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("chain", ["stop", "unfused"])
def test_a_transform_error_is_skipped(tree, chain, path, policy):
    good = make(tree, chain)
    ds = make(tree, chain, on_error=policy)
    indices = good_indices(good) + [i for i, (p, _) in enumerate(ds.samples)
                                    if p.endswith("magenta.png")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = load(ds, indices, path)
    assert len(items) == len(indices) and ds.skipped >= 1
    for (got, target), index in zip(items, indices[:-1]):  # the good ones are themselves
        want, want_target = good[index]
        assert torch.equal(got, want) and target == want_target
    said = [str(w.message) for w in caught if w.category is RuntimeWarning]
    if policy == "warn":
        assert any("magenta.png" in m and "RuntimeError: RaiseOnMagenta" in m for m in said)
    else:
        assert said == []


@pytest.mark.parametrize("path", PATHS)
def test_a_target_transform_error_follows_the_policy(tree, path):
    raising = make(tree, "fused", target_transform=raise_on_class_1)
    odd = [i for i, (_, t) in enumerate(raising.samples) if t == 1][:1]
    with pytest.raises(KeyError, match="no label for class 1"):
        load(raising, good_indices(raising)[:1] + odd, path)
    ds = make(tree, "fused", target_transform=raise_on_class_1, on_error="skip")
    items = load(ds, good_indices(ds)[:1] + odd, path)
    assert [t for _, t in items] == [0, 0]  # the stand-in is a sample of class 0
    assert ds.skipped >= 1


def test_a_transform_error_skipped_through_2_workers(tree):
    ds = make(tree, "stop", on_error="skip")
    good = [i for i, (p, _) in enumerate(ds.samples) if os.sep + "good" + os.sep in p]
    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, good), batch_size=2,
                                         num_workers=2)
    assert sum(len(targets) for _, targets in loader) == len(good)
