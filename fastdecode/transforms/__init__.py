"""fastdecode.transforms: torchvision transform chains run inside the decode (needs torch and torchvision).

:func:`fuse` takes a torchvision pipeline (``transforms.Compose`` or
``transforms.v2.Compose``, or a single transform) and returns a callable on
*encoded* bytes whose result is what the pipeline returns on
``Image.open(f).convert('RGB')``: the same type, shape and dtype, the same
random crop boxes and flips for the same ``torch.manual_seed``, values within
fuse's documented bound, computed by decoding only the pixels the chain
keeps, straight to the output size and layout::

    train = fuse(T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                            T.ToTensor(), T.Normalize(mean, std)]))
    x = train(open("cat.jpg", "rb").read())      # float32 (3, 224, 224)

Colour steps right after the geometry (ColorJitter, hue included;
RandomGrayscale; a RandomApply of them) fuse too, and so do the
augmentations of training recipes: torchvision's v1 and v2 RandAugment,
TrivialAugmentWide, AutoAugment, RandomRotation (without ``expand``),
RandomAffine, RandomPosterize, RandomSolarize, RandomAdjustSharpness,
RandomAutocontrast, RandomEqualize and RandomInvert, timm's RandAugment and
AutoAugment, both libraries' AugMix (:mod:`fastdecode.augment`), and GaussianBlur in the default
mode (within one level of torchvision's); then the tensor tail and
RandomErasing. Each is drawn as its library draws it, from the same
generators in the same order, and computed with Pillow's arithmetic
(``exact=True``: the library's result bit for bit; torchvision's AugMix runs
its own tensor ops on the decoded pixels). timm's blur ops
and a user's own callables run unfused, and ``explain()`` says why.
FiveCrop and TenCrop right after those steps cut their crops from the
decoded pixels (a tuple, as torchvision's; v2 tensor steps after them run
on each crop in one pass, a v1 ``Lambda`` stacking them runs on the tuple).

:class:`RandomResizedCrop`, :class:`Resize`, :class:`CenterCrop`,
:class:`RandomHorizontalFlip` and :class:`Compose` are torchvision's v1
classes that also take encoded bytes. ``fuse(t).explain()`` says how a chain
is split and what runs unfused. See docs/decisions/fused-transforms.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from fastdecode._lazy import lazy_attributes
from fastdecode._options import DEFAULTS as _D
from fastdecode.transforms.geometry import Geometry
from fastdecode.transforms.render import DCT_MARGIN

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers
    from torchvision.transforms import InterpolationMode

    from fastdecode.transforms.encoded import (
        CenterCrop,
        Compose,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
    )
    from fastdecode.transforms.fused import FusedTransform

# torchvision loads on first use: a Ray worker unpickling a fully fused plan
# (fastdecode.batching._detached) imports this package but never torchvision.
_LAZY = {
    "CenterCrop": "fastdecode.transforms.encoded",
    "Compose": "fastdecode.transforms.encoded",
    "RandomHorizontalFlip": "fastdecode.transforms.encoded",
    "RandomResizedCrop": "fastdecode.transforms.encoded",
    "Resize": "fastdecode.transforms.encoded",
    "FusedTransform": "fastdecode.transforms.fused",
    "InterpolationMode": "torchvision.transforms",
}


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)


__all__ = [
    "CenterCrop",
    "Compose",
    "FusedTransform",
    "Geometry",
    "InterpolationMode",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "fuse",
]


def fuse(transform: Any = None, *, exact: bool = False, region: str = "box",
         dct_margin: float = DCT_MARGIN, max_pixels: Optional[int] = _D["max_pixels"],
         max_work_per_byte: Optional[int] = _D["max_work_per_byte"]) -> FusedTransform:
    """Fuses a torchvision pipeline into the decoder: ``f(data)`` on encoded bytes.

    ``f(data)`` returns what ``transform(Image.open(io.BytesIO(data)).convert('RGB'))``
    returns (the same type, shape and dtype, the same random crop boxes and
    flips for the same ``torch.manual_seed``, values within the bound below),
    computed by decoding only the pixels the chain keeps, straight to the
    output size and layout. ``f`` is picklable, so it works in DataLoader
    workers. ``f.explain()`` says how the chain is split and what runs
    unfused (the rules: docs/decisions/fused-transforms.md).

    Exactness: with ``exact=True`` every fused chain is bit-identical to
    torchvision for every format. By default a JPEG may decode at 1/2, 1/4 or
    1/8 scale before the resample; the documented floor is 40 dB PSNR
    against torchvision for every op combination tested (the parity tests
    assert it; the measured minimum is 42.1 dB over 250 ImageNet-style
    photos). Nearest, padding and unfused steps are exact.

    Parameters
    ----------
    transform : callable or list, optional
        A torchvision ``transforms.Compose`` / ``transforms.v2.Compose``
        (nested ones are flattened), a list of transforms, a single
        transform, fastdecode's own classes, or None (the decoded PIL image).
    exact : bool, default False
        Decode at full resolution and resample as Pillow does (results
        bit-identical to torchvision's) instead of letting the decoder
        downscale by M/8 first and resampling natively.
    region : {'box', 'whole', 'round'}, default 'box'
        For a region kept after a resample (``Resize(256)`` then
        ``CenterCrop(224)``): 'box' decodes just the pixels the centre reads
        and resamples the sub-pixel source box, as Pillow's
        ``resize(box=)`` (exact); 'whole' resamples the whole image and keeps
        the centre (exact, more resampling); 'round' resamples the nearest
        integer source box (one call, sub-pixel misaligned: down to about
        24 dB on photos).
    dct_margin : float, default 2.0
        With ``exact=False``, a JPEG is decoded at 1/2, 1/4 or 1/8 scale
        only when the scaled crop stays at least ``dct_margin`` times the
        output size. The default keeps the 40 dB floor above; 1.25 fell to
        33 dB with 64 px outputs; 1 is the decoder's own rule.
    max_pixels : int or None, default DEFAULT_MAX_PIXELS
        The limit of every decode ``f`` runs, as for
        :func:`fastdecode.decode_image`.
    max_work_per_byte : int or None, default 2048
        The work limit of every decode ``f`` runs, as for
        :func:`fastdecode.decode_image`.

    Returns
    -------
    FusedTransform
        ``f``: called on encoded bytes (bytes, bytearray, memoryview, mmap,
        a 1-D uint8 numpy array or tensor, e.g. ``torchvision.io.read_file``):
        JPEG and BMP are decoded natively, other formats through Pillow; or
        on a decoded image: a uint8 (H, W[, C]) array, a uint8 (C, H, W) or
        (H, W, C) tensor, an L or RGB PIL image, whose pixels run the fused
        steps natively with the result of the chain on their PIL image (a
        gray image gives one channel, as torchvision); RGBA, palette and
        other PIL modes run the chain unfused (a RuntimeWarning once). A
        wrong dtype is a TypeError, a wrong shape a ValueError, each naming
        what is expected. Random parameters come from
        the global generators the chain's library draws from (torch's; timm's
        policies also Python's ``random`` and NumPy's), drawn as that library
        draws them, in the same order. It also has ``f.plan``, ``f.explain()``,
        ``f.fusion_report()``, ``f.is_current()`` / ``f.refreshed()``,
        ``f.output_shape``, ``f.last_params`` and, for batch loaders,
        ``f.decode_into(data, out)`` / ``f.finish(batch)``: see
        :class:`FusedTransform`.

    Raises
    ------
    TypeError
        A step of the chain is not callable.
    ValueError
        An unknown ``region``, a ``dct_margin`` below 1, or limits the
        decoders refuse.
    """
    from fastdecode.transforms.fused import fuse as _fuse

    return _fuse(transform, exact=exact, region=region, dct_margin=dct_margin,
                 max_pixels=max_pixels, max_work_per_byte=max_work_per_byte)
