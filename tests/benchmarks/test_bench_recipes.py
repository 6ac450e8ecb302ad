"""benchmarks/bench_recipes.py on a tiny tree: structure only (no timing
claims), and the fusion report of each recipe."""

from __future__ import annotations

import json

import pytest

from helpers.trees import make_tree

pytest.importorskip("torchvision")
bench = pytest.importorskip("benchmarks.bench_recipes")


@pytest.mark.parametrize("name", list(bench.RECIPES))
def test_fusion_report_names_every_step_once(name):
    if name.startswith("timm"):
        pytest.importorskip("timm")
    report = bench.fusion(bench.RECIPES[name][1]())
    assert set(report) == {"decode", "tensor", "unfused", "repr"}
    assert report["repr"].startswith("FusedTransform(")
    assert report["decode"] or report["tensor"] or report["unfused"]  # every recipe does something


def test_a_plain_train_chain_fuses_its_geometry_and_tail():
    from torchvision import transforms as T

    chain = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
    report = bench.fusion(chain)
    assert report["decode"] == ["RandomResizedCrop", "RandomHorizontalFlip"]
    assert report["tensor"] == ["ToTensor"] and report["unfused"] == []


def test_a_v2_chain_names_its_tail_steps():
    import torch
    from torchvision.transforms import v2 as T2

    chain = T2.Compose([T2.RandomResizedCrop(224), T2.ToImage(),
                        T2.ToDtype(torch.float32, scale=True), T2.ToPureTensor()])
    report = bench.fusion(chain)  # v2 transforms have a .transform method: not their name
    assert report["decode"] == ["RandomResizedCrop"]
    assert report["tensor"] == ["ToImage", "ToDtype", "ToPureTensor"]


@pytest.mark.slow
@pytest.mark.no_sanitize
def test_quick_run_reports_each_recipe_per_setting(tmp_path, capsys):
    root = make_tree(tmp_path / "tree", per_class=2)
    out = tmp_path / "recipes.json"
    names = ["reference eval v1", "ResNet50_Weights.IMAGENET1K_V2.transforms()"]
    argv = ["--quick", "--data", str(root), "--json", str(out), "--recipes", *names]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert list(report["recipes"]) == names
    for result in report["recipes"].values():
        assert result["kind"] == "eval" and result["target_speedup"] == 2.0
        assert [s["num_workers"] for s in result["settings"]] == [0, 2]
        for s in result["settings"]:
            assert s["speedup"] == pytest.approx(
                s["fastimagefolder_images_per_s"] / s["imagefolder_images_per_s"])
            assert s["noisy"] == (s["spread"] > 0.10)
    text = capsys.readouterr().out
    assert "| recipe | fused at decode | fused tensor tail | unfused |" in text
    assert "| reference eval v1 |" in text
    # per core: the one-thread rows' CPU time per image and the rounds' ratio
    one_thread = report["recipes"][names[0]]["settings"][0]
    assert one_thread["imagefolder_cpu_ms_per_image"] > 0 and one_thread["cpu_speedup"] > 0
    assert "per-core speedup" in text


def test_rows_alternate_their_order_round_by_round(monkeypatch):
    """Each round runs a recipe's rows in common.round_order's order (as given,
    then reversed), as every other section does: the same order every round
    would hand the drift of a round to the same rows (issue 55)."""
    import types

    opened, ran = [], []

    def open_row(name, kind, data, transform, workers, batch, count, make=None):
        row = types.SimpleNamespace(loader=kind, num_workers=workers, source=object())
        opened.append(row)
        return row

    monkeypatch.setattr(bench.loader_bench, "open_row", open_row)
    monkeypatch.setattr(bench.loader_bench, "run_round", lambda row: ran.append(row))
    bar = types.SimpleNamespace(set_postfix_str=lambda text: None, update=lambda: None)
    settings = dict(workers=[0, 2], batch=4, batches=1, rounds=3)
    bench.measure("data", {"recipe": None}, settings, bar)
    rounds = [ran[k:k + len(opened)] for k in range(0, len(ran), len(opened))]
    # one thread: the two datasets; 2 workers: the two and FastLoader
    assert [(r.loader, r.num_workers) for r in opened] == [
        ("ImageFolder+PIL", 0), ("FastImageFolder", 0),
        ("ImageFolder+PIL", 2), ("FastImageFolder", 2), ("FastLoader", 2)]
    assert len(rounds) == 3
    assert rounds == [opened, opened[::-1], opened]


