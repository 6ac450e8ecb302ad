"""FastImageList: samples, paths + targets, CSV and JSON manifests and a COCO
file give FastImageFolder's rows and (exact) tensors over the same files, on
the item path, the batch path under a stock DataLoader and FastLoader, with
the same on_error and explain(); local or remote (fsspec memory filesystem)."""

from __future__ import annotations

import csv
import json
import uuid

import pytest
import torch

pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

from fastdecode import FastImageFolder, FastImageList, FastLoader  # noqa: E402
from fastdecode.errors import ImageFileError  # noqa: E402

from helpers.trees import make_tree  # noqa: E402

TF = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree")


@pytest.fixture
def folder(tree):
    return FastImageFolder(str(tree), TF, exact=True)


def relative(folder, tree):
    return [(str(p)[len(str(tree)) + 1:], t) for p, t in folder.samples]


def write_csv(path, rows, header=True):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if header:
            w.writerow(["label", "path"])  # columns found by name
            w.writerows([(t, p) for p, t in rows])
        else:
            w.writerows(rows)
    return path


BUILDS = {
    "samples": lambda folder, tree, tmp: FastImageList(list(folder.samples), TF, exact=True),
    "paths-targets": lambda folder, tree, tmp: FastImageList(
        paths=[p for p, _ in relative(folder, tree)], targets=folder.targets, root=tree,
        transform=TF, exact=True),
    "csv-header": lambda folder, tree, tmp: FastImageList.from_csv(
        write_csv(tree / "m.csv", relative(folder, tree)), TF, exact=True),
    "csv-no-header": lambda folder, tree, tmp: FastImageList.from_csv(
        write_csv(tmp / "m.csv", relative(folder, tree), header=False), TF, root=tree,
        exact=True),
    "json-list": lambda folder, tree, tmp: FastImageList.from_json(
        _json(tree / "m.json", [{"path": p, "label": t} for p, t in relative(folder, tree)]),
        TF, exact=True),
}


def _json(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("build", BUILDS, ids=list(BUILDS))
def test_rows_and_items_are_the_folders(build, folder, tree, tmp_path):
    ds = BUILDS[build](folder, tree, tmp_path)
    assert ds.samples == folder.samples and ds.targets == folder.targets
    assert all(torch.equal(ds[i][0], folder[i][0]) for i in (0, 5, len(ds) - 1))
    assert ds.explain() == folder.explain()


@pytest.mark.parametrize("workers", [0, 2], ids=["0-workers", "2-workers"])
@pytest.mark.parametrize("kind", ["DataLoader", "FastLoader"])
def test_batches_are_the_folders(folder, workers, kind):
    ds = FastImageList(list(folder.samples), TF, exact=True)
    make = torch.utils.data.DataLoader if kind == "DataLoader" else FastLoader
    got = [(x.clone(), y) for x, y in make(ds, batch_size=4, num_workers=workers)]
    want = list(torch.utils.data.DataLoader(folder, batch_size=4))
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want))
    assert len(got) == len(want)


def test_string_labels_are_sorted_classes(tree, folder):
    named = [(p, folder.classes[t]) for p, t in folder.samples]
    ds = FastImageList(named)
    assert ds.classes == folder.classes and ds.class_to_idx == folder.class_to_idx
    assert ds.targets == folder.targets


def test_coco_targets_are_each_images_annotations(tree, folder):
    files = [p for p, _ in relative(folder, tree)][:4]
    coco = {"images": [{"id": 10 + i, "file_name": f} for i, f in enumerate(files)],
            "annotations": [{"id": 1, "image_id": 11, "category_id": 3, "bbox": [0, 0, 5, 5]},
                            {"id": 2, "image_id": 10, "category_id": 7, "bbox": [1, 1, 2, 2]},
                            {"id": 3, "image_id": 11, "category_id": 7, "bbox": [2, 2, 3, 3]}],
            "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}]}
    ds = FastImageList.from_json(_json(tree / "coco.json", coco), TF, exact=True)
    assert [[a["id"] for a in t] for t in ds.targets] == [[2], [1, 3], [], []]
    assert ds.classes == ["cat", "dog"] and ds.class_to_idx == {"cat": 3, "dog": 7}
    images, targets = next(iter(torch.utils.data.DataLoader(ds, batch_size=4,
                                                            collate_fn=FastImageList.collate)))
    assert images.shape == (4, 3, 32, 32) and targets == ds.targets
    assert torch.equal(images[1], folder[1][0])


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_a_missing_file_is_replaced_under_on_error(folder, on_error):
    samples = list(folder.samples)
    samples[2] = (samples[2][0] + ".gone.jpg", samples[2][1])
    ds = FastImageList(samples, TF, on_error=on_error)
    if on_error == "warn":
        with pytest.warns(RuntimeWarning, match="skipping unreadable sample"):
            ds[2]
    else:
        assert ds[2][0].shape == (3, 32, 32)
    assert ds.skipped == 1


def test_a_missing_file_raises_naming_it(folder):
    samples = list(folder.samples)
    samples[2] = (samples[2][0] + ".gone.jpg", samples[2][1])
    with pytest.raises(ImageFileError, match=r"\.gone\.jpg: sample 2: cannot read file: No such file"):
        FastImageList(samples, TF)[2]


def test_remote_paths_read_through_fsspec(folder, tree, tmp_path, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setenv("FASTDECODE_CACHE", str(tmp_path / "cache"))
    fs = fsspec.filesystem("memory")
    base = f"/list-{uuid.uuid4().hex}"
    rel = relative(folder, tree)
    fs.pipe({f"{base}/{p}": (tree / p).read_bytes() for p, _ in rel})
    fs.pipe(f"{base}/m.csv", "".join(f"{p},{t}\n" for p, t in rel).encode())
    try:
        ds = FastImageList.from_csv(f"memory://{base}/m.csv", TF, exact=True)
        assert ds.samples[0][0] == f"memory://{base}/{rel[0][0]}"
        got = next(iter(torch.utils.data.DataLoader(ds, batch_size=len(ds))))
        want = next(iter(torch.utils.data.DataLoader(folder, batch_size=len(ds))))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    finally:
        fs.rm(base, recursive=True)


@pytest.mark.parametrize("kwargs,match", [
    ({"samples": [("a.jpg", 0)], "paths": ["a.jpg"]}, "samples, or paths"),
    ({"paths": ["a.jpg", "b.jpg"], "targets": [0]}, "2 paths but 1 targets"),
    ({"samples": [("a.jpg", "cat")], "classes": ["dog"]}, "labels not in classes"),
    ({"paths": ["memory://a.jpg", "http://h/b.jpg"]}, "one remote protocol"),
], ids=["both-forms", "length-mismatch", "unknown-label", "two-protocols"])
def test_bad_arguments_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FastImageList(**kwargs)


def test_a_json_that_is_no_manifest_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="a JSON manifest is a list"):
        FastImageList.from_json(_json(tmp_path / "x.json", {"files": []}))
