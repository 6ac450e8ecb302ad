"""fastdecode.transforms: fused decode + torchvision transforms, same seed parity."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from helpers.corpus import CORPUS, corpus_params, read_manifest  # noqa: E402
from fastdecode import _fuse  # noqa: E402
from fastdecode import transforms as FT  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402
from helpers.jpeg_samples import encode, natural_image  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
MIN_PSNR = 35.0


# --------------------------------------------------------------------------
# Chains and images.


def train_v1():
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def eval_v1():
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])


def train_v2():
    return T2.Compose([T2.RandomResizedCrop(224), T2.RandomHorizontalFlip(), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])


def eval_v2():
    return T2.Compose([T2.Resize(256), T2.CenterCrop(224), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])


CHAINS = {"train-v1": train_v1, "eval-v1": eval_v1, "train-v2": train_v2, "eval-v2": eval_v2}


def encode_pil(arr: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt, **kwargs)
    return buf.getvalue()


def cmyk_jpeg(height: int, width: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(natural_image(height, width, 3)).convert("CMYK").save(buf, "JPEG", quality=92)
    return buf.getvalue()


SAMPLES = {
    "jpeg-420-500x375": lambda: encode(375, 500),
    "jpeg-444-333x500": lambda: encode(500, 333, subsampling="4:4:4", seed=1),
    "jpeg-progressive-640x480": lambda: encode(480, 640, coding="progressive", seed=2),
    "jpeg-gray-400x300": lambda: encode(300, 400, subsampling="gray", seed=3),
    "jpeg-cmyk-300x260": lambda: cmyk_jpeg(260, 300),
    "bmp-300x200": lambda: encode_pil(natural_image(200, 300, 4), "BMP"),
    "png-260x300": lambda: encode_pil(natural_image(300, 260, 5), "PNG"),
}
TINY = {
    "jpeg-1x1": lambda: encode(1, 1),
    "jpeg-3x5": lambda: encode(3, 5),
    "jpeg-4000x3": lambda: encode(3, 4000),
    "jpeg-3x4000": lambda: encode(4000, 3),
    "bmp-3x5": lambda: encode_pil(natural_image(3, 5, 6), "BMP"),
}


def pil_of(data) -> Image.Image:
    """What torchvision's ImageFolder loader gives."""
    with Image.open(io.BytesIO(bytes(data))) as im:
        return im.convert("RGB")


def reference(chain, data, seed: int):
    torch.manual_seed(seed)
    result = chain(pil_of(data))
    return result, torch.get_rng_state()


def fused(f, data, seed: int):
    torch.manual_seed(seed)
    result = f(data)
    return result, torch.get_rng_state()


def pixels(x) -> np.ndarray:
    """A result in 0..255 pixel units: PIL, uint8 tensors, or ImageNet-normalized floats."""
    if isinstance(x, Image.Image):
        return np.asarray(x, dtype=np.float64)
    arr = x.as_subclass(torch.Tensor).double().numpy()
    if x.dtype == torch.uint8:
        return arr
    return arr * 255.0


def unnormalize(x: np.ndarray) -> np.ndarray:
    return x * np.array(STD)[:, None, None] + np.array(MEAN)[:, None, None] * 255.0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def assert_same_kind(ours, theirs):
    assert type(ours) is type(theirs)
    if isinstance(theirs, Image.Image):
        assert (ours.mode, ours.size) == (theirs.mode, theirs.size)
    else:
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype


