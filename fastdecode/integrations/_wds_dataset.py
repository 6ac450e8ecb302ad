"""``fastdecode.webdataset.WebDataset``: webdataset's ``WebDataset`` with its
shard reader swapped for the bounded one (``tarfile_to_samples``'s); the
module imports webdataset, so the package reaches it lazily. Decision
record: docs/decisions/webdataset.md."""

from __future__ import annotations

from typing import Any, Optional

import webdataset as wds
from webdataset.handlers import reraise_exception
from webdataset.tariterators import tar_file_expander

from fastdecode.integrations._wds_reader import tarfile_to_samples

__all__ = ["WebDataset"]


class WebDataset(wds.WebDataset):
    """``wds.WebDataset`` with every tar member bounded by the per-file limit:
    a drop-in for ``wds.WebDataset(urls, ...)``, whose own reader reads each
    member whole, whatever its size.

    It is webdataset's class (``isinstance(ds, wds.WebDataset)`` holds, and
    every chained method, ``.shuffle``, ``.decode``, ``.to_tuple``,
    ``.batched``, is webdataset's) built as webdataset builds it, with the
    one stage that reads the opened shards into members swapped for the
    stage :class:`tarfile_to_samples` reads them with: a member over the
    limit is an :class:`~fastdecode.errors.ImageFileError` (errno EFBIG,
    its ``path`` ``"{shard}/{member}"``) handed to ``handler``, its bytes
    skipped unread; header data over the limit, and a header broken inside
    a shard, end that shard with an error; each shard's stream is closed
    when the shard ends. Its samples are webdataset's, key for key, for
    every shard that holds nothing over the limit. Picklable (DataLoader
    workers, forked or spawned).

    Parameters
    ----------
    urls, *args, **kwargs
        webdataset's (``shardshuffle=``, ``handler=``, ``cache_dir=``,
        ``select_files=``, ``rename_files=``, the node and worker splitters,
        ...), passed to ``wds.WebDataset`` as given.
    max_file_bytes : int, optional
        The bound on one member's bytes, as :class:`tarfile_to_samples`
        takes it (None: the per-file limit in force as each shard is
        opened).

    Raises
    ------
    ValueError
        As :class:`tarfile_to_samples`: ``max_file_bytes`` under one byte.
    RuntimeError
        This webdataset's ``WebDataset`` does not read its shards through
        ``tar_file_expander`` (a version other than the 1.0 series): the
        reader cannot be swapped, so nothing is built rather than a dataset
        left unbounded; build ``wds.DataPipeline(..., tarfile_to_samples(),
        ...)`` instead.
    """

    def __init__(self, urls: Any, *args: Any, max_file_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        stage = tarfile_to_samples(max_file_bytes=max_file_bytes)  # checked before the rest
        super().__init__(urls, *args, **kwargs)
        readers = [k for k, stage in enumerate(self.pipeline)
                   if getattr(stage, "f", None) is tar_file_expander]
        if len(readers) != 1:
            raise RuntimeError(
                f"fastdecode.webdataset.WebDataset: webdataset {wds.__version__}'s WebDataset "
                f"has {len(readers)} tar_file_expander stages, not one, so its shard reader "
                "cannot be bounded; build wds.DataPipeline(wds.SimpleShardList(urls), ..., "
                "fastdecode.webdataset.tarfile_to_samples(handler), ...) instead")
        [at] = readers
        given = self.pipeline[at].kw  # WebDataset passes the three by name
        stage.handler = given.get("handler") or reraise_exception
        stage.select_files, stage.rename_files = given.get("select_files"), given.get("rename_files")
        self.pipeline[at] = _Members(stage)


class _Members:
    """The pipeline stage from opened shards to their members (and ``{}`` at
    each shard's end, which webdataset's ``group_by_keys`` ends a sample at):
    ``stage``'s bounded reading, in place of webdataset's
    ``tar_file_expander``."""

    def __init__(self, stage: tarfile_to_samples) -> None:
        self.stage = stage

    def __call__(self, src: Any) -> Any:
        return self.stage._members(src, self.stage.handler)