@pytest.mark.parametrize("name", [n for n, (kind, _) in bench.RECIPES.items() if kind == "augment"])
def test_the_auto_augment_recipes_fuse_their_policy(name):
    """Issue 50's rows: the policy runs in the decode, nothing unfused; their target is 2.5x."""
    if name.startswith("timm"):
        pytest.importorskip("timm")
    report = bench.fusion(bench.RECIPES[name][1]())
    assert report["decode"][-1] in ("TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix",
                                    "AugMixAugment")
    assert report["unfused"] == []
    # timm's prefetcher erases on the device, after the batch: not in the samples' transform
    assert ("RandomErasing" in report["tensor"]) == (name not in bench.MAKERS)
    assert bench.TARGETS["augment"] == 2.5


@pytest.mark.parametrize("kind", bench.DATASETS)
def test_the_prefetcher_row_loads_as_timms_create_loader(tmp_path, kind):
    """The prefetcher row's loader gives what timm's create_loader(use_prefetcher=True)
    hands its PrefetchLoader: uint8 batches of fast_collate, int64 targets."""
    import torch

    pytest.importorskip("timm")
    import fastdecode.integrations.timm as fd_timm

    root = make_tree(tmp_path / "tree", per_class=2)
    make = bench.MAKERS[bench._PREFETCHER]
    try:
        loader, sampler = make(kind, root, bench.RECIPES[bench._PREFETCHER][1](), 0, 2, 4)
        batches = list(loader)
    finally:
        fd_timm.uninstall()
    assert sampler.num_samples == 4 and len(batches) == 2
    for x, y in batches:
        assert x.dtype == torch.uint8 and tuple(x.shape) == (2, 3, 224, 224)
        assert y.dtype == torch.int64 and tuple(y.shape) == (2,)


# -- the peers' rows (benchmarks/_peers.py) ------------------------------------------------

peers = pytest.importorskip("benchmarks._peers")
PEER_ROWS = {
    # recipe: the peers it has (DALI only where it imports)
    "reference train v2 ta_wide + random erase, 176": (peers.TORCHCODEC, peers.DALI),
    "reference train v1 ta_wide + random erase, 176": (),
    "reference train v2 ra + random erase, 176": (peers.TORCHCODEC, peers.DALI),
    "reference train v2 imagenet + random erase, 176": (peers.TORCHCODEC, peers.DALI),
    "reference train v2 augmix + random erase, 176": (peers.TORCHCODEC,),
    "timm train rand-m9-mstd0.5-inc1-mmax9 re_prob=0.25 interpolation=random": (peers.DALI,),
    bench._PREFETCHER: (),
    "reference train v1": (),
}


@pytest.mark.parametrize("recipe", list(PEER_ROWS))
def test_the_one_thread_rows_add_the_peers_of_each_recipe(recipe):
    want = tuple(k for k in PEER_ROWS[recipe] if peers.available(k))
    assert bench.loaders(recipe, 0) == bench.DATASETS + want
    assert not set(bench.loaders(recipe, 2)) & set(peers.KINDS)


def test_dali_has_no_augmix_row():
    assert peers.DALI not in peers.kinds("augmix", True)
    with pytest.raises(ValueError, match="DALI has no 'augmix' policy"):
        peers.maker(peers.DALI, "augmix")


@pytest.mark.parametrize("kind", [peers.TORCHCODEC, peers.DALI], ids=["torchcodec", "dali"])
def test_each_peer_loads_the_recipes_float_batches(tmp_path, kind):
    """A peer row's source gives what the recipe's rows give: float32 (N, 3, 176, 176)
    batches and their labels, count // batch of them an epoch."""
    import torch

    if not peers.available(kind):
        pytest.skip(f"{kind}: not installed (requirements/peers.txt)")
    root = make_tree(tmp_path / "tree", per_class=2)
    make = peers.maker(kind, "ta_wide")
    source, sampler = make(kind, root, None, 0, 2, 4)
    batches = list(source)
    assert len(batches) == 2
    for x, y in batches:
        assert x.dtype == torch.float32 and tuple(x.shape) == (2, 3, 176, 176)
        assert len(y) == 2
    sampler.count = 2  # the rows set the next epoch's length on the sampler
    assert len(list(source)) == 1
