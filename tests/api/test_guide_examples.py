"""Every Python block of the How-to guides runs, on a generated tree.

A guide's block is a fragment of the user's own script: it names the user's
paths (``imagenet/train``, ``/data/imagenet/train``) and objects defined
elsewhere in that script (``train_transform``, ``dataset``, ``model``). A
page's blocks run here in order as one script, in a subprocess with warnings
as errors, in a folder laid out as the guides assume (an ImageFolder tree, a
CSV of ``path,label``, a COCO annotation file, a WebDataset shard), after a
prelude that defines those names. Their text runs unchanged except for the
user paths (mapped to the generated tree), ``num_workers=8`` (2 here, on 2
cores) and batch sizes for a 16-image tree; a check after a block asserts
what it says it does. A block that needs what this machine cannot give (an
S3 bucket, a GPU, a Ray cluster) is left out, naming what it needs.

The README's and Getting started's blocks run whole, as written, in
``test_docs.py`` (make test); these, a subprocess per guide, are in the
slow tier (make test-full, .ci/run).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"

# user paths in the guides -> the generated tree's
PATHS = {
    '"/fast/train-bmp"': '"data/train"',
    '"/data/imagenet/train"': '"data/train"',
    '"imagenet/train"': '"data/train"',
    '"imagenet/val"': '"data/train"',
    '"train/"': '"data/train"',
    "shard-{000000..000099}.tar": "shard-000000.tar",
    "num_workers=8": "num_workers=2",
    '"coco/train2017"': '"train2017"',
    '"coco/annotations/instances_train2017.json"': '"annotations/instances_train2017.json"',
    '"img.jpg"': '"train2017/000000000001.jpg"',
}
# what the surrounding script of a guide's blocks defines
PRELUDE = '''
import torch
import fastdecode
from torchvision import transforms as T
train_transform = transform = preset = T.Compose(
    [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.PILToTensor()])
root = traindir = "data/train"
dataset = fastdecode.FastImageFolder(root, train_transform)
'''
PAGE_PRELUDE = {
    "lightning-accelerate.md": '''
import lightning as L
from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
resume_step = 0
''',
    "webdataset.md": 'urls = "shards/shard-000000.tar"\n',
    # the reference's preset ends in float tensors (MixUp mixes them)
    "torchvision-references.md": "preset = T.Compose([T.RandomResizedCrop(64), T.ToTensor()])\n",
    "timm.md": 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n',
    # CIFAR10's files in ./data (8 random images per batch file), its md5 checks as
    # file-existence checks (as torchvision's own tests fake it): download=True
    # then finds the files and downloads nothing
    "torchvision-datasets.md": '''
import os, pickle
import numpy as np
import torchvision.datasets.cifar
_dir = "data/cifar-10-batches-py"
os.makedirs(_dir, exist_ok=True)
_rng = np.random.default_rng(0)
for _name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    with open(os.path.join(_dir, _name), "wb") as _f:
        pickle.dump({"data": _rng.integers(0, 256, (8, 3072), dtype=np.uint8),
                     "labels": [int(v) for v in _rng.integers(0, 10, 8)]}, _f)
with open(os.path.join(_dir, "batches.meta"), "wb") as _f:
    pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, _f)
torchvision.datasets.cifar.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)
''',
    # the tree's COCO file gains a polygon per instance; one image's boxes and masks
    "detection.md": '''
import json
_coco = json.load(open("annotations/instances_train2017.json"))
for _a in _coco["annotations"]:
    _a.update(segmentation=[[1, 1, 9, 1, 9, 9, 1, 9]], area=64.0, iscrowd=0)
json.dump(_coco, open("annotations/instances_train2017.json", "w"))
h, w = 300, 400
boxes = torch.tensor([[10.0, 20.0, 200.0, 150.0], [50.0, 60.0, 52.0, 60.5]])
masks = torch.zeros(2, h, w, dtype=torch.uint8)
masks[0, 20:150, 10:200] = 1
labels = torch.tensor([1, 2])
''',
}
# (page, block number) -> what it needs that is not here
NEEDS = {
    ("file-lists.md", 2): "an S3 bucket and s3fs",
    ("storage.md", 2): "an S3 bucket and s3fs",
    ("storage.md", 3): "an S3 bucket, its credentials and s3fs",
    ("storage.md", 4): "an S3-compatible store (tests/storage/test_storage_guide.py runs its "
                       "options on a local one)",
    ("storage.md", 5): "a GCS bucket and gcsfs",
    ("storage.md", 6): "an HTTP server holding the tree (tests/data/test_remote.py runs one)",
    ("ray.md", 0): "a Ray cluster (tests/data/test_ray*.py run read_images on one)",
    ("ray.md", 1): "a Ray cluster and a Parquet table of images",
    ("ray.md", 2): "a Ray Train worker",
    ("detection.md", 2): "a VOC2012 tree and a Cityscapes-style tree (tests/targets/"
                         "test_segmentation.py builds both)",
}
# batch sizes for a 16-image tree, a save every 5 steps, not 1000, and what this
# machine's size asks
SMALLER = {
    ("file-lists.md", 0): [("batch_size=256", "batch_size=8")],
    ("file-lists.md", 1): [("batch_size=64", "batch_size=4")],
    ("resuming.md", 0): [("batch_size=256", "batch_size=2"), ("% 1000", "% 5")],
    # a cache for ImageNet's 20 GiB would not fit a CI machine's RAM (CacheSpaceError)
    ("storage.md", 1): [('cache="20GiB"', 'cache="64MiB"')],
    # the seed example's 4 workers on 2 cores: torch warns (an error here)
    ("torchvision-datasets.md", 0): [("num_workers=4", "num_workers=2")],
    ("timm.md", 1): [("batch_size=128", "batch_size=8")],
    ("timm.md", 2): [("batch_size=128", "batch_size=8")],
}
# after the block: what shows it did what it says
EPILOGUE = {
    ("file-lists.md", 0): "assert ds.classes == ['cat', 'dog'] and len(next(iter(loader))[0]) == 8",
    ("file-lists.md", 1): "assert images.shape == (4, 3, 224, 224) and len(targets) == 4",
    ("resuming.md", 0): 'assert start == 8 and os.path.exists("ckpt.pt")',  # 16 images / 2
    ("lightning-accelerate.md", 0): "assert len(next(iter(ImageNet().train_dataloader()))) == 2",
    ("lightning-accelerate.md", 2): "assert batches is loader and len(next(iter(batches))[0]) == 16",
    ("timm.md", 0): "assert fd_timm.installed()",
    ("timm.md", 1): ("images, targets = next(iter(loader))\n"
                     "assert images.shape == (8, 3, 224, 224) and targets.shape == (8, 1000)"),
    ("timm.md", 2): ("images, targets = next(iter(loader))\n"
                     "assert images.shape == (8, 3, 224, 224) and targets.shape == (8, 1000)"),
    ("torchvision-references.md", 2): ("images, targets = next(iter(data_loader))\n"
                                       "assert images.dtype == torch.float32 and "
                                       "targets.shape == (16, 2)"),
    ("torchvision-references.md", 3): ("images, targets = next(iter(data_loader))\n"
                                       "assert targets.shape == (16, 2)"),
    ("torchvision-datasets.md", 0): ("images, labels = next(iter(train_loader))\n"
                                     "assert images.shape == (32, 3, 224, 224) and "
                                     "len(train_dataset) == 40"),
    ("detection.md", 0): ("assert image.dtype == torch.float32 and target['masks'].shape[0] == "
                          "len(target['boxes']) == len(target['labels'])"),
    ("detection.md", 1): "assert len(target['boxes']) == 1 and target['masks'].shape[0] == 1",
    ("detection.md", 3): ("assert len(files) == len(ds) and target['masks'].shape[0] == "
                          "len(target['boxes']) == len(target['labels'])"),
    ("detection.md", 4): "assert len(images) == len(targets) == 2 and 'boxes' in targets[0]",
    ("webdataset.md", 2): ("images, labels = next(iter(loader))\n"
                           "assert images.shape == (16, 3, 64, 64) and len(labels) == 16"),
}


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


PAGES = sorted(p.name for p in GUIDES.glob("*.md") if _blocks(p))


@pytest.fixture(scope="module")
def guide_tree(tmp_path_factory):
    """data/train (2 classes x 8 JPEGs), labels.csv, a COCO file over train2017/,
    a WebDataset shard (each JPEG and its class)."""
    image = pytest.importorskip("PIL.Image")
    np = pytest.importorskip("numpy")
    base = tmp_path_factory.mktemp("guides")
    rng = np.random.default_rng(0)
    rows = ["path,label"]
    for label in ("cat", "dog"):
        folder = base / "data" / "train" / label
        folder.mkdir(parents=True)
        for i in range(8):
            pixels = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
            image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
            rows.append(f"data/train/{label}/{i:03d}.jpg,{label}")
    (base / "labels.csv").write_text("\n".join(rows) + "\n")
    coco = base / "train2017"
    coco.mkdir()
    images, annotations = [], []
    for i, jpg in enumerate(sorted((base / "data" / "train").rglob("*.jpg"))):
        (coco / f"{i:012d}.jpg").write_bytes(jpg.read_bytes())
        images.append({"id": i, "file_name": f"{i:012d}.jpg"})
        annotations += [{"id": 10 * i + k, "image_id": i, "category_id": 1 + k % 2,
                         "bbox": [0, 0, 10, 10]} for k in range(i % 3)]
    (base / "annotations").mkdir()
    (base / "annotations" / "instances_train2017.json").write_text(json.dumps(
        {"images": images, "annotations": annotations,
         "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}))
    (base / "shards").mkdir()
    with tarfile.open(base / "shards" / "shard-000000.tar", "w") as tar:
        for i, jpg in enumerate(sorted((base / "data" / "train").rglob("*.jpg"))):
            tar.add(jpg, arcname=f"{i:06d}.jpg")
            label = tarfile.TarInfo(f"{i:06d}.cls")
            label.size = 1
            tar.addfile(label, io.BytesIO(b"01"[i // 8:i // 8 + 1]))
    return base


def _script(page: str) -> str:
    """The page's blocks in order as one script (those that need what is not
    here left out), each followed by its check."""
    parts = [PRELUDE, PAGE_PRELUDE.get(page, "")]
    for number, block in enumerate(_blocks(GUIDES / page)):
        if (page, number) in NEEDS:
            continue
        for user, here in PATHS.items():
            block = block.replace(user, here)
        for old, new in SMALLER.get((page, number), []):
            block = block.replace(old, new)
        parts += [block, EPILOGUE.get((page, number), "")]
    return "\n".join([*parts, 'print("ran")', ""])


@pytest.mark.slow
@pytest.mark.no_sanitize
@pytest.mark.parametrize("page", PAGES, ids=[Path(p).stem for p in PAGES])
def test_guide_blocks_run(page, guide_tree):
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    blocks = _blocks(GUIDES / page)
    if all((page, n) in NEEDS for n in range(len(blocks))):
        pytest.skip("; ".join(sorted({f"needs {NEEDS[page, n]}" for n in range(len(blocks))})))
    for module in {"lightning-accelerate.md": ("lightning", "accelerate"), "timm.md": ("timm",),
                   "webdataset.md": ("webdataset",)}.get(page, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (requirements/integrations.txt)")
    if page == "gpu.md":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
    script = guide_tree / f"guide_{Path(page).stem}.py"  # not timm.py: it would shadow timm
    script.write_text(_script(page))
    done = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=guide_tree,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("ran")
