"""fastdecode.integrations.timm against the installed timm: its dataset factory builds fastdecode
datasets with timm's labels and timm's transforms, and a script runs unchanged under
``python -m fastdecode.integrations.timm``."""

import gc
import os
import random
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from timm.data import create_dataset, create_loader  # noqa: E402
from timm.data.dataset import ImageDataset  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.integrations import timm as fd_timm  # noqa: E402

from helpers.trees import make_tree, write_image  # noqa: E402


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = make_tree(tmp_path_factory.mktemp("timm") / "train", per_class=3,
                     classes=("class10", "class2", "class1"))  # natural sort != sorted
    write_image(root / "class2" / "deeper" / "leaf" / "x.jpg", "JPEG", (90, 70), seed=9)
    return root


@pytest.fixture
def installed():
    fd_timm.install(exact=True)
    yield
    fd_timm.uninstall()


def fusion_warnings_only(record):
    """timm's chains may not fuse yet: the only warnings allowed say so (and timm's own
    ImageDataset leaves its files to the garbage collector: ResourceWarning, timm's)."""
    others = [str(w.message) for w in record if "stopped fusion" not in str(w.message)
              and not issubclass(w.category, ResourceWarning)]
    assert others == []


def test_install_and_uninstall_swap_the_factory_names(tree):
    from timm.data import dataset_factory

    assert not fd_timm.installed() and dataset_factory.ImageDataset is ImageDataset
    fd_timm.install()
    try:
        assert fd_timm.installed() and dataset_factory.ImageFolder is not ImageFolder
    finally:
        fd_timm.uninstall()
    assert dataset_factory.ImageDataset is ImageDataset
    assert dataset_factory.ImageFolder is ImageFolder


def test_folder_dataset_has_timms_labels_and_order(tree, installed):
    ours = create_dataset("", root=str(tree.parent), split="train", is_training=True)
    fd_timm.uninstall()
    theirs = create_dataset("", root=str(tree.parent), split="train", is_training=True)
    assert isinstance(ours, fd_timm.TimmImageFolder) and isinstance(ours, fd.FastImageFolder)
    assert isinstance(ours, ImageFolder) and isinstance(theirs, ImageDataset)
    assert ours.samples == theirs.reader.samples  # leaf-folder labels, natural sort
    assert ours.class_to_idx == theirs.reader.class_to_idx
    assert ours.filenames() == theirs.filenames()
    assert ours.filenames(basename=True) == theirs.filenames(basename=True)
    assert ours.filename(3, absolute=True) == theirs.filename(3, absolute=True)


def test_torch_image_folder_is_a_fast_image_folder(tree, installed):
    ours = create_dataset("torch/image_folder", root=str(tree.parent), split="train")
    assert type(ours) is fd.FastImageFolder and ours.exact
    assert ours.samples == ImageFolder(tree).samples


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_loader_batches_equal_timms_own(tree, installed, training):
    def batches(dataset):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            loader = create_loader(dataset, input_size=(3, 32, 32), batch_size=4,
                                   is_training=training, use_prefetcher=False, num_workers=0)
            random.seed(5)
            torch.manual_seed(5)
            out = [(x.clone(), y.clone()) for x, y in loader]
            del loader
            gc.collect()  # timm's unclosed files warn here, inside the block
        fusion_warnings_only(record)
        return out

    ours = batches(create_dataset("", root=str(tree.parent), split="train", is_training=training))
    fd_timm.uninstall()
    theirs = batches(create_dataset("", root=str(tree.parent), split="train",
                                    is_training=training))
    assert len(ours) == len(theirs) == (2 if training else 3)  # timm drops the last in training
    for (a, ya), (b, yb) in zip(ours, theirs):
        assert torch.equal(ya, yb) and torch.equal(a, b)


def test_configurations_fastdecode_does_not_serve_stay_timms_and_say_so(tree, installed):
    with pytest.warns(RuntimeWarning, match="load_bytes=True is timm's own path"):
        ds = create_dataset("", root=str(tree.parent), split="train", load_bytes=True)
    assert isinstance(ds, ImageDataset)
    with pytest.warns(RuntimeWarning, match="input_img_mode='L' is timm's own path"):
        ds = create_dataset("", root=str(tree.parent), split="train", input_img_mode="L")
    assert isinstance(ds, ImageDataset)


def test_bad_files_are_skipped_by_timm_style_oserror_handlers(tmp_path, installed):
    root = make_tree(tmp_path / "train", per_class=2, classes=("a",))
    (root / "a" / "img0.jpg").write_bytes(b"not a jpeg")
    ds = create_dataset("", root=str(tmp_path), split="train")
    with pytest.raises(OSError, match="img0.jpg: sample 0"):  # timm catches (IOError, OSError)
        ds[0]


SCRIPT = textwrap.dedent("""
    import sys
    from timm.data import create_dataset  # bound before anything else runs, as in train.py
    ds = create_dataset("", root=sys.argv[1], split="train")
    print(type(ds).__module__, type(ds).__name__, len(ds), __name__)
""")


@pytest.mark.slow  # a training script in a subprocess, ~9 s: make test-full
def test_a_script_runs_unchanged_under_the_module(tree, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, "-m", "fastdecode.integrations.timm", str(script),
                          str(tree.parent)], capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, PYTHONWARNINGS="error"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fastdecode.integrations.timm", "TimmImageFolder", "10",
                                  "__main__"]
