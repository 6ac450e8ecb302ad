"""FastImageFolder against ImageFolder, sample by sample, for the same seed: chains x formats x
exact. exact=True is bit-identical; the default mode stays within fuse's documented bound.

Generated trees (one image per format, large enough for DCT scaling to apply) and the shared
photos corpus (every 10th photo by name: 25 real JPEGs; the figures over all 250 are in
DESIGN.md, "Datasets and loaders")."""

import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402
from helpers.jpeg_samples import natural_image  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BICUBIC, NEAREST = T.InterpolationMode.BICUBIC, T.InterpolationMode.NEAREST
# fuse's documented floor for the default mode (fastdecode.transforms: minimum PSNR >= 42.1 dB
# measured per op combination, "the documented floor is 40 dB"), on the chains' uint8 pixels
DEFAULT_MIN_PSNR = 40.0

CHAINS = {
    "train-v1": lambda: T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
                                   T.ToTensor(), T.Normalize(MEAN, STD)]),
    "train-v2": lambda: v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
                                    v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                                    v2.Normalize(MEAN, STD)]),
    "eval-v1": lambda: T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(),
                                  T.Normalize(MEAN, STD)]),
    "eval-v2": lambda: v2.Compose([v2.Resize(72), v2.CenterCrop(64), v2.ToImage(),
                                   v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "resize-only": lambda: T.Compose([T.Resize(56), T.PILToTensor()]),
    "uint8-tail": lambda: T.Compose([T.RandomResizedCrop(48), T.PILToTensor()]),
    "float-tail": lambda: T.Compose([T.Resize(60), T.CenterCrop(48), T.ToTensor()]),
    "bicubic": lambda: T.Compose([T.RandomResizedCrop(48, interpolation=BICUBIC),
                                  T.PILToTensor()]),
    "nearest": lambda: T.Compose([T.Resize(60, interpolation=NEAREST), T.CenterCrop(48),
                                  T.PILToTensor()]),
    "no-antialias": lambda: T.Compose([T.Resize(60, antialias=False), T.CenterCrop(48),
                                       T.PILToTensor()]),
    "pad-center-crop": lambda: T.Compose([T.Resize(40), T.CenterCrop(64), T.PILToTensor()]),
}
# (format, PIL mode, save options); each image 240x320, so a 48-72 px output is 3-5x smaller
FORMATS = {
    "jpeg-420": ("JPEG", "RGB", {"quality": 90}),
    "jpeg-444": ("JPEG", "RGB", {"quality": 92, "subsampling": 0}),
    "jpeg-progressive": ("JPEG", "RGB", {"quality": 85, "progressive": True}),
    "jpeg-gray": ("JPEG", "L", {"quality": 90}),
    "png": ("PNG", "RGB", {}),
    "png-rgba": ("PNG", "RGBA", {}),
    "webp": ("WEBP", "RGB", {"quality": 90}),
    "tiff": ("TIFF", "RGB", {}),
    "gif": ("GIF", "P", {}),
    "bmp": ("BMP", "RGB", {}),
    "ppm": ("PPM", "RGB", {}),
}
EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "TIFF": "tiff", "GIF": "gif", "BMP": "bmp",
       "PPM": "ppm"}
# Chains fuse does not fuse today: the dataset says so (issue 14) and runs them unfused.
WARNS = {"no-antialias": r"nothing fused: Resize\(.*runs unfused: antialias=False"}


