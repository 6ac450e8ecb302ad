"""FastImageFolder / FastDatasetFolder against torchvision's ImageFolder on the same trees."""

from __future__ import annotations

import pickle
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import DatasetFolder, ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode import datasets  # noqa: E402
from fastdecode.loader._loader import collate  # noqa: E402

from helpers.trees import corrupt_file, make_tree, symlink_class  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_chain(v):
    if v == 1:
        return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    return v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def eval_chain(v):
    if v == 1:
        return T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])
    return v2.Compose([v2.Resize(72), v2.CenterCrop(64), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


CHAINS = [pytest.param(f, v, id=f"{f.__name__.split('_')[0]}-v{v}")
          for f in (train_chain, eval_chain) for v in (1, 2)]


def psnr_float(a, b):
    a, b = torch.as_tensor(a).float(), torch.as_tensor(b).float()
    # normalized floats: compare on the 0-255 scale of the underlying pixels
    mse = torch.mean(((a - b) * 255 * 0.226) ** 2).item()
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("tree"))


# ---------------------------------------------------------------------------
# torchvision's contract


def test_same_classes_samples_targets(tree):
    ours, theirs = fd.FastImageFolder(tree), ImageFolder(tree)
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples and list(ours.samples) == theirs.samples
    assert ours.imgs == theirs.imgs and ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 12
    assert ours.samples[-1] == theirs.samples[-1] and ours.samples[1:3] == theirs.samples[1:3]
    assert np.array_equal(np.asarray(ours.targets), theirs.targets)
    assert datasets.IMG_EXTENSIONS == tv.datasets.folder.IMG_EXTENSIONS


def test_is_valid_file_and_dataset_folder_extensions(tree):
    def only_png(path):
        return path.endswith(".png")

    assert fd.FastImageFolder(tree, is_valid_file=only_png).samples == ImageFolder(
        tree, is_valid_file=only_png).samples
    ours = fd.FastDatasetFolder(tree, datasets.default_loader, extensions=(".txt",))
    theirs = DatasetFolder(tree, loader=open, extensions=(".txt",))
    assert ours.samples == theirs.samples


def test_symlinked_class_folders_are_followed(tmp_path):
    root = make_tree(tmp_path / "root", per_class=2, classes=("a",))
    other = make_tree(tmp_path / "other", per_class=2, classes=("b",))
    symlink_class(root, other / "b", "b")
    assert fd.FastImageFolder(root).samples == ImageFolder(root).samples
    assert len(fd.FastImageFolder(root)) == 4


def test_missing_and_empty_class_folders_raise_like_torchvision(tmp_path):
    (tmp_path / "empty_root").mkdir()
    with pytest.raises(FileNotFoundError, match="Couldn't find any class folder"):
        fd.FastImageFolder(tmp_path / "empty_root")
    root = make_tree(tmp_path / "r", per_class=1, classes=("a",))
    (root / "zzz").mkdir()
    with pytest.raises(FileNotFoundError, match="Found no valid file for the classes zzz"):
        fd.FastImageFolder(root)
    assert fd.FastImageFolder(root, allow_empty=True).classes == ["a", "zzz"]
    with pytest.raises(ValueError, match="Both extensions and is_valid_file"):
        fd.FastDatasetFolder(root, datasets.default_loader, extensions=(".jpg",),
                             is_valid_file=lambda p: True)
    with pytest.raises(ValueError, match="class_to_idx parameter cannot be None"):
        fd.FastDatasetFolder.make_dataset(root, None, extensions=(".jpg",))


def test_find_classes_can_be_overridden(tree):
    class OnlyCats(fd.FastImageFolder):
        def find_classes(self, directory):
            return ["cat"], {"cat": 0}

    ds = OnlyCats(tree)
    assert ds.classes == ["cat"] and len(ds) == 4 and set(ds.targets) == {0}


def test_file_list_is_compact_and_pickles(tree):
    ds = fd.FastImageFolder(tree)
    # three arrays instead of one Python tuple (and two objects) per file
    assert ds.samples.compact and ds.samples.store.nbytes < 100 * len(ds) + 200
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.samples == ds.samples and clone.samples.compact
    assert clone.targets == ds.targets and clone.imgs is clone.samples


# ---------------------------------------------------------------------------
# What __getitem__ returns


def test_no_transform_gives_the_pil_image_imagefolder_gives(tree):
    ours, theirs = fd.FastImageFolder(tree), ImageFolder(tree)
    for i in range(len(ours)):
        (a, ta), (b, tb) = ours[i], theirs[i]
        assert ta == tb and a.mode == b.mode == "RGB" and a.size == b.size
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("chain,v", CHAINS)
def test_same_seed_same_tensors_as_imagefolder(tree, chain, v):
    ours, theirs = fd.FastImageFolder(tree, chain(v)), ImageFolder(tree, chain(v))
    for i in range(len(ours)):
        torch.manual_seed(i)
        a, ta = ours[i]
        torch.manual_seed(i)
        b, tb = theirs[i]
        assert ta == tb and a.shape == b.shape and a.dtype == b.dtype
        assert psnr_float(a, b) >= 35, f"sample {i}"


def test_custom_loader_is_honoured(tree):
    calls = []

    def loader(path):
        calls.append(path)
        return path

    ds = fd.FastImageFolder(tree, transform=len, loader=loader)
    sample, target = ds[0]
    assert calls == [ds.samples[0][0]] and sample == len(ds.samples[0][0]) and target == 0


def test_target_transform(tree):
    ds = fd.FastImageFolder(tree, transform=eval_chain(1), target_transform=lambda t: t * 10)
    assert ds[len(ds) - 1][1] == 20
    assert [t for _, t in ds.__getitems__([0, 11])] == [0, 20]


# ---------------------------------------------------------------------------
# Bad files


@pytest.fixture()
def broken_tree(tmp_path):
    root = make_tree(tmp_path / "broken", per_class=3, classes=("a", "b"))
    corrupt_file(root / "a" / "img1.jpg")
    return root


def test_on_error_raise_names_path_and_index(broken_tree):
    ds = fd.FastImageFolder(broken_tree, eval_chain(1))
    with pytest.raises(fd.DecodeError, match=r"img1\.jpg: sample 1: truncated JPEG") as info:
        ds[1]
    assert info.value.path.endswith("img1.jpg")
    with pytest.raises(fd.DecodeError, match="sample 1"):
        ds.__getitems__([0, 1])


@pytest.mark.parametrize("transform", [pytest.param(None, id="pil"),
                                       pytest.param(eval_chain(1), id="fused")])
def test_on_error_skip_is_deterministic_and_counted(broken_tree, transform):
    ds = fd.FastImageFolder(broken_tree, transform, on_error="skip")
    first, second = ds[1], ds[1]
    assert ds.skipped == 2
    assert first[1] == second[1]
    if transform is not None:
        torch.testing.assert_close(first[0], second[0])
        batch = ds.__getitems__([0, 1, 2])
        assert ds.skipped == 3 and len(batch) == 3


def test_on_error_warn_warns(broken_tree):
    ds = fd.FastImageFolder(broken_tree, eval_chain(1), on_error="warn")
    with pytest.warns(RuntimeWarning, match="skipping unreadable sample.*img1.jpg"):
        ds[1]
    with pytest.raises(ValueError, match="on_error must be one of"):
        fd.FastImageFolder(broken_tree, on_error="ignore")


def test_missing_file_is_a_decode_error(tree, tmp_path):
    root = make_tree(tmp_path / "t", per_class=2, classes=("a",))
    ds = fd.FastImageFolder(root, eval_chain(1))
    (root / "a" / "img0.jpg").unlink()
    with pytest.raises(fd.DecodeError, match="cannot read file"):
        ds[0]


# ---------------------------------------------------------------------------
# Batches decoded in place


@pytest.mark.parametrize("chain,v", CHAINS)
def test_getitems_equals_the_per_item_path(tree, chain, v):
    ds = fd.FastImageFolder(tree, chain(v))
    indices = [3, 0, 7, 11, 5]
    torch.manual_seed(7)
    singles = [ds[i] for i in indices]
    torch.manual_seed(7)
    batch = ds.__getitems__(indices)
    for (a, ta), (b, tb) in zip(singles, batch):
        assert ta == tb
        # b is a BatchRow (the stock collate's way to the batch), a plain tensor's subclass
        torch.testing.assert_close(torch.as_tensor(a), b.as_subclass(torch.Tensor), rtol=0, atol=0)


def test_getitems_is_one_batch_that_collate_takes_whole(tree):
    ds = fd.FastImageFolder(tree, T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]))
    assert ds.fixed_sample_shape() == (3, 32, 32) and ds.pixel_table() is None
    batch = ds.__getitems__([0, 1, 2, 3])
    images, targets = collate(batch)
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.uint8
    assert images.data_ptr() == batch[0][0].data_ptr()  # no copy
    assert torch.equal(targets, torch.tensor([0, 0, 0, 0]))
    stock = torch.utils.data.default_collate(batch)  # the stock collate takes it whole too
    assert torch.equal(stock[0], images) and stock[0].data_ptr() == images.data_ptr()
    assert type(stock[0]) is torch.Tensor and type(batch[0][0]) is not torch.Tensor


