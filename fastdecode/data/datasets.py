"""FastImageFolder / FastDatasetFolder: torchvision's ImageFolder contract,
with the decode and the leading transforms fused into one native call.

Swap ``ImageFolder`` for ``FastImageFolder`` and keep the transforms and the
DataLoader: the same classes, samples, targets and (for the same seed) the
same tensors, several times faster. torchvision is not needed to import this.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from fastdecode.data._batches import BatchBuffers, _taken_whole  # noqa: F401  (_taken_whole: tests)
from fastdecode.data._folder import (
    IMG_EXTENSIONS,
    find_classes,
    has_file_allowed_extension,
    is_image_file,
    make_dataset,
)
from fastdecode.data._samples import SampleStore, SamplesView, TargetsView
from fastdecode.api import decode_image
from fastdecode.errors import DecodeError, FastDecodeError

__all__ = [
    "IMG_EXTENSIONS",
    "FastDatasetFolder",
    "FastImageFolder",
    "find_classes",
    "has_file_allowed_extension",
    "is_image_file",
    "make_dataset",
]

ON_ERROR = ("raise", "skip", "warn")
# Attempts at another index before 'skip'/'warn' give up (never a hang on a
# dataset that is mostly broken).
MAX_SKIPS = 16


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@contextmanager
def _naming(path: str, index: int):
    """Errors inside name the sample: its index and file."""
    try:
        yield
    except FastDecodeError as exc:
        raise type(exc)(f"sample {index}: {exc.reason}", path=path) from exc
    except OSError as exc:
        raise DecodeError(f"sample {index}: cannot read file: {exc}", path=path) from exc


def _to_pil(array: np.ndarray):
    from PIL import Image

    return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)


class FastDatasetFolder(Dataset):
    """torchvision's ``DatasetFolder`` with fused decoding.

    With ``loader=None`` samples are decoded by fastdecode (JPEG and BMP
    natively, other formats through Pillow) and ``transform`` runs fused
    (see :func:`fastdecode.transforms.fuse`); a custom ``loader`` is called
    as torchvision calls it, with no fast path.

    on_error: 'raise' (a DecodeError naming the file and index), 'skip'
    (another index, drawn deterministically, is loaded instead and
    ``skipped`` counts it) or 'warn' (the same, with a warning).
    """

    def __init__(
        self,
        root: Union[str, Path],
        loader: Optional[Callable[[str], Any]] = None,
        extensions: Optional[tuple[str, ...]] = None,
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        *,
        on_error: str = "raise",
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.root = os.path.expanduser(root) if isinstance(root, str) else root
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader
        self.extensions = extensions
        self.on_error = on_error
        self.skipped = 0
        classes, class_to_idx = self.find_classes(self.root)
        samples = self.make_dataset(
            self.root, class_to_idx=class_to_idx, extensions=extensions,
            is_valid_file=is_valid_file, allow_empty=allow_empty,
        )
        self.classes = classes
        self.class_to_idx = class_to_idx
        self.samples = samples

    # -- torchvision's overridable hooks -----------------------------------

    @staticmethod
    def make_dataset(
        directory: Union[str, Path],
        class_to_idx: dict[str, int],
        extensions: Optional[tuple[str, ...]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        if class_to_idx is None:
            raise ValueError("The class_to_idx parameter cannot be None.")
        return make_dataset(directory, class_to_idx, extensions=extensions,
                            is_valid_file=is_valid_file, allow_empty=allow_empty)

    def find_classes(self, directory: Union[str, Path]) -> tuple[list[str], dict[str, int]]:
        return find_classes(directory)

    # -- the file list, stored compactly -----------------------------------

    @property
    def samples(self) -> SamplesView:
        return SamplesView(self._store)

    @samples.setter
    def samples(self, value) -> None:
        self._store = SampleStore(value)

    @property
    def imgs(self) -> SamplesView:
        return self.samples

    @imgs.setter
    def imgs(self, value) -> None:
        self.samples = value

    @property
    def targets(self) -> TargetsView:
        return TargetsView(self._store)

    # -- the transform, fused once -----------------------------------------

    @property
    def transform(self) -> Optional[Callable]:
        return self._transform

    @transform.setter
    def transform(self, value: Optional[Callable]) -> None:
        self._transform = value
        self._fused = None  # rebuilt on first use, in whichever process uses it

    def _fused_transform(self):
        if self._fused is None:
            from fastdecode.transforms import fuse

            self._fused = fuse(self._transform)
        return self._fused

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fused"] = None
        state.pop("_buffers", None)  # per-thread buffers stay with their threads
        return state

    # -- loading ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}"]
        if self._transform is not None:
            lines += ["    " + line for line in repr(self._transform).splitlines()]
        return "\n".join(lines)

    def _load(self, index: int) -> Any:
        path = self._store.path(index)
        if self.loader is not None:
            sample = self.loader(path)
            return self._transform(sample) if self._transform is not None else sample
        with _naming(path, index):
            data = _read_bytes(path)
            if self._transform is None:
                return _to_pil(decode_image(data))
            return self._fused_transform()(data)

    def _replacement(self, index: int, attempt: int) -> int:
        """Deterministic stand-in for a broken sample: same index, same
        replacement, in every worker and every epoch."""
        return (index * 2654435761 + attempt * 40503 + 1) % len(self)

    def _with_policy(self, index: int, load: Callable[[int], Any]) -> tuple[int, Any]:
        """load(index), or for 'skip'/'warn' a replacement's; returns the
        index actually loaded and its result."""
        current = index
        for attempt in range(MAX_SKIPS + 1):
            try:
                return current, load(current)
            except DecodeError as exc:
                if self.on_error == "raise" or attempt == MAX_SKIPS:
                    raise
                self.skipped += 1
                if self.on_error == "warn":
                    warnings.warn(f"skipping unreadable sample: {exc}", RuntimeWarning,
                                  stacklevel=3)
                current = self._replacement(index, attempt)
        raise AssertionError("unreachable")

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        index = range(len(self))[index]  # negative indices, bounds, as a list
        used, sample = self._with_policy(index, self._load)
        target = self._store.target(used)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    # -- batches decoded in place -----------------------------------------

    def _batch_fused(self):
        """The fused transform when batches can be decoded in place."""
        if self.loader is not None or self._transform is None:
            return None
        fused = self._fused_transform()
        return fused if fused.output_shape is not None else None

    def fixed_sample_shape(self) -> Optional[tuple[int, int, int]]:
        """(C, H, W) of the uint8 geometric result when every sample has it
        (the leading transforms fix the size), else None."""
        fused = self._batch_fused()
        return None if fused is None else tuple(fused.output_shape)

    def pixel_table(self) -> Optional[torch.Tensor]:
        """The per-channel table (C, 256) that turns the uint8 result into
        the chain's float result (ToTensor, Normalize, ToDtype...), or None
        when the chain's result is the uint8 pixels themselves. Lets a loader
        defer that step to the GPU."""
        fused = self._batch_fused()
        if fused is None or fused.tail.identity:
            return None
        return torch.from_numpy(fused.tail.table)

    def decode_batch_into(self, indices: list[int], pixels) -> list[Any]:
        """Decodes samples ``indices`` into the uint8 (N, C, H, W) ``pixels``
        (tensor or array), slot by slot, and returns their targets."""
        fused = self._batch_fused()
        if fused is None:
            raise TypeError("decode_batch_into needs the default loader and a transform chain "
                            "with a fixed output size (see fixed_sample_shape)")
        slots = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        targets = []
        for slot, index in enumerate(indices):
            index = range(len(self))[index]

            def load_into(i: int, slot: int = slot) -> None:
                path = self._store.path(i)
                with _naming(path, i):
                    fused.decode_into(_read_bytes(path), slots[slot])

            used, _ = self._with_policy(index, load_into)
            target = self._store.target(used)
            targets.append(self.target_transform(target) if self.target_transform else target)
        return targets

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """DataLoader's batched fetch: one uint8 batch, each sample decoded
        straight into its slot, then the chain's tensor step in one pass over
        the batch. The samples are views of that batch, so the stock collate
        works unchanged and :func:`fastdecode.collate` takes it whole."""
        fused = self._batch_fused()
        if fused is None:
            return [self[i] for i in indices]
        shape = (len(indices), *fused.output_shape)
        buffers = self._batch_buffers()
        if fused.tail.identity:  # the uint8 pixels are the result
            pixels = buffers.get("batch", shape, torch.uint8)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels)
        else:  # the pixels are consumed at once, by the chain's tensor step
            pixels = buffers.get("pixels", shape, torch.uint8, leaves=False)
            targets = self.decode_batch_into(indices, pixels)
            batch = fused.finish(pixels, out=buffers.get("batch", shape, fused.tail.dtype))
        return list(zip(batch.unbind(0), targets))

    def _batch_buffers(self) -> BatchBuffers:
        buffers = self.__dict__.get("_buffers")
        if buffers is None:
            buffers = self.__dict__.setdefault("_buffers", BatchBuffers())
        return buffers


class FastImageFolder(FastDatasetFolder):
    """torchvision's ``ImageFolder`` with fused decoding (see FastDatasetFolder)."""

    def __init__(
        self,
        root: Union[str, Path],
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        loader: Optional[Callable[[str], Any]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        *,
        on_error: str = "raise",
    ) -> None:
        super().__init__(
            root, loader, IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform, target_transform=target_transform,
            is_valid_file=is_valid_file, allow_empty=allow_empty, on_error=on_error,
        )
