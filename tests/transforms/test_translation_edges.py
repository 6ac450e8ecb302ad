"""How steps are translated for fuse, at the edges: kinds.py (a chain that
contains itself, geometric steps whose parameters fuse cannot read, sizes
it does not translate), tensor.py (what is not a per-pixel chain, the table
written into an ``out``), kinds.py's recipes (what is not a pure wrapper, timm's
ResizeKeepRatio and CenterCropOrPad as timm runs them)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import fuse, kinds  # noqa: E402
from fastdecode.transforms.geometry import ResizeOp  # noqa: E402
from fastdecode.transforms.tensor import TensorTail  # noqa: E402

from helpers.fusion import check_parity, pil_of  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402


@pytest.fixture(scope="module")
def jpeg():
    return encode(75, 100, seed=3)


# -- kinds ---------------------------------------------------------------------

def test_a_chain_that_contains_itself_is_not_opened_forever():
    chain: list = [T.CenterCrop(8)]
    chain.append(chain)
    steps = kinds.flatten(chain)
    assert steps[0] is chain[0] and steps[-1] is chain  # opened to the depth limit, then kept
    assert len(steps) == kinds._MAX_DEPTH + 2


def test_a_deeply_nested_compose_is_opened_to_the_depth_limit():
    inner = T.Resize(16)
    nested = T.Compose([inner])
    for _ in range(40):
        nested = T.Compose([nested])
    steps = kinds.flatten(nested)
    # past the limit the rest is kept whole, as one step (a Compose's list of transforms)
    assert len(steps) == 1 and steps[0] is not inner and isinstance(steps[0], (list, T.Compose))
    assert kinds.flatten(T.Compose([T.Compose([inner])])) == [inner]


def _v1_resize_without_size():
    step = T.Resize(32)
    step.size = None  # v1's init refuses None; v1's forward then fails
    return step


@pytest.mark.parametrize("step", [T.Compose([T.Resize(8)]), T.RandomHorizontalFlip(p="half"),
                                  T.Resize((32, 32), max_size=40), _v1_resize_without_size()],
                         ids=["compose", "flip-p-not-a-number", "two-sizes-and-max-size",
                              "v1-size-none"])
def test_a_geometric_step_fuse_cannot_read_is_left_to_torchvision(step):
    assert kinds.geo_op(step) is None
    assert kinds.fusable(step) is False


def test_a_v2_resize_without_size_is_translated():
    op = kinds.geo_op(T2.Resize(size=None, max_size=40))
    assert isinstance(op, ResizeOp) and op.size is None and op.max_size == 40


def test_a_v1_flip_with_an_unreadable_p_fails_as_torchvision_does(jpeg):
    chain = T.Compose([T.CenterCrop(32), T.RandomHorizontalFlip(p="half"), T.PILToTensor()])
    f = fuse(chain)
    assert f.fusion_report().index == 1
    with pytest.raises(TypeError):
        chain(pil_of(jpeg))
    with pytest.raises(TypeError):
        f(jpeg)


# -- tensor --------------------------------------------------------------------

def _chw(img):
    return np.asarray(img).transpose(2, 0, 1)


@pytest.mark.parametrize("steps, match", [
    ([T.ToTensor(), T.CenterCrop(1)], "not a per-pixel chain"),
    ([lambda img: "pixels"], "not a per-pixel chain"),
    ([T2.ToImage(), lambda x: x.as_subclass(tv_tensors.Mask)], "unexpected result type Mask"),
    ([lambda img: _chw(img) // 2], "not a per-pixel chain"),
], ids=["changes-the-shape", "not-a-tensor", "a-mask", "numpy-not-the-pixels"])
def test_what_is_not_a_per_pixel_chain_is_refused(steps, match):
    with pytest.raises(TypeError, match=match):
        TensorTail(steps)


@pytest.fixture(scope="module")
def image():
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8), "RGB")


@pytest.mark.parametrize("steps, dtype", [
    ([T.PILToTensor()], torch.uint8),
    ([T2.PILToTensor(), T2.ToDtype(torch.int32)], torch.int32),
    ([T2.ToImage(), T2.ToDtype(torch.float32, scale=True)], torch.float32),
], ids=["identity", "int-table", "float-table"])
@pytest.mark.parametrize("as_tensor", [True, False], ids=["out-tensor", "out-array"])
def test_the_table_is_written_into_out(image, steps, dtype, as_tensor):
    tail = TensorTail(steps)
    expected = T.Compose(steps)(image).as_subclass(torch.Tensor)
    out = torch.full((3, 5, 7), 99, dtype=dtype)
    target = out if as_tensor else out.numpy()
    got = tail.apply(np.ascontiguousarray(_chw(image)), target)
    if as_tensor:
        assert got.data_ptr() == out.data_ptr()
    else:
        assert got.numpy().ctypes.data == target.ctypes.data
    assert torch.equal(got.as_subclass(torch.Tensor), expected) and torch.equal(out, expected)


def test_an_out_of_the_wrong_shape_is_named(image):
    tail = TensorTail([T.PILToTensor()])
    with pytest.raises(ValueError, match=r"out must have dtype uint8 and shape \(3, 5, 7\), "
                                         r"got uint8 \(3, 7, 5\)"):
        tail.apply(np.ascontiguousarray(_chw(image)), torch.empty((3, 7, 5), dtype=torch.uint8))


# -- recipes -------------------------------------------------------------------

class Offset:
    """Five instructions, but an addition, not a call: not a wrapper."""

    def __init__(self):
        self.offset = 1

    def __call__(self, img):
        return self.offset + img


class Indexed:
    def __init__(self):
        self.table = {}

    def __call__(self, img):
        return self.table[img]


class Wrapper:
    def __init__(self, inner):
        self.inner = inner

    def __call__(self, img):
        return self.inner(img)


@pytest.mark.parametrize("obj", [Offset(), Indexed()], ids=["addition", "subscript"])
def test_what_only_looks_like_a_wrapper_is_not_opened(obj):
    assert kinds.unwrap(obj) is None
    assert kinds.flatten(obj) == [obj]


def test_a_pure_wrapper_is_opened():
    inner = T.CenterCrop(8)
    assert kinds.unwrap(Wrapper(inner)) == ("inner", inner)
    assert kinds.flatten(Wrapper(T.Compose([inner]))) == [inner]


@pytest.fixture(scope="module")
def tt():
    return pytest.importorskip("timm.data.transforms")


def test_timm_resize_keep_ratio_after_a_resize_resizes_as_timm_does(tt, jpeg):
    chain = T.Compose([T.Resize(60), tt.ResizeKeepRatio(32), T.PILToTensor()])
    f, ours, theirs, _ = check_parity(chain, jpeg, exact=True)
    assert torch.equal(ours, theirs)
    assert f.fusion_report().reason.startswith("a second resample")


@pytest.mark.parametrize("fill, fused", [(0, True), (7, False)], ids=["zero-fill", "grey-fill"])
def test_timm_center_crop_or_pad_fuses_with_a_zero_fill(tt, jpeg, fill, fused):
    chain = T.Compose([tt.CenterCropOrPad(120, fill=fill), T.PILToTensor()])  # pads the 75 rows
    f, ours, theirs, _ = check_parity(chain, jpeg, exact=True)
    assert torch.equal(ours, theirs)
    assert (len(f.plan["geometric"]) == 1) is fused


def test_timm_center_crop_or_pad_with_an_unreadable_size_is_left_to_timm(tt):
    step = tt.CenterCropOrPad(48)
    step.size = None
    assert kinds.geo_op(step) is None


def test_timm_resize_keep_ratio_to_nothing_fails_as_timm_does(tt):
    data = encode(8, 400, seed=4)  # longest edge to 1 px: the short edge rounds to 0
    chain = T.Compose([tt.ResizeKeepRatio(1, longest=1.0), T.PILToTensor()])
    with pytest.raises(ValueError) as theirs:
        chain(pil_of(data))
    with pytest.raises(ValueError) as ours:
        fuse(chain)(data)
    assert str(ours.value) == str(theirs.value)
