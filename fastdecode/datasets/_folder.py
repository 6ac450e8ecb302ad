"""FastDatasetFolder and FastImageFolder themselves (public through
:mod:`fastdecode.datasets`, which imports this module on first access of the
names: with torchvision installed these subclass its DatasetFolder and
ImageFolder, and importing ``torchvision.datasets`` imports PIL and tqdm)."""

# No `from __future__ import annotations`: inspect.signature must show the
# constructors' annotations as torchvision's (objects, not strings).
import os
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from fastdecode._options import DEFAULTS as _D
from fastdecode._options import parse_bytes
from fastdecode._system import settle_in_worker
from fastdecode.api import check_limits, decode_image
from fastdecode.batching._buffers import BatchBuffers
from fastdecode.batching._seeding import seeding_of
from fastdecode.datasets import _planned, _stateful
from fastdecode.datasets._base import (
    TV_DEFAULT_LOADER,
    DatasetFolder,
    ImageFolder,
    VisionDataset,
    is_pil_loader,
)
from fastdecode.datasets._chain import LiveFused
from fastdecode.datasets._loading import _naming, _to_pil, default_loader
from fastdecode.storage import _listing, _remote
from fastdecode.storage._cache import SharedCache
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import is_remote, remote_paths, remote_root, scrub
from fastdecode.storage._reads import DatasetReads
from fastdecode.storage._samples import SampleStore, SamplesView, shared_int_list

__all__ = ["FastDatasetFolder", "FastImageFolder"]

ON_ERROR = ("raise", "skip", "warn")
# Attempts at another index before 'skip'/'warn' give up (never a hang on a
# dataset that is mostly broken).
MAX_SKIPS = 16


