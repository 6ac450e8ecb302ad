"""How fuse splits a chain: unknown steps, tensor-stage geometry, the plan, inputs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import (  # noqa: E402
    MEAN,
    MIN_PSNR,
    STD,
    check_parity,
    eval_v1,
    eval_v2,
    pil_of,
    train_v1,
    train_v2,
)
from helpers.jpeg_samples import encode  # noqa: E402


def test_v2_to_image_returns_tv_image():
    f = fuse(train_v2())
    out = f(encode(100, 120))
    assert type(out) is tv_tensors.Image and out.dtype == torch.float32
    to_image = fuse(T2.Compose([T2.CenterCrop(8), T2.ToImage()]))
    assert type(to_image(encode(20, 20))) is tv_tensors.Image


UNKNOWN = {
    "color-jitter": T.Compose([T.RandomResizedCrop(128), T.ColorJitter(0.4, 0.4, 0.4),
                               T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]),
    "lambda-middle": T.Compose([T.Resize(160), T.Lambda(lambda im: im.rotate(10)),
                                T.CenterCrop(128), T.ToTensor()]),
    "lambda-on-tensor": T.Compose([T.RandomResizedCrop(96), T.ToTensor(),
                                   T.Lambda(lambda x: x * 2), T.Normalize(MEAN, STD)]),
    "v1-geometry-on-tensors": T.Compose([T.PILToTensor(), T.RandomResizedCrop(96),
                                         T.ConvertImageDtype(torch.float32)]),
    "v2-color-jitter": T2.Compose([T2.RandomResizedCrop(128), T2.ColorJitter(0.3, 0.3),
                                   T2.ToImage(), T2.ToDtype(torch.float32, scale=True)]),
    "grayscale": T.Compose([T.CenterCrop(128), T.Grayscale(), T.ToTensor()]),
}


@pytest.mark.parametrize("chain_id", list(UNKNOWN))
def test_unknown_transforms_run_unfused_in_order(chain_id):
    data = encode(300, 400, seed=9)
    for seed in (0, 1):
        check_parity(UNKNOWN[chain_id], data, seed,
                     min_psnr=33.0 if "lambda" in chain_id else MIN_PSNR)


TENSOR_STAGE = {
    # v2 geometric ops after ToImage run on uint8 tensors in torchvision; torch's
    # antialiased resize is Pillow's within a level, so they join the plan.
    "v2-train-to-image-first": T2.Compose([
        T2.ToImage(), T2.RandomResizedCrop(96), T2.RandomHorizontalFlip(),
        T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)]),
    "v2-eval-pil-to-tensor-first": T2.Compose([
        T2.PILToTensor(), T2.Resize(128), T2.CenterCrop(112),
        T2.ToDtype(torch.float32, scale=True)]),
    "v2-split-stages": T2.Compose([T2.CenterCrop(300), T2.ToImage(), T2.Resize(100, antialias=True),
                                   T2.RandomHorizontalFlip()]),
    # cannot join: the whole chain is replayed unfused with the same RNG state
    "v2-double-resample-replayed": T2.Compose([T2.Resize(128), T2.ToImage(),
                                               T2.RandomResizedCrop(96),
                                               T2.ToDtype(torch.float32, scale=True)]),
    "v2-pad-then-rrc-replayed": T2.Compose([T2.ToImage(), T2.CenterCrop(480),
                                            T2.RandomResizedCrop(64), T2.RandomHorizontalFlip()]),
    # not fused: nearest differs between torch and Pillow; antialias=False
    "v2-nearest-on-tensors": T2.Compose([T2.ToImage(), T2.RandomResizedCrop(
        96, interpolation=T2.InterpolationMode.NEAREST)]),
    "v2-no-antialias-on-tensors": T2.Compose([T2.ToImage(), T2.Resize(100, antialias=False)]),
}
TENSOR_STAGE_FUSED = {"v2-train-to-image-first": 2, "v2-eval-pil-to-tensor-first": 2,
                      "v2-split-stages": 3, "v2-double-resample-replayed": 2,
                      "v2-pad-then-rrc-replayed": 3, "v2-nearest-on-tensors": 0,
                      "v2-no-antialias-on-tensors": 0}


@pytest.mark.parametrize("chain_id", list(TENSOR_STAGE))
def test_geometry_after_the_converter(chain_id):
    data = encode(375, 500, seed=10)
    f = None
    for seed in (0, 1, 2):
        f, *_ = check_parity(TENSOR_STAGE[chain_id], data, seed,
                             normalized="train" in chain_id)
    assert len(f.plan["geometric"]) == TENSOR_STAGE_FUSED[chain_id]
    if TENSOR_STAGE_FUSED[chain_id] > 1:
        assert "(on tensors)" in repr(f)


def test_replayed_chain_is_torchvision_exactly():
    chain = TENSOR_STAGE["v2-double-resample-replayed"]
    data = encode(375, 500, seed=10)
    _, ours, theirs, _ = check_parity(chain, data, 6)
    assert torch.equal(ours, theirs)  # every step ran in torchvision, same draws


def test_decode_into_replays_a_tensor_stage_stop():
    f = fuse(TENSOR_STAGE["v2-double-resample-replayed"])
    assert f.output_shape == (3, 96, 96)
    data = encode(375, 500, seed=10)
    out = torch.empty(f.output_shape, dtype=torch.uint8)
    torch.manual_seed(8)
    f.decode_into(data, out)
    a = f.finish(out)
    torch.manual_seed(8)
    assert torch.equal(a, f(data))


def test_unknown_transform_plan_is_not_reordered():
    chain = UNKNOWN["color-jitter"]  # the flip after the colour step is not moved before it
    f = fuse(chain)
    assert f.plan["geometric"] == chain.transforms[:1]
    assert f.plan["color"] == chain.transforms[1:2]
    assert f.plan["tensor"] == []
    assert f.plan["trailing"] == chain.transforms[2:]
    assert f.output_shape is None
    assert "trailing (unfused): RandomHorizontalFlip" in repr(f)


def test_plan_and_output_shape():
    f = fuse(train_v1())
    assert f.output_shape == (3, 224, 224)
    assert [type(t) for t in f.plan["tensor"]] == [T.ToTensor, T.Normalize]
    assert "native decode + resample" in repr(f) and "one table pass" in repr(f)
    assert fuse(eval_v2()).output_shape == (3, 224, 224)
    assert fuse(T.Compose([T.Resize(256), T.ToTensor()])).output_shape is None
    assert fuse(T.Compose([T.RandomResizedCrop(64)])).output_shape is None  # PIL result
    assert fuse(None).output_shape is None


def test_fuse_none_and_single_transform():
    data = encode(60, 80)
    assert np.array_equal(np.asarray(fuse(None)(data)), np.asarray(pil_of(data)))
    torch.manual_seed(0)
    ours = fuse(T.RandomHorizontalFlip(1.0))(data)
    assert np.array_equal(np.asarray(ours), np.asarray(pil_of(data))[:, ::-1])


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "ndarray", "tensor"])
def test_bytes_like_inputs(kind):
    data = encode(120, 160)
    wrapped = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
               "ndarray": np.frombuffer(data, np.uint8),
               "tensor": torch.frombuffer(bytearray(data), dtype=torch.uint8)}[kind]
    f = fuse(eval_v1())
    assert torch.equal(f(wrapped), f(data))


def test_pil_input_runs_unfused():
    data = encode(120, 160)
    chain = train_v1()
    torch.manual_seed(1)
    ours = fuse(chain)(pil_of(data))
    torch.manual_seed(1)
    assert torch.equal(ours, chain(pil_of(data)))