TAILS = [
    pytest.param(lambda: eval_chain(1), id="float"),
    pytest.param(lambda: T.Compose([T.Resize(72), T.CenterCrop(64), T.PILToTensor()]),
                 id="uint8"),
]


@pytest.fixture
def batch_buffers_fresh(monkeypatch):
    """This thread has not seen fastdecode.collate take a batch whole."""
    from fastdecode.batching import _buffers

    monkeypatch.setattr(_buffers._taken_whole, "flag", False, raising=False)


def _copying_collate(batch):
    """A user collate that copies the samples (the stock collate no longer does)."""
    return torch.stack([x for x, _ in batch]), [t for _, t in batch]


@pytest.mark.parametrize("chain", TAILS)
def test_getitems_reuses_its_batch_once_a_copying_collate_let_go(tree, chain,
                                                                 batch_buffers_fresh):
    ds = fd.FastImageFolder(tree, chain())
    batch = ds.__getitems__([0, 1, 2])
    base = weakref.ref(batch[0][0]._base)
    _copying_collate(batch)
    del batch
    again = ds.__getitems__([3, 4, 5])
    assert again[0][0]._base is base() is not None
    for (image, target), i in zip(again, [3, 4, 5]):
        expected, expected_target = ds[i]
        assert target == expected_target and torch.equal(image, expected)


