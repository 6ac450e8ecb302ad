"""A FastLoader state saved by an earlier release's layout loads now, and the
epoch goes on exactly: ``states/fastloader-v1-b0d1558.pt`` was saved by the
tree at b0d1558 (before the package moved out of ``fastdecode/data``), after
two batches of ``loader()`` below over ``make_tree(per_class=6)``; the hashes
are those of that tree's six uninterrupted batches."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.errors import ResumeError  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

SAVED = Path(__file__).with_name("states") / "fastloader-v1-b0d1558.pt"
# sha256 (first 16 hex digits) of each batch of the saving tree's uninterrupted epoch
BEFORE = ["56047be9e2bc50cf", "e0b386c81177dc0e", "c4993295e6b7de26", "199994c5301b94b2",
          "74077370bd6690be", "c6320273725176e6"]


def loader(root: Path):
    chain = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = fd.FastImageFolder(str(root), chain)
    return fd.FastLoader(ds, batch_size=3, shuffle=True, num_workers=0, resumable=1234,
                         generator=torch.Generator().manual_seed(7))


def digest(batch) -> str:
    return hashlib.sha256(batch.contiguous().numpy().tobytes()).hexdigest()[:16]


def test_a_state_saved_before_the_move_resumes_the_epoch_exactly(tmp_path):
    root = make_tree(tmp_path / "tree", per_class=6)
    state = torch.load(SAVED, weights_only=True)
    assert state["kind"] == "fastdecode.FastLoader" and state["version"] == 1
    assert state["batches"] == 2
    # The saved file list is the saving machine's absolute paths; this tree's
    # are elsewhere, so only that hash is this tree's (the same names and targets).
    fresh = loader(root)
    state["dataset"]["files"] = fresh.state_dict()["dataset"]["files"]
    assert state["dataset"]["classes"] == fresh.state_dict()["dataset"]["classes"]

    whole = [digest(images) for images, _ in loader(root)]
    assert whole == BEFORE, "this tree's uninterrupted epoch is not the saving tree's"
    resumed = loader(root)
    resumed.load_state_dict(state)
    assert [digest(images) for images, _ in resumed] == BEFORE[2:]


def test_a_state_of_another_dataset_is_refused(tmp_path):
    """The guard that the test above works around is live: an unchanged saved
    state names files that are not this tree's."""
    root = make_tree(tmp_path / "tree", per_class=6)
    state = torch.load(SAVED, weights_only=True)
    with pytest.raises(ResumeError, match="another dataset: its file list differs"):
        loader(root).load_state_dict(state)
