"""The dataset follows its transform chain live (a change is used from the next item, in-process
and in DataLoader workers alike), and says once when a chain fuses less than its leading
geometric run (issue 14: no silent full-decode fallbacks)."""

import re
import warnings

import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.transforms import fuse  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("tree"), per_class=2)


def train():
    return T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def _set_size(chain):
    chain.transforms[0].size = (24, 24)


def _append(chain):
    chain.transforms.append(T.RandomVerticalFlip(p=1.0))


def _replace(chain):
    chain.transforms[0] = T.Resize((30, 20))


def _normalize_in_place(chain):
    chain.transforms[3].mean[0] = 10.0


def _interpolation(chain):
    chain.transforms[0].interpolation = T.InterpolationMode.BICUBIC


CHANGES = {"attribute": _set_size, "append": _append, "replace-step": _replace,
           "list-in-place": _normalize_in_place, "interpolation": _interpolation}


def same_items(ours, theirs, indices, seed=0):
    for i in indices:
        torch.manual_seed(seed + i)
        a = ours[i][0]
        torch.manual_seed(seed + i)
        b = theirs[i][0]
        assert a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_is_used_from_the_next_item(tree, change):
    chain, reference = train(), train()
    ours = fd.FastImageFolder(tree, chain, exact=True)
    theirs = ImageFolder(tree, reference)
    same_items(ours, theirs, [0, 3])
    CHANGES[change](chain)
    CHANGES[change](reference)
    if change == "append":  # a flip after Normalize costs the batch path: said once
        with pytest.warns(RuntimeWarning, match=r"RandomVerticalFlip.*\(step 4\) runs unfused.*"
                                                r"batches lose the batch path"):
            same_items(ours, theirs, [0, 3, 5])
    else:
        same_items(ours, theirs, [0, 3, 5])
    torch.manual_seed(9)
    batch = ours.__getitems__([1, 2])
    torch.manual_seed(9)
    items = [ours[1], ours[2]]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batch, items))


def test_reassignment_is_used_from_the_next_item(tree):
    ours = fd.FastImageFolder(tree, train(), exact=True)
    assert ours[0][0].shape == (3, 48, 48)
    ours.transform = T.Compose([T.Resize((20, 30)), T.PILToTensor()])
    assert ours[0][0].shape == (3, 20, 30) and ours[0][0].dtype == torch.uint8
    assert ours.fixed_sample_shape() == (3, 20, 30)


def test_a_changed_fused_transform_is_rebuilt_with_its_options(tree):
    chain = train()
    fused = fuse(chain, exact=True)
    ours = fd.FastImageFolder(tree, fused, exact=True)
    assert ours[0][0].shape == (3, 48, 48)
    _set_size(chain)
    plan = ours._live.get(fused)
    assert plan is not fused and plan.exact and ours[0][0].shape == (3, 24, 24)
    same_items(ours, ImageFolder(tree, chain), [0, 4])


def _shrink_in_worker(worker_id):
    dataset = torch.utils.data.get_worker_info().dataset
    dataset.transform.transforms[0].size = (16, 16)


@pytest.mark.timeout(120)
def test_a_change_made_inside_a_worker_is_used_there(tree):
    ours = fd.FastImageFolder(tree, train())
    assert ours[0][0].shape == (3, 48, 48)  # the main process has a plan for 48 (forked along)
    loader = torch.utils.data.DataLoader(ours, batch_size=3, num_workers=2, timeout=60,
                                         worker_init_fn=_shrink_in_worker)
    assert {tuple(x.shape[1:]) for x, _ in loader} == {(3, 16, 16)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent"])
def test_changes_between_epochs_reach_workers_as_with_imagefolder(tree, persistent):
    def shapes(dataset):
        loader = torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=2, timeout=60,
                                             persistent_workers=persistent)
        seen = []
        for _epoch in range(2):
            seen.append({tuple(x.shape[1:]) for x, _ in loader})
            _set_size(dataset.transform)
        return seen

    ours, theirs = shapes(fd.FastImageFolder(tree, train())), shapes(ImageFolder(tree, train()))
    assert ours == theirs  # persistent workers keep their copy, in torchvision too
    assert ours[1] == ({(3, 48, 48)} if persistent else {(3, 24, 24)})


# ---------------------------------------------------------------------------
# Saying what happened


