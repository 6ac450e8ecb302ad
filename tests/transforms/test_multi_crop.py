"""FiveCrop and TenCrop fused (fastdecode/transforms/split.py, ``MultiCrop``): the crops cut from the
decoded pixels, then what follows them as torchvision runs it (v1: a ``Lambda`` stacking
ToTensor/Normalize over the tuple, as torchvision's documentation writes it; v2: the tensor steps
on each crop, fused into one pass), against torchvision's chain for the same seed: chain x input x
exact. exact=True is bit-identical; the default mode stays within fuse's bound. Also: a crop
larger than the image raises torchvision's error, a v1 tensor step on the tuple fails as in
torchvision, a v2 RandomErasing after the crops runs unfused (it draws once for all of them), and
explain() says where the crops are cut."""

import io
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _stack(*steps):
    """torchvision's documented follow-up: each crop through ``steps``, stacked."""
    chain = T.Compose(list(steps))
    return T.Lambda(lambda crops: torch.stack([chain(c) for c in crops]))


CHAINS = {
    "five-pil": lambda: T.Compose([T.Resize(64), T.FiveCrop(40)]),
    "five-alone": lambda: T.FiveCrop((30, 20)),
    "ten-totensor": lambda: T.Compose([T.Resize(72), T.TenCrop(48), _stack(T.ToTensor())]),
    "ten-vflip-normalize": lambda: T.Compose([
        T.Resize((60, 70)), T.TenCrop((40, 32), vertical_flip=True),
        _stack(T.ToTensor(), T.Normalize(MEAN, STD))]),
    "rrc-flip-five": lambda: T.Compose([T.RandomResizedCrop(56), T.RandomHorizontalFlip(),
                                        T.FiveCrop(33), _stack(T.PILToTensor())]),
    "jitter-ten": lambda: T.Compose([T.Resize(50), T.ColorJitter(0.4, 0.4, 0.4), T.TenCrop(31),
                                     _stack(T.PILToTensor())]),
    "v2-five-normalize": lambda: v2.Compose([
        v2.Resize(64), v2.FiveCrop(40), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD)]),
    "v2-ten-uint8": lambda: v2.Compose([v2.RandomResizedCrop(48), v2.TenCrop(32),
                                        v2.PILToTensor()]),
}


def _image(seed=0, size=(75, 90)):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    return np.array(Image.fromarray(base).resize((size[1], size[0]), Image.Resampling.BICUBIC))


def _encoded(fmt):
    def make(arr):
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        return buf.getvalue(), Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return make


INPUTS = {  # -> (what fuse is given, the PIL image torchvision's chain is given)
    "jpeg": _encoded("JPEG"),
    "png": _encoded("PNG"),
    "numpy": lambda arr: (arr, Image.fromarray(arr)),
    "gray-numpy": lambda arr: (arr[:, :, 1].copy(), Image.fromarray(arr[:, :, 1].copy())),
    "tensor-chw": lambda arr: (torch.from_numpy(arr).permute(2, 0, 1), Image.fromarray(arr)),
}


def _psnr(a, b):
    err = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if err == 0 else 10 * np.log10(255.0 ** 2 / err)


def _pixels(x):
    """uint8 HWC-ish pixels of a PIL image or a tensor (a float one scaled to 0..255)."""
    if isinstance(x, Image.Image):
        return np.asarray(x)
    x = x.as_subclass(torch.Tensor)
    return (x.numpy() if x.dtype == torch.uint8 else x.mul(255).numpy())


