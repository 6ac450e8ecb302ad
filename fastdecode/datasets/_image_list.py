"""FastImageList: a dataset over a list of files (paths and targets, a CSV or
JSON manifest, a COCO image list), local or remote, with FastImageFolder's
fast path, contract and options (public through :mod:`fastdecode.datasets`).

Its constructor and manifest readers list the samples (the "list" step of a
batch's path); everything an item or a batch does after that is the fast
datasets' common parts (``datasets/_dataset.py``). Decision record:
docs/decisions/datasets.md.
"""

# No `from __future__ import annotations`: as _folder, signatures show objects.
import csv
import io
import json
import os
from typing import Any, Callable, Optional, Sequence, Union

from fastdecode._options import DEFAULTS as _D
from fastdecode.batching._buffers import collate as _collate
from fastdecode.datasets._dataset import _FastDataset
from fastdecode.datasets._loading import default_loader
from fastdecode.storage import _remote
from fastdecode.storage._readahead import ReadAheadOptions
from fastdecode.storage._readers import expand, join, parent, reader_for, remote_paths, scrub
from fastdecode.storage._samples import SampleStore, SamplesView, shared_int_list

__all__ = ["FastImageList"]

PathLike = Union[str, os.PathLike]


def _read_text(manifest: PathLike, storage_options: Optional[dict]) -> str:
    name = os.fspath(manifest)
    binary = reader_for(name, storage_options).open_file(name)
    with io.TextIOWrapper(binary, encoding="utf-8", newline="") as text:
        return text.read()


