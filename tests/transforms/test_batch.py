"""The batch protocol (decode_into, finish, tensor_table, result_dtype), pickling, workers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import (  # noqa: E402
    CHAINS,
    MEAN,
    MIN_PSNR,
    STD,
    eval_v1,
    fused,
    pil_of,
    psnr,
    train_v1,
    unnormalize,
)
from helpers.jpeg_samples import encode  # noqa: E402

# --------------------------------------------------------------------------
# Batch contract: decode_into + finish.


@pytest.mark.parametrize("chain_id", list(CHAINS))
def test_decode_into_and_finish_match_call(chain_id):
    f = fuse(CHAINS[chain_id]())
    images = [encode(375, 500), encode(200, 180, seed=1), encode(3, 5, seed=2)]
    batch = torch.empty((len(images),) + f.output_shape, dtype=torch.uint8)
    torch.manual_seed(7)
    params = [f.decode_into(data, batch[i]) for i, data in enumerate(images)]
    finished = f.finish(batch)
    torch.manual_seed(7)
    singles, single_params = [], []
    for data in images:
        singles.append(f(data))
        single_params.append(f.last_params)
    assert params == single_params
    assert type(finished) is type(singles[0])
    assert torch.equal(finished.as_subclass(torch.Tensor),
                       torch.stack([s.as_subclass(torch.Tensor) for s in singles]))
    out = torch.empty(batch.shape, dtype=torch.float32)
    assert f.finish(batch, out=out).data_ptr() == out.data_ptr()
    assert torch.equal(out, finished.as_subclass(torch.Tensor))


TAIL_CHAINS = {
    "ToTensor+Normalize": lambda: T.Compose([T.CenterCrop(8), T.ToTensor(),
                                             T.Normalize(MEAN, STD)]),
    "v2-ToDtype-float64": lambda: T2.Compose([T2.CenterCrop(8), T2.ToImage(),
                                              T2.ToDtype(torch.float64, scale=True)]),
    "PILToTensor": lambda: T.Compose([T.CenterCrop(8), T.PILToTensor()]),
    "v2-ToImage": lambda: T2.Compose([T2.CenterCrop(8), T2.ToImage()]),
}


@pytest.mark.parametrize("chain_id", list(TAIL_CHAINS))
def test_batch_protocol_table_and_dtype_describe_finish(chain_id):
    f = fuse(TAIL_CHAINS[chain_id]())
    pixels = torch.randint(0, 256, (2, *f.output_shape), dtype=torch.uint8)
    result = f.finish(pixels)
    assert f.result_dtype == result.dtype
    table = f.tensor_table
    if table is None:
        assert torch.equal(result.as_subclass(torch.Tensor), pixels)
    else:
        assert table.shape == (3, 256)
        expected = torch.from_numpy(table)[torch.arange(3)[:, None, None], pixels.long()]
        assert torch.equal(result.as_subclass(torch.Tensor), expected)
        if result.dtype == torch.float32:
            assert table.dtype == np.float32


def test_batch_protocol_without_a_tensor_step():
    f = fuse(T.Compose([T.CenterCrop(8)]))
    assert f.tensor_table is None and f.result_dtype is None


def test_decode_into_with_unfusable_step_still_fills_out():
    f = fuse(T.Compose([T.Resize(300), T.RandomResizedCrop(160), T.PILToTensor()]))
    data = encode(375, 500)
    out = np.empty(f.output_shape, np.uint8)
    torch.manual_seed(3)
    f.decode_into(data, out)
    torch.manual_seed(3)
    assert np.array_equal(out, f(data).numpy())


def test_finish_identity_returns_input_values():
    f = fuse(T.Compose([T.CenterCrop(32), T.PILToTensor()]))
    batch = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert torch.equal(f.finish(batch), batch)


def test_decode_into_errors():
    with pytest.raises(TypeError, match="decode_into needs a chain with a fixed output shape"):
        fuse(T.Compose([T.Resize(64), T.ToTensor()])).decode_into(encode(40, 40), np.empty(3))
    f = fuse(eval_v1())
    with pytest.raises(ValueError, match="out must have dtype uint8 and shape"):
        f.decode_into(encode(300, 300), np.empty((3, 224, 225), np.uint8))
    with pytest.raises(ValueError, match="out must be writable and C-contiguous"):
        f.decode_into(encode(300, 300), np.empty((3, 224, 448), np.uint8)[:, :, ::2])
    with pytest.raises(TypeError, match="out must be a numpy array or a CPU tensor"):
        f.decode_into(encode(300, 300), [0] * 3)
    with pytest.raises(TypeError, match="finish needs a chain whose output_shape is not None"):
        fuse(None).finish(torch.zeros(3, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="finish takes uint8"):
        f.finish(torch.zeros(3, 4, 4))


# --------------------------------------------------------------------------
# Pickling and DataLoader seeding.


def test_pickle_roundtrip():
    f = fuse(train_v1())
    g = pickle.loads(pickle.dumps(f))
    data = encode(200, 300)
    assert torch.equal(fused(f, data, 11)[0], fused(g, data, 11)[0])
    assert repr(g) == repr(f)


class _Files(torch.utils.data.Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.transform(self.files[i])


@pytest.mark.no_sanitize
def test_dataloader_worker_seeding():
    files = [encode(120 + 10 * i, 160, seed=i) for i in range(6)]

    def load(transform):
        loader = torch.utils.data.DataLoader(
            _Files(files, transform), batch_size=3, num_workers=2,
            generator=torch.Generator().manual_seed(5), multiprocessing_context="fork")
        return torch.cat(list(loader))

    ours = load(fuse(train_v1(), exact=True))
    theirs = load(T.Compose([pil_of] + train_v1().transforms))
    assert psnr(unnormalize(ours.numpy() * 255), unnormalize(theirs.numpy() * 255)) >= MIN_PSNR
