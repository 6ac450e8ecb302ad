"""Bad files through FastImageFolder: errors that ImageFolder-era code catches (OSError) and
fastdecode code catches (DecodeError), the same verdict for a file whatever the random crop, and
files that change under a running epoch (2 DataLoader workers, bounded in time)."""

import errno
import functools
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import UnidentifiedImageError  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode import (
    datasets,  # noqa: E402
    errors,  # noqa: E402
)

from helpers.trees import make_tree, write_image  # noqa: E402

TRAIN = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor()])
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
SEEDS = range(50)


def _big_jpeg(tmp_path):
    return write_image(tmp_path / "src.jpg", "JPEG", size=(480, 640), seed=5).read_bytes()


# What each bad file is; the full-decode verdict comes from ImageFolder itself.
BAD = {
    "truncated-half": lambda data: data[: len(data) // 2],
    "truncated-tail": lambda data: data[: len(data) * 9 // 10],
    "no-eoi": lambda data: data[:-2],
    "zero-byte": lambda data: b"",
    "not-an-image": lambda data: b"plain text, named .jpg",
}
# A crop decode that stops before the end gives the full decode's verdict
# (the C core checks the rest of the file: tests/core/test_crop_verdict.py).


def _bad_params():
    for name in BAD:
        yield pytest.param(name, id=name)


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory):
    root = make_tree(tmp_path_factory.mktemp("bad"), per_class=2, classes=("a", "b"))
    data = _big_jpeg(root.parent)
    assert data.endswith(b"\xff\xd9")
    for name, cut in BAD.items():
        (root / "b" / f"{name}.jpg").write_bytes(cut(data))
    return root


def _index(ds, name):
    return [os.path.basename(p) for p, _ in ds.samples].index(f"{name}.jpg")


class SkipBad(torch.utils.data.Dataset):
    """The usual wrapper around an ImageFolder, as written for torchvision."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        try:
            return self.dataset[index]
        except (OSError, UnidentifiedImageError):
            return None


def verdicts(dataset, index):
    wrapped = SkipBad(dataset)
    out = set()
    for seed in SEEDS:
        torch.manual_seed(seed)
        out.add(wrapped[index] is None)
    return out


@pytest.mark.parametrize("name", list(_bad_params()))
def test_skip_wrapper_for_imagefolder_works_unchanged(bad_tree, name):
    theirs, ours = ImageFolder(bad_tree, TRAIN), fd.FastImageFolder(bad_tree, TRAIN)
    index = _index(ours, name)
    assert verdicts(theirs, index) == {True}  # ImageFolder rejects every one of them
    assert verdicts(ours, index) == {True}  # the same file, the same verdict, every seed


@pytest.mark.parametrize("exact", [False, True], ids=["default", "exact"])
def test_good_files_pass_under_every_seed(bad_tree, exact):
    ours = fd.FastImageFolder(bad_tree, TRAIN, exact=exact)
    good = [i for i, (p, _) in enumerate(ours.samples) if os.path.basename(p).startswith("img")]
    assert good and all(verdicts(ours, i) == {False} for i in good)


@pytest.mark.parametrize("name,kind,says", [
    ("truncated-half", errors.ImageFileError, ""),
    ("zero-byte", errors.ImageFileError, "Empty input file$"),  # as decode_jpeg says it
    ("not-an-image", errors.UnsupportedImageFileError, "unrecognized image format")])
def test_item_errors_are_oserrors_and_decode_errors(bad_tree, name, kind, says):
    ds = fd.FastImageFolder(bad_tree, EVAL)
    index = _index(ds, name)
    with pytest.raises(kind, match=rf"{name}\.jpg: sample {index}: {says}") as info:
        ds[index]
    exc = info.value
    assert isinstance(exc, OSError) and isinstance(exc, fd.DecodeError)
    assert exc.path == exc.filename == ds.samples[index][0] and exc.errno is None
    clone = pickle.loads(pickle.dumps(exc))
    assert type(clone) is kind and clone.path == exc.path and str(clone) == str(exc)


def test_decode_functions_keep_raising_plain_decode_errors():
    with pytest.raises(fd.UnsupportedFormatError, match="unrecognized image format") as info:
        fd.decode_image(b"plain text")
    assert not isinstance(info.value, OSError) and isinstance(info.value, ValueError)


def test_missing_file_keeps_its_errno(tmp_path):
    root = make_tree(tmp_path / "t", per_class=2, classes=("a",))
    ds = fd.FastImageFolder(root, EVAL)
    os.unlink(ds.samples[1][0])
    with pytest.raises(errors.ImageFileError, match=r"img1\.jpg: sample 1: cannot read file: "
                       "No such file or directory") as info:
        ds[1]
    assert info.value.errno == errno.ENOENT
    with pytest.raises(OSError, match="No such file"):
        ds.loader(ds.samples[1][0])
    with pytest.raises(errors.ImageFileError, match="No such file"):
        datasets.default_loader(ds.samples[1][0])


# ---------------------------------------------------------------------------
# Files that change between the scan and the read, under 2 workers


def _truncate(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 3])


def _garbage(path):
    with open(path, "wb") as f:
        f.write(os.urandom(4096))


@functools.lru_cache(maxsize=None)
def _reads_any_file() -> bool:
    """Whether this process reads a file whatever its mode (root with CAP_DAC_OVERRIDE)."""
    with tempfile.NamedTemporaryFile() as probe:
        os.chmod(probe.name, 0)
        try:
            open(probe.name, "rb").close()
        except PermissionError:
            return False
        return True


def _unreadable(path):
    if _reads_any_file():
        pytest.skip("this process reads files whatever their mode (root): "
                    "test_no_permission_cases_without_dac_override runs these cases")
    os.chmod(path, 0)


FAULTS = {"truncated": _truncate, "garbage": _garbage, "deleted": os.unlink,
          "no-permission": _unreadable}
VICTIM = 5


@pytest.fixture
def changed(tmp_path, request):
    """A dataset scanned over 16 good files, then one of them changed."""
    root = make_tree(tmp_path / "t", per_class=8, classes=("a", "b"))
    datasets = {policy: fd.FastImageFolder(root, EVAL, on_error=policy)
                for policy in ("raise", "skip", "warn")}
    FAULTS[request.param](datasets["raise"].samples[VICTIM][0])
    return datasets


def _epoch(dataset, workers):
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers,
                                         timeout=30 if workers else 0)
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("changed", sorted(FAULTS), indirect=True)
def test_raise_names_the_file_and_index_through_workers(changed):
    path = changed["raise"].samples[VICTIM][0]
    with pytest.raises(OSError, match=rf"{os.path.basename(path)}: sample {VICTIM}: "):
        _epoch(changed["raise"], workers=2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["skip", "warn"])
@pytest.mark.parametrize("changed", sorted(FAULTS), indirect=True)
def test_skip_and_warn_continue_deterministically_through_workers(changed, policy):
    dataset = changed[policy]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if policy == "warn" else "error")
        first, second = _epoch(dataset, workers=2), _epoch(dataset, workers=2)
        in_process = _epoch(dataset, workers=0)
    assert sum(len(y) for _, y in first) == len(dataset)
    for a, b, c in zip(first, second, in_process):
        assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0])
        assert torch.equal(a[1], b[1]) and torch.equal(a[1], c[1])
    assert dataset.skipped == 1  # the in-process epoch: one stand-in for the changed file


@pytest.mark.slow  # a pytest run as an unprivileged user, ~14 s: make test-full
@pytest.mark.timeout(360)
@pytest.mark.skipif(not _reads_any_file(), reason="the no-permission cases run directly")
def test_no_permission_cases_without_dac_override():
    """Root reads a file whatever its mode, so here the three no-permission
    cases above run in a pytest of their own without the capabilities that
    bypass file modes (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    run = subprocess.run(
        [setpriv, "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-m",
         "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",  # a GPU image's plugin
         f"{__file__}::test_raise_names_the_file_and_index_through_workers",
         f"{__file__}::test_skip_and_warn_continue_deterministically_through_workers",
         "-k", "no-permission"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_warn_says_which_file_it_skipped(changed_deleted):
    with pytest.warns(RuntimeWarning, match=rf"skipping unreadable sample: .*sample {VICTIM}: "
                      "cannot read file"):
        changed_deleted["warn"][VICTIM]


@pytest.fixture
def changed_deleted(tmp_path):
    root = make_tree(tmp_path / "t", per_class=8, classes=("a", "b"))
    ds = {"warn": fd.FastImageFolder(root, EVAL, on_error="warn")}
    os.unlink(ds["warn"].samples[VICTIM][0])
    return ds


# ---------------------------------------------------------------------------
# A decompression bomb in the tree: refused by the core's work budget on every path


def _bomb_jpeg(declared=13000):
    """A 16 x 16 progressive JPEG whose SOF declares declared x declared (as the
    core's work-budget tests build it): inside max_pixels, refused by the work budget."""
    import io
    import struct

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=90, progressive=True)
    data = buf.getvalue()
    i = data.index(b"\xff\xc2")
    return data[:i + 5] + struct.pack(">HH", declared, declared) + data[i + 9:]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transform", [pytest.param(None, id="pil"),
                                       pytest.param(EVAL, id="eval"),
                                       pytest.param(TRAIN, id="train")])
def test_a_bomb_is_an_oserror_the_skip_wrapper_catches(tmp_path, transform):
    root = make_tree(tmp_path / "t", per_class=2, classes=("a",))
    (root / "a" / "bomb.jpg").write_bytes(_bomb_jpeg())
    ds = fd.FastImageFolder(root, transform)
    index = _index(ds, "bomb")
    with pytest.raises(errors.ImageFileTooLargeError, match=rf"bomb\.jpg: sample {index}: .*"
                       "max_work_per_byte"):
        ds[index]
    assert SkipBad(ds)[index] is None