class _FastDataset(VisionDataset):
    """What the fast datasets share: the fused, followed transform, the error
    policy, the limits, the reads (local or remote), the batch path and
    FastLoader's planned path. A subclass's ``__init__`` calls
    :meth:`_setup_fast`, then sets ``samples``/``targets``."""

    def _setup_fast(self, root: Any, loader: Any, transform: Optional[Callable],
                    target_transform: Optional[Callable], exact: bool, on_error: str,
                    max_pixels: Optional[int], max_work_per_byte: Optional[int]) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.on_error = on_error
        self.skipped = 0
        self._live = LiveFused(bool(exact), check_limits(max_pixels, max_work_per_byte))
        self.loader = loader  # before the transform: it decides whether the chain is fused
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)

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

    def _read(self, path: str, index: Optional[int] = None) -> bytes:
        """The bytes of ``path`` (sample ``index``): from the cache, the
        read-ahead window or the file, or through the dataset's remote
        filesystem (fetched ahead by :meth:`_prefetch` when batched)."""
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

    # -- the transform, fused and followed ---------------------------------

    @property
    def transform(self) -> Optional[Callable]:
        """The sample transform chain (None: the decoded PIL image). Followed
        live: a chain set here (or changed in place) is fused again and used
        from the next item on; with the fast loader, setting it fuses it at
        once, so a chain that cannot be fused warns once, here."""
        return self.__dict__.get("_transform")

    @transform.setter
    def transform(self, value: Optional[Callable]) -> None:
        self.__dict__["_transform"] = value
        if self._fast_loader():
            self._live.get(value)  # fuse now, here: a bad chain warns once, in this process

    @property
    def exact(self) -> bool:
        """The constructor's ``exact``: True when decodes are bit-identical
        to ImageFolder's (no reduced DCT scale)."""
        return self._live.exact

    @property
    def max_pixels(self) -> Optional[int]:
        """The constructor's ``max_pixels``: the most pixels a decode of the
        dataset accepts (None: no limit)."""
        return self._live.limits["max_pixels"]

    @property
    def max_work_per_byte(self) -> Optional[int]:
        """The constructor's ``max_work_per_byte``: the most decoding work
        per byte of file a decode of the dataset accepts (None: no limit)."""
        return self._live.limits["max_work_per_byte"]

    def explain(self) -> str:
        """How each item is loaded: the fused plan of ``transform`` (what joins
        the decode, what runs unfused), as text.

        Returns
        -------
        str
            The plan; for a custom ``loader``, a line saying it is called as
            torchvision calls it, nothing fused.
        """
        if not self._fast_loader():
            return f"custom loader {self.loader!r}: called as torchvision calls it, nothing fused"
        return self._live.explain(self.transform)

    def _fast_loader(self) -> bool:
        loader = self.__dict__.get("loader")
        return loader is None or loader is default_loader or is_pil_loader(loader)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_buffers", None)  # per-thread buffers stay with their threads
        samples, targets = state.get("samples"), state.get("targets")
        if (isinstance(samples, SamplesView) and samples.store is not None
                and type(targets) is list and len(targets) == len(samples)
                and all(type(t) is int for t in targets)
                and np.array_equal(np.asarray(targets, dtype=np.int64),
                                   samples.store.target_array)):
            state["targets"] = _TARGETS_FROM_STORE  # rebuilt with shared ints on unpickling
        return state

    def __setstate__(self, state: dict) -> None:
        if state.get("targets") is _TARGETS_FROM_STORE:
            state["targets"] = shared_int_list(state["samples"].store.target_array)
        self.__dict__.update(state)

    # -- torchdata's StatefulDataLoader: the dataset side of its protocol --

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state for torchdata's ``StatefulDataLoader``: the
        random states its augmentations draw from, in the calling process.

        Under a stock DataLoader the dataset draws its random transforms from
        the global generators of the process that decodes (torch's, Python's
        ``random``, NumPy's), as torchvision's ImageFolder does: a worker's,
        seeded by DataLoader, or the training process's. StatefulDataLoader
        calls this in each worker after each batch (in-process: in its own
        ``state_dict()``) and keeps each worker's state as of the last batch
        the loop received, so that a resumed run draws what the uninterrupted
        run drew from there on. Nothing is decoded to resume, and the batch
        path (``__getitems__``) is kept.

        Returns
        -------
        dict
            Primitives only (``torch.load(weights_only=True)`` reads them),
            a few KB whatever the dataset's size: a kind and version, the
            dataset's size, and the three generators' states.
        """
        return _stateful.dataset_state(len(self))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` saved: sets the calling process's
        torch, Python and NumPy global random states to the saved ones.

        StatefulDataLoader calls it in each resumed worker (after the worker
        is seeded and its ``worker_init_fn`` ran) with that worker's saved
        state, and in-process at the resumed ``iter()``; there it also sets
        the training process's global generators to what they were at the
        save, so the loop's own draws after it match the uninterrupted run's
        too.

        Parameters
        ----------
        state_dict : dict
            What :meth:`state_dict` returned (in a StatefulDataLoader state,
            for instance read back with ``torch.load(weights_only=True)``).

        Raises
        ------
        ResumeError
            ``state_dict`` is not a fastdecode dataset state, is of another
            version or is malformed, or was saved for a dataset of another
            size; the message names what differs. Nothing is changed then.
        """
        _stateful.load_dataset_state(state_dict, len(self))

    # -- loading ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        transform = self.transform
        if not self._fast_loader():
            sample = self.loader(path)
            return (transform(sample) if transform is not None else sample), target
        fused = self._live.get(transform)
        path = os.fspath(path)
        with _naming(path, index):
            data = self._read(path, index)
            if fused is not None:
                return fused(data), target
            image = self._decode_whole(data)
        return (transform(image) if transform is not None else image), target

    def _decode_whole(self, data: Any) -> Any:
        """The whole image as the PIL RGB image an unfused transform takes,
        under the dataset's limits."""
        return _to_pil(decode_image(data, **self._live.limits))

    def _replacement(self, index: int, attempt: int) -> int:
        """Deterministic stand-in for a broken sample: same index, same
        replacement, in every worker and every epoch."""
        return (index * 2654435761 + attempt * 40503 + 1) % len(self)

    def _with_policy(self, index: int, load: Callable[[int], Any]) -> Any:
        """load(index), or for 'skip'/'warn' a replacement's."""
        current = index
        for attempt in range(MAX_SKIPS + 1):
            try:
                return load(current)
            except Exception as exc:  # noqa: BLE001 - any failure of a sample is on_error's
                self._skip_or_raise(exc, attempt, current)
                current = self._replacement(index, attempt)
        raise AssertionError("unreachable")

    def _skip_or_raise(self, exc: Exception, attempt: int, index: Optional[int] = None) -> None:
        """``exc`` (attempt ``attempt`` at a sample, ``index``, failed)
        raised, or for 'skip'/'warn' counted (and warned): the caller loads a
        replacement."""
        if self.on_error == "raise" or attempt >= MAX_SKIPS:
            raise exc
        self.skipped += 1
        if self.on_error != "warn":
            return
        if isinstance(exc, OSError) or index is None:  # names the file (an ImageFileError)
            message = f"skipping unreadable sample: {exc}"
        else:  # a loader's or a transform's exception: name the file here
            message = (f"skipping sample {index} ({os.fspath(self.samples[index][0])}): "
                       f"{type(exc).__name__}: {exc}")
        warnings.warn(message, RuntimeWarning, stacklevel=4)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        settle_in_worker()
        index = range(len(self))[index]  # negative indices, bounds, as a list
        return self._with_policy(index, self._item)

    def _item(self, index: int) -> tuple[Any, Any]:
        sample, target = self._load(index)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    # -- batches decoded in place -----------------------------------------

    def _batch_fused(self) -> Any:
        """The fused transform when batches can be decoded in place."""
        if not self._fast_loader():
            return None
        fused = self._live.get(self.transform)
        return fused if fused is not None and fused.output_shape is not None else None

    def fixed_sample_shape(self) -> Optional[tuple[int, int, int]]:
        """(C, H, W) of the uint8 geometric result when every sample has it
        (the leading transforms fix the size), else None.

        Returns
        -------
        tuple of int or None
            The shape every sample's pixels have before the chain's tensor
            step; None with a custom ``loader`` or a chain whose output size
            varies. FastLoader uses it to size its batch rings.
        """
        fused = self._batch_fused()
        return None if fused is None else tuple(fused.output_shape)

    def pixel_table(self) -> Optional[torch.Tensor]:
        """The per-channel table (C, 256) that turns the uint8 result into
        the chain's float result (ToTensor, Normalize, ToDtype...), or None
        when the chain's result is the uint8 pixels themselves. Lets a loader
        defer that step to the GPU.

        Returns
        -------
        torch.Tensor or None
            The (C, 256) table, entry ``[c, v]`` the result for value ``v``
            of channel ``c``; None also when :meth:`fixed_sample_shape` is
            None.
        """
        fused = self._batch_fused()
        if fused is None or fused.tensor_table is None:
            return None
        return torch.from_numpy(fused.tensor_table)

    def decode_batch_into(self, indices: list[int], pixels: Any) -> list[Any]:
        """Decodes samples ``indices`` into the uint8 (N, C, H, W) ``pixels``
        (tensor or array), slot by slot, and returns their targets.

        Parameters
        ----------
        indices : list of int
            The samples, one per slot (negative indices count from the end).
        pixels : torch.Tensor or numpy.ndarray
            uint8, of shape ``(len(indices),
            *fixed_sample_shape())`` (a CPU tensor is written through its
            numpy view); slot ``j`` receives sample ``indices[j]``.

        Returns
        -------
        list
            The targets, one per slot, ``target_transform`` applied. Under
            ``on_error='skip'``/``'warn'`` a failed slot holds its
            replacement's pixels and target.

        Raises
        ------
        TypeError
            The dataset has a custom ``loader`` or a chain without a fixed
            output size (:meth:`fixed_sample_shape` is None).
        ImageFileError
            A sample cannot be read or decoded (``on_error='raise'``, or 16
            failed replacements).
        """
        fused = self._batch_fused()
        if fused is None:
            raise TypeError("decode_batch_into needs the default loader and a transform chain "
                            "with a fixed output size (see fixed_sample_shape)")
        slots = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        planned = _planned.planned_here(indices)
        if planned is not None:  # FastLoader(threads=N): the draws were planned already
            return _planned.render_planned(self, planned, slots)
        seeded = seeding_of(indices)  # FastLoader(resumable=True): seeds by position
        if seeded is not None:
            planned = self._plan_batch(list(indices), *seeded)
            if planned is not None:
                return _planned.render_into(self, planned, slots)
        with self._prefetch(indices):
            return self._decode_slots(fused, indices, slots)

    def _decode_slots(self, fused: Any, indices: list[int], slots: Any) -> list[Any]:
        targets = []
        for slot, index in enumerate(indices):
            index = range(len(self))[index]

            def load_into(i: int, slot: int = slot) -> Any:
                path, target = self.samples[i]
                path = os.fspath(path)
                with _naming(path, i):
                    fused.decode_into(self._read(path, i), slots[slot])
                return self.target_transform(target) if self.target_transform else target

            targets.append(self._with_policy(index, load_into))
        return targets

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: one uint8 batch, each sample decoded
        straight into its slot, then the chain's tensor step in one pass over
        the batch. The samples are views of that batch, so the stock collate
        takes it whole, as :func:`fastdecode.collate` does: the samples are a
        ``torch.Tensor`` subclass (``BatchRow``; in a worker ``SlotView``) that
        torch's ``default_collate`` hands to fastdecode (batching/_buffers.py)."""
        settle_in_worker()
        seeded = seeding_of(indices)  # FastLoader(resumable=True): seeds by position
        if seeded is not None and _planned.planned_here(indices) is None:
            planned = self._plan_batch(list(indices), *seeded)
            if planned is not None:
                samples = self._render_plan(planned)
                return self._finish_plan(planned) if samples is None else samples
        fused = self._batch_fused()
        if fused is None:
            return [self[i] for i in indices]
        shape = (len(indices), *fused.output_shape)
        buffers = self._batch_buffers()
        if fused.tensor_table is None:  # the uint8 pixels are the result
            pixels = buffers.get("batch", shape, torch.uint8)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels)
        else:  # the pixels are consumed at once, by the chain's tensor step
            pixels = buffers.get("pixels", shape, torch.uint8, leaves=False)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels, out=buffers.get("batch", shape, fused.result_dtype))
        return list(zip(buffers.rows(batch), targets))

    # -- FastLoader(threads=N): draws planned in one thread, rendered in others

    def _plan_batch(self, indices: list[int], seed: int,
                    keys: Optional[list[int]] = None) -> Optional["_planned.Plan"]:
        """The batch's random draws, under per-sample seeds from ``seed``
        (keyed by ``keys``, the samples' positions, or their slots), in the
        calling thread (None: a custom loader, nothing to split)."""
        return _planned.plan(self, indices, seed, keys)

    def _render_plan(self, plan: "_planned.Plan") -> Optional[list[tuple[Any, Any]]]:
        """What __getitems__ returns, rendered from ``plan`` without drawing
        (any thread); None when :meth:`_finish_plan` has work left."""
        return _planned.render(self, plan)

    def _finish_plan(self, plan: "_planned.Plan") -> list[tuple[Any, Any]]:
        """The rest of a rendered plan (the thread that planned it)."""
        return _planned.complete(self, plan)

    def _batch_buffers(self) -> BatchBuffers:
        buffers = self.__dict__.get("_buffers")
        if buffers is None:
            buffers = self.__dict__.setdefault("_buffers", BatchBuffers())
        return buffers


