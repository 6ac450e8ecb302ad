"""FastDatasetFolder and FastImageFolder: the fast datasets over a folder tree,
one subfolder per class, local or remote (the "list" step of a batch's path).

Their constructors list the samples (``storage/``: the ImageFolder walk, or
its local index, or a remote root's listing) and set the fast datasets' parts
up (``datasets/_dataset.py``); everything an item or a batch does after that
is those parts'. Public through :mod:`fastdecode.datasets`, which imports this
module on first access of the names: with torchvision installed these subclass
its DatasetFolder and ImageFolder, and importing ``torchvision.datasets``
imports PIL and tqdm. Decision record: docs/decisions/datasets.md ("The
ImageFolder contract").
"""

# No `from __future__ import annotations`: inspect.signature must show the
# constructors' annotations as torchvision's (objects, not strings).
import os
from pathlib import Path
from typing import Any, Callable, Optional, Union

from fastdecode._options import DEFAULTS as _D
from fastdecode.datasets._base import TV_DEFAULT_LOADER, DatasetFolder, ImageFolder
from fastdecode.datasets._dataset import _FastDataset
from fastdecode.datasets._loading import default_loader
from fastdecode.storage import _listing
from fastdecode.storage._folder import IMG_EXTENSIONS, find_classes, make_dataset
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import remote_root, scrub
from fastdecode.storage._samples import SampleStore, SamplesView

__all__ = ["FastDatasetFolder", "FastImageFolder"]


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
