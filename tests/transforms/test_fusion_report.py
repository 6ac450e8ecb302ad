"""What fuse says about a chain it fused less than it could
(fastdecode/transforms/report.py): the reason given for each kind of
unfused step (a subclass, a v1 step after the converter, antialias,
interpolations on tensors, parameters it does not translate, a colour
RandomApply first), and explain()'s lines for tensor-stage geometry, chains
returning PIL images or numpy arrays, and unfused steps that cost nothing."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2 as T2  # noqa: E402

from fastdecode.transforms import fuse  # noqa: E402

NEAREST = T.InterpolationMode.NEAREST


class MyResize(T.Resize):
    """A subclass: its forward may differ from Resize's."""


def _resize_with_interpolation(value):
    """A v2 Resize whose interpolation was set after it was made (its init checks it)."""
    step = T2.Resize(32)
    step.interpolation = value
    return step


def _fuse(steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's own warning on antialias=False
        return fuse(T.Compose(steps))


# (chain, index of the step reported, steps fused before it, the reason)
REPORTS = {
    "subclass-first": ([MyResize(32), T.CenterCrop(32), T.ToTensor()], 0, 0,
                       f"a subclass ({__name__}.MyResize) of torchvision's Resize: its forward "
                       "may differ, so it runs as it is"),
    "subclass-after-resize": ([T.CenterCrop(64), MyResize(32), T.ToTensor()], 1, 1,
                              f"a subclass ({__name__}.MyResize) of torchvision's Resize: its "
                              "forward may differ, so it runs as it is"),
    "v1-flip-after-converter": ([T2.PILToTensor(), T.RandomHorizontalFlip()], 1, 1,
                                "a v1 transform after the tensor converter (torchvision runs it "
                                "on the tensor)"),
    "antialias-false": ([T.CenterCrop(64), T2.Resize(32, antialias=False), T.ToTensor()], 1, 1,
                        "antialias=False: torchvision resamples PIL images antialiased anyway "
                        "and warns; it runs in torchvision"),
    "nearest-on-tensor": ([T2.PILToTensor(), T2.Resize(32, interpolation=NEAREST)], 1, 1,
                          "nearest on tensors is not Pillow's nearest"),
    "antialias-none-on-tensor": ([T2.PILToTensor(), T2.Resize(32, antialias=None)], 1, 1,
                                 "antialias must be True on tensors (torch's resize is "
                                 "Pillow's only then)"),
    "size-and-max-size": ([T.CenterCrop(64), T.Resize((32, 32), max_size=40), T.ToTensor()],
                          1, 1, "parameters fuse does not translate (e.g. a size torchvision "
                                "would reject)"),
    "interpolation-set-to-a-number": ([T.CenterCrop(64), _resize_with_interpolation(7),
                                       T.ToTensor()], 1, 1,
                                      "interpolation 7 is not one fuse maps"),
    "colour-randomapply-first": ([T.RandomApply([T.ColorJitter(0.4), T.RandomRotation(10)]),
                                  T.Resize(32), T.ToTensor()], 0, 0,
                                 "a RandomApply of steps other than ColorJitter / "
                                 "RandomGrayscale: it runs unfused"),
}


@pytest.mark.parametrize("steps, index, fused, reason", list(REPORTS.values()), ids=list(REPORTS))
def test_the_reason_an_unfused_step_is_given(steps, index, fused, reason):
    f = _fuse(steps)
    report = f.fusion_report()
    assert (report.index, report.fused, report.reason) == (index, fused, reason)
    assert report.step is steps[index]
    entry = f.explain().split(f"\n  {index}. ")[1]
    assert f"runs unfused, in order, in torchvision: {reason}" in entry


def test_an_unfused_step_costs_the_steps_after_it():
    f = _fuse([MyResize(32), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.2] * 3),
               T.RandomErasing(), T.Lambda(lambda x: x)])
    report = f.fusion_report()
    assert report.cost == ("the 5 step(s) after it (CenterCrop, ToTensor, Normalize, "
                           "RandomErasing, ...) run unfused too, per sample")
    assert not report.loses_batch_path
    assert str(report).startswith("nothing fused: MyResize(size=32")


def test_geometry_on_the_tensor_is_said_to_run_in_torchvision():
    f = _fuse([T2.PILToTensor(), T2.CenterCrop(32), T2.ToDtype(torch.float32, scale=True)])
    assert f.fusion_report() is None
    assert ("  1. CenterCrop(size=(32, 32))\n       fused into the decode: only the region it "
            "keeps is decoded (torchvision runs it on the uint8 tensor; the result is the same)"
            ) in f.explain()
    assert "Summary: every step fused." in f.explain()


def test_a_chain_returning_pil_images_has_no_batch_path():
    f = _fuse([T.Resize(32), T.CenterCrop(32)])
    assert f.explain().splitlines()[-2:] == [
        "Batches: no batch path, because the chain returns PIL images, not tensors; each "
        "sample is made on its own.",
        "Summary: every step fused."]


def test_unfused_steps_after_the_fused_run_that_cost_nothing():
    f = _fuse([T.Resize(32), T.CenterCrop(32), T.Lambda(lambda x: x), T.RandomGrayscale()])
    assert f.fusion_report() is None  # PIL out: no batch path to lose
    lines = f.explain().splitlines()
    assert lines[5:] == [
        "  2. Lambda()",
        "       runs unfused, in order, in torchvision: not a transform fuse knows "
        "(torchvision.transforms.transforms.Lambda); it runs on the decoded PIL image",
        "  3. RandomGrayscale(p=0.1)",
        "       runs unfused, in order, in torchvision: it comes after an unfused step "
        "(fastdecode never reorders a chain)",
        "Batches: no batch path, because the chain returns PIL images, not tensors; each sample "
        "is made on its own.",
        "Summary: the leading geometric run fused; the steps after it run unfused, which costs "
        "nothing more for this chain."]


def test_a_resize_of_each_images_own_size_loses_no_batch_path():
    f = _fuse([T.Resize(32), T.Lambda(lambda x: x), T.ToTensor()])
    assert f.fusion_report() is None  # sizes differ per image: no batch path either way
    assert ("Batches: no batch path, because the samples' size depends on each image (no "
            "fixed-size crop); each sample is made on its own.") in f.explain()


def test_a_chain_returning_numpy_arrays_has_no_batch_path():
    tt = pytest.importorskip("timm.data.transforms")
    f = _fuse([T.Resize(32), T.CenterCrop(32), tt.ToNumpy()])
    assert f.output_shape is None and f.fusion_report() is None
    assert ("Batches: no batch path, because the chain returns numpy arrays; each sample is "
            "made on its own.") in f.explain()