class FastDatasetFolder(_FastDataset, DatasetFolder):
    """torchvision's ``DatasetFolder`` with fused decoding; with torchvision
    installed it is a ``torchvision.datasets.DatasetFolder``.

    With fastdecode's :func:`default_loader` (or torchvision's
    ``default_loader``/``pil_loader``, or None) samples are decoded by
    fastdecode and ``transform`` runs fused (see
    :func:`fastdecode.transforms.fuse`); any other ``loader`` is called as
    torchvision calls it, with no fast path.

    ``samples``, ``targets`` (and FastImageFolder's ``imgs``) are what
    torchvision has: separate lists, ``imgs`` the same object as ``samples``;
    items come from ``samples``. ``samples`` is kept compact until changed
    (see :mod:`fastdecode.storage._samples`). The transform chain is followed
    live: a change to it is used from the next item on, in every process.

    Parameters
    ----------
    root : str or path-like
        The dataset folder, one subfolder per class; or any fsspec URL
        (``s3://``, ``gs://``, ``http://``...), listed once and the listing
        kept as a local index file (re-opening lists nothing);
        its files are fetched concurrently per batch, transient failures
        retried within a bound, then an ImageFileError naming the URL
        (``on_error`` applies). Credentials stay out of errors and pickles
        (:mod:`fastdecode.storage._remote`). A local tree selected by
        ``extensions`` (no ``is_valid_file``) of 20,000 files or more is kept
        as a local index too, used again while its folders are unchanged.
    loader : callable
        ``path -> sample``. fastdecode's :func:`default_loader`,
        torchvision's ``default_loader``/``pil_loader``, or None: samples are
        decoded by fastdecode and ``transform`` runs fused. Any other loader
        is called as torchvision calls it, with no fast path (and the
        limits do not apply to it).
    extensions : tuple of str, optional
        The lower-case suffixes of the files to keep, as DatasetFolder's;
        exactly one of ``extensions`` and ``is_valid_file`` is given.
    transform : callable, optional
        The sample transform chain (see :func:`fastdecode.transforms.fuse`).
        A :class:`~fastdecode.transforms.FusedTransform` is used as it is
        (``exact=True`` then needs one built with exact=True).
    target_transform : callable, optional
        Applied to each target, as torchvision does.
    is_valid_file : callable, optional
        ``path -> bool``: whether to keep a file, as DatasetFolder's.
    allow_empty : bool, default False
        If True, a class folder with no valid file is allowed; else it
        raises FileNotFoundError.
    exact : bool, default False
        False lets JPEGs decode at a reduced DCT scale when the output is
        much smaller (within the bound :func:`~fastdecode.transforms.fuse`
        documents); True gives tensors bit-identical to ImageFolder's.
    on_error : {'raise', 'skip', 'warn'}, default 'raise'
        'raise': an :class:`~fastdecode.errors.ImageFileError` (a DecodeError
        and an OSError) naming the file and index. 'skip' or 'warn' (the
        same, with a RuntimeWarning naming the file): a failed sample ``i``
        is replaced by another sample, so ``len`` and the batch size are
        unchanged and ``skipped`` counts each replacement: the k-th try
        (k = 0, 1, ...) loads index
        ``(i * 2654435761 + k * 40503 + 1) % len(dataset)``, a function of
        ``i`` alone, so the same sample stands in for ``i`` in every worker,
        every epoch and every sampler order (``ds[i]`` and batches alike; it
        may repeat a sample the epoch also yields). After 16 failed
        replacements the 17th failure is raised, so a dataset of bad files
        fails instead of looping. 'skip' and 'warn' take every failure of a
        sample: a file that cannot be read or decoded, and any exception a
        custom ``loader``, ``transform`` or ``target_transform`` raises for
        it ('raise' lets those propagate as they are).
    max_pixels, max_work_per_byte : int or None
        The limits of every decode the dataset runs (fused or not, in every
        worker), as for :func:`fastdecode.decode_image`, with its defaults
        (178956970 pixels, 2048 blocks per byte; None disables one): a file
        above them is an :class:`~fastdecode.errors.ImageTooLargeError`
        naming it and its index (``on_error`` applies). A custom ``loader``
        is called as it is.
    storage_options : dict, optional
        For a URL ``root``: the fsspec filesystem's options, as pandas takes
        them.
    refresh_index : bool, default False
        True lists ``root`` again (remote) or walks it again (local) instead
        of opening its kept index, and writes the index anew.
    readahead : int, ReadAheadOptions or None, default None
        How many file reads each process keeps in flight, so a worker
        decodes while its next files arrive (storage with a round trip per
        open: NFS, Lustre, FUSE). An int depth (0: off, each file read when
        its sample is decoded; N: N reads, fixed) or
        ``ReadAheadOptions(depth, max_bytes, max_depth)``; None:
        ``FASTDECODE_READAHEAD`` ("16", "16,64MiB", "0", "auto,256MiB") or
        the adaptive default: 16 reads, grown by Little's law to what the
        measured latency asks (up to 128), within 64 MiB. A batch's reads
        are all started at once (``__getitems__``; FastLoader also starts the
        next batch's), taken and decoded in sample order, so the samples are
        the same as without it. ``readahead_stats()`` counts them. Only
        threads that read bytes are added, no decode threads.
    cache : int, str or None, default None
        A byte budget (int, or a string such as '2GiB') for the files'
        encoded bytes, held in shared memory for every worker and every
        epoch: from the second epoch on a dataset that fits reads no files.
        Its space is checked against /dev/shm and the available RAM first;
        files past the budget are read as usual. ``cache_stats()`` counts
        hits and misses. Nothing is left in /dev/shm (``storage/_cache.py``).

    Raises
    ------
    ValueError
        ``on_error`` is not one of the three, a limit, ``readahead`` or
        ``cache`` is out of range, or ``extensions`` and ``is_valid_file``
        are both given or both None.
    TypeError
        A limit, ``readahead`` or ``cache`` of the wrong type.
    FileNotFoundError
        ``root`` has no class folder, or a class has no valid file (unless
        ``allow_empty``).
    CacheSpaceError
        ``cache=`` does not fit in /dev/shm or the available RAM.
    """

    def __init__(
        self,
        root: Union[str, Path],
        loader: Callable[[str], Any],
        extensions: Optional[tuple[str, ...]] = None,
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        *,
        exact: bool = False,
        on_error: str = "raise",
        max_pixels: Optional[int] = _D["max_pixels"],
        max_work_per_byte: Optional[int] = _D["max_work_per_byte"],
        storage_options: Optional[dict] = None,
        refresh_index: bool = False,
        readahead: Union[int, ReadAheadOptions, None] = None,
        cache: Union[int, str, None] = None,
    ) -> None:
        remote = remote_root(root, storage_options, refresh_index)
        if remote is not None:
            self._remote = remote
            root = scrub(os.fspath(root))
        self._setup_fast(root, loader, transform, target_transform, exact, on_error,
                         max_pixels, max_work_per_byte)
        listing = None
        if (remote is None and is_valid_file is None and extensions is not None
                and type(self).find_classes is FastDatasetFolder.find_classes
                and type(self).make_dataset is FastDatasetFolder.make_dataset):
            # the same classes and samples, walked on bytes, or from the local index
            listing = _listing.folder_listing(os.path.expanduser(os.fspath(self.root)),
                                              extensions, allow_empty, refresh_index)
            classes, class_to_idx, store = listing.classes, listing.class_to_idx, listing.store
            self.targets = listing.targets  # ints shared with class_to_idx, as torchvision's
        else:
            classes, class_to_idx = self.find_classes(self.root)
            samples = self.make_dataset(
                self.root, class_to_idx=class_to_idx, extensions=extensions,
                is_valid_file=is_valid_file, allow_empty=allow_empty,
            )
            self.targets = [s[1] for s in samples]  # ints shared with class_to_idx
            store = SampleStore(samples)
        self._listing_source = "listed" if listing is None else listing.source
        self.extensions = extensions
        self.classes = classes
        self.class_to_idx = class_to_idx
        self.samples = SamplesView(store)
        self.imgs = self.samples  # ImageFolder's name (kept on DatasetFolder too, as before)
        self._setup_reads(readahead, cache)

    # -- torchvision's overridable hooks -----------------------------------

    @staticmethod
    def make_dataset(
        directory: Union[str, Path],
        class_to_idx: dict[str, int],
        extensions: Optional[tuple[str, ...]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        """torchvision's overridable hook: (path, class_index) pairs, as
        :func:`fastdecode.datasets.make_dataset` walks them. A subclass that
        overrides it (or :meth:`find_classes`) is called as torchvision calls
        it (the walk on bytes and the local index are then not used).

        Parameters
        ----------
        directory : str or path-like
            The dataset root.
        class_to_idx : dict of str to int
            The classes to collect and their indices (required here).
        extensions : tuple of str, optional
            The lower-case suffixes to keep; exactly one of ``extensions``
            and ``is_valid_file`` is given.
        is_valid_file : callable, optional
            ``path -> bool``: whether to keep a file.
        allow_empty : bool, default False
            If True, a class with no valid file is allowed.

        Returns
        -------
        list of (str, int)
            Each kept file's path and class index, in torchvision's order.

        Raises
        ------
        ValueError
            ``class_to_idx`` is None or empty, or ``extensions`` and
            ``is_valid_file`` are both given or both None.
        FileNotFoundError
            A class has no valid file (unless ``allow_empty``).
        """
        if class_to_idx is None:
            raise ValueError("The class_to_idx parameter cannot be None.")
        return make_dataset(directory, class_to_idx, extensions=extensions,
                            is_valid_file=is_valid_file, allow_empty=allow_empty)

    def find_classes(self, directory: Union[str, Path]) -> tuple[list[str], dict[str, int]]:
        """torchvision's overridable hook: the class folders of
        ``directory``, as :func:`fastdecode.datasets.find_classes` finds them.

        Parameters
        ----------
        directory : str or path-like
            The dataset root (or its remote URL).

        Returns
        -------
        classes : list of str
            The subfolder names, sorted.
        class_to_idx : dict of str to int
            Each class's index in ``classes``.

        Raises
        ------
        FileNotFoundError
            ``directory`` has no subfolder.
        """
        return find_classes(directory)


class _TARGETS_FROM_STORE:  # noqa: N801 - a marker pickled by reference (identity survives)
    """In a pickled dataset: targets equal the samples' targets (rebuilt from the store)."""


# ImageFolder's loader default, so the signatures are equal (it keeps the fast path)
_IMAGEFOLDER_LOADER: Callable[[str], Any] = TV_DEFAULT_LOADER or default_loader


class FastImageFolder(FastDatasetFolder, ImageFolder):
    """torchvision's ``ImageFolder`` with fused decoding (see
    FastDatasetFolder); with torchvision installed it is a
    ``torchvision.datasets.ImageFolder``, with the same constructor plus the
    keyword-only ``exact``, ``on_error``, ``max_pixels``,
    ``max_work_per_byte``, ``storage_options``, ``refresh_index``,
    ``readahead`` and ``cache``. ``on_error='skip'`` replaces a failed
    sample ``i`` by the sample at ``(i * 2654435761 + k * 40503 + 1) %
    len(dataset)`` on its k-th try (the same in every worker, epoch and
    sampler order; ``len`` unchanged; raised after 16 failed replacements),
    as FastDatasetFolder documents.

    Parameters
    ----------
    root : str or path-like
        The dataset folder (one subfolder per class) or an fsspec URL, as
        FastDatasetFolder's.
    transform, target_transform : callable, optional
        As FastDatasetFolder's: the sample chain (run fused) and the target
        transform.
    loader : callable, optional
        torchvision's ``default_loader`` by default (fastdecode's
        :func:`default_loader` without torchvision): decoded by fastdecode,
        fused. Any other loader is called as ImageFolder calls it.
    is_valid_file : callable, optional
        ``path -> bool``: whether to keep a file; None (the default) keeps
        the files with one of ``IMG_EXTENSIONS``, as ImageFolder does.
    allow_empty : bool, default False
        If True, a class folder with no valid file is allowed.
    exact, on_error, max_pixels, max_work_per_byte : optional
        As FastDatasetFolder's (defaults False, 'raise', 178956970, 2048).
    storage_options, refresh_index, readahead, cache : optional
        As FastDatasetFolder's (defaults None, False, None, None).

    Raises
    ------
    ValueError, TypeError, FileNotFoundError, CacheSpaceError
        As FastDatasetFolder's.
    """

    def __init__(
        self,
        root: Union[str, Path],
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        loader: Callable[[str], Any] = _IMAGEFOLDER_LOADER,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        *,
        exact: bool = False,
        on_error: str = "raise",
        max_pixels: Optional[int] = _D["max_pixels"],
        max_work_per_byte: Optional[int] = _D["max_work_per_byte"],
        storage_options: Optional[dict] = None,
        refresh_index: bool = False,
        readahead: Union[int, ReadAheadOptions, None] = None,
        cache: Union[int, str, None] = None,
    ):
        super().__init__(
            root, loader, IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform, target_transform=target_transform,
            is_valid_file=is_valid_file, allow_empty=allow_empty, exact=exact, on_error=on_error,
            max_pixels=max_pixels, max_work_per_byte=max_work_per_byte,
            storage_options=storage_options, refresh_index=refresh_index,
            readahead=readahead, cache=cache,
        )
