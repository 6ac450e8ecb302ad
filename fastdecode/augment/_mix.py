"""MixUp and CutMix on batches, in place, with the draws and the soft targets of
torchvision's and timm's own call. See docs/decisions/augment.md ("Batch mixing").

:func:`mix_batch` runs a batch-mixing transform on ``(images, labels)``:
torchvision v2's ``MixUp``, ``CutMix`` and a ``RandomChoice`` of them, timm's
``Mixup`` (its 'batch' mode) draw with the transform's own code (``make_params``,
``_params_per_batch``, ``cutmix_bbox_and_lam``: the same generators, the same
order) and mix the images in place, row by row, with the same float
operations (a pasted box is a copy of the box alone, never of the batch);
the soft targets are the transform's own. Anything else (another transform,
timm's 'elem'/'pair' modes, integer images, labels the transform would
refuse) is the transform's own call, so its result and its errors are the
transform's. :class:`MixCollate` is the collate_fn form (torchvision's
reference: ``lambda batch: mixup_cutmix(*default_collate(batch))``; timm's
``FastCollateMixup`` in 'batch' mode mixes the collated uint8 batch in place
too). Imports nothing of fastdecode: torch's ``default_collate`` takes
FastImageFolder's batches whole (``batching/_buffers.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.utils.data import default_collate

__all__ = ["MixCollate", "fast_collate_mixup", "mix_batch"]


def _kind(t: Any) -> Optional[str]:
    """Which mixing transform ``t`` is (exact types), or None."""
    cls = type(t)
    module, name = cls.__module__, cls.__name__
    if module.startswith("torchvision.transforms.v2") and name in ("MixUp", "CutMix"):
        return name
    if module.startswith("torchvision.transforms.v2") and name == "RandomChoice":
        return "RandomChoice"
    if module == "timm.data.mixup" and name in ("Mixup", "FastCollateMixup"):
        return name
    if module == "fastdecode.integrations.timm" and name == "InPlaceFastCollateMixup":
        return "FastCollateMixup"  # what timm.data.FastCollateMixup is after install()
    return None


def _batch(images: Any, labels: Any) -> bool:
    """A (N, C, H, W) batch and labels torchvision takes (any dtype: a MixUp
    of integer images is then the transform's own call, which refuses it)."""
    return (isinstance(images, torch.Tensor) and images.ndim == 4
            and isinstance(labels, torch.Tensor) and labels.ndim in (1, 2)
            and images.shape[0] == labels.shape[0] and images.shape[0] > 0)


def _float_batch(images: Any, labels: Any) -> bool:
    """A floating :func:`_batch`."""
    return _batch(images, labels) and images.is_floating_point()


def _tv_labels_ok(t: Any, labels: torch.Tensor) -> bool:
    """torchvision's own checks of the labels would pass (else its call raises them)."""
    if labels.ndim == 2:
        return t.num_classes is None or labels.shape[-1] == t.num_classes
    return t.num_classes is not None


def mixup_rows_(images: torch.Tensor, lam: float) -> None:
    """``images.roll(1, 0).mul_(1 - lam).add_(images.mul(lam))`` in place, row by
    row from the last (one row kept aside, one row of scratch): the same float
    operations on the same values, so the same bits (float addition commutes)."""
    x = images.as_subclass(torch.Tensor)
    first = x[-1].clone()  # row 0 mixes with the last row as it was
    scratch = torch.empty_like(first)
    for i in range(x.shape[0] - 1, -1, -1):
        prev = x[i - 1] if i else first
        torch.mul(prev, 1.0 - lam, out=scratch)
        x[i].mul_(lam).add_(scratch)


def paste_rolled_(images: torch.Tensor, y1: int, y2: int, x1: int, x2: int, flip: bool) -> None:
    """Each row's box ``[y1:y2, x1:x2]`` replaced by the previous row's
    (``flip``: by the mirrored row's, ``N - 1 - i``), in place: a copy of the
    box alone."""
    region = images.as_subclass(torch.Tensor)[..., y1:y2, x1:x2]
    region.copy_(region.flip(0) if flip else region.roll(1, 0))


def _torchvision(t: Any, kind: str, images: Any, labels: Any) -> Any:
    if kind == "RandomChoice":
        idx = int(torch.multinomial(torch.tensor(t.p), 1))  # RandomChoice.forward's draw
        chosen = t.transforms[idx]
        inner = _kind(chosen)
        if inner not in ("MixUp", "CutMix") or not _tv_labels_ok(chosen, labels):
            return chosen(images, labels)
        return _torchvision(chosen, inner, images, labels)
    if not _tv_labels_ok(t, labels) or (kind == "MixUp" and not images.is_floating_point()):
        return t(images, labels)
    params = t.make_params([images])  # the transform's own draws
    if kind == "MixUp":
        mixup_rows_(images, params["lam"])
        return images, t._mixup_label(labels, lam=params["lam"])
    x1, y1, x2, y2 = params["box"]
    paste_rolled_(images, y1, y2, x1, x2, flip=False)
    return images, t._mixup_label(labels, lam=params["lam_adjusted"])


def _timm_batch(t: Any, images: torch.Tensor, labels: torch.Tensor) -> Any:
    """timm's ``Mixup._mix_batch`` in place: a cutmix box copied alone (timm
    flips the whole batch to read it), a mixup pair by pair."""
    from timm.data.mixup import cutmix_bbox_and_lam, mixup_target

    lam, use_cutmix = t._params_per_batch()
    if lam != 1.0:
        x = images.as_subclass(torch.Tensor)
        if use_cutmix:
            (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                x.shape, lam, ratio_minmax=t.cutmix_minmax, correct_lam=t.correct_lam)
            paste_rolled_(images, yl, yh, xl, xh, flip=True)
        else:  # x_flipped = x.flip(0).mul_(1 - lam); x.mul_(lam).add_(x_flipped)
            n = x.shape[0]
            for i in range(n // 2):
                a, b = x[i], x[n - 1 - i]
                a_part = a.mul(1.0 - lam)
                a.mul_(lam).add_(b.mul(1.0 - lam))
                b.mul_(lam).add_(a_part)
    else:
        lam = 1.0
    return images, mixup_target(labels, t.num_classes, lam, t.label_smoothing, t.multi_label)


def mix_batch(transform: Callable, images: Any, labels: Any) -> Any:
    """``transform(images, labels)`` for a batch-mixing transform, in place in
    ``images`` where fastdecode knows the transform (the module doc).

    Parameters
    ----------
    transform : callable
        torchvision v2's ``MixUp``, ``CutMix`` or ``RandomChoice`` of them,
        timm's ``Mixup``, or any ``(images, labels) -> (images, labels)``
        callable (called as it is).
    images : torch.Tensor
        The (N, C, H, W) batch; a floating batch is mixed in place (the
        caller gives up its values), so pass a batch nothing else reads.
    labels : torch.Tensor
        (N,) class indices or (N, num_classes) probabilities.

    Returns
    -------
    tuple
        ``(images, soft_labels)``, equal to ``transform(images, labels)`` for
        the same random state, with the same draws from the same generators.

    Raises
    ------
    Exception
        What ``transform`` itself raises for such inputs (its own call makes
        them: labels of the wrong shape, ``num_classes`` missing, timm's odd
        batch, integer images for MixUp).
    """
    kind = _kind(transform)
    if kind in ("MixUp", "CutMix", "RandomChoice") and _batch(images, labels):
        return _torchvision(transform, kind, images, labels)
    if (kind == "Mixup" and getattr(transform, "mode", None) == "batch"
            and _float_batch(images, labels)
            and images.shape[0] % 2 == 0):
        return _timm_batch(transform, images, labels)
    return transform(images, labels)


def _timm_collate_batch(t: Any, batch: list) -> Any:
    """timm's ``FastCollateMixup`` ('batch' mode, tensor samples) on the
    collated uint8 batch, in place: a cutmix box copied alone, a mixup pair by
    pair with timm's float operations and rounding."""
    from timm.data.mixup import cutmix_bbox_and_lam, mixup_target

    images = default_collate([b[0] for b in batch])
    labels = default_collate([b[1] for b in batch])
    x = images.as_subclass(torch.Tensor)
    lam, use_cutmix = t._params_per_batch()
    if use_cutmix:
        (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
            x.shape, lam, ratio_minmax=t.cutmix_minmax, correct_lam=t.correct_lam)
    if lam != 1.0:
        if use_cutmix:
            paste_rolled_(x, yl, yh, xl, xh, flip=True)
        else:
            n = x.shape[0]
            for i in range((n + 1) // 2):
                j = n - 1 - i
                mixed_i = x[i].float() * lam + x[j].float() * (1 - lam)
                mixed_j = x[j].float() * lam + x[i].float() * (1 - lam)
                torch.round(mixed_i, out=mixed_i)
                torch.round(mixed_j, out=mixed_j)
                x[i].copy_(mixed_i.byte())
                x[j].copy_(mixed_j.byte())
    return images, mixup_target(labels, t.num_classes, lam, t.label_smoothing, t.multi_label)


def fast_collate_mixup(t: Any, batch: list) -> Any:
    """timm's ``FastCollateMixup`` (or a subclass) called on ``batch``: its
    'batch' mode on uint8 tensor samples in place on the collated batch, the
    rest as timm's own ``__call__``."""
    if (t.mode == "batch" and batch and len(batch) % 2 == 0
            and all(isinstance(b[0], torch.Tensor) and b[0].dtype == torch.uint8 for b in batch)):
        return _timm_collate_batch(t, batch)
    from timm.data.mixup import FastCollateMixup

    return FastCollateMixup.__call__(t, batch)


class MixCollate:
    """A collate_fn that collates a batch and mixes it in place: torchvision's
    reference ``lambda batch: mixup_cutmix(*default_collate(batch))`` (or
    timm's ``FastCollateMixup``) with the same draws, mixed batches and soft
    targets, without copying the batch (see :func:`mix_batch`). Picklable when
    the transform is, so it runs in DataLoader workers.

    Parameters
    ----------
    transform : callable
        The batch-mixing transform (torchvision v2's ``MixUp``, ``CutMix``,
        ``RandomChoice([MixUp, CutMix])``, timm's ``Mixup``), or timm's
        ``FastCollateMixup`` (itself a collate: it is called on the samples,
        its 'batch' mode in place on the collated uint8 batch).
    collate : callable, optional
        The collate run first (torch's ``default_collate`` when None, which
        takes FastImageFolder's batches whole); must return ``(images,
        labels)``. Not used with ``FastCollateMixup``.

    Examples
    --------
    >>> from torchvision.transforms import v2  # doctest: +SKIP
    >>> mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=1000),
    ...                        v2.CutMix(alpha=1.0, num_classes=1000)])
    >>> loader = DataLoader(FastImageFolder(root, train_chain), batch_size=128,
    ...                     collate_fn=MixCollate(mix))
    """

    def __init__(self, transform: Callable, collate: Optional[Callable] = None) -> None:
        if not callable(transform):
            raise TypeError(f"MixCollate needs a callable transform, got {type(transform).__name__}")
        self.transform = transform
        self.collate = collate

    def __call__(self, batch: list) -> Any:
        """The batch collated, then mixed.

        Parameters
        ----------
        batch : list
            The samples, ``(image, target)`` pairs.

        Returns
        -------
        tuple
            ``(images, soft_targets)``, as the transform returns them.
        """
        t: Any = self.transform
        if _kind(t) == "FastCollateMixup":
            return fast_collate_mixup(t, batch)
        images, labels = (self.collate or default_collate)(batch)
        return mix_batch(t, images, labels)

    def __repr__(self) -> str:
        return f"MixCollate({self.transform!r})"