PARAMS = [pytest.param(chain, fmt, exact, id=f"{chain}-{fmt}-{'exact' if exact else 'default'}")
          for chain in CHAINS for fmt in FORMATS for exact in (True, False)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    for i, (name, (fmt, mode, options)) in enumerate(FORMATS.items()):
        (root / name).mkdir()
        image = Image.fromarray(natural_image(240, 320, seed=40 + i, noise=0.02)).convert(mode)
        image.save(root / name / f"image.{EXT[fmt]}", fmt, **options)
    return root


def any_file(path):  # GIF is not among ImageFolder's extensions; both datasets take it so
    return True


def psnr(a, b) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def as_pixels(x):
    """The chain's result on the 0-255 scale of the pixels it came from."""
    x = x.as_subclass(torch.Tensor)
    if x.dtype == torch.uint8:
        return x.double()
    if x.min() < 0:  # normalized
        x = x * torch.tensor(STD)[:, None, None] + torch.tensor(MEAN)[:, None, None]
    return x.double() * 255


def compare(ours, theirs, index, seed, exact):
    torch.manual_seed(seed)
    a, target_a = ours[index]
    torch.manual_seed(seed)
    b, target_b = theirs[index]
    assert target_a == target_b and type(a) is type(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    if exact:
        assert torch.equal(a, b), f"max abs difference {(a.double() - b.double()).abs().max()}"
    else:
        assert psnr(as_pixels(a), as_pixels(b)) >= DEFAULT_MIN_PSNR


# torchvision's own warning for Resize(antialias=False) on PIL images (it ignores the option)
@pytest.mark.filterwarnings("ignore:Anti-alias option is always applied:UserWarning")
@pytest.mark.parametrize("chain,fmt,exact", PARAMS)
def test_generated_tree(tree, chain, fmt, exact):
    if chain in WARNS:
        with pytest.warns(RuntimeWarning, match=WARNS[chain]):
            ours = fd.FastImageFolder(tree, CHAINS[chain](), exact=exact, is_valid_file=any_file)
    else:
        ours = fd.FastImageFolder(tree, CHAINS[chain](), exact=exact, is_valid_file=any_file)
    theirs = ImageFolder(tree, CHAINS[chain](), is_valid_file=any_file)
    index = ours.classes.index(fmt)
    for seed in (0, 1):  # two crop boxes and flips per file, same in both
        compare(ours, theirs, index, seed, exact)


# Resize(NEAREST) + CenterCrop on a small image: a sub-pixel source box resampled with NEAREST
# once picked other pixels than Pillow's resize-then-crop (47 levels); fuse now resamples the
# whole crop for nearest.
@pytest.mark.parametrize("fmt", ["BMP", "PNG"])
def test_nearest_with_a_kept_region_on_a_small_image(tmp_path, fmt):
    (tmp_path / "c").mkdir()
    Image.fromarray(natural_image(120, 90, seed=3, noise=0.02)).save(
        tmp_path / "c" / f"x.{EXT[fmt]}", fmt)
    chain = T.Compose([T.Resize(40, interpolation=NEAREST), T.CenterCrop(32), T.PILToTensor()])
    ours = fd.FastImageFolder(tmp_path, chain, exact=True)
    compare(ours, ImageFolder(tmp_path, chain), 0, 0, exact=True)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
def test_a_fused_transform_is_used_as_such(tree, exact):
    chain = CHAINS["eval-v1"]()
    fused = fuse(chain, exact=exact)
    ours = fd.FastImageFolder(tree, fused, exact=exact, is_valid_file=any_file)
    assert ours.transform is fused and ours._live.get(fused) is fused
    assert ours.fixed_sample_shape() == (3, 64, 64)  # batch path: it is fused, not opaque
    theirs = ImageFolder(tree, chain, is_valid_file=any_file)
    compare(ours, theirs, ours.classes.index("jpeg-420"), 0, exact)


def test_exact_needs_a_fused_transform_built_exact(tree):
    with pytest.raises(ValueError, match="FusedTransform given as the transform was built "
                       "with exact=False"):
        fd.FastImageFolder(tree, fuse(CHAINS["eval-v1"]()), exact=True, is_valid_file=any_file)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
def test_batches_equal_items(tree, exact):
    ours = fd.FastImageFolder(tree, CHAINS["train-v1"](), exact=exact, is_valid_file=any_file)
    indices = list(range(len(ours)))
    torch.manual_seed(3)
    items = [ours[i][0] for i in indices]
    torch.manual_seed(3)
    batch = [x for x, _ in ours.__getitems__(indices)]
    assert all(torch.equal(a, b) for a, b in zip(items, batch))


# ---------------------------------------------------------------------------
# Real photos


PHOTO_CHAINS = {
    "train": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                T.ToTensor(), T.Normalize(MEAN, STD)]),
    "eval": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()]),
    "resize-only": lambda: T.Compose([T.Resize(128), T.PILToTensor()]),
}
PHOTOS = corpus_dir("photos")
@pytest.fixture(scope="module")
def photo_sets():
    if PHOTOS is None:
        pytest.skip("shared corpus 'photos' not present")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theirs = {name: ImageFolder(PHOTOS, make()) for name, make in PHOTO_CHAINS.items()}
        ours = {(name, exact): fd.FastImageFolder(PHOTOS, make(), exact=exact)
                for name, make in PHOTO_CHAINS.items() for exact in (True, False)}
    return ours, theirs


def _photo_params():
    names = sorted(p.name for p in PHOTOS.iterdir() if p.is_dir())[::10] if PHOTOS else []
    if not names:
        return [pytest.param(None, None, None, id="photos-absent",
                             marks=pytest.mark.skip(reason="shared corpus 'photos' not present"))]
    params = []
    for chain in PHOTO_CHAINS:
        for exact in (True, False):
            params += [pytest.param(chain, exact, name,
                                    id=f"{chain}-{'exact' if exact else 'default'}-{name}")
                       for name in names]
    return params


@pytest.mark.parametrize("chain,exact,wnid", _photo_params())
def test_photos(photo_sets, chain, exact, wnid):
    ours, theirs = photo_sets
    dataset = ours[(chain, exact)]
    index = dataset.class_to_idx[wnid]
    compare(dataset, theirs[chain], index, seed=index, exact=exact)


def test_photo_files_are_what_the_tests_think(photo_sets):
    ours, theirs = photo_sets
    first = ours[("eval", True)]
    with open(first.samples[0][0], "rb") as f:
        assert Image.open(io.BytesIO(f.read())).format == "JPEG"
    assert first.samples == theirs["eval"].samples and len(first) == 250
    assert np.array_equal(np.asarray(first.targets), np.arange(250))
