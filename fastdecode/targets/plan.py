"""JointPlan: one image's geometric steps as two axis maps, for the pixels, the masks and the fill.

A detection chain's leading geometric steps (at most one resize, first; then
crops, pads and a mirror, as the reference presets make them) become, per
axis, the stage-1 index each output position reads (-1: padding) and which
step padded it. From that one plan come the image's
:class:`~fastdecode.transforms.Geometry` (what the renderer decodes, once),
the fill of the padded canvas, and every mask at the output size by index
(a NEAREST resize, a crop, a pad and a flip are each a choice of source rows
and columns). See docs/decisions/detection.md.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from fastdecode.transforms.filters import PIL_BILINEAR
from fastdecode.transforms.geometry import Geometry, Stop

__all__ = ["Axis", "JointPlan", "nearest_index"]


def nearest_index(positions: np.ndarray, in_size: int, out_size: int) -> np.ndarray:
    """torch's ``interpolate(mode='nearest')`` source index for each output position.

    ATen's ``nearest_idx``: identity at equal sizes, ``i >> 1`` at twice the
    size, else ``min(floorf(i * (float)in / out), in - 1)`` in float32.

    Parameters
    ----------
    positions : numpy.ndarray
        Output positions (int64, non-negative).
    in_size, out_size : int
        The axis length before and after the resize.

    Returns
    -------
    numpy.ndarray
        The source index of each position (int64).
    """
    if out_size == in_size:
        return positions.copy()
    if out_size == 2 * in_size:
        return positions >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    src = np.floor(positions.astype(np.float32) * scale).astype(np.int64)
    return np.minimum(src, in_size - 1)


class Axis:
    """One axis of a plan: the stage-1 index of each output position and the step that padded it.

    Parameters
    ----------
    length : int
        The axis length of the image before any step.
    """

    def __init__(self, length: int):
        self.size = length  # the stage-1 length (after the resize, if any)
        self.idx = np.arange(length, dtype=np.int64)
        self.pad = np.full(length, -1, dtype=np.int32)
        self.flipped = False

    def __len__(self) -> int:
        return len(self.idx)

    def crop(self, start: int, length: int, fill: int) -> None:
        """Keeps ``length`` positions from ``start``; those outside become fill ``fill``."""
        pos = np.arange(start, start + length, dtype=np.int64)
        inside = (pos >= 0) & (pos < len(self.idx))
        idx = np.full(length, -1, dtype=np.int64)
        pad = np.full(length, fill, dtype=np.int32)
        idx[inside] = self.idx[pos[inside]]
        pad[inside] = self.pad[pos[inside]]
        self.idx, self.pad = idx, pad

    def extend(self, before: int, after: int, fill: int) -> None:
        """Pads ``before`` and ``after`` positions of fill ``fill``."""
        self.crop(-before, len(self.idx) + before + after, fill)

    def flip(self) -> None:
        """Mirrors the axis."""
        self.idx, self.pad = self.idx[::-1].copy(), self.pad[::-1].copy()
        self.flipped = not self.flipped

    def kept(self) -> tuple[int, int, int]:
        """(first stage-1 index kept, how many, output position of the first
        kept one before mirroring); (0, 0, 0) when nothing is kept."""
        where = np.flatnonzero(self.idx >= 0)
        if where.size == 0:
            return 0, 0, 0
        lo, n = int(self.idx[where].min()), int(where.size)
        pos = int(where[0])
        if self.flipped:  # where it lands before the mirror
            pos = len(self.idx) - int(where[-1]) - 1
        return lo, n, pos


class JointPlan:
    """One image's geometric steps, planned: the axes, the resize and the fills.

    Parameters
    ----------
    height, width : int
        The size of the image the steps start from.
    """

    def __init__(self, height: int, width: int):
        self.image_size = (height, width)
        self.size: Optional[tuple[int, int]] = None
        self.filter = PIL_BILINEAR
        self.rows = Axis(height)
        self.cols = Axis(width)
        self.fills: list[tuple[tuple[int, ...], Optional[float]]] = []  # (image RGB, mask)

    @property
    def canvas(self) -> tuple[int, int]:
        """(H, W) of the image so far."""
        return len(self.rows), len(self.cols)

    def _fill(self, image_fill: Sequence[int], mask_fill: Optional[float]) -> int:
        entry = (tuple(int(v) for v in image_fill), mask_fill)
        if entry not in self.fills:
            self.fills.append(entry)
        return self.fills.index(entry)

    # -- the steps ------------------------------------------------------------------

    def resize(self, height: int, width: int, pil_filter: int) -> None:
        """Resamples the image to (height, width).

        Raises
        ------
        Stop
            The image was cropped, padded or resampled before (one resample,
            first: the presets' order).
        """
        if (height, width) == self.canvas:
            return
        if self.size is not None or self.rows.flipped or self.cols.flipped:
            raise Stop("a resample after another step")
        if not (np.array_equal(self.rows.idx, np.arange(self.image_size[0]))
                and np.array_equal(self.cols.idx, np.arange(self.image_size[1]))):
            raise Stop("a resample after a crop or a pad")
        if height <= 0 or width <= 0:
            raise Stop("empty output size")
        self.size, self.filter = (height, width), pil_filter
        self.rows, self.cols = Axis(height), Axis(width)

    def crop(self, top: int, left: int, height: int, width: int) -> None:
        """Crops as ``F.crop`` does (zero where the box leaves the image)."""
        zero = self._fill((0, 0, 0), 0)
        self.rows.crop(top, height, zero)
        self.cols.crop(left, width, zero)

    def pad(self, padding: Sequence[int], image_fill: Sequence[int],
            mask_fill: Optional[float]) -> None:
        """Pads [left, top, right, bottom] with the fills of the image and the masks."""
        left, top, right, bottom = padding
        k = self._fill(image_fill, mask_fill)
        self.rows.extend(top, bottom, k)
        self.cols.extend(left, right, k)

    def flip(self) -> None:
        """Mirrors left to right."""
        self.cols.flip()

    # -- what the plan gives ---------------------------------------------------------

    def geometry(self) -> Geometry:
        """The :class:`~fastdecode.transforms.Geometry` the renderer decodes (zero padding)."""
        r0, rn, rpos = self.rows.kept()
        c0, cn, cpos = self.cols.kept()
        region = (r0, c0, rn, cn)
        crop = (0, 0) + self.image_size if self.size is not None else region
        return Geometry(self.image_size, crop, self.size, region, self.canvas,
                        (rpos, cpos, rn, cn), self.cols.flipped, self.filter)

    def fill_image(self, canvas: np.ndarray) -> None:
        """Writes the fills of the padded parts into a uint8 (3, H, W) canvas."""
        if not any(any(f[0]) for f in self.fills):
            return  # every fill is zero: the renderer's zero padding is it
        colors = np.array([f[0] if len(f[0]) == 3 else f[0] * 3 for f in self.fills], np.uint8)
        self._fill_bands(canvas, colors.T[:, :, None])

    def _fill_bands(self, out: np.ndarray, values: np.ndarray) -> None:
        """Writes ``values[..., k, :]`` where fill k owns a pixel (the later
        step's padding over the earlier's), band by band: a padded row run at
        once, then the padded column runs of the rows left. ``values`` is
        (n_fills, 1) for masks, (3, n_fills, 1) for the image."""
        rp, cp = self.rows.pad, self.cols.pad
        for a, b, k in _runs(rp):
            if k >= 0:
                out[..., a:b, :] = values[..., np.maximum(k, cp), 0][..., None, :]
        for a, b, k in _runs(cp):
            if k < 0:
                continue
            for ra, rb, kr in _runs(rp):
                if kr < 0:
                    out[..., ra:rb, a:b] = values[..., k, :, None]

    def source_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """Per axis, the index in the original image each output position
        reads (a resize is NEAREST, as for masks); -1 where it is padding."""
        out = []
        for axis, n in ((self.rows, self.image_size[0]), (self.cols, self.image_size[1])):
            idx = axis.idx.copy()
            if self.size is not None:
                ok = idx >= 0
                idx[ok] = nearest_index(idx[ok], n, axis.size)
            out.append(idx)
        return out[0], out[1]

    def gather(self, mask: np.ndarray) -> np.ndarray:
        """A (..., H0, W0) mask of the original image at the output, as v2 makes it.

        Raises
        ------
        Stop
            A padding step's mask fill is not a number v2 pads a mask with.
        """
        rows, cols = self.source_indices()
        out = _take(_take(mask, rows, -2), cols, -1)
        out = out.copy() if np.shares_memory(out, mask) else np.ascontiguousarray(out)
        return self.fill_mask(out)

    def fill_mask(self, out: np.ndarray) -> np.ndarray:
        """Writes the mask fills of the padded parts into ``out`` (..., H, W); returns it.

        Raises
        ------
        Stop
            A padding step's mask fill is not a number v2 pads a mask with.
        """
        used = set(np.unique(self.rows.pad)) | set(np.unique(self.cols.pad))
        used.discard(-1)
        if not used:
            return out
        fills = np.array([np.nan if f[1] is None else f[1] for f in self.fills], np.float64)
        if np.isnan(fills[sorted(used)]).any():
            raise Stop("a mask fill that is not a number")
        self._fill_bands(out, fills.astype(out.dtype)[:, None])
        return out


def _runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, value) of each run of equal values."""
    if values.size == 0:
        return []
    edges = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [values.size]])
    return [(int(a), int(b), int(values[a])) for a, b in zip(starts, ends)]


def _take(mask: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """``mask`` at ``idx`` along ``axis`` (-1 read as 0; the fill comes after):
    a view when ``idx`` is the whole axis, forward or mirrored."""
    n = mask.shape[axis]
    if len(idx) == n and idx[0] in (0, n - 1) and (np.diff(idx) == (1 if idx[0] == 0 else -1)).all():
        sl = slice(None) if idx[0] == 0 or n == 1 else slice(None, None, -1)
        return mask[..., sl, :] if axis == -2 else mask[..., sl]
    return np.take(mask, np.maximum(idx, 0), axis=axis)
