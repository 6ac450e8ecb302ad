"""What the fused plan says about itself (repr, explain, a detached plan's
repr), the lazy names the packages list, and filter_of's mapping: small
public surfaces no matrix reaches (make coverage's list of public
functions never run)."""

from __future__ import annotations

import pytest

pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

import fastdecode  # noqa: E402
import fastdecode.transforms as fdt  # noqa: E402
from fastdecode.batching._detached import detach  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402
from fastdecode.transforms.filters import filter_of  # noqa: E402


def chain():
    return T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])


def test_repr_and_explain_name_every_step():
    fused = fuse(chain())
    text = repr(fused)
    assert text.startswith("FusedTransform(") and "RandomResizedCrop(size=(24, 24)" in text
    explained = fused.explain()
    for k, step in enumerate(("RandomResizedCrop", "RandomHorizontalFlip", "ToTensor")):
        assert f"{k}. {step}" in explained
    assert "fused into the decode" in explained
    for op in fused.geo_ops:
        assert type(op.transform).__name__ in repr(op)


def test_a_detached_plan_names_its_chain():
    plan = detach(fuse(chain()))
    assert plan is not None
    assert repr(plan) == f"DetachedPlan of {plan.text}"
    assert "RandomResizedCrop" in repr(plan)


@pytest.mark.parametrize("package, names", [(fastdecode, ("FastLoader", "fuse", "decode_jpeg")),
                                            (fdt, tuple(fdt._LAZY))],
                         ids=["fastdecode", "fastdecode.transforms"])
def test_dir_lists_the_lazy_names(package, names):
    listed = dir(package)
    assert listed == sorted(listed)
    assert set(names) <= set(listed)


@pytest.mark.parametrize("value", [T.InterpolationMode.BILINEAR, "bilinear", 2],
                         ids=["mode", "name", "pil-constant"])
def test_filter_of_bilinear_is_one_filter(value):
    assert filter_of(value) is not None
    assert filter_of(value) == filter_of(T.InterpolationMode.BILINEAR)


def test_filter_of_refuses_what_is_no_interpolation():
    with pytest.raises(ValueError, match="interpolation must be"):
        filter_of(12345)