def _same(a, b, exact):
    if isinstance(b, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        return all(_same(x, y, exact) for x, y in zip(a, b))
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(b, Image.Image):
        assert a.mode == b.mode and a.size == b.size
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
    if exact:
        return np.array_equal(_pixels(a), _pixels(b))
    if not isinstance(b, Image.Image) and b.dtype != torch.uint8:
        return (a - b).abs().max().item() < 0.3  # normalized: within the bound's few levels
    return _psnr(_pixels(a), _pixels(b)) >= 40


# on gray pixels torchvision's colour steps and 3-value Normalize fail or run unfused (warned):
# tests/transforms/test_array_inputs.py covers those; here the crops of gray pixels
GRAY = ("five-pil", "five-alone", "ten-totensor", "rrc-flip-five", "v2-ten-uint8")


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("chain,kind", [(chain, kind) for chain in sorted(CHAINS)
                                        for kind in sorted(INPUTS)
                                        if kind != "gray-numpy" or chain in GRAY])
def test_same_as_torchvision(chain, kind, exact):
    transform = CHAINS[chain]()
    f = fuse(transform, exact=exact)
    assert f.crops is not None and f.output_shape is None
    data, image = INPUTS[kind](_image())
    for seed in range(3):
        torch.manual_seed(seed)
        got = f(data)
        after = torch.get_rng_state()
        torch.manual_seed(seed)
        want = transform(image)
        assert _same(got, want, exact), seed
        assert torch.equal(after, torch.get_rng_state())  # the same draws


def test_v2_tensor_steps_fuse_into_the_crops():
    """A v2 chain runs its tensor steps on each crop in the fused pass: nothing trails."""
    f = fuse(CHAINS["v2-five-normalize"]())
    assert f.plan["trailing"] == [] and f.tail is not None
    assert isinstance(f.plan["geometric"][-1], v2.FiveCrop)
    assert "crops are cut from the decoded pixels" in f.explain()
    assert "tuple of crops" in f.explain()


def test_a_v1_lambda_runs_on_the_tuple_and_the_report_says_so():
    """torchvision's v1 recipe: the Lambda runs on the PIL crops; the report (what a dataset
    warns once) names it and the v2 steps that would fuse."""
    f = fuse(CHAINS["ten-totensor"]())
    assert len(f.plan["trailing"]) == 1 and isinstance(f.plan["trailing"][0], T.Lambda)
    report = f.fusion_report()
    assert report is not None and report.index == 2 and report.fused == 2
    assert "only v2 tensor steps fuse" in str(report) and not report.loses_batch_path
    assert fuse(CHAINS["five-pil"]()).fusion_report() is None  # the crops end the chain


@pytest.mark.parametrize("kind", ["jpeg", "numpy"])
@pytest.mark.parametrize("step", [T.FiveCrop(80), v2.TenCrop((10, 95))], ids=["five", "ten"])
def test_a_crop_larger_than_the_image_raises_torchvisions_error(step, kind):
    data, image = INPUTS[kind](_image())
    with pytest.raises(ValueError) as want:
        step(image)
    with pytest.raises(ValueError) as got:
        fuse(step, exact=True)(data)
    assert str(got.value) == str(want.value)


def test_a_v1_tensor_step_on_the_tuple_fails_as_in_torchvision():
    chain = T.Compose([T.FiveCrop(20), T.ToTensor()])
    data, image = INPUTS["jpeg"](_image())
    with pytest.raises(TypeError) as want:
        chain(image)
    f = fuse(chain, exact=True)
    assert f.tail is None and isinstance(f.plan["trailing"][0], T.ToTensor)
    with pytest.raises(TypeError, match=re.escape(str(want.value))):
        f(data)


def test_a_v2_erasing_after_the_crops_runs_unfused():
    """v2's RandomErasing draws one box for every crop of the tuple: it stays torchvision's."""
    chain = v2.Compose([v2.Resize(48), v2.FiveCrop(32), v2.ToImage(),
                        v2.ToDtype(torch.float32, scale=True), v2.RandomErasing(p=1.0)])
    f = fuse(chain, exact=True)
    assert f.erasing == [] and isinstance(f.plan["trailing"][0], v2.RandomErasing)
    data, image = INPUTS["jpeg"](_image(3))
    torch.manual_seed(7)
    got = f(data)
    torch.manual_seed(7)
    want = chain(image)
    assert _same(got, want, exact=True)
