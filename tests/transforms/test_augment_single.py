"""torchvision's single-op augmentations fused into the decode (issue 50).

RandomRotation (fill, centre, each resample), RandomAffine (translate,
scale, one and two shears, centre), RandomPosterize, RandomSolarize,
RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomInvert, v1
and v2, after a RandomResizedCrop: ``exact=True`` is torchvision's tensor bit
for bit with torch's RNG left in the same state; what does not fuse (a
RandomRotation with ``expand``, a nearest-exact interpolation) runs unfused
and says why.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

from helpers.fusion import pil_of  # noqa: E402
from helpers.jpeg_samples import encode  # noqa: E402

B, C = T.InterpolationMode.BILINEAR, T.InterpolationMode.BICUBIC
OPS = {
    "rotation": lambda M: M.RandomRotation(30),
    "rotation-fill-center": lambda M: M.RandomRotation((-90, 200), interpolation=B,
                                                       fill=(5, 100, 250), center=(3, 7)),
    "rotation-bicubic": lambda M: M.RandomRotation(180, interpolation=C, fill=128),
    "affine": lambda M: M.RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2),
                                       shear=(-10, 10, -5, 5), interpolation=B, fill=7),
    "affine-one-shear": lambda M: M.RandomAffine(0, shear=15),
    "affine-center": lambda M: M.RandomAffine(45, center=(10, 20), scale=(0.5, 2)),
    "posterize": lambda M: M.RandomPosterize(3, p=0.6),
    "solarize": lambda M: M.RandomSolarize(100.5),
    "sharpness": lambda M: M.RandomAdjustSharpness(2.5),
    "autocontrast": lambda M: M.RandomAutocontrast(),
    "equalize": lambda M: M.RandomEqualize(0.3),
    "invert": lambda M: M.RandomInvert(0.7),
}
VERSIONS = {"v1": T, "v2": T2}
SEEDS = range(3)


def _chain(M, op):
    return M.Compose([M.RandomResizedCrop((72, 88)), op, M.PILToTensor()])


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("name", list(OPS))
def test_exact_is_torchvision_bit_for_bit(name, version, seed):
    M = VERSIONS[version]
    chain = _chain(M, OPS[name](M))
    f = fuse(chain, exact=True)
    assert f.plan["color"] == [chain.transforms[1]] and not f.trailing
    data = encode(150, 190, seed=seed)
    torch.manual_seed(seed)
    theirs = chain(pil_of(data))
    their_state = torch.get_rng_state()
    torch.manual_seed(seed)
    ours = f(data)
    assert torch.equal(torch.get_rng_state(), their_state)
    assert torch.equal(ours, theirs)


UNFUSED = {
    "rotation-expand": (lambda M: M.RandomRotation(30, expand=True), "expand=True changes the image size"),
    "rotation-nearest-exact": (lambda M: M.RandomRotation(
        30, interpolation=T.InterpolationMode.NEAREST_EXACT),
        "an interpolation Image.transform does not take"),
}


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("name", list(UNFUSED))
def test_what_does_not_fuse_runs_unfused_and_says_so(name, version):
    M = VERSIONS[version]
    make, words = UNFUSED[name]
    chain = _chain(M, make(M))
    f = fuse(chain)
    assert f.plan["color"] == [] and f.trailing[0] is chain.transforms[1]
    assert words in f.explain()
    data = encode(100, 120, seed=4)
    torch.manual_seed(1)
    theirs = chain(pil_of(data))
    torch.manual_seed(1)
    assert torch.equal(f(data), theirs)


BLURS = {"k5": (5, (0.1, 2.0)), "k9x3": ((9, 3), (1.5, 1.5)), "k23": (23, (0.5, 5.0))}


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("blur", list(BLURS))
def test_gaussian_blur_default_mode_within_a_level(blur, version, seed):
    """GaussianBlur fuses in the default mode only (torch's conv2d sums in the
    CPU's own order): its sigma drawn as torchvision draws it, the pixels
    within one level; exact=True leaves it to torchvision, bit for bit."""
    M = VERSIONS[version]
    kernel, sigma = BLURS[blur]
    chain = M.Compose([M.GaussianBlur(kernel, sigma), M.PILToTensor()])
    f, exact = fuse(chain), fuse(chain, exact=True)
    assert f.plan["color"] == [chain.transforms[0]] and exact.trailing[0] is chain.transforms[0]
    assert "within one level" in f.explain() and "exact=True it runs unfused" in exact.explain()
    data = encode(90, 130, seed=seed)
    torch.manual_seed(seed)
    theirs = chain(pil_of(data))
    their_state = torch.get_rng_state()
    torch.manual_seed(seed)
    ours = f(data)
    assert torch.equal(torch.get_rng_state(), their_state)
    assert (ours.int() - theirs.int()).abs().max() <= 1
    torch.manual_seed(seed)
    assert torch.equal(exact(data), theirs)
