"""Ray Data on fastdecode: ``read_images`` (image files or an ImageFolder tree
as a Dataset of decoded fixed-shape tensors) and ``Decode`` (the fused decode
as a ``map_batches`` over any Dataset's encoded-bytes column). Needs ``pip install fastdecode[ray]``.

Reading::

    import fastdecode.ray
    from torchvision import transforms as T

    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(mean, std)])
    ds = fastdecode.ray.read_images("s3://bucket/train", train, seed=0)   # blocks of 64
    for batch in ds.iter_torch_batches(batch_size=None):
        images, labels = batch["image"], batch["label"]     # (64, 3, 224, 224), (64,)

Each read task reads its files, decodes each straight into its row of a
preallocated batch and hands Ray blocks of ``block_rows`` rows (64): the
encoded bytes never enter the object store, and the images travel as one
Arrow tensor column over each batch. ``batch_size=None`` makes each block a
batch and the tensors views of the object store (no copy, no per-row
objects); Ray 2.60 copies a batch that is exactly one whole block
(``batch_size=64``), while a ``batch_size`` that divides ``block_rows``
slices blocks without copying and any other size concatenates pieces of two.
A read task decodes up to 8 blocks, each handed on as soon as it is decoded:
the Dataset's own ``context.target_max_block_size`` is lowered to one
block's image bytes (Ray would otherwise concatenate a task's blocks up to
128 MiB), which also bounds the blocks of the maps made from this Dataset.

An encoded-bytes column of any Dataset (parquet, tars through Ray's readers,
``read_binary_files``)::

    ds = ray.data.read_binary_files("s3://bucket/train", override_num_blocks=n // 64)
    ds = ds.map_batches(fastdecode.ray.Decode(train, column="bytes"),
                        batch_format="pyarrow")

Pass the ``Decode`` *instance* (not the class) and no ``batch_size`` (each
block one batch): it then runs inside the read task (Ray fuses the two: no
actor start-up, no bytes through the object store); size the read's blocks
to a batch (``override_num_blocks``; Ray's own choice for 1,000 files was
109 blocks of 9-10 rows, and its driver then spent ~2.3 CPU-s per 1,000
images). A ``batch_size`` makes the decode a separate operator fed through
the object store.

Ray Train: give the Dataset to the trainer and iterate the worker's shard::

    def train_loop(config):
        shard = ray.train.get_dataset_shard("train")
        for epoch in range(config["epochs"]):
            for batch in shard.iter_torch_batches(batch_size=None, device="cuda"):
                loss = step(batch["image"], batch["label"])

    TorchTrainer(train_loop, train_loop_config={"epochs": 90},
                 datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=8)).fit()

A fresh job's first batch waits for its Ray workers to start and import
Ray Data (seconds: docs/decisions/ray.md, "The first batch on a fresh cluster
is the job's worker processes"; a fully fused chain of the plain geometry
ops, e.g. RandomResizedCrop + flip or Resize + CenterCrop, then ToTensor /
Normalize, reaches them without torchvision or torch: its draws are torch's
CPU draws written again, ``fastdecode.transforms.torch_draws``);
``fastdecode.ray.warm_up()`` right after ``ray.init()`` starts those imports
while the driver sets up.

Random draws: with ``seed=None`` each row is drawn under a seed taken from
the OS (fresh augmentations every epoch, like a DataLoader). With ``seed=s``, row ``i``
(its ImageFolder index, or its position in the file list) is drawn from
``torch.manual_seed(row_seed(s, i))``: the same augmentations on any cluster
shape, in any task, after any retry, and the same as
``FastImageFolder(root, train)[i]`` under that seed; every epoch then repeats
them unless the seed changes (``read_images(..., seed=s + epoch)``).

What it does not do: variable-size outputs (the chain must fix the size, as
for batches in FastImageFolder), actor pools (not needed: an actor pool that
takes every CPU starves the read tasks and Ray waits 30 minutes before it
reports no progress), on-error skipping (a bad file fails its task, naming
the file). ``iter_torch_batches`` cannot turn the ``path`` strings of
``include_paths=True`` into tensors: drop the column first
(``ds.drop_columns(["path"])``) or use ``iter_batches``.
``iter_torch_batches`` needs ``pydantic``, which ``ray[data]`` does not
install; ``fastdecode[ray]`` does.
"""

# Ray Data first: where it is missing, that import's error names the extra to install.
from fastdecode.integrations.ray import (
    Decode,
    ImageDatasource,
    read_images,
    row_seed,
    row_seeds,
    warm_up,
)

# isort: split
from fastdecode.conversion.ray_jobs import run_convert_jobs

__all__ = ["Decode", "ImageDatasource", "read_images", "row_seed", "row_seeds",
           "run_convert_jobs", "warm_up"]
