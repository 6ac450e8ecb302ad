"""fastdecode.webdataset: shards written from an ImageFolder tree (labels,
keys, sizes, resume, atomicity) and read back through the installed
webdataset with the fastdecode handler and batch collation, against
FastImageFolder for the same seeds."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from helpers.trees import corrupt_file, encoded_jpeg, make_tree

pytest.importorskip("torchvision")

import fastdecode.webdataset as fwds  # noqa: E402
from fastdecode import FastImageFolder  # noqa: E402


def train_chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])])


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree", per_class=4)


def members(shard: Path) -> list[str]:
    with tarfile.open(shard) as tar:
        return tar.getnames()


def shards_of(dst: Path) -> list[Path]:
    return sorted(dst.glob("shard-*.tar"))


@pytest.mark.parametrize("count", [1, 3, 5])
def test_shard_count(tree, tmp_path, count):
    summary = fwds.write_shards(tree, tmp_path / "wds", shard_count=count, workers=1)
    assert summary.shards == summary.written == len(shards_of(tmp_path / "wds")) == count
    keys = [m for s in shards_of(tmp_path / "wds") for m in members(s) if m.endswith(".cls")]
    assert len(keys) == summary.samples == len(FastImageFolder(tree))


@pytest.mark.parametrize("shuffle_seed", [None, 0], ids=["imagefolder-order", "shuffled"])
def test_labels_and_keys_name_the_imagefolder_sample(tree, tmp_path, shuffle_seed):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=2, shuffle_seed=shuffle_seed, workers=1)
    ref = FastImageFolder(tree)
    seen = []
    for shard in shards_of(tmp_path / "wds"):
        with tarfile.open(shard) as tar:
            names = tar.getnames()
            for name in names[1::2]:
                key = int(name.split(".")[0])
                path, target = ref.samples[key]
                assert int(tar.extractfile(name).read()) == target
                image = next(n for n in names if n.startswith(f"{key:08d}.") and n != name)
                assert tar.extractfile(image).read() == Path(path).read_bytes()
                seen.append(key)
    assert sorted(seen) == list(range(len(ref)))
    assert (seen == sorted(seen)) == (shuffle_seed is None)
    plan = json.loads((tmp_path / "wds" / "wds.json").read_text())
    assert plan["classes"] == ref.classes


def test_shard_size_bounds_each_shard(tree, tmp_path):
    limit = 6000
    fwds.write_shards(tree, tmp_path / "wds", shard_size=limit, workers=1)
    plan = json.loads((tmp_path / "wds" / "wds.json").read_text())
    ref = FastImageFolder(tree)
    for shard in plan["shards"]:
        sizes = [Path(ref.samples[i][0]).stat().st_size for i in shard["indices"]]
        assert len(sizes) == 1 or sum(sizes) <= limit
    assert len(plan["shards"]) > 1


def test_resume_skips_finished_shards_and_redoes_missing(tree, tmp_path):
    dst = tmp_path / "wds"
    first = fwds.write_shards(tree, dst, shard_count=3, workers=1)
    before = {p.name: p.read_bytes() for p in shards_of(dst)}
    shards_of(dst)[1].unlink()
    again = fwds.write_shards(tree, dst, shard_count=3, workers=1)
    assert (first.written, again.written, again.skipped) == (3, 1, 2)
    assert {p.name: p.read_bytes() for p in shards_of(dst)} == before  # reproducible bytes


def test_another_plan_is_refused(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=3, workers=1)
    with pytest.raises(ValueError, match="holds shards of another plan"):
        fwds.write_shards(tree, tmp_path / "wds", shard_count=2, workers=1)


def test_interrupted_shard_leaves_nothing(tree, tmp_path, monkeypatch):
    import fastdecode.conversion.jobs as convert

    calls = {"n": 0}
    real = convert.load_pixels

    def failing(data, max_side):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(data, max_side)

    monkeypatch.setattr(convert, "load_pixels", failing)
    with pytest.raises(KeyboardInterrupt):
        fwds.write_shards(tree, tmp_path / "wds", shard_count=1, max_side=32, workers=1)
    assert not shards_of(tmp_path / "wds")
    assert not list((tmp_path / "wds").glob("*.partial"))


def test_unreadable_input_is_listed(tree, tmp_path):
    bad = corrupt_file(next((tree / "dog").glob("*.jpg")))
    bad.write_bytes(b"not an image at all")
    summary = fwds.write_shards(tree, tmp_path / "wds", shard_count=2, workers=1)
    assert [f["path"] for f in summary.failures] == [str(bad)]
    names = [m for s in shards_of(tmp_path / "wds") for m in members(s)]
    assert len(names) == 2 * (summary.samples - 1)


@pytest.mark.parametrize("bad", [{"shard_count": 0}, {"shard_size": 0},
                                 {"shard_count": 2, "shard_size": 10}],
                         ids=["count-0", "size-0", "both"])
def test_bad_arguments(tree, tmp_path, bad):
    with pytest.raises(ValueError, match="shard_count|shard_size"):
        fwds.write_shards(tree, tmp_path / "wds", workers=1, **bad)


def test_max_side_reencodes_jpeg(tree, tmp_path):
    from fastdecode import read_header

    fwds.write_shards(tree, tmp_path / "wds", shard_count=1, max_side=40, workers=1)
    with tarfile.open(shards_of(tmp_path / "wds")[0]) as tar:
        images = [n for n in tar.getnames() if not n.endswith(".cls")]
        assert all(n.endswith(".jpg") for n in images)
        for name in images:
            header = read_header(tar.extractfile(name).read())
            assert header.format == "jpeg" and max(header.height, header.width) <= 40


def test_parallel_writers_write_the_same_shards(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "one", shard_count=3, workers=1)
    fwds.write_shards(tree, tmp_path / "two", shard_count=3, workers=2)
    assert [p.read_bytes() for p in shards_of(tmp_path / "one")] == [
        p.read_bytes() for p in shards_of(tmp_path / "two")]


# --------------------------------------------------------------------------
# Reading back through webdataset.


def read_all(pipeline, limit=None) -> list:
    """The pipeline's samples. webdataset 1.0.2 leaves the shard files it
    opened to the garbage collector: collect them here, where their
    ResourceWarning is expected, not in a later test."""
    import gc
    import itertools
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        samples = list(itertools.islice(pipeline, limit))
        del pipeline
        gc.collect()
    return samples


def _expected(tree, chain, seed):
    import torch

    ref = FastImageFolder(tree, chain)
    torch.manual_seed(seed)
    return [ref[i] for i in range(len(ref))]


@pytest.fixture
def shards(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=2, shuffle_seed=None, workers=1)
    return [str(p) for p in shards_of(tmp_path / "wds")]


def test_handler_equals_fast_image_folder(tree, shards):
    wds = pytest.importorskip("webdataset")
    import torch

    expected = _expected(tree, train_chain(), seed=3)
    torch.manual_seed(3)
    ds = wds.WebDataset(shards, shardshuffle=False).decode(fwds.handler(train_chain()))
    got = read_all(ds.to_tuple("jpg;png", "cls"))
    assert len(got) == len(expected)
    for (image, label), (x, y) in zip(got, expected):
        assert label == y
        np.testing.assert_array_equal(image.numpy(), x.numpy())


def test_collate_equals_fast_image_folder(tree, shards):
    wds = pytest.importorskip("webdataset")
    import torch

    expected = _expected(tree, train_chain(), seed=4)
    torch.manual_seed(4)
    ds = (wds.WebDataset(shards, shardshuffle=False).to_tuple("jpg;png", "cls")
          .batched(5, collation_fn=fwds.collate(train_chain()), partial=True))
    images, labels = zip(*read_all(ds))
    images, labels = torch.cat(images), torch.cat(labels)
    np.testing.assert_array_equal(images.numpy(), torch.stack([x for x, _ in expected]).numpy())
    assert labels.tolist() == [y for _, y in expected]


def test_handler_leaves_other_keys(shards):
    wds = pytest.importorskip("webdataset")
    [sample] = read_all(wds.WebDataset(shards[:1], shardshuffle=False)
                        .decode(fwds.handler(train_chain())), limit=1)
    assert isinstance(sample["cls"], int)


def test_collate_names_the_bad_sample():
    pytest.importorskip("webdataset")  # collate collates the other fields as webdataset does
    from fastdecode import DecodeError

    with pytest.raises(DecodeError, match="sample 1 of the batch"):
        fwds.collate(train_chain())([(encoded_jpeg(), 0), (b"garbage", 1)])


# --------------------------------------------------------------------------
# fastdecode convert --to wds


def test_cli_writes_shards_and_resumes(tree, tmp_path, capsys):
    from fastdecode.cli.__main__ import main

    argv = ["convert", str(tree), str(tmp_path / "wds"), "--to", "wds", "--shard-count", "2",
            "--workers", "1", "--json", str(tmp_path / "s.json")]
    assert main(argv) == 0
    assert "wrote 2 shards" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["samples"] == len(FastImageFolder(tree))
    assert main(argv) == 0
    assert "skipped 2 already done" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--engine", "ray"], ["--subsampling", "4:4:4"]],
                         ids=["engine-ray", "subsampling"])
def test_cli_refuses_wds_options_it_cannot_honour(tree, tmp_path, capsys, extra):
    from fastdecode.cli.__main__ import main

    assert main(["convert", str(tree), str(tmp_path / "wds"), "--to", "wds", *extra]) == 2
    assert "go with --to wds" in capsys.readouterr().err