class FastImageList(_FastDataset):
    """A dataset over a list of image files, each with a target, decoded as
    FastImageFolder decodes: the same fused transform, ``exact=``,
    ``on_error=``, limits, :meth:`explain`, the batch path a stock
    DataLoader takes (``__getitems__``) and FastLoader. ``on_error='skip'``
    (or 'warn') replaces a failed sample ``i`` by the sample at index
    ``(i * 2654435761 + k * 40503 + 1) % len(dataset)`` on its k-th try: a
    function of ``i`` alone (the same in every worker, epoch and sampler
    order), ``len`` unchanged, ``skipped`` counting it; after 16 failed
    replacements the failure is raised.

    ``samples`` holds (path, target) pairs (compact, as FastImageFolder's,
    when the targets are ints) and ``targets`` the targets.
    :meth:`from_csv` and :meth:`from_json` read a manifest.

    Parameters
    ----------
    samples : sequence of (path, target), optional
        The files and their targets. Exactly one of ``samples`` and
        ``paths`` is given.
    transform, target_transform : callable, optional
        The sample chain (run fused, as FastImageFolder's) and the target
        transform.
    paths : sequence of path-like, optional
        The files, with ``targets``.
    targets : sequence, optional
        One target per path (the same length); None: every target is -1.
        Used with ``paths`` only. Ints (numpy's too) are kept as ints
        (``classes`` may name them); strings are class names, turned into
        indices of their sorted set as ImageFolder does (``classes``,
        ``class_to_idx``); anything else (a COCO image's annotations) is
        kept per sample as it is: collate such batches with :meth:`collate`.
    root : str or path-like, optional
        A local folder (``~`` expanded) or fsspec URL that relative paths
        are under; absolute paths and URLs are kept as they are. Paths and
        ``root`` may be fsspec URLs (one protocol per dataset); remote files
        are fetched concurrently per batch and retried as FastImageFolder's
        remote roots are.
    classes : sequence of str, optional
        The class names. With string targets, their order gives the indices
        (every target must be one of them); with int targets, the names of
        indices 0, 1, ... None: the sorted set of string targets, else none.
    loader : callable, optional
        As FastDatasetFolder's: fastdecode's :func:`default_loader` (the
        default) decodes fused; any other loader is called as it is.
    exact, on_error, max_pixels, max_work_per_byte : optional
        As FastDatasetFolder's (defaults False, 'raise', 178956970, 2048);
        ``on_error='skip'`` replaces a failed sample as the summary says.
    storage_options : dict, optional
        The fsspec filesystem's options for URL paths, as pandas takes them.
    readahead, cache : optional
        The reads in flight and the shared cache of encoded bytes, as
        FastImageFolder's (local files only).

    Raises
    ------
    ValueError
        Both or neither of ``samples`` and ``paths``; ``targets`` of another
        length than ``paths``; URLs of more than one protocol; a string
        target not in ``classes``; an ``on_error``, a limit, ``readahead``
        or ``cache`` out of range.
    TypeError
        A limit, ``readahead`` or ``cache`` of the wrong type.
    CacheSpaceError
        ``cache=`` does not fit in /dev/shm or the available RAM.
    """

    def __init__(
        self,
        samples: Optional[Sequence[tuple[PathLike, Any]]] = None,
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        *,
        paths: Optional[Sequence[PathLike]] = None,
        targets: Optional[Sequence[Any]] = None,
        root: Optional[PathLike] = None,
        classes: Optional[Sequence[str]] = None,
        loader: Callable[[str], Any] = default_loader,
        exact: bool = False,
        on_error: str = "raise",
        max_pixels: Optional[int] = _D["max_pixels"],
        max_work_per_byte: Optional[int] = _D["max_work_per_byte"],
        storage_options: Optional[dict] = None,
        readahead: Union[int, ReadAheadOptions, None] = None,
        cache: Union[int, str, None] = None,
    ) -> None:
        if (samples is None) == (paths is None):
            raise ValueError("FastImageList takes samples, or paths (with targets), not both")
        if samples is not None:
            pairs = [(os.fspath(p), t) for p, t in samples]
            path_list = [p for p, _ in pairs]
            target_list = [t for _, t in pairs]
        else:
            assert paths is not None
            path_list = [os.fspath(p) for p in paths]
            target_list = [-1] * len(path_list) if targets is None else list(targets)
            if len(target_list) != len(path_list):
                raise ValueError(f"FastImageList: {len(path_list)} paths but "
                                 f"{len(target_list)} targets")
        base = None if root is None else os.fspath(root)
        if base is not None:
            base = expand(base)
        path_list = [join(base, p) for p in path_list]
        urls = remote_paths(path_list)
        if urls:
            protocols = {u.split("://", 1)[0] for u in urls}
            if len(protocols) > 1:
                raise ValueError(f"FastImageList: one remote protocol per dataset, got "
                                 f"{sorted(protocols)}")
            self._remote = _remote.Remote(urls[0], storage_options)
            path_list = [scrub(p) for p in path_list]
            base = None if base is None else _remote.scrub_url(base)
        self._setup_fast(base, loader, transform, target_transform, exact, on_error,
                         max_pixels, max_work_per_byte)
        self.classes, self.class_to_idx, target_list = self._classes(target_list, classes)
        if all(type(t) is int for t in target_list):
            store = SampleStore(zip(path_list, target_list))
            self.samples: Any = SamplesView(store)
            self.targets: list = shared_int_list(store.target_array)
        else:
            self.samples = list(zip(path_list, target_list))
            self.targets = target_list
        self.imgs = self.samples
        self._setup_reads(readahead, cache)

    @staticmethod
    def _classes(targets: list, classes: Optional[Sequence[str]]) -> tuple[list, dict, list]:
        if targets and all(isinstance(t, str) for t in targets):
            names = list(classes) if classes is not None else sorted(set(targets))
            to_idx = {name: i for i, name in enumerate(names)}
            missing = sorted(set(targets) - set(to_idx))
            if missing:
                raise ValueError(f"FastImageList: labels not in classes: {missing[:5]}")
            return names, to_idx, [to_idx[t] for t in targets]
        targets = [int(t) if hasattr(t, "__index__") and not isinstance(t, bool) else t
                   for t in targets]
        names = list(classes) if classes is not None else []
        return names, {name: i for i, name in enumerate(names)}, targets

    # -- manifests ---------------------------------------------------------------

    @classmethod
    def from_csv(cls, manifest: PathLike, transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None, *, root: Optional[PathLike] = None,
                 path_column: str = "path", label_column: str = "label",
                 storage_options: Optional[dict] = None, **kwargs: Any) -> "FastImageList":
        """The files a CSV names: a header with ``path_column`` (and
        ``label_column``, optional: -1 without it), or no header and rows of
        ``path,label``. Labels that are all integers are class indices, else
        class names (sorted into ``classes``). Relative paths are under
        ``root`` (default: the manifest's folder). The manifest may be an
        fsspec URL; other keywords are the constructor's.

        Parameters
        ----------
        manifest : str or path-like
            The CSV file (UTF-8), local or an fsspec URL. Blank rows are
            skipped. The first row is a header when one of its cells is
            ``path_column``; else column 0 is the path and column 1 (when
            the first row has two cells or more) the label.
        transform, target_transform : callable, optional
            As the constructor's.
        root : str or path-like, optional
            The folder (or URL) relative paths are under; None: the
            manifest's folder.
        path_column : str, default 'path'
            The header's path column.
        label_column : str, default 'label'
            The header's label column; a header without it gives every
            sample the target -1.
        storage_options : dict, optional
            The fsspec options, for the manifest and the files.
        **kwargs
            The constructor's other keywords (``exact``, ``on_error``,
            ``readahead``, ...).

        Returns
        -------
        FastImageList
            The dataset, in the manifest's row order.

        Raises
        ------
        OSError
            The manifest cannot be read.
        ValueError
            As the constructor raises it (a label not in ``classes``, ...).
        """
        name = os.fspath(manifest)
        rows = list(csv.reader(io.StringIO(_read_text(name, storage_options))))
        rows = [r for r in rows if r and any(c.strip() for c in r)]
        if rows and path_column in [c.strip() for c in rows[0]]:
            header = [c.strip() for c in rows[0]]
            p = header.index(path_column)
            lab = header.index(label_column) if label_column in header else None
            rows = rows[1:]
        else:
            p, lab = 0, (1 if rows and len(rows[0]) > 1 else None)
        paths = [r[p].strip() for r in rows]
        labels: Optional[list] = None
        if lab is not None:
            raw = [r[lab].strip() for r in rows]
            labels = [int(v) for v in raw] if all(_is_int(v) for v in raw) else raw
        return cls(paths=paths, targets=labels, transform=transform,
                   target_transform=target_transform,
                   root=parent(name) if root is None else root,
                   storage_options=storage_options, **kwargs)

    @classmethod
    def from_json(cls, manifest: PathLike, transform: Optional[Callable] = None,
                  target_transform: Optional[Callable] = None, *,
                  root: Optional[PathLike] = None, path_key: str = "path",
                  label_key: str = "label", storage_options: Optional[dict] = None,
                  **kwargs: Any) -> "FastImageList":
        """The files a JSON manifest names: a list of objects with
        ``path_key`` and ``label_key`` (labels as :meth:`from_csv` reads
        them), or a COCO file (``images`` of ``{id, file_name}``,
        ``annotations`` with ``image_id``, ``categories`` of ``{id, name}``):
        one sample per image, in the file's order, whose target is the list
        of that image's annotation dicts in the file's order (empty for an
        image without any); ``classes`` are the category names in id order
        and ``class_to_idx`` maps each to its category id. Collate COCO
        batches with :meth:`collate`. Relative paths are under ``root``
        (default: the manifest's folder).

        Parameters
        ----------
        manifest : str or path-like
            The JSON file (UTF-8), local or an fsspec URL.
        path_key : str, default 'path'
            The key of each object's path (list manifests).
        label_key : str, default 'label'
            The key of each object's label (list manifests); unless every
            object has it, every target is -1.
        transform, target_transform, root, storage_options, **kwargs
            As :meth:`from_csv`'s: the constructor's transforms, the folder
            (or URL) relative paths are under (None: the manifest's folder),
            the fsspec options for the manifest and the files, and the
            constructor's other keywords.

        Returns
        -------
        FastImageList
            The dataset, in the file's order; for a COCO file also with
            ``images`` (the file's image records).

        Raises
        ------
        OSError
            The manifest cannot be read.
        ValueError
            The JSON is invalid, or neither a list nor a dict with
            ``images``; or as the constructor raises it.
        KeyError
            An object without ``path_key``, or a COCO image without ``id``
            or ``file_name``.
        """
        name = os.fspath(manifest)
        data = json.loads(_read_text(name, storage_options))
        base = parent(name) if root is None else root
        if isinstance(data, dict) and "images" in data:
            images = data["images"]
            per_image: dict[Any, list] = {im["id"]: [] for im in images}
            for ann in data.get("annotations") or []:
                if ann.get("image_id") in per_image:
                    per_image[ann["image_id"]].append(ann)
            cats = sorted(data.get("categories") or [], key=lambda c: c["id"])
            ds = cls(paths=[im["file_name"] for im in images],
                     targets=[per_image[im["id"]] for im in images], transform=transform,
                     target_transform=target_transform, root=base,
                     storage_options=storage_options, **kwargs)
            ds.classes = [c["name"] for c in cats]
            ds.class_to_idx = {c["name"]: c["id"] for c in cats}
            ds.images = images
            return ds
        if not isinstance(data, list):
            raise ValueError(f"{name}: a JSON manifest is a list of {{{path_key!r}, "
                             f"{label_key!r}}} objects or a COCO file with 'images'")
        paths = [item[path_key] for item in data]
        labels = None
        if data and all(label_key in item for item in data):
            labels = [item[label_key] for item in data]
        return cls(paths=paths, targets=labels, transform=transform,
                   target_transform=target_transform, root=base,
                   storage_options=storage_options, **kwargs)

    @staticmethod
    def collate(batch: Sequence[tuple[Any, Any]]) -> list:
        """[images, targets]: the images as :func:`fastdecode.collate` stacks
        them (the batch tensor taken whole), the targets as a list, one per
        sample, uncollated (COCO annotations differ in count per image).

        Pass it as ``collate_fn=`` (a DataLoader's or FastLoader's) for
        targets that :func:`fastdecode.collate` cannot stack.

        Parameters
        ----------
        batch : sequence of (image, target)
            The samples of one batch.

        Returns
        -------
        list
            ``[images, targets]``: the images as one tensor (the batch
            tensor itself when the samples are its rows), the targets as a
            list in sample order.
        """
        images = _collate([(image, 0) for image, _ in batch])[0]
        return [images, [target for _, target in batch]]


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
