"""The decode limits on the datasets: max_pixels and max_work_per_byte reach
every decode a FastImageFolder runs (fused and unfused, __getitem__ and
__getitems__, in workers), on the bomb files tests/core builds."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode._options import DEFAULTS  # noqa: E402

from core.test_work_budget import tiny_jpeg, tiny_rle_bmp  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402

MID = 2000  # declared 2000 x 2000: inside the default budget, cheap to decode
BOMBS = {"jpeg": lambda: tiny_jpeg(declared=MID), "bmp": lambda: tiny_rle_bmp(declared=MID)}
TIGHT = {"max_work_per_byte": 16}
CHAINS = {
    "fused": lambda: T.Compose([T.Resize(16), T.CenterCrop(16), T.PILToTensor()]),
    "unfused": lambda: None,  # the PIL image, decoded by decode_image
}


def make_tree(root, bomb: bytes, ext: str):
    """class a: 0 the bomb, 1 a real 32x32 JPEG."""
    (root / "a").mkdir()
    (root / "a" / f"0bomb.{ext}").write_bytes(bomb)
    (root / "a" / "1good.jpg").write_bytes(encode(32, 32))
    return root


@pytest.fixture(params=BOMBS, ids=list(BOMBS))
def tree(request, tmp_path):
    return make_tree(tmp_path, BOMBS[request.param](), "jpg" if request.param == "jpeg" else "bmp")


def test_the_defaults_are_the_decoders():
    ds_sig = fd.FastImageFolder.__init__.__kwdefaults__
    assert {k: ds_sig[k] for k in ("max_pixels", "max_work_per_byte")} == {
        k: DEFAULTS[k] for k in ("max_pixels", "max_work_per_byte")}


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_a_tightened_budget_refuses_the_bomb_naming_file_and_index(tree, chain):
    ds = fd.FastImageFolder(tree, CHAINS[chain](), **TIGHT)
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.\w+: sample 0: .*max_work_per_byte=16"):
        ds[0]
    assert ds[1][1] == 0  # the real file still decodes


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_the_default_budget_decodes_it_and_a_loosened_one_too(tree, chain):
    for limits in ({}, {"max_work_per_byte": None}):
        image, _ = fd.FastImageFolder(tree, CHAINS[chain](), **limits)[0]
        assert (image.size if chain == "unfused" else tuple(image.shape)) == (
            (MID, MID) if chain == "unfused" else (3, 16, 16))


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_a_tightened_max_pixels_refuses_the_bomb(tree, chain):
    ds = fd.FastImageFolder(tree, CHAINS[chain](), max_pixels=MID * MID - 1)
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.\w+: sample 0: "):
        ds[0]
    assert fd.FastImageFolder(tree, CHAINS[chain](), max_pixels=MID * MID)[0][1] == 0


def test_the_thirteen_thousand_bomb_is_refused_by_the_default(tmp_path):
    ds = fd.FastImageFolder(make_tree(tmp_path, tiny_jpeg(), "jpg"), CHAINS["fused"]())
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.jpg: sample 0: .*max_work_per_byte="):
        ds[0]


def test_batches_and_workers_keep_the_limits(tree):
    ds = fd.FastImageFolder(tree, CHAINS["fused"](), **TIGHT)
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.\w+: sample 0: "):
        ds.__getitems__([0, 1])
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.max_work_per_byte == 16
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1)
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.\w+: sample 0: "):
        next(iter(loader))


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_skip_skips_what_the_budget_refuses(tree, chain):
    ds = fd.FastImageFolder(tree, CHAINS[chain](), on_error="skip", **TIGHT)
    assert [ds[i][1] for i in range(len(ds))] == [0, 0]
    assert ds.skipped >= 1


def test_bad_limits_are_refused_at_construction(tree):
    with pytest.raises(ValueError, match="max_work_per_byte must be a positive int"):
        fd.FastImageFolder(tree, max_work_per_byte=0)
    with pytest.raises(ValueError, match="max_pixels must be >= 0"):
        fd.FastImageFolder(tree, max_pixels=-1)


def test_a_fused_transform_with_other_limits_is_refused(tree):
    from fastdecode.transforms import fuse

    f = fuse(CHAINS["fused"](), max_work_per_byte=16)
    assert fd.FastImageFolder(tree, f, **TIGHT).max_work_per_byte == 16
    with pytest.raises(ValueError, match="decode limits .* differ"):
        fd.FastImageFolder(tree, f)


def test_fuse_carries_the_limits(tree):
    from fastdecode.transforms import fuse

    data = sorted((tree / "a").iterdir())[0].read_bytes()
    with pytest.raises(fd.ImageTooLargeError, match="max_work_per_byte=16"):
        fuse(CHAINS["fused"](), **TIGHT)(data)
    f = pickle.loads(pickle.dumps(fuse(CHAINS["fused"](), **TIGHT)))
    with pytest.raises(fd.ImageTooLargeError, match="max_work_per_byte=16"):
        f.refreshed()(data)
    assert tuple(fuse(CHAINS["fused"]())(data).shape) == (3, 16, 16)


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_fastloader_threads_keep_the_limits(tree, chain):
    """FastLoader(threads=N) renders planned batches on its own path (datasets/_planned.py)."""
    ds = fd.FastImageFolder(tree, CHAINS[chain](), **TIGHT)
    loader = fd.FastLoader(ds, batch_size=2, threads=2,
                           collate_fn=None if chain == "fused" else list)
    with pytest.raises(fd.ImageTooLargeError, match=r"0bomb\.\w+: sample 0: "):
        next(iter(loader))
