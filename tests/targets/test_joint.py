"""fuse_joint against torchvision v2 itself: the reference presets x seed x photo x mode.

Per case: the same RNG state after the call, boxes and labels ``torch.equal``
to v2's, masks (per-instance and semantic) equal in both modes, the image
bit-identical with exact=True and >= 40 dB PSNR by default (fuse's bound).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
PIL_Image = pytest.importorskip("PIL.Image")

from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2 as T  # noqa: E402

from fastdecode.targets import fuse_joint, presets  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402

PHOTOS = corpus_dir("photos")
FILES = sorted(PHOTOS.glob("*/*"))[:8] if PHOTOS else []
photo_params = ([pytest.param(f, id=f"{f.parent.name}-{f.stem}") for f in FILES] or
                [pytest.param(None, id="photos-absent",
                              marks=pytest.mark.skip(reason="shared corpus 'photos' absent"))])
SEEDS = [0, 1, 2, 3]


def instance_target(height: int, width: int, seed: int) -> dict:
    """Boxes, their rectangle-and-disc masks, labels and keypoints of one image."""
    g = torch.Generator().manual_seed(1000 + seed)
    n = 6
    x0 = torch.randint(0, width - 8, (n,), generator=g)
    y0 = torch.randint(0, height - 8, (n,), generator=g)
    x1 = (x0 + torch.randint(4, max(5, width // 2), (n,), generator=g)).clamp(max=width)
    y1 = (y0 + torch.randint(4, max(5, height // 2), (n,), generator=g)).clamp(max=height)
    boxes = torch.stack([x0, y0, x1, y1], 1).float()
    yy, xx = np.mgrid[:height, :width]
    masks = np.zeros((n, height, width), np.uint8)
    for i, (a, b, c, d) in enumerate(boxes.long().tolist()):
        cy, cx, r = (b + d) / 2, (a + c) / 2, max(2, min(c - a, d - b) / 2)
        masks[i] = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r)
    points = torch.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], 1)
    return {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(height, width)),
            "masks": tv_tensors.Mask(torch.from_numpy(masks)),
            "labels": torch.arange(1, n + 1),
            "keypoints": tv_tensors.KeyPoints(points[:, None, :], canvas_size=(height, width))}


def _copy(target):
    if isinstance(target, dict):
        return {k: v.clone() for k, v in target.items()}
    return target.clone()


def _psnr(a: torch.Tensor, b: torch.Tensor, peak: float) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)


def _both(chain, fused, data, image, target, seed):
    torch.manual_seed(seed)
    want = chain(image, _copy(target))
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    got = fused(data, _copy(target))
    assert torch.equal(torch.get_rng_state(), state), "the RNG advanced differently"
    return want, got


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("preset", presets.DETECTION)
@pytest.mark.parametrize("path", photo_params)
def test_detection_preset_matches_v2(path, preset, seed, exact):
    data = path.read_bytes()
    image = PIL_Image.open(path).convert("RGB")
    chain = presets.detection(preset)
    target = instance_target(image.height, image.width, seed)
    (want_img, want), (got_img, got) = _both(chain, fuse_joint(chain, exact=exact), data,
                                             image, target, seed)
    assert sorted(got) == sorted(want)
    for key in ("boxes", "labels", "masks", "keypoints"):
        assert type(got[key]) is type(want[key]), key
        assert got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key], want[key]), key
    assert got_img.shape == want_img.shape and got_img.dtype == want_img.dtype
    if exact:
        assert torch.equal(got_img, want_img)
    else:
        assert _psnr(got_img, want_img, 1.0) >= 40.0


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "default"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("path", photo_params)
def test_segmentation_preset_matches_v2(path, seed, exact):
    data = path.read_bytes()
    image = PIL_Image.open(path).convert("RGB")
    chain = presets.segmentation()
    labels = tv_tensors.Mask(torch.from_numpy((np.asarray(image)[..., 1] // 23).astype(np.uint8)))
    (want_img, want), (got_img, got) = _both(chain, fuse_joint(chain, exact=exact), data,
                                             image, labels, seed)
    assert got.dtype == want.dtype == torch.int64
    assert torch.equal(got, want)
    assert got_img.shape == want_img.shape
    if exact:
        assert torch.equal(got_img, want_img)
    else:
        std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
        assert _psnr(got_img * std, want_img * std, 1.0) >= 40.0


def test_a_tuple_target_and_one_sample_argument_match_v2():
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    chain = T.Compose([T.RandomIoUCrop(), T.RandomHorizontalFlip(1.0), T.PILToTensor()])
    target = instance_target(image.height, image.width, 0)
    pair = (target["boxes"], target["masks"])
    torch.manual_seed(5)
    want_img, (want_boxes, want_masks) = chain(image, pair)
    torch.manual_seed(5)
    got_img, (got_boxes, got_masks) = fuse_joint(chain, exact=True)((path.read_bytes(), pair))
    assert torch.equal(got_img, want_img) and type(got_img) is type(want_img)
    assert torch.equal(got_boxes, want_boxes) and torch.equal(got_masks, want_masks)


def test_a_step_that_cannot_join_runs_in_torchvision_said_once():
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    # a resample after the mirror: the mirror joins, the resize and the rest run in torchvision
    chain = T.Compose([T.RandomHorizontalFlip(1.0), T.RandomShortestSize(300), T.RandomIoUCrop(),
                       T.ToImage()])
    fused = fuse_joint(chain, exact=True)
    target = instance_target(image.height, image.width, 1)
    with pytest.warns(UserWarning, match="does not fuse here .*a resample after another step"):
        want, got = _both(chain, fused, path.read_bytes(), image, target, 2)
    assert torch.equal(got[0], want[0])
    for key in want[1]:
        assert torch.equal(got[1][key], want[1][key]), key
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _both(chain, fused, path.read_bytes(), image, target, 3)


def test_iou_crop_without_boxes_raises_as_v2():
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    fused = fuse_joint(T.Compose([T.RandomIoUCrop()]))
    with pytest.raises(TypeError, match="requires input sample to contain .* bounding boxes"):
        fused(path.read_bytes(), {"labels": torch.tensor([1])})


@pytest.mark.parametrize("inputs", [(b"x",), (b"x", {}, {})], ids=["one", "three"])
def test_not_a_pair_raises(inputs):
    with pytest.raises(TypeError, match=r"takes \(data, target\)"):
        fuse_joint(T.Compose([T.RandomHorizontalFlip()]))(*inputs)


def test_a_joint_transform_pickles():
    import pickle

    fused = fuse_joint(presets.detection("ssd"), exact=True)
    again = pickle.loads(pickle.dumps(fused))
    assert again.exact and [type(s) for s in again.steps] == [type(s) for s in fused.steps]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("leading", ["jitter", "jitter-no-contrast", "jitter+permutation"])
def test_leading_colour_steps_match_v2(leading, seed):
    """ColorJitter runs natively: on the whole decoded image when it draws a
    contrast (the whole image's mean), else on the kept crop alone;
    RandomChannelPermutation (not a fused colour step) sends the leading
    steps to torchvision on PIL."""
    path = FILES[seed % len(FILES)] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    contrast = 0 if leading == "jitter-no-contrast" else 0.4
    steps = [T.ColorJitter(0.4, contrast, 0.4, 0.1)]
    if leading == "jitter+permutation":
        steps.append(T.RandomChannelPermutation())
    chain = T.Compose(steps + [T.RandomIoUCrop(), T.RandomHorizontalFlip(), T.PILToTensor()])
    fused = fuse_joint(chain, exact=True)
    assert (fused.pre_color is None) == (leading == "jitter+permutation")
    target = instance_target(image.height, image.width, seed)
    (want_img, want), (got_img, got) = _both(chain, fused, path.read_bytes(), image, target,
                                             seed)
    assert torch.equal(got_img, want_img)
    for key in want:
        assert torch.equal(got[key], want[key]), key


@pytest.mark.parametrize("mask", ["instances", "semantic"])
def test_sanitize_moved_before_the_masks_matches_v2(mask):
    """Degenerate boxes dropped before the masks are made (instance masks), or
    left to v2's own step (a (H, W) mask, indexed by v2 at its output size)."""
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    h, w = image.height, image.width
    target = instance_target(h, w, 7)
    target["boxes"][1] = torch.tensor([5.0, 5.0, 5.0, 9.0])  # degenerate: dropped
    if mask == "semantic":
        target["masks"] = tv_tensors.Mask(target["masks"].amax(0))
    chain = T.Compose([T.RandomHorizontalFlip(1.0), T.ToImage(),
                       T.ConvertBoundingBoxFormat("CXCYWH"), T.SanitizeBoundingBoxes()])
    fused = fuse_joint(chain, exact=True)
    assert fused.sanitize is not None and fused.sanitize.index == 2
    (want_img, want), (got_img, got) = _both(chain, fused, path.read_bytes(), image, target, 0)
    assert len(want["labels"]) == 5
    for key in want:
        assert torch.equal(got[key], want[key]) and type(got[key]) is type(want[key]), key


def test_sanitize_with_labels_of_another_length_raises_as_v2():
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    target = instance_target(image.height, image.width, 8)
    target["labels"] = target["labels"][:2]
    fused = fuse_joint(T.Compose([T.RandomHorizontalFlip(), T.SanitizeBoundingBoxes()]))
    with pytest.raises(ValueError, match="must match the number of labels"):
        fused(path.read_bytes(), target)


def test_fuse_takes_data_and_target_once_targets_is_imported(monkeypatch):
    from fastdecode.transforms import fuse, kinds

    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    chain = presets.detection("ssdlite")
    target = instance_target(image.height, image.width, 4)
    f = fuse(chain, exact=True)
    for call in (lambda d, t: f(d, t), lambda d, t: f((d, t))):
        (want_img, want), (got_img, got) = _both(chain, call, path.read_bytes(), image, target, 3)
        assert torch.equal(got_img, want_img)
        for key in want:
            assert torch.equal(got[key], want[key]), key
    monkeypatch.setattr(kinds, "_JOINT", [])
    with pytest.raises(TypeError, match="needs fastdecode.targets: import fastdecode.targets"):
        fuse(chain)(path.read_bytes(), target)


@pytest.mark.parametrize("fmt", ["CXCYWHR", "XYWHR", "XYXYXYXY"])
@pytest.mark.parametrize("seed", [0, 1])
def test_rotated_boxes_match_v2(fmt, seed):
    """Rotated boxes through a resize, a zoom-out and a mirror are v2's (its
    kernels move them); RandomIoUCrop refuses them as v2 does."""
    path = FILES[seed] if len(FILES) > seed else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    h, w = image.height, image.width
    cxcywhr = torch.tensor([[100.0, 80.0, 60.0, 40.0, 30.0], [w / 2, h / 2, 50.0, 90.0, -20.0]])
    boxes = tv_tensors.BoundingBoxes(cxcywhr, format="CXCYWHR", canvas_size=(h, w))
    from torchvision.transforms.v2 import functional as F

    target = {"boxes": F.convert_bounding_box_format(boxes, new_format=fmt),
              "labels": torch.tensor([1, 2])}
    chain = T.Compose([T.RandomShortestSize([300, 400], max_size=700),
                       T.RandomZoomOut(fill=0, p=1.0), T.RandomHorizontalFlip(1.0), T.ToImage()])
    (want_img, want), (got_img, got) = _both(chain, fuse_joint(chain, exact=True),
                                             path.read_bytes(), image, target, seed)
    assert torch.equal(got_img, want_img)
    assert got["boxes"].format == want["boxes"].format and torch.equal(got["boxes"], want["boxes"])
    with pytest.raises(ValueError, match="Cannot convert between rotated and unrotated"):
        fuse_joint(T.Compose([T.RandomIoUCrop()]))(path.read_bytes(), target)


TAILS = {
    "float": ([T.ToDtype(torch.float32, scale=True)], 1),
    "unscaled": ([T.ToDtype(torch.float32)], 1),
    "float-normalize": ([T.ToDtype(torch.float32, scale=True), T.Normalize([0.4, 0.5, 0.6],
                                                                           [0.2, 0.3, 0.25])], 2),
    "box-steps-between": ([T.ConvertBoundingBoxFormat("CXCYWH"), T.ToDtype(torch.float32, scale=True),
                           T.ToPureTensor(), T.Normalize([0.5] * 3, [0.5] * 3)], 2),
    "dict-masks": ([T.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64,
                               "others": None}, scale=True)], 1),
    "invert-ends-it": ([T.ToDtype(torch.float32, scale=True), T.RandomInvert(p=1.0),
                         T.Normalize([0.5] * 3, [0.5] * 3)], 1),
    "float64": ([T.ToDtype(torch.float64, scale=True)], 0),
}


@pytest.mark.parametrize("tail", list(TAILS))
def test_the_image_float_tail_is_v2s(tail):
    """ToImage then ToDtype to float32 / Normalize (box steps between them
    allowed) as one table: v2's floats bit for bit, masks converted by the
    ToDtype kept; a step that is neither ends the tail; another float dtype
    is not fused."""
    path = FILES[0] if FILES else pytest.skip("shared corpus 'photos' absent")
    image = PIL_Image.open(path).convert("RGB")
    steps, fused_steps = TAILS[tail]
    chain = T.Compose([T.RandomHorizontalFlip(1.0), T.ToImage(), *steps])
    fused = fuse_joint(chain, exact=True)
    assert (0 if fused.tail is None else len(fused.tail.steps)) == fused_steps
    target = instance_target(image.height, image.width, 2)
    (want_img, want), (got_img, got) = _both(chain, fused, path.read_bytes(), image, target, 1)
    assert type(got_img) is type(want_img) and got_img.dtype == want_img.dtype
    assert torch.equal(got_img, want_img)
    for key in want:
        assert type(got[key]) is type(want[key]) and got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key], want[key]), key