@pytest.mark.parametrize("chain", TAILS)
def test_getitems_never_writes_over_a_sample_still_held(tree, chain, batch_buffers_fresh):
    ds = fd.FastImageFolder(tree, chain())
    held = ds.__getitems__([0, 1, 2])[1][0]
    snapshot = held.clone()
    again = ds.__getitems__([3, 4, 5])
    assert again[0][0].untyped_storage().data_ptr() != held.untyped_storage().data_ptr()
    assert torch.equal(held, snapshot)


def test_a_batch_sent_to_another_process_is_never_reused(tree, batch_buffers_fresh):
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

    ds = fd.FastImageFolder(tree, eval_chain(1))
    batch = ds.__getitems__([0, 1, 2])
    ForkingPickler.dumps(batch[0][0])  # moves the storage to shared memory, in place
    assert batch[0][0].is_shared()
    del batch
    ds.__getitems__([3, 4, 5])
    buffers = ds._batch_buffers()
    assert buffers.sent and "batch" not in buffers.kept


def test_collate_that_takes_batches_whole_in_process_gets_pooled_ones(tree,
                                                                     batch_buffers_fresh):
    """In-process, batches taken whole come from the 2-deep pool (reuse:
    tests/data/test_loader.py); in a worker they are fresh
    (test_collate_takes_every_worker_batch_whole)."""
    ds = fd.FastImageFolder(tree, eval_chain(1))
    images, _ = collate(ds.__getitems__([0, 1, 2]))
    del images
    ds.__getitems__([3, 4, 5])
    buffers = ds._batch_buffers()
    assert not buffers.sent and "batch" not in buffers.kept and len(buffers.pools["batch"]) == 1


@pytest.mark.parametrize("chain", TAILS)
def test_a_shorter_batch_is_the_first_rows_of_the_buffer(tree, chain, batch_buffers_fresh):
    ds = fd.FastImageFolder(tree, chain())
    batch = ds.__getitems__([0, 1, 2, 3])
    base = weakref.ref(batch[0][0]._base)
    _copying_collate(batch)
    del batch
    short = ds.__getitems__([4, 5])
    assert short[0][0]._base is base() is not None and len(short) == 2
    for (image, target), i in zip(short, [4, 5]):
        expected, expected_target = ds[i]
        assert target == expected_target and torch.equal(image, expected)
    images, _ = collate(short)  # the buffer's first rows, taken whole
    assert images.shape[0] == 2 and images.data_ptr() == short[0][0].data_ptr()


def _collate_reporting_copies(batch):
    """fastdecode.collate, plus whether it handed the samples' own memory on."""
    images, targets = collate(batch)
    return images, targets, images.data_ptr() == batch[0][0].data_ptr()


@pytest.mark.parametrize("chain", TAILS)
def test_collate_takes_every_worker_batch_whole(tree, chain):
    """In a worker the batches are born on a slot of its shared pool, as the
    batch tensor's own storage: fastdecode.collate copies none of them (a
    copy would fault in a second batch per batch)."""
    ds = fd.FastImageFolder(tree, chain())
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=1,
                                         collate_fn=_collate_reporting_copies)
    taken = [whole for images, _, whole in loader]
    assert len(taken) == len(loader) >= 3 and all(taken)


def test_variable_size_chains_fall_back_to_items(tree):
    ds = fd.FastImageFolder(tree, T.Compose([T.Resize(40), T.ToTensor()]))
    assert ds.fixed_sample_shape() is None
    batch = ds.__getitems__([0, 5])
    assert [b[0].shape[0] for b in batch] == [3, 3]
    assert collate([batch[0]])[0].shape[0] == 1


def test_dataloader_with_workers_matches_imagefolder(tree):
    def run(dataset_cls):
        ds = dataset_cls(tree, train_chain(1))
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=True,
                                             generator=torch.Generator().manual_seed(3))
        return [(x, y) for x, y in loader]

    ours, theirs = run(fd.FastImageFolder), run(ImageFolder)
    for (a, ya), (b, yb) in zip(ours, theirs):
        assert torch.equal(ya, yb)
        assert psnr_float(a, b) >= 35