STOPS = {
    "unknown-first": (lambda: T.Compose([T.Grayscale(3), T.RandomResizedCrop(32),
                                         T.ToTensor()]),
                      r"nothing fused: Grayscale.*\(step 0\) runs unfused: not a transform fuse "
                      r"knows.*dataset\.explain\(\)"),
    # the colour step fuses (on the whole image); the crop after it cannot
    "colour-first": (lambda: T.Compose([T.ColorJitter(0.1), T.RandomResizedCrop(32),
                                        T.ToTensor()]),
                     r"fused 1 step\(s\), then: RandomResizedCrop.*\(step 1\) runs unfused: a "
                     r"geometric step after a colour step"),
    "function": (lambda: T.Compose([lambda im: im, T.Resize(32), T.ToTensor()]),
                 r"nothing fused: <function .*<lambda>.* \(step 0\) runs unfused: not a "
                 r"transform fuse knows \(builtins.function\)"),
    # a tensor-stage resize other than bilinear/bicubic is not Pillow's: not fused
    "unfusable-geometric": (lambda: v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(), v2.Resize(
        20, interpolation=T.InterpolationMode.NEAREST), v2.ToDtype(torch.float32, scale=True)]),
        r"fused 2 step\(s\), then: Resize\(.*\(step 2\) runs unfused: nearest on tensors"),
    # a mid-chain step after the fused geometry: the steps after it and the batch path are lost
    "mid-chain-unknown": (lambda: T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                             T.RandomPerspective(), T.ToTensor(),
                                             T.Normalize(MEAN, STD)]),
                          r"fused 2 step\(s\), then: RandomPerspective\(.*\(step 2\) runs unfused: "
                          r"not a transform fuse knows .*the 2 step\(s\) after it \(ToTensor, "
                          r"Normalize\) run unfused too, per sample, and batches lose the batch "
                          r"path.*dataset\.explain\(\)"),
    "mid-chain-lambda": (lambda: T.Compose([T.CenterCrop(32), T.Lambda(lambda im: im),
                                            T.PILToTensor()]),
                         r"fused 1 step\(s\), then: Lambda.*\(step 1\).*batches lose the batch "
                         r"path"),
    "after-the-tensor-steps": (lambda: T.Compose([T.RandomResizedCrop(32), T.ToTensor(),
                                                  T.Normalize(MEAN, STD), T.RandomVerticalFlip()]),
                               r"fused 3 step\(s\), then: RandomVerticalFlip.*\(step 3\) runs "
                               r"unfused: .*after the tensor converter.*batches lose the batch path"),
}


@pytest.mark.parametrize("name", sorted(STOPS))
def test_a_chain_that_fuses_less_warns_once(tree, name):
    make, match = STOPS[name]
    with pytest.warns(RuntimeWarning, match=match):
        ours = fd.FastImageFolder(tree, make())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours[0]
        ours.__getitems__([1, 2])
    text = ours.explain()
    assert "runs unfused, in order, in torchvision: " in text and "Summary: " in text
    assert str(ours._live.get(ours.transform).fusion_report()) in text


@pytest.mark.parametrize("name", [n for n in sorted(STOPS) if n.startswith(("mid", "after"))])
def test_a_step_that_costs_the_batch_path_warns_once_per_dataset(tree, name):
    make, match = STOPS[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = fd.FastImageFolder(tree, make())
        ours[0]
        ours.__getitems__([1, 2])
        ours.transform = ours.transform  # the same chain again: no second warning
        ours[3]
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and re.search(match, messages[0]), messages
    assert ours.fixed_sample_shape() is None  # the batch path the warning names is lost
    with pytest.warns(RuntimeWarning, match=match):  # another dataset says it again, once
        fd.FastImageFolder(tree, make())[0]
    assert "Batches: no batch path, because step" in ours.explain()


@pytest.mark.parametrize("make", [
    pytest.param(train, id="train"),
    pytest.param(lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()]), id="eval"),
    pytest.param(lambda: T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.2), T.ToTensor()]),
                 id="geometric-run-then-colour"),
    pytest.param(lambda: T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.2, 0.2, 0.2),
                                    T.RandomGrayscale(0.2), T.ToTensor()]),
                 id="geometric-run-then-fused-colour"),
    pytest.param(lambda: None, id="no-transform"),
])
def test_chains_whose_geometric_run_fuses_do_not_warn(tree, make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = fd.FastImageFolder(tree, make())
        ours[0]
    assert isinstance(ours.explain(), str) and ours.explain()


def test_a_change_that_stops_fusion_warns_at_the_next_item(tree):
    ours = fd.FastImageFolder(tree, train())
    ours.transform.transforms.insert(0, T.Grayscale(3))
    with pytest.warns(RuntimeWarning, match=r"nothing fused: Grayscale"):
        ours[0]

