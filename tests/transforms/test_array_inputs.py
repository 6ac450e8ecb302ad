"""fuse(chain) on decoded images (numpy arrays, CHW / HWC tensors, PIL images) and the padding crops
(RandomCrop padding / pad_if_needed, Pad), against torchvision's chain on the same PIL image for the
same seed: chain x input x image x exact. exact=True is bit-identical; the default mode stays within
one level. Also: gray stays one channel, modes the fused path does not read run unfused (warned once),
and wrong inputs raise errors that name what is expected."""

import io
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

BICUBIC = T.InterpolationMode.BICUBIC


def _pixels(shape, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (5, 6) + shape[2:], dtype=np.uint8)
    img = np.repeat(np.repeat(base, -(-shape[0] // 5), 0), -(-shape[1] // 6), 1)[:shape[0], :shape[1]]
    return np.clip(img.astype(np.int16) + rng.integers(-25, 26, img.shape), 0, 255).astype(np.uint8)


IMAGES = {
    "rgb-32x32": lambda: _pixels((32, 32, 3)),
    "rgb-45x61": lambda: _pixels((45, 61, 3), 1),
    "gray-28x28": lambda: _pixels((28, 28), 2),
}

CHAINS = {
    "seed-example": lambda: T.Compose([T.Resize((224, 224)), T.ToTensor(),
                                       T.Normalize((0.5,), (0.5,))]),
    "cifar-crop": lambda: T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(),
                                     T.ToTensor(), T.Normalize((0.5,), (0.5,))]),
    "pad-if-needed": lambda: T.Compose([T.RandomHorizontalFlip(),
                                        T.RandomCrop(50, padding=(1, 2, 3, 4), pad_if_needed=True),
                                        T.PILToTensor()]),
    "pad-center": lambda: T.Compose([T.Pad((3, 5)), T.RandomHorizontalFlip(), T.CenterCrop(30),
                                     T.PILToTensor()]),
    "rrc-uint8": lambda: T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                    T.PILToTensor()]),
    "resize-center": lambda: T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor()]),
    "bicubic-crop": lambda: T.Compose([T.Resize(50, interpolation=BICUBIC),
                                       T.RandomCrop(40, padding=2), T.ToTensor()]),
    "flip-only": lambda: T.RandomHorizontalFlip(),
}

INPUTS = {
    "numpy": lambda arr: arr,
    "tensor-chw": lambda arr: torch.from_numpy(arr.reshape(arr.shape[0], arr.shape[1], -1)).permute(2, 0, 1),
    "tensor-hwc": lambda arr: torch.from_numpy(arr.reshape(arr.shape[0], arr.shape[1], -1)),
    "pil": lambda arr: Image.fromarray(arr),
}


def _same(a, b, exact):
    if isinstance(b, Image.Image):
        return isinstance(a, Image.Image) and a.mode == b.mode and np.array_equal(np.asarray(a),
                                                                                np.asarray(b))
    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape, (a.shape, b.shape)
    if exact:
        return torch.equal(a, b)
    tol = 1 if a.dtype == torch.uint8 else 1.01 / 255 / 0.5
    return (a.double() - b.double()).abs().max().item() <= tol


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("kind", sorted(INPUTS))
@pytest.mark.parametrize("image", sorted(IMAGES))
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_same_as_torchvision_on_the_pil_image(chain, image, kind, exact):
    transform = CHAINS[chain]()
    arr = IMAGES[image]()
    f = fuse(transform, exact=exact)
    data = INPUTS[kind](arr)
    for seed in range(4):
        torch.manual_seed(seed)
        got = f(data)
        after = torch.get_rng_state()
        torch.manual_seed(seed)
        want = transform(Image.fromarray(arr))
        assert _same(got, want, exact), seed
        assert torch.equal(after, torch.get_rng_state())  # the same draws


@pytest.mark.parametrize("chain", ["cifar-crop", "pad-if-needed", "pad-center", "bicubic-crop"])
@pytest.mark.parametrize("fmt", ["BMP", "JPEG"])
def test_padding_crops_on_encoded_files_are_bit_identical(chain, fmt):
    """RandomCrop's padding and Pad join the fused decode of a file: exact=True bit for bit."""
    arr = _pixels((45, 61, 3), 4)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt)
    transform = CHAINS[chain]()
    f = fuse(transform, exact=True)
    assert f.plan["trailing"] == [] and f.plan["geometric"]
    for seed in range(6):
        torch.manual_seed(seed)
        got = f(buf.getvalue())
        torch.manual_seed(seed)
        want = transform(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
        assert torch.equal(got, want), seed


PAD_MODES = {
    "edge": {"padding_mode": "edge"},
    "reflect": {"padding_mode": "reflect"},
    "symmetric": {"padding_mode": "symmetric"},
    "fill-7": {"fill": 7},
    "fill-rgb": {"fill": (10, 20, 30)},
}
MODE_CHAINS = {
    "crop-flip": lambda kw: T.Compose([T.RandomCrop(32, padding=4, **kw), T.RandomHorizontalFlip(),
                                       T.ToTensor()]),
    "flip-crop-if-needed": lambda kw: T.Compose([
        T.RandomHorizontalFlip(), T.RandomCrop(36, padding=(1, 2, 3, 4), pad_if_needed=True, **kw),
        T.PILToTensor()]),
    "pad-flip-center": lambda kw: T.Compose([T.RandomHorizontalFlip(), T.Pad((3, 5), **kw),
                                             T.RandomHorizontalFlip(), T.CenterCrop(30),
                                             T.PILToTensor()]),
    "resize-crop": lambda kw: T.Compose([T.Resize(20), T.RandomCrop(20, padding=3, **kw),
                                         T.PILToTensor()]),
    "crop-then-resize": lambda kw: T.Compose([T.RandomCrop(32, padding=4, **kw), T.Resize(24),
                                              T.PILToTensor()]),
}


@pytest.mark.parametrize("kind", ["file", "numpy", "gray"])
@pytest.mark.parametrize("mode", sorted(PAD_MODES))
@pytest.mark.parametrize("chain", sorted(MODE_CHAINS))
def test_padding_modes_and_fills_fuse_bit_identical(chain, mode, kind):
    """edge / reflect / symmetric and non-zero fills: the padded image's pixels, as F.pad
    makes them, the crops and flips after it; a resample after it stops there (the same
    result, unfused)."""
    if kind == "gray" and mode == "fill-rgb":
        pytest.skip("torchvision's own fill for an L image is one value")
    transform = MODE_CHAINS[chain](PAD_MODES[mode])
    f = fuse(transform, exact=True)
    assert any(type(t).__name__ in ("RandomCrop", "Pad") for t in f.plan["geometric"])  # fused
    arr = _pixels((28, 28), 8) if kind == "gray" else _pixels((30, 37, 3), 7)
    data = arr
    if kind == "file":
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "BMP")
        data = buf.getvalue()
    for seed in range(5):
        torch.manual_seed(seed)
        got = f(data)
        torch.manual_seed(seed)
        assert torch.equal(got, transform(Image.fromarray(arr))), seed


