"""Ray Data reading and decoding images with fastdecode: ``read_images`` (a
Datasource of read tasks, each decoding its rows into fixed-shape blocks),
``Decode`` (a ``map_batches`` over an encoded-bytes column) and ``warm_up``.
Rows are seeded by ``row_seed`` (``batching._seeding``), so a row's draws do
not depend on the cluster's shape. The public face is ``fastdecode.ray``,
whose docstring is the user's guide (the convert engine it also re-exports is
``fastdecode.conversion.ray_jobs``). Decision record: docs/decisions/ray.md.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Iterator, Optional

import numpy as np

try:
    import pyarrow as pa
    import ray
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
    from ray.data.extensions import ArrowTensorArray
except ImportError as exc:  # test_missing_ray_names_the_extra hides ray to check it
    raise ImportError(
        f"fastdecode.ray needs Ray Data ({exc}): pip install fastdecode[ray]"
    ) from exc

from fastdecode import _native
from fastdecode.batching._rows import BatchDecoder
from fastdecode.batching._seeding import random_seeds, row_seed, row_seeds
from fastdecode.storage._listing import Listing, PathsLike, list_images
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import remote_paths
from fastdecode.storage._reads import open_window
from fastdecode.storage._remote import Remote
from fastdecode.storage._window import ReadAhead

__all__ = ["Decode", "ImageDatasource", "read_images", "row_seed", "row_seeds", "warm_up"]

BLOCK_ROWS = 64
BLOCKS_PER_TASK = 8  # at most; fewer where the cluster's CPUs need more tasks


# --------------------------------------------------------------------------
# Reading: one Ray read task per range of rows.


def _reader(filesystem: Optional[Any]) -> Any:
    """The read-ahead window's reader: local files (None), an fsspec root (a
    :class:`~fastdecode.storage._remote.Remote`, a reader itself: each file one
    GET, retried within the bound, its client made in the task's process), or a
    pyarrow filesystem."""
    if filesystem is None or isinstance(filesystem, Remote):
        return filesystem
    return functools.partial(_read_file, filesystem)


def _read_file(filesystem: Optional[Any], path: str) -> bytes:
    if filesystem is None:
        return _native.read_file(path)
    with filesystem.open_input_stream(path) as f:
        return f.read()


def _tensor_column(batch: np.ndarray) -> Any:
    """A zero-copy Arrow tensor column over a C-contiguous (N, ...) batch."""
    return ArrowTensorArray.from_numpy(batch)


def _read_rows(decoder: BatchDecoder, filesystem: Optional[Any], paths: list[str],
               labels: np.ndarray, indices: np.ndarray, seed: Optional[int],
               include_paths: bool, block_rows: int) -> Iterator[pa.Table]:
    # the task's files read ahead, across its blocks (storage/_window.py)
    window = open_window(ReadAheadOptions.resolve(None), _reader(filesystem))
    try:
        yield from _read_blocks(window, decoder, paths, labels, indices, seed, include_paths,
                                block_rows)
    finally:
        window.close()


def _read_blocks(window: ReadAhead, decoder: BatchDecoder, paths: list[str],
                 labels: np.ndarray, indices: np.ndarray, seed: Optional[int],
                 include_paths: bool, block_rows: int) -> Iterator[pa.Table]:
    rows_of = window.ahead_of(range(len(paths)), paths.__getitem__)
    for start in range(0, len(paths), block_rows):
        rows = range(start, min(len(paths), start + block_rows))
        data = [_read_file_named(window, paths[next(rows_of)]) for _ in rows]
        # every row seeded (unseeded: from the OS), so a torch-free plan never imports torch
        seeds = (random_seeds(len(rows)) if seed is None
                 else row_seeds(seed, indices[rows.start:rows.stop]))
        images = decoder.decode(data, seeds, name=functools.partial(_path_of, paths, rows.start))
        columns = {"image": _tensor_column(images),
                   "label": pa.array(labels[rows.start:rows.stop])}
        if include_paths:
            columns["path"] = pa.array(paths[rows.start:rows.stop], pa.string())
        yield pa.table(columns)


def _path_of(paths: list[str], start: int, row: int) -> str:
    return paths[start + row]


def _read_file_named(window: ReadAhead, path: str) -> bytes:
    from fastdecode.errors import DecodeError

    try:
        return window.take(path)
    except OSError as exc:
        raise DecodeError(f"cannot read file: {exc}", path=path) from exc


class ImageDatasource(Datasource):
    """The Ray Datasource behind :func:`read_images`: each read task covers a
    contiguous range of rows and yields blocks of ``block_rows`` decoded rows.

    Parameters
    ----------
    listing : Listing
        The rows: their paths, labels, class names and the filesystem they
        are read through (``storage._listing``).
    decoder : BatchDecoder
        The fused chain that decodes a block's rows into one batch.
    seed : int or None
        Row ``i`` is drawn from ``row_seed(seed, i)``; None: each row under a
        seed from the OS.
    include_paths : bool
        Add a ``path`` column.
    block_rows : int, default 64
        Rows per block.
    """

    def __init__(self, listing: Listing, decoder: BatchDecoder, *, seed: Optional[int],
                 include_paths: bool, block_rows: int = BLOCK_ROWS) -> None:
        super().__init__()
        self.listing = listing
        self.decoder = decoder
        self.seed = seed
        self.include_paths = include_paths
        self.block_rows = block_rows
        self.row_bytes = int(np.prod(decoder.shape)) * decoder.dtype.itemsize + 8

    def get_name(self) -> str:
        """The name Ray shows for this datasource's read operator.

        Returns
        -------
        str
            ``"FastdecodeImages"``.
        """
        return "FastdecodeImages"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        """The size of the decoded Dataset in bytes, for Ray's planning.

        Returns
        -------
        int
            Each row's image bytes and 8 for its label, times the rows.
        """
        return self.row_bytes * len(self.listing.paths)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Any = None) -> list[ReadTask]:
        """Ray's read tasks over the listing: contiguous ranges of whole blocks
        (of ``block_rows`` rows; only the last block may be short), at most
        ``parallelism`` of them.

        Parameters
        ----------
        parallelism : int
            The number of read tasks Ray asks for.
        per_task_row_limit : int or None
            Passed on to each ``ReadTask`` (a row limit Ray pushes down).
        data_context : Any
            Ray's DataContext; not used.

        Returns
        -------
        list of ReadTask
            One per range of rows, each yielding blocks of decoded rows, with
            their metadata (rows, bytes); empty for an empty listing.
        """
        n = len(self.listing.paths)
        if n == 0:
            return []
        blocks = math.ceil(n / self.block_rows)
        tasks = max(1, min(parallelism, blocks))
        per_task = math.ceil(blocks / tasks) * self.block_rows  # whole blocks: one short block
        out = []
        for start in range(0, n, per_task):
            stop = min(n, start + per_task)
            paths = self.listing.paths[start:stop]
            meta = BlockMetadata(num_rows=stop - start, size_bytes=self.row_bytes * (stop - start),
                                 input_files=None, exec_stats=None)
            args = (self.decoder, self.listing.filesystem, paths, self.listing.labels[start:stop],
                    np.arange(start, stop, dtype=np.int64), self.seed, self.include_paths,
                    self.block_rows)
            out.append(ReadTask(functools.partial(_read_rows, *args), meta,
                                per_task_row_limit=per_task_row_limit))
        return out


def read_images(paths: PathsLike, transform: Any, *, exact: bool = False,
                include_paths: bool = False, seed: Optional[int] = None,
                block_rows: int = BLOCK_ROWS, filesystem: Optional[Any] = None,
                storage_options: Optional[dict] = None, refresh_index: bool = False,
                **ray_read_args: Any) -> "ray.data.Dataset":
    """A Dataset of ``image`` (the chain's fixed-shape result: uint8 or float
    tensors) and ``label`` (the ImageFolder class index; -1 when ``paths`` is
    not one ImageFolder root), plus ``path`` with ``include_paths``.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        A file or directory, a list of them, or fsspec URLs (``s3://...``,
        ``gs://...``, ``https://...``; one filesystem for all). One directory
        holding class folders is read as ``FastImageFolder`` reads it: the same
        files, order and class indices. URLs are listed and read as
        ``FastImageFolder(url, storage_options=...)`` lists and reads them
        (one listing kept as a local index file; each file one request,
        retried within ``$FASTDECODE_RETRY_SECONDS``); with ``filesystem=`` (a
        pyarrow filesystem) paths are read through it instead.
    transform : torchvision transform or FusedTransform
        A chain that fixes the output size (or a
        :class:`~fastdecode.transforms.FusedTransform`); fused as
        ``fuse(transform, exact=exact)``.
    exact : bool, default False
        ``fuse``'s ``exact``: the results equal torchvision's to the pixel.
    include_paths : bool, default False
        Add a ``path`` column (strings).
    seed : int or None, default None
        None (fresh draws: each row seeded from the OS) or an int: row ``i`` is
        drawn from ``row_seed(seed, i)`` (see ``fastdecode.ray``'s docstring).
    block_rows : int, default 64
        Rows per block (iterate with a batch size that divides it).
    filesystem : pyarrow.fs.FileSystem, optional
        Read ``paths`` through this filesystem.
    storage_options : dict, optional
        The fsspec filesystem's options (``endpoint_url``, ``key``/``secret``,
        ``anon``...), as pandas, datasets and Ray take them. Secrets stay out
        of the read tasks' pickles: a task reads them from its environment,
        which Ray's workers inherit from the driver's only where the driver
        started them (``ray.init()`` after this call); give a cluster its
        credentials as Ray's docs say (environment, instance roles).
    refresh_index : bool, default False
        List the URL again instead of reading its index file.
    **ray_read_args
        For ``ray.data.read_datasource`` (``ray_remote_args``,
        ``concurrency``, ``override_num_blocks``: the number of read tasks; by
        default up to 8 blocks per task, and at least 2 tasks per cluster CPU
        where there are enough blocks).

    Returns
    -------
    ray.data.Dataset
        The rows, read and decoded lazily by Ray's read tasks.

    Raises
    ------
    ValueError
        ``block_rows`` under 1, a chain that does not fix the output size,
        URLs mixed with local paths, or ``storage_options`` without URLs.
    FileNotFoundError
        A path or URL with nothing there. A file that cannot be decoded fails
        its task with a DecodeError naming it.
    """
    if block_rows < 1:
        raise ValueError(f"block_rows must be at least 1, got {block_rows}")
    decoder = BatchDecoder(transform, exact=exact)
    items = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if filesystem is None and remote_paths(items):
        listing = _list_urls(items, storage_options, refresh_index)
    elif storage_options is not None:
        raise ValueError("storage_options= goes with fsspec URLs, not with filesystem= or "
                         "local paths")
    else:
        listing = list_images(paths, filesystem)
    source = ImageDatasource(listing, decoder, seed=seed, include_paths=include_paths,
                             block_rows=block_rows)
    ray_read_args.setdefault("override_num_blocks", _read_tasks(len(listing.paths), block_rows))
    ds = ray.data.read_datasource(source, **ray_read_args)
    _stream_each_block(ds, decoder, block_rows)
    return ds


def _list_urls(items: list[str], storage_options: Optional[dict] = None,
              refresh: bool = False) -> Listing:
    """The rows of fsspec URLs (one filesystem, the first URL's): one URL whose
    listing has top-level folders is an ImageFolder tree, listed as
    ``FastImageFolder(url)`` lists it (its index file, its classes, order and
    targets); otherwise each URL's image files (a folder: all of them, sorted;
    a file: itself), label -1. The Listing's filesystem is the
    :class:`~fastdecode.storage._remote.Remote` the read tasks read through.

    Raises FileNotFoundError for a URL with nothing under it."""
    from fastdecode.storage import _remote
    from fastdecode.storage._listing import _is_image

    if len(remote_paths(items)) != len(items):
        raise ValueError("read_images: fsspec URLs and local paths cannot be mixed")
    remote = Remote(items[0], storage_options)
    if len(items) == 1 and remote.fs.isdir(_remote.scrub_url(items[0])):
        remote, index = _remote.open_root(items[0], storage_options, refresh=refresh)
        if index.folders:
            classes, class_to_idx = _remote.folder_classes(items[0])
            samples, _ = _remote.folder_samples(items[0], class_to_idx, _is_image)
            return Listing([p for p, _ in samples], np.array([t for _, t in samples], np.int64),
                           classes, remote)
    paths: list[str] = []
    for item in items:
        url = _remote.scrub_url(item).rstrip("/")
        if remote.fs.isdir(url):
            index = remote.tree(item, refresh=refresh)
            paths += [f"{url}/{rel}" for rel in index.relpaths() if _is_image(rel)]
        elif remote.fs.isfile(url):
            paths.append(url)
        else:
            raise FileNotFoundError(f"read_images: no such file or directory: {url}")
    return Listing(paths, np.full(len(paths), -1, np.int64), [], remote)


def _read_tasks(rows: int, block_rows: int) -> int:
    """Read tasks of several blocks each: one task per block left the CPUs idle
    between tasks (Ray Data's scheduling loop notices a finished task within
    0.1 s, a 64-row task lasts ~0.1 s); at least 2 tasks per CPU of the
    cluster (when Ray is up) keep every CPU busy to the end."""
    blocks = max(1, math.ceil(rows / block_rows))
    cpus = int(ray.cluster_resources().get("CPU", 1)) if ray.is_initialized() else 1
    return min(blocks, max(math.ceil(blocks / BLOCKS_PER_TASK), 2 * cpus))


def _stream_each_block(ds: "ray.data.Dataset", decoder: BatchDecoder, block_rows: int) -> None:
    """Ray Data concatenates (copies) the blocks one read task yields until they
    exceed the Dataset's ``target_max_block_size`` (128 MiB) and only then
    hands them on; at one block's image bytes each block leaves its task as
    it is, as soon as it is decoded. Only this Dataset's context (a copy) and
    the Datasets made from it; never raised."""
    block_bytes = block_rows * int(np.prod(decoder.shape)) * decoder.dtype.itemsize
    target = ds.context.target_max_block_size
    if target is not None and block_bytes < target:
        ds.context.target_max_block_size = block_bytes


# --------------------------------------------------------------------------
# Decode: a map over an encoded-bytes column.


class Decode:
    """``ds.map_batches(Decode(transform, column="jpg"), batch_format="pyarrow")``:
    replaces the encoded-bytes ``column`` of each batch by the chain's
    results, decoded into one preallocated (N, C, H, W) array.

    With ``batch_format="pyarrow"`` the bytes are read as views of the Arrow
    buffers (no Python bytes object per row) and the result is a zero-copy
    tensor column; numpy and pandas batches work too. seed with
    ``seed_column``: row draws from ``row_seed(seed, row[seed_column])``
    (an integer id column), reproducible on any cluster shape; otherwise each
    row under a seed taken from the OS.

    Parameters
    ----------
    transform : torchvision transform or FusedTransform
        A chain that fixes the output size; fused as ``fuse(transform,
        exact=exact)``.
    column : str, default "image"
        The encoded-bytes column.
    exact : bool, default False
        ``fuse``'s ``exact``: the results equal torchvision's to the pixel.
    output_column : str, optional
        The column of the results (default: ``column``, replaced).
    seed : int, optional
        With ``seed_column``: the seed of every row's draws.
    seed_column : str, optional
        With ``seed``: an integer id column; row ``r`` is drawn from
        ``row_seed(seed, r[seed_column])``.

    Raises
    ------
    ValueError
        ``seed`` without ``seed_column`` or the reverse, or a chain that does
        not fix the output size.
    """

    def __init__(self, transform: Any, column: str = "image", *, exact: bool = False,
                 output_column: Optional[str] = None, seed: Optional[int] = None,
                 seed_column: Optional[str] = None) -> None:
        if (seed is None) != (seed_column is None):
            raise ValueError("seed and seed_column go together (seed_column: an integer id "
                             "column giving each row its draws)")
        self.decoder = BatchDecoder(transform, exact=exact)
        self.column = column
        self.output_column = output_column or column
        self.seed = seed
        self.seed_column = seed_column

    def __call__(self, batch: Any) -> Any:
        """Decodes one batch's ``column`` through the chain.

        Parameters
        ----------
        batch : pyarrow.Table, dict of numpy.ndarray or pandas.DataFrame
            A batch of the Dataset, with the encoded-bytes ``column`` (and
            ``seed_column`` when seeded).

        Returns
        -------
        pyarrow.Table, dict of numpy.ndarray or pandas.DataFrame
            The batch in its own format with ``output_column`` holding the
            decoded (N, C, H, W) images (a pandas frame: one per row);
            ``column`` is replaced, or dropped when ``output_column`` differs.

        Raises
        ------
        KeyError
            The batch has no ``column`` (or no ``seed_column``).
        ValueError
            An Arrow bytes column has null rows.
        fastdecode.errors.FastDecodeError
            A row cannot be decoded; the error names it by the ``path`` column
            when the batch has one, else by its row.
        """
        if isinstance(batch, pa.Table):
            return self._arrow(batch)
        columns = {k: batch[k] for k in batch}  # dict of numpy arrays or a pandas frame
        items = list(columns[self._need(columns)])
        seeds = self._seeds(np.asarray(columns[self.seed_column]) if self.seed_column else None,
                            len(items))
        images = self.decoder.decode(items, seeds, name=_row_names(columns.get("path")))
        if self.output_column != self.column:
            columns.pop(self.column)
        columns[self.output_column] = images
        if not isinstance(batch, dict):  # pandas: rows of tensors
            import pandas as pd

            columns[self.output_column] = list(images)
            return pd.DataFrame(columns)
        return columns

    def _need(self, columns: Any) -> str:
        missing = [c for c in (self.column, self.seed_column) if c and c not in columns]
        if missing:
            raise KeyError(f"Decode: the batch has no column {missing[0]!r}; it has "
                           f"{list(columns)}")
        return self.column

    def _seeds(self, keys: Optional[np.ndarray], n: int) -> np.ndarray:
        # unseeded rows get seeds from the OS: every row seeded, no torch RNG involved
        return random_seeds(n) if keys is None else row_seeds(self.seed or 0, keys)

    def _arrow(self, table: pa.Table) -> pa.Table:
        self._need(table.column_names)
        column = table.column(self.column).combine_chunks()
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            items = _binary_views(column)
        else:
            items = column.to_pylist()
        keys = (table.column(self.seed_column).to_numpy() if self.seed_column else None)
        paths = table.column("path").to_pylist() if "path" in table.column_names else None
        images = self.decoder.decode(items, self._seeds(keys, len(items)), name=_row_names(paths))
        index = table.column_names.index(self.column)
        if self.output_column == self.column:
            return table.set_column(index, self.column, _tensor_column(images))
        return table.remove_column(index).append_column(self.output_column,
                                                        _tensor_column(images))


def _row_names(paths: Any) -> Any:
    """Errors name a row by its ``path`` column when the batch has one."""
    if paths is None:
        return lambda j: f"row {j} of the batch"
    return lambda j: str(paths[j])


def _binary_views(column: pa.Array) -> list[np.ndarray]:
    """Each row of an Arrow binary array as a uint8 view of its data buffer."""
    if column.null_count:
        raise ValueError("Decode: the bytes column has null rows")
    _, offsets_buf, data_buf = column.buffers()
    wide = pa.types.is_large_binary(column.type)
    offsets = np.frombuffer(offsets_buf, np.int64 if wide else np.int32)[
        column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return [data[offsets[j]:offsets[j + 1]] for j in range(len(column))]


# --------------------------------------------------------------------------
# Warming a fresh job's workers


def warm_up(cpus: Optional[int] = None) -> list[Any]:
    """Starts one task per CPU of the cluster (or ``cpus`` tasks), spread over
    the nodes, that imports what the read and ``Decode`` tasks import (Ray
    Data, the native decoder, the detached plan; torch only where the chain
    needs it: ``fastdecode.batching._detached``), and returns their
    ObjectRefs at once (``ray.get`` them to wait; each gives its worker's
    pid).

    Each new Ray job starts its own worker processes, and the first task in
    each pays these imports (about 1-1.5 CPU-s here) before its first block.
    Call ``warm_up()`` right after ``ray.init()``: the imports then overlap
    the driver's own set-up (building the model, the trainer) and the read
    tasks run in the warmed workers (Ray reuses a job's idle workers). It
    moves that cost off the first batch; it does not remove it, and without
    other work to overlap it gains nothing.

    Parameters
    ----------
    cpus : int, optional
        The tasks to start (default: the cluster's CPUs, at least 1).

    Returns
    -------
    list of ray.ObjectRef
        One per task; each gives its worker's pid.

    Raises
    ------
    ray.exceptions.RaySystemError
        ``cpus`` not given and Ray not started (``ray.init()`` first).
    """
    n = cpus if cpus is not None else max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_import_decode_path)
    return [task.remote() for _ in range(n)]


def _import_decode_path() -> int:
    import fastdecode.batching._detached  # noqa: F401  # the native decoder, the plan

    return os.getpid()
