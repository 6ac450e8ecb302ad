"""The format table: what each natively decoded format means to the Python layers, one row each.

The C core names its formats, sniffs them and reads their headers
(``src_c/fd_formats.h``; ``_native.sniff``, ``_native.NATIVE_FORMATS``); a
row here says what Python does with one: the binding's decoder, the
``decode_image`` keywords it takes, and whether a variant it refuses goes to
Pillow. The decode dispatch (``api``), the Pillow fallback, the renderer
(``transforms.render``) and conversion read this table; none of them names a
format. The rows must be the C core's formats, in its order: the module
refuses to import otherwise. See docs/decisions/core.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from fastdecode import _native
from fastdecode._options import BMP_OPTIONS, DEFAULTS, PNG_OPTIONS, WEBP_OPTIONS

__all__ = ["ALL_OPTIONS", "LISTED", "NATIVE", "NativeFormat", "dct_scaling", "native"]

ALL_OPTIONS = tuple(DEFAULTS)


@dataclass(frozen=True)
class NativeFormat:
    """One format the C core decodes.

    Attributes
    ----------
    name : str
        The C core's name (``ImageInfo.format``, ``_native.sniff``).
    decode : callable
        The binding's decoder: ``decode(data, **options)``.
    options : tuple of str
        The ``decode_image`` keywords ``decode`` takes (:data:`ALL_OPTIONS`:
        every one).
    pillow_variants : bool
        Whether a file the decoder refuses as an unsupported variant
        (``UnsupportedFormatError``) is tried with Pillow, whose own decoder
        may have it.
    """

    name: str
    decode: Callable[..., np.ndarray]
    options: tuple[str, ...]
    pillow_variants: bool

    @property
    def dct_scaling(self) -> bool:
        """Whether the decoder scales by M/8 itself (``scale``, ``min_size``);
        the others' reduced scales are Pillow's box filter of the full image."""
        return "scale" in self.options

    def keywords(self, options: Any) -> Any:
        """The part of ``options`` (a ``DecodeOptions`` dict) the decoder takes."""
        if self.options is ALL_OPTIONS:
            return options
        return {k: options[k] for k in self.options if k in options}


# PNG and WebP are rows only where the extension was built with libspng /
# libwebp (``_native.NATIVE_FORMATS`` has them); otherwise Pillow decodes them.
# What each sends to Pillow: docs/decisions/png-webp.md.
NATIVE: dict[str, NativeFormat] = {f.name: f for f in (
    NativeFormat("jpeg", _native.decode_jpeg, ALL_OPTIONS, pillow_variants=True),
    NativeFormat("bmp", _native.decode_bmp, BMP_OPTIONS, pillow_variants=False),
    NativeFormat("png", _native.decode_png, PNG_OPTIONS, pillow_variants=True),
    NativeFormat("webp", _native.decode_webp, WEBP_OPTIONS, pillow_variants=True),
) if f.name in _native.NATIVE_FORMATS}

if tuple(NATIVE) != _native.NATIVE_FORMATS:
    raise ImportError(f"fastdecode: _formats.NATIVE has {tuple(NATIVE)}, the C core decodes "
                      f"{_native.NATIVE_FORMATS}")


def native(fmt: Optional[str]) -> Optional[NativeFormat]:
    """The row of ``fmt`` (a format name, e.g. ``ImageInfo.format``); None for
    a format the C core does not decode."""
    return NATIVE.get(fmt) if fmt is not None else None


def dct_scaling(fmt: Optional[str]) -> bool:
    """Whether ``fmt`` is decoded natively at M/8 scales (see :class:`NativeFormat`)."""
    row = native(fmt)
    return row is not None and row.dct_scaling


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# The native formats as messages name them: "JPEG or BMP".
LISTED = _listed([name.upper() for name in NATIVE])
