"""FastLoader's ``threads`` (issue 51, items 7 and 8): checked when the loader
is made, each refusal naming ``threads`` (not the thread pool's
``max_workers``, at the first batch); and what it gives, as the README says:
for the same seed the samples and order of ``num_workers=2``, the image
tensors too only with ``resumable=True``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

import fastdecode  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return fastdecode.FastImageFolder(make_tree(tmp_path_factory.mktemp("threads") / "t"), TRAIN)


@pytest.mark.parametrize("kwargs, error, match", [
    pytest.param({"threads": 0}, ValueError,
                 r"^threads must be a positive int \(the pool's thread count\), got 0;", id="0"),
    pytest.param({"threads": -1}, ValueError,
                 r"^threads must be a positive int \(the pool's thread count\), got -1;", id="-1"),
    pytest.param({"threads": 1.5}, TypeError,
                 r"^threads must be a positive int \(the pool's thread count\), got 1\.5 "
                 r"\(float\)$", id="float"),
    pytest.param({"threads": 2.0}, TypeError, r"got 2\.0 \(float\)$", id="whole-float"),
    pytest.param({"threads": True}, TypeError, r"got True \(bool\)$", id="bool"),
    pytest.param({"threads": "2"}, TypeError, r"got '2' \(str\)$", id="str"),
    pytest.param({"threads": 2, "num_workers": 2}, ValueError,
                 r"^threads=2 and num_workers=2 exclude each other: threads runs the loading in "
                 r"a thread pool in this process, without worker processes; pass one of them$",
                 id="with-workers"),
])
def test_a_bad_threads_is_refused_when_the_loader_is_made(dataset, kwargs, error, match):
    with pytest.raises(error, match=match):
        fastdecode.FastLoader(dataset, batch_size=4, **kwargs)


@pytest.mark.parametrize("kwargs", [{"threads": 1}, {"threads": 2, "num_workers": 0},
                                    {"threads": np.int64(2)}, {"threads": None}],
                         ids=["1", "with-0-workers", "numpy-int", "none"])
def test_a_good_threads_is_taken(dataset, kwargs):
    loader = fastdecode.FastLoader(dataset, batch_size=4, num_workers=kwargs.pop("num_workers", 0),
                                   **kwargs)
    assert next(iter(loader))[0].shape == (4, 3, 32, 32)


def _epoch(dataset, **kwargs):
    torch.manual_seed(0)
    loader = fastdecode.FastLoader(dataset, batch_size=4, shuffle=True, **kwargs)
    images, targets = zip(*[(x.clone(), y.clone()) for x, y in loader])
    return torch.cat(images), torch.cat(targets)


@pytest.mark.parametrize("resumable", [False, True], ids=["default", "resumable"])
def test_threads_give_the_workers_targets_and_their_images_only_resumable(dataset, resumable):
    threads = _epoch(dataset, threads=2, resumable=resumable)
    workers = _epoch(dataset, num_workers=2, resumable=resumable)
    assert torch.equal(threads[1], workers[1])  # the same samples, in the same order
    # by default each worker draws its crops from its own RNG, as DataLoader's do
    assert torch.equal(threads[0], workers[0]) is resumable
