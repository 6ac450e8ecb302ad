"""The detached batch plan (fastdecode.batching._detached): what a pickled
BatchDecoder of a fully fused chain becomes in the process that unpickles it.
The same rows as the FusedTransform it came from, without torchvision."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.batching._detached import DetachedPlan, detach  # noqa: E402
from fastdecode.batching._rows import BatchDecoder  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import CHAINS, MEAN, SAMPLES, STD, TINY  # noqa: E402

FULLY_FUSED = {
    **CHAINS,
    "train-uint8": lambda: T.Compose([T.RandomResizedCrop(48, scale=(0.3, 1.0)),
                                      T.RandomHorizontalFlip(), T.PILToTensor()]),
    "v2-tensor-stage": lambda: T2.Compose([T2.ToImage(), T2.RandomResizedCrop(40),
                                           T2.RandomHorizontalFlip(),
                                           T2.ToDtype(torch.float32, scale=True)]),
    # a CenterCrop larger than the image pads; the crop after it then stops the
    # geometry for that image (the full transform's path)
    "padded-then-crop": lambda: T.Compose([T.CenterCrop(420), T.RandomResizedCrop(32),
                                           T.ToTensor(), T.Normalize(MEAN, STD)]),
}
COLOUR = {
    "train-jitter": lambda: T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(),
                                       T.ColorJitter(0.4, 0.4, 0.4), T.ToTensor(),
                                       T.Normalize(MEAN, STD)]),
    "v2-jitter-hue-grayscale": lambda: T2.Compose([
        T2.RandomResizedCrop(40), T2.ColorJitter(0.3, 0.2, 0.5, 0.1), T2.RandomGrayscale(0.5),
        T2.PILToTensor(), T2.ToDtype(torch.float32, scale=True)]),
    "random-apply": lambda: T.Compose([T.Resize(40), T.CenterCrop(32),
                                       T.RandomApply([T.ColorJitter(0.5, 0.5)], p=0.5),
                                       T.PILToTensor()]),
}
FULLY_FUSED.update(COLOUR)
IMAGES = {**SAMPLES, **TINY}
SEEDS = np.array([3, 17, 2**40 + 5, 99], dtype=np.int64)


def _shipped(decoder: BatchDecoder) -> BatchDecoder:
    return pickle.loads(pickle.dumps(decoder))


@pytest.mark.parametrize("chain", FULLY_FUSED)
def test_fully_fused_chain_travels_detached(chain):
    decoder = _shipped(BatchDecoder(FULLY_FUSED[chain]()))
    assert isinstance(decoder.fused, DetachedPlan)
    assert decoder.shape == BatchDecoder(FULLY_FUSED[chain]()).shape


@pytest.mark.parametrize("image", IMAGES)
@pytest.mark.parametrize("chain", FULLY_FUSED)
def test_detached_rows_equal_the_fused_transform(chain, image):
    data = IMAGES[image]()
    local = BatchDecoder(FULLY_FUSED[chain]())
    shipped = _shipped(local)
    items = [data] * len(SEEDS)
    np.testing.assert_array_equal(shipped.decode(items, SEEDS), local.decode(items, SEEDS))
    # unseeded: the same draws from the global RNG as it stands
    torch.manual_seed(5)
    want = local.decode(items)
    torch.manual_seed(5)
    np.testing.assert_array_equal(shipped.decode(items), want)


def test_a_stopped_image_runs_through_the_full_transform():
    shipped = _shipped(BatchDecoder(FULLY_FUSED["padded-then-crop"]()))
    assert shipped.fused._full is None
    shipped.decode([SAMPLES["jpeg-420-500x375"]()], SEEDS[:1])
    assert shipped.fused._full is not None


def test_timm_ops_are_not_detached():
    timm_transforms = pytest.importorskip("timm.data.transforms")
    chain = T.Compose([timm_transforms.RandomResizedCropAndInterpolation(32), T.ToTensor()])
    f = fuse(chain)
    assert f.output_shape is not None and detach(f) is None
    shipped = _shipped(BatchDecoder(f))
    assert not isinstance(shipped.fused, DetachedPlan)


@pytest.mark.parametrize("extra, detached", [
    ({"something_new": 1}, False),  # a field detach() was not taught: it must refuse
    ({"color_ops": [], "fill_end": 2}, True),  # the fused colour steps' fields, none drawn
    ({"color_ops": ["not a colour op"], "fill_end": 3}, False),  # only fastdecode's ColorOps
], ids=["unknown-field", "no-colour-ops", "unknown-colour-op"])
def test_detach_refuses_state_it_does_not_know(extra, detached):
    f = fuse(CHAINS["train-v1"]())
    assert detach(f) is not None
    vars(f).update(extra)
    assert (detach(f) is not None) is detached


@pytest.mark.parametrize("chain", ["train-v1", "eval-v2", *(  # a process each: make test-full
    pytest.param(c, marks=pytest.mark.slow) for c in ["train-uint8", *COLOUR])])
def test_unpickling_and_decoding_import_no_torchvision(chain, tmp_path):
    blob = tmp_path / "decoder.pkl"
    blob.write_bytes(pickle.dumps(BatchDecoder(FULLY_FUSED[chain]())))
    image = tmp_path / "image.jpg"
    image.write_bytes(SAMPLES["jpeg-420-500x375"]())
    code = (
        "import pickle, sys\n"
        f"decoder = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        f"batch = decoder.decode([open({str(image)!r}, 'rb').read()])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'torchvision')\n"
        "print(batch.shape, loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    shape = BatchDecoder(FULLY_FUSED[chain]()).shape
    assert out.strip() == f"{(1, *shape)} []"
