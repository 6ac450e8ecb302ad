"""The old private paths (fastdecode._fuse, fastdecode._plan) keep working for one release."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

MOVED = {
    "fastdecode._fuse": {"FusedTransform": "fastdecode.transforms.fused",
                         "fuse": "fastdecode.transforms.fused",
                         "register": "fastdecode.transforms.kinds",
                         "flatten": "fastdecode.transforms.kinds",
                         "pil_filter": "fastdecode.transforms.filters",
                         "PIL_FILTER_NAMES": "fastdecode.transforms.filters",
                         "TensorTail": "fastdecode.transforms.tensor",
                         "Renderer": "fastdecode.transforms.render"},
    "fastdecode._plan": {"Geometry": "fastdecode.transforms.geometry",
                         "Stop": "fastdecode.transforms.geometry",
                         "resized_output_size": "fastdecode.transforms.geometry",
                         "PIL_FILTER_NAMES": "fastdecode.transforms.filters"},
}


@pytest.mark.parametrize("old,name", [(old, name) for old, names in MOVED.items()
                                      for name in names])
def test_old_private_paths_are_the_same_objects(old, name):
    new = MOVED[old][name]
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new),
                                                                   name)


def test_run_geometry_is_draw_geometry():
    from fastdecode import _plan
    from fastdecode.transforms import geometry

    assert _plan.run_geometry is geometry.draw_geometry
