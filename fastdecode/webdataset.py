"""WebDataset on fastdecode: a decode handler, a batch collation and a
shard reader bounding each member for ``webdataset`` pipelines, and the
tar-shard writer behind ``fastdecode convert --to wds``. The pipeline parts need ``pip install
fastdecode[webdataset]``, the writer only the standard library.

Decoding per sample (a handler for ``.decode``; other keys fall through to
webdataset's own handlers, so ``cls`` still becomes an int)::

    import webdataset as wds
    import fastdecode.webdataset as fwds

    ds = (fwds.WebDataset("shards/shard-{000000..000099}.tar", shardshuffle=100)
          .shuffle(1000).decode(fwds.handler(train)).to_tuple("jpg", "cls"))

Decoding per batch (faster: one preallocated batch, no per-sample tensors and
no stack)::

    ds = (fwds.WebDataset(urls, shardshuffle=100).shuffle(1000)
          .to_tuple("jpg", "cls").batched(64, collation_fn=fwds.collate(train)))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=8)

Random draws come from torch's global RNG, as torchvision draws them, so a
DataLoader's per-worker seeding applies unchanged.

Reading shards with every member bounded by the per-file limit
(``FASTDECODE_MAX_FILE_BYTES``): ``WebDataset`` is ``wds.WebDataset`` (the
same arguments and chained methods) with that reader, as above; in a
pipeline, ``tarfile_to_samples`` in place of webdataset's stage of the same
name, which reads a member whole whatever its size::

    ds = wds.DataPipeline(
        wds.SimpleShardList(urls), wds.split_by_worker,
        fwds.tarfile_to_samples(handler=wds.warn_and_continue),
        wds.shuffle(1000), wds.decode(fwds.handler(train)), wds.to_tuple("jpg", "cls"))

Writing shards (``write_shards``): each sample is ``<key>.<ext>`` (the file's
bytes as they are, or a JPEG re-encoded to ``max_side``) and ``<key>.cls``
(the ImageFolder class index); the key is the sample's ImageFolder index, so
``FastImageFolder(root).samples[int(key)]`` names its source. Samples are
shuffled across shards by default (a shard of one class makes shard-level
shuffling useless). ``wds.json`` next to the shards records the classes, the
shards and the plan; a rerun with the same plan skips finished shards (each
is written to a temporary file and renamed into place, so a shard that exists
is complete) and a different plan is refused.
"""

from typing import TYPE_CHECKING

from fastdecode._lazy import lazy_attributes
from fastdecode.conversion.shards import plan_shards, write_shards
from fastdecode.conversion.summary import ShardSummary
from fastdecode.integrations._wds_reader import tarfile_to_samples
from fastdecode.integrations.webdataset import collate, handler

if TYPE_CHECKING:
    from fastdecode.integrations._wds_dataset import WebDataset

__all__ = ["ShardSummary", "WebDataset", "collate", "handler", "plan_shards",
           "tarfile_to_samples", "write_shards"]

# WebDataset subclasses webdataset's class: built on first use, so that the
# writer needs no webdataset.
__getattr__, __dir__ = lazy_attributes(globals(),
                                       {"WebDataset": "fastdecode.integrations._wds_dataset"})
