"""WebDataset samples decoded by fastdecode: ``handler`` (a ``.decode``
handler, one sample's image fields fused-decoded) and ``collate`` (a
``.batched`` collation, one batch decoded into one preallocated tensor). The
bounded shard reader is ``_wds_reader``, the ``WebDataset`` class
``_wds_dataset``, the shard writer ``fastdecode.conversion.shards``;
``fastdecode.webdataset`` re-exports them all and its docstring is the
user's guide. Decision record: docs/decisions/webdataset.md.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastdecode._system import settle_in_worker

__all__ = ["collate", "handler"]


IMAGE_KEYS = ("jpg", "jpeg", "png", "bmp", "ppm", "pgm", "tif", "tiff", "webp")


class handler:  # noqa: N801 - used like webdataset's own handler functions
    """``.decode(handler(transform))``: image keys (``jpg``, ``png``...)
    become ``fuse(transform, exact=exact)(data)``; other keys return None,
    which hands them to the next handler. Picklable (DataLoader workers).

    Parameters
    ----------
    transform : torchvision transform or FusedTransform
        The chain each image goes through, fused as ``fuse(transform,
        exact=exact)``.
    exact : bool, default False
        ``fuse``'s ``exact``: the results equal torchvision's to the pixel.
    keys : sequence of str, default IMAGE_KEYS
        The keys decoded (without case): ``jpg jpeg png bmp ppm pgm tif
        tiff webp``.

    Raises
    ------
    TypeError, ValueError
        As :func:`~fastdecode.transforms.fuse` raises them for ``transform``.
    """

    def __init__(self, transform: Any, *, exact: bool = False,
                 keys: Sequence[str] = IMAGE_KEYS) -> None:
        from fastdecode.transforms import fuse

        self.fused = fuse(transform, exact=exact)
        self.keys = frozenset(k.lower() for k in keys)

    def __call__(self, key: str, data: bytes) -> Any:
        """Decodes a sample's field when its key is an image key.

        Parameters
        ----------
        key : str
            The field's key (``"jpg"``, ``"cls"``; of a dotted key, the part
            after the last dot), matched without case.
        data : bytes
            The field's encoded bytes.

        Returns
        -------
        Any
            ``fuse(transform, exact=exact)(data)`` for an image key; None for
            any other key, which webdataset then hands to its next handler.
        """
        if key.rsplit(".", 1)[-1].lower() not in self.keys:
            return None
        settle_in_worker()
        return self.fused(data)


class collate:  # noqa: N801 - used like a function: collation_fn=collate(t)
    """``.batched(n, collation_fn=collate(transform))`` on tuples whose field
    ``image`` holds encoded bytes: that field becomes one (n, C, H, W) tensor
    decoded in place (the chain must fix the size); the other fields are
    collated as webdataset collates them (numbers as tensors), with undecoded
    ``cls`` bytes (``b"3"``) read as ints.

    Parameters
    ----------
    transform : torchvision transform or FusedTransform
        The chain each image goes through; it must give every image the same
        shape and end in tensor steps (``RandomResizedCrop(224), ToTensor(),
        Normalize(...)``).
    exact : bool, default False
        ``fuse``'s ``exact``: the results equal torchvision's to the pixel.
    image : int, default 0
        The position of the encoded image in each sample's tuple.

    Raises
    ------
    ValueError
        The chain does not fix the output shape or does not end in tensor
        steps.
    """

    def __init__(self, transform: Any, *, exact: bool = False, image: int = 0) -> None:
        from fastdecode.batching._rows import BatchDecoder

        self.decoder = BatchDecoder(transform, exact=exact)
        self.image = image

    def __call__(self, samples: Sequence[Sequence[Any]]) -> tuple:
        """Collates a batch of samples, decoding their image field into one tensor.

        Parameters
        ----------
        samples : sequence of sequences
            The batch's sample tuples; field ``image`` holds encoded bytes.

        Returns
        -------
        tuple
            One entry per field: at position ``image`` the images as one
            (n, C, H, W) tensor; the other fields collated as webdataset
            collates them (numbers, and bytes holding an integer such as
            ``cls``'s, as tensors).

        Raises
        ------
        fastdecode.errors.FastDecodeError
            An image cannot be decoded; the error names its sample.
        """
        import torch
        from webdataset.filters import default_collation_fn

        settle_in_worker()
        images = self.decoder.decode([s[self.image] for s in samples],
                                     name=lambda j: f"sample {j} of the batch")
        rest = [tuple(_plain(v) for i, v in enumerate(s) if i != self.image) for s in samples]
        others = [_tensor(v) for v in default_collation_fn(rest)] if rest and rest[0] else []
        others.insert(self.image, torch.from_numpy(images))
        return tuple(others)


def _tensor(value: Any) -> Any:
    """webdataset combines numbers into numpy arrays; a training step wants tensors."""
    import torch

    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)) and value.strip().lstrip(b"-").isdigit():
        return int(value)
    return value
