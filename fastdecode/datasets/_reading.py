"""A fast dataset's samples as bytes: how many there are, whether fastdecode
loads them, and their reads, local or remote, started ahead and cached.

:class:`SampleReads` is the bottom of the fast datasets' classes
(``datasets/_dataset.py`` composes them): the read-ahead window and the shared
cache (``storage/``) set up from the ``readahead=`` and ``cache=`` options,
and a sample's bytes (:meth:`SampleReads._read`): from the cache, the
read-ahead window or the file, or through the dataset's remote filesystem,
fetched for its batch (:meth:`SampleReads._prefetch`). Reads are started
ahead only when fastdecode itself loads the samples (``_fast_loader``). It
calls nothing of the dataset's other parts. Decision record:
docs/decisions/storage.md and storage-remote.md.
"""

# No `from __future__ import annotations`: inspect.signature shows the public
# methods' annotations as objects.
import os
from contextlib import nullcontext
from typing import Any, Optional

from fastdecode._decode_paths import DecodePaths
from fastdecode._options import parse_bytes
from fastdecode.datasets._base import is_pil_loader
from fastdecode.datasets._loading import default_loader
from fastdecode.storage import _remote
from fastdecode.storage._cache import SharedCache
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import is_remote, remote_paths
from fastdecode.storage._reads import DatasetReads

__all__ = ["SampleReads"]


class SampleReads:
    """The samples' count and bytes (the module doc)."""

    samples: Any  # (path, target) pairs: a SamplesView or a list
    loader: Any

    def __len__(self) -> int:
        return len(self.samples)

    def _fast_loader(self) -> bool:
        loader = self.__dict__.get("loader")
        return loader is None or loader is default_loader or is_pil_loader(loader)

    def _setup_reads(self, readahead: Any, cache: Any) -> None:
        """The read-ahead options and the shared cache (``storage/_readahead.py``,
        ``storage/_cache.py``); after ``samples`` is set: the cache has an entry
        per sample, its space checked here, before anything is filled."""
        options = ReadAheadOptions.resolve(readahead)
        budget = 0 if cache is None else parse_bytes(cache)
        self._reads = DatasetReads(options, SharedCache(budget, len(self.samples)) if budget
                                   else None)

    def _reads_here(self) -> DatasetReads:
        reads = self.__dict__.get("_reads")
        if reads is None:  # made without its constructor (a subclass's own __init__)
            reads = self.__dict__["_reads"] = DatasetReads(ReadAheadOptions.resolve(None))
        return reads

    def cache_stats(self) -> Optional[dict[str, int]]:
        """The shared cache's counters over every process (hits, misses,
        stored, rejected: past the budget; used and capacity in bytes), or
        None without ``cache=``.

        Returns
        -------
        dict of str to int or None
            The counters, summed over every process that shares the cache;
            None when the dataset has no ``cache=``.
        """
        cache = self._reads_here().cache
        return None if cache is None else cache.stats()

    def readahead_stats(self) -> dict[str, int]:
        """This process's (this thread's) read-ahead counters: reads
        submitted, started, taken, dropped, direct (read by the decoding
        thread itself), failed; peak_in_flight and peak_bytes, the peaks of
        reads in flight and of their bytes (never above the bounds but for
        a single file larger than ``max_bytes``).

        Returns
        -------
        dict of str to int
            The counters of the read-ahead window of the calling process
            and thread.
        """
        return self._reads_here().window().stats()

    def decode_stats(self) -> dict[str, Any]:
        """This process's decodes of the dataset's samples by path: native
        (the C core) or Pillow (the slow path), in all and per format.

        Returns
        -------
        dict
            ``native`` and ``pillow`` counts, and ``formats``: for each
            format, its ``native`` and ``pillow`` counts. A DataLoader
            worker counts its own decodes (call it there, e.g. from a
            ``worker_init_fn``, or use ``num_workers=0`` to inspect).
        """
        return self._decode_paths().stats()

    def _decode_paths(self) -> DecodePaths:
        paths = self.__dict__.get("_paths")
        if paths is None:
            paths = self.__dict__["_paths"] = DecodePaths()
        return paths

    def _read(self, path: str, index: Optional[int] = None) -> bytes:
        """The bytes of ``path`` (sample ``index``): from the cache, the
        read-ahead window or the file, or through the dataset's remote
        filesystem (fetched ahead by :meth:`_prefetch` when batched). The
        caller counts the sample's decodes as this dataset's
        (``_naming(path, index, self._decode_paths())``)."""
        remote = self.__dict__.get("_remote")
        if remote is None or not is_remote(path):
            return self._reads_here().read(index, path)
        return _remote.take_prefetched(remote, path)

    def _read_ahead(self, indices: Any) -> None:
        """Starts the reads of samples ``indices``' files, in order: local
        ones in this thread's read-ahead window, remote ones fetched for the
        batch that will take them (FastLoader calls it for the batch a worker
        gets next, too)."""
        reads = self._reads_here()
        if not self._fast_loader() or reads.options.depth == 0:
            return
        n = len(self)
        remote = self.__dict__.get("_remote")
        if remote is not None:
            paths = (os.fspath(self.samples[range(n)[i]][0]) for i in indices)
            _remote.fetch_ahead(remote, remote_paths(paths))
            return
        if not reads.reading_ahead():
            return
        items = []
        for i in indices:
            i = range(n)[i]
            items.append((i, os.fspath(self.samples[i][0])))
        reads.ahead(items)

    def _prefetch(self, indices: Any) -> Any:
        """A context in which the remote files of samples ``indices`` were
        fetched together (concurrently); local files: their reads started."""
        remote = self.__dict__.get("_remote")
        if remote is None:
            self._read_ahead(indices)
            return nullcontext()
        n = len(self)
        paths = [os.fspath(self.samples[range(n)[i]][0]) for i in indices]
        return _remote.prefetched(remote, remote_paths(paths))