@pytest.mark.parametrize("mode", ["reflect", "fill-7"])
def test_a_padding_mode_keeps_the_batch_path(mode):
    transform = MODE_CHAINS["crop-flip"](PAD_MODES[mode])
    f = fuse(transform, exact=True)
    assert f.output_shape == (3, 32, 32)
    arrays = [_pixels((32, 32, 3), k) for k in range(4)]
    torch.manual_seed(2)
    batch = np.empty((4, 3, 32, 32), np.uint8)
    for k, arr in enumerate(arrays):
        f.decode_into(arr, batch[k])
    got = f.finish(batch)
    torch.manual_seed(2)
    want = torch.stack([transform(Image.fromarray(arr)) for arr in arrays])
    assert torch.equal(got, want)


def test_unfused_fills_and_modes():
    """A float fill, a per-channel fill of another length and v2's RandomCrop run unfused."""
    from torchvision.transforms import v2

    assert fuse(T.RandomCrop(32, padding=4, fill=0.5)).plan["geometric"] == []
    assert fuse(T.Pad(2, fill=(1, 2))).plan["geometric"] == []
    assert fuse(v2.RandomCrop(32, padding=4)).plan["geometric"] == []


def test_a_crop_larger_than_the_padded_image_raises_as_torchvision():
    transform = T.Compose([T.RandomCrop(64), T.PILToTensor()])
    arr = _pixels((32, 32, 3))
    with pytest.raises(ValueError) as want:
        transform(Image.fromarray(arr))
    with pytest.raises(ValueError, match=re.escape(str(want.value))):
        fuse(transform)(arr)


def test_gray_gives_one_channel_and_its_own_batch_shape():
    f = fuse(T.Compose([T.RandomCrop(28, padding=2), T.ToTensor()]))
    assert f(_pixels((28, 28), 3)).shape == (1, 28, 28)
    assert f.output_shape == (3, 28, 28)  # the plan's own: RGB images


@pytest.mark.parametrize("mode", ["RGBA", "P", "LA", "I;16"])
def test_pil_modes_the_fused_path_does_not_read_run_unfused_warned_once(mode):
    transform = T.Compose([T.Resize(20), T.PILToTensor()])
    f = fuse(transform)
    img = Image.fromarray(_pixels((32, 32, 3), 6)).convert(mode)
    with pytest.warns(RuntimeWarning, match=f"a {re.escape(mode)} image runs the chain unfused"):
        got = f(img)
    assert torch.equal(got, transform(img))


def test_rgba_arrays_run_unfused():
    arr = np.dstack([_pixels((20, 20, 3)), np.full((20, 20), 200, np.uint8)])
    transform = T.Compose([T.Resize(10), T.PILToTensor()])
    with pytest.warns(RuntimeWarning, match="a RGBA image runs the chain unfused"):
        got = fuse(transform)(arr)
    assert torch.equal(got, transform(Image.fromarray(arr)))


@pytest.mark.parametrize("data,error,message", [
    (np.zeros((8, 8, 3), np.float32), TypeError, "got a float32 array"),
    (torch.zeros(3, 8, 8), TypeError, "got a torch.float32 tensor"),
    (np.zeros((8, 8, 5), np.uint8), ValueError, r"got a uint8 array of shape \(8, 8, 5\)"),
    (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), ValueError, r"got a uint8 tensor of shape"),
    ("image.jpg", TypeError, "got a str"),
], ids=["float-array", "float-tensor", "5-channels", "4-d-tensor", "path"])
def test_wrong_inputs_name_what_is_expected(data, error, message):
    with pytest.raises(error, match=message):
        fuse(CHAINS["seed-example"]())(data)


@pytest.mark.parametrize("fn", ["decode_image", "read_header"])
@pytest.mark.parametrize("data,message", [
    (np.zeros((8, 8, 3), np.uint8), r"got a uint8 array of shape \(8, 8, 3\)"),
    (torch.zeros(3, 8, 8, dtype=torch.uint8), "got a torch Tensor"),
    (Image.new("RGB", (8, 8)), "got a PIL Image"),
], ids=["array", "tensor", "pil"])
def test_decode_image_names_a_decoded_image(fn, data, message):
    with pytest.raises(TypeError, match=message + ".*fuse"):
        getattr(fd, fn)(data)