def check_parity(chain, data, seed=0, *, min_psnr=MIN_PSNR, normalized=False, **options):
    f = fuse(chain, **options)
    theirs, their_rng = reference(chain, data, seed)
    ours, our_rng = fused(f, data, seed)
    assert_same_kind(ours, theirs)
    assert torch.equal(our_rng, their_rng), "the RNG was consumed differently"
    a, b = pixels(ours), pixels(theirs)
    if normalized:
        a, b = unnormalize(a), unnormalize(b)
    quality = psnr(a, b)
    assert quality >= min_psnr, f"PSNR {quality:.2f} dB < {min_psnr}"
    return f, ours, theirs, quality


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """As in DataLoader workers; torch's own threads only fight over a small
    machine's cores (10x slower references on 2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def pillow_backend(monkeypatch):
    """Resample with Pillow instead of the native resampler: isolates the
    planning (boxes, sizes, padding, flips) and must be bit-exact."""
    monkeypatch.setattr(_fuse, "native_caps", lambda: frozenset())


# --------------------------------------------------------------------------
# Same crop boxes and flips as torchvision.


def torchvision_draws(chain, img, seed):
    """(box, flip) torchvision draws for RandomResizedCrop + RandomHorizontalFlip."""
    rrc, flip = chain.transforms[0], chain.transforms[1]
    torch.manual_seed(seed)
    if isinstance(rrc, T2.RandomResizedCrop):
        p = rrc.make_params([img])
        box = (p["top"], p["left"], p["height"], p["width"])
    else:
        box = tuple(T.RandomResizedCrop.get_params(img, rrc.scale, rrc.ratio))
    return box, bool(torch.rand(1) < flip.p)


@pytest.mark.parametrize("chain_id", ["train-v1", "train-v2"])
@pytest.mark.parametrize("size", [(375, 500), (500, 333), (3, 4000), (1, 1)],
                         ids=lambda s: f"{s[1]}x{s[0]}")
def test_random_draws_match_torchvision(chain_id, size):
    chain = CHAINS[chain_id]()
    data = encode(*size)
    img = pil_of(data)
    f = fuse(chain)
    for seed in range(8):
        torch.manual_seed(seed)
        f(data)
        assert (f.last_params.crop, f.last_params.flip) == torchvision_draws(chain, img, seed)


# --------------------------------------------------------------------------
# Parity on the standard chains.


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_standard_chains(chain_id, sample):
    data = SAMPLES[sample]()
    for seed in (0, 1):
        check_parity(CHAINS[chain_id](), data, seed, normalized=True)


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_standard_chains_bit_exact_planning(chain_id, sample, pillow_backend):
    f, ours, theirs, _ = check_parity(CHAINS[chain_id](), SAMPLES[sample](), 3, exact=True,
                                      normalized=True)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", ["jpeg-420-500x375", "jpeg-444-333x500", "bmp-300x200"])
def test_exact_mode_is_near_bit_exact(chain_id, sample):
    check_parity(CHAINS[chain_id](), SAMPLES[sample](), 5, exact=True, normalized=True,
                 min_psnr=50.0)


PHOTOS = read_manifest("photos")


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("row", corpus_params("photos", PHOTOS, "file"))
def test_corpus_photos(chain_id, row):
    data = (CORPUS / "photos" / row["file"]).read_bytes()
    seed = sum(map(ord, row["file"]))
    check_parity(CHAINS[chain_id](), data, seed, normalized=True)


# --------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("chain_id", list(CHAINS))
@pytest.mark.parametrize("sample", list(TINY))
def test_tiny_and_extreme_images(chain_id, sample):
    chain = CHAINS[chain_id]()
    if chain_id.startswith("eval"):  # Resize(256) of 3x4000 is 341333 px wide
        resize = T.Resize(32) if chain_id == "eval-v1" else T2.Resize(32)
        crop = T.CenterCrop(24) if chain_id == "eval-v1" else T2.CenterCrop(24)
        chain.transforms[:2] = [resize, crop]
    for seed in (0, 1, 2):
        check_parity(chain, TINY[sample](), seed, normalized=True)


PADDING = {
    "crop-larger": T.Compose([T.CenterCrop(300), T.PILToTensor()]),
    "crop-larger-odd": T.Compose([T.CenterCrop((251, 333)), T.PILToTensor()]),
    "crop-taller": T.Compose([T.CenterCrop((301, 100)), T.PILToTensor()]),
    "flip-then-pad": T.Compose([T.RandomHorizontalFlip(1.0), T.CenterCrop((120, 333)),
                                T.PILToTensor()]),
    "pad-then-flip": T.Compose([T.CenterCrop((120, 333)), T.RandomHorizontalFlip(1.0),
                                T.PILToTensor()]),
    "resize-then-pad": T.Compose([T.Resize((100, 300)), T.CenterCrop(200), T.PILToTensor()]),
    "pad-then-resize": T.Compose([T.CenterCrop(300), T.Resize(128), T.PILToTensor()]),
    "pad-then-rrc": T.Compose([T.CenterCrop(300), T.RandomResizedCrop(64), T.PILToTensor()]),
    "pad-v2": T2.Compose([T2.CenterCrop(301), T2.RandomHorizontalFlip(), T2.ToImage()]),
    "pad-pil": T.Compose([T.CenterCrop(333)]),
}


@pytest.mark.parametrize("chain_id", list(PADDING))
def test_center_crop_padding(chain_id):
    data = encode(150, 251, seed=7)
    for seed in range(3):
        check_parity(PADDING[chain_id], data, seed)


@pytest.mark.parametrize("chain_id", list(PADDING))
def test_center_crop_padding_bit_exact(chain_id, pillow_backend):
    data = encode(150, 251, seed=7)
    _, ours, theirs, _ = check_parity(PADDING[chain_id], data, 1, exact=True)
    assert np.array_equal(pixels(ours), pixels(theirs))


SIZES = {
    "resize-max-size": T.Compose([T.Resize(200, max_size=250), T.PILToTensor()]),
    "resize-max-size-extreme": T.Compose([T.Resize(8, max_size=300), T.PILToTensor()]),
    "resize-tuple": T.Compose([T.Resize((200, 300)), T.PILToTensor()]),
    "resize-1-seq": T.Compose([T.Resize([180]), T.CenterCrop((150, 120)), T.PILToTensor()]),
    "v2-resize-none-max-size": T2.Compose([T2.Resize(None, max_size=222), T2.ToImage()]),
    "v2-resize-max-size": T2.Compose([T2.Resize(200, max_size=250), T2.ToImage()]),
    "rrc-tuple": T.Compose([T.RandomResizedCrop((120, 200), scale=(0.3, 1.0)), T.PILToTensor()]),
    "rrc-bicubic": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.BICUBIC),
                              T.ToTensor()]),
    "rrc-nearest": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.NEAREST),
                              T.PILToTensor()]),
    "rrc-lanczos": T.Compose([T.RandomResizedCrop(100, interpolation=T.InterpolationMode.LANCZOS),
                              T.PILToTensor()]),
    "v2-rrc-string-interp": T2.Compose([T2.RandomResizedCrop(100, interpolation="bicubic"),
                                        T2.PILToTensor()]),
    "eval-bicubic": T.Compose([T.Resize(128, interpolation=Image.BICUBIC), T.CenterCrop(112),
                               T.ToTensor()]),
    "resize-identity": T.Compose([T.Resize((375, 500)), T.CenterCrop(300), T.PILToTensor()]),
    "double-resize": T.Compose([T.Resize(300), T.RandomResizedCrop(160), T.PILToTensor()]),
    "flip-first": T.Compose([T.RandomHorizontalFlip(), T.RandomResizedCrop(96), T.PILToTensor()]),
    "crop-only": T.Compose([T.CenterCrop(128), T.RandomHorizontalFlip(), T.ToTensor()]),
    "geometry-only-pil": T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip()]),
    "no-geometry": T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]),
    "v2-pure-tensor": T2.Compose([T2.RandomResizedCrop(96), T2.ToImage(), T2.ToPureTensor()]),
    "v2-float64": T2.Compose([T2.CenterCrop(96), T2.ToImage(), T2.ToDtype(torch.float64, scale=True)]),
    "v2-uint8-normalize-unfused": T2.Compose([T2.CenterCrop(96), T2.ToImage(),
                                              T2.ToDtype(torch.float32, scale=True),
                                              T2.Normalize([0.5], [0.25])]),
    "v1-convert-dtype": T.Compose([T.CenterCrop(96), T.PILToTensor(),
                                   T.ConvertImageDtype(torch.float32)]),
    "v2-deprecated-totensor": T2.Compose([T2.CenterCrop(96), T2.ToImage(), T2.ToPureTensor()]),
    "mixed-v1-v2": T2.Compose([T.Resize(160), T2.CenterCrop(128), T.ToTensor()]),
    "nested-compose": T.Compose([T.Compose([T.Resize(160), T.CenterCrop(128)]),
                                 T2.Compose([T.ToTensor()])]),
}


@pytest.mark.parametrize("chain_id", list(SIZES))
def test_sizes_interpolations_and_types(chain_id):
    data = encode(375, 500, seed=8)
    for seed in (0, 1):
        check_parity(SIZES[chain_id], data, seed)


@pytest.mark.parametrize("chain_id", list(SIZES))
def test_sizes_bit_exact_planning(chain_id, pillow_backend):
    data = encode(375, 500, seed=8)
    _, ours, theirs, _ = check_parity(SIZES[chain_id], data, 4, exact=True)
    assert np.array_equal(pixels(ours), pixels(theirs))


REGION_CHAINS = {
    "eval-bilinear-flip": T.Compose([T.Resize(256), T.CenterCrop(224), T.RandomHorizontalFlip(),
                                     T.PILToTensor()]),
    "eval-bicubic": T.Compose([T.Resize(200, interpolation=T.InterpolationMode.BICUBIC),
                               T.CenterCrop((150, 190)), T.PILToTensor()]),
    "upscale-then-crop": T.Compose([T.Resize(700), T.CenterCrop(500), T.PILToTensor()]),
    "rrc-then-center-crop": T.Compose([T.RandomResizedCrop(160), T.CenterCrop(100),
                                       T.PILToTensor()]),
}


@pytest.mark.parametrize("region", ["box", "whole"])
@pytest.mark.parametrize("chain_id", list(REGION_CHAINS))
def test_region_after_resample_is_exact(chain_id, region):
    data = encode(375, 500, seed=14)
    for seed in (0, 1):
        _, ours, theirs, _ = check_parity(REGION_CHAINS[chain_id], data, seed, exact=True,
                                          region=region)
        assert torch.equal(ours, theirs)


def test_region_round_is_an_approximation():
    f, *_ = check_parity(REGION_CHAINS["eval-bilinear-flip"], encode(375, 500, seed=14), 0,
                         exact=True, region="round", min_psnr=25.0)
    assert f.renderer.region == "round"


def test_v2_to_image_returns_tv_image():
    f = fuse(train_v2())
    out = f(encode(100, 120))
    assert type(out) is tv_tensors.Image and out.dtype == torch.float32
    assert type(fuse(T2.Compose([T2.CenterCrop(8), T2.ToImage()]))(encode(20, 20))) is tv_tensors.Image


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
        check_parity(UNKNOWN[chain_id], data, seed, min_psnr=33.0 if "lambda" in chain_id else MIN_PSNR)


TENSOR_STAGE = {
    # v2 geometric ops after ToImage run on uint8 tensors in torchvision; torch's
    # antialiased resize is Pillow's within a level, so they join the plan.
    "v2-train-to-image-first": T2.Compose([
        T2.ToImage(), T2.RandomResizedCrop(96), T2.RandomHorizontalFlip(),
        T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)]),
    "v2-eval-pil-to-tensor-first": T2.Compose([
        T2.PILToTensor(), T2.Resize(128), T2.CenterCrop(112), T2.ToDtype(torch.float32, scale=True)]),
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
    chain = UNKNOWN["color-jitter"]
    f = fuse(chain)
    assert f.plan["geometric"] == chain.transforms[:1]
    assert f.plan["tensor"] == []
    assert f.plan["trailing"] == chain.transforms[1:]
    assert f.output_shape is None
    assert "trailing (unfused): ColorJitter" in repr(f)


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


def test_decode_into_with_unfusable_step_still_fills_out():
    f = fuse(SIZES["double-resize"])
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


# --------------------------------------------------------------------------
# fastdecode's own transform classes.


def test_own_classes_on_bytes_match_torchvision():
    data = encode(375, 500, seed=12)
    ours = FT.Compose([FT.RandomResizedCrop(224, interpolation="bilinear"),
                       FT.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    theirs = train_v1()
    torch.manual_seed(2)
    a = ours(data)
    torch.manual_seed(2)
    b = theirs(pil_of(data))
    assert psnr(unnormalize(pixels(a)), unnormalize(pixels(b))) >= MIN_PSNR
    # the same object on PIL images is torchvision
    torch.manual_seed(2)
    assert torch.equal(ours(pil_of(data)), b)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: FT.RandomResizedCrop(64, interpolation=Image.BICUBIC), id="rrc"),
    pytest.param(lambda: FT.Resize(100, interpolation="nearest", max_size=150), id="resize"),
    pytest.param(lambda: FT.CenterCrop((90, 300)), id="center-crop"),
    pytest.param(lambda: FT.RandomHorizontalFlip(0.7), id="hflip"),
])
def test_own_single_transforms(make):
    data = encode(160, 240, seed=13)
    t = make()
    for seed in (0, 1):
        torch.manual_seed(seed)
        on_bytes = t(data)
        torch.manual_seed(seed)
        on_pil = t(pil_of(data))
        assert isinstance(on_bytes, Image.Image)
        assert on_bytes.size == on_pil.size
        assert psnr(pixels(on_bytes), pixels(on_pil)) >= MIN_PSNR
    # inside a plain torchvision Compose on PIL images
    torch.manual_seed(4)
    a = T.Compose([t, T.PILToTensor()])(pil_of(data))
    torch.manual_seed(4)
    b = T.Compose([t, T.PILToTensor()])(pil_of(data))
    assert torch.equal(a, b)
    assert pickle.loads(pickle.dumps(t)).forward is not None


def test_own_classes_pickle_after_use():
    t = FT.Compose([FT.CenterCrop(32), T.PILToTensor()])
    t(encode(40, 40))
    clone = pickle.loads(pickle.dumps(t))
    assert "_fd_fused" not in clone.__dict__
    assert torch.equal(clone(encode(40, 40)), t(encode(40, 40)))


def test_own_classes_fuse_like_torchvision():
    ours = fuse(FT.Compose([FT.Resize(256), FT.CenterCrop(224), T.ToTensor()]))
    assert len(ours.plan["geometric"]) == 2 and ours.output_shape == (3, 224, 224)


# --------------------------------------------------------------------------
# Documented errors.


def test_errors():
    with pytest.raises(ValueError, match="interpolation must be one of"):
        FT.Resize(10, interpolation="cubic-ish")
    with pytest.raises(ValueError, match="interpolation must be an InterpolationMode"):
        FT.RandomResizedCrop(10, interpolation=17)
    with pytest.raises(TypeError, match="is not callable"):
        fuse(T.Compose([T.CenterCrop(8), 42]))
    with pytest.raises(ValueError, match="region must be one of"):
        fuse(eval_v1(), region="nearest")
    with pytest.raises(ValueError, match="dct_margin must be >= 1"):
        fuse(eval_v1(), dct_margin=0.5)
    with pytest.raises(TypeError, match="must hold encoded bytes"):
        fuse(eval_v1())(torch.zeros(3, 8, 8))


def test_torchvision_errors_surface_unchanged():
    f = fuse(T.Compose([T.Resize(300, max_size=200), T.ToTensor()]))
    with pytest.raises(ValueError, match="max_size = 200 must be strictly greater"):
        f(encode(40, 40))
    f = fuse(T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize([0.5] * 3, [0.0] * 3)]))
    assert f.plan["trailing"][0].std == [0.0] * 3
    with pytest.raises(ValueError, match="std evaluated to zero"):
        f(encode(40, 40))
