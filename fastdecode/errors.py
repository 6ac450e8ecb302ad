"""The exceptions fastdecode raises.

Every failure that comes from the data is a :class:`DecodeError` (and so also
a :class:`ValueError`, which is what Pillow-based code already catches). A
dataset item whose file cannot be read or decoded raises an
:class:`ImageFileError`: a DecodeError that is also an :class:`OSError`, as
the errors of torchvision's ImageFolder loader are (PIL's
``UnidentifiedImageError``, "image file is truncated"), so code that skips
bad images with ``except OSError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "FastDecodeError",
    "DecodeError",
    "UnsupportedFormatError",
    "ImageTooLargeError",
    "ImageFileError",
    "UnsupportedImageFileError",
    "ImageFileTooLargeError",
    "CacheSpaceError",
    "ResumeError",
    "file_error",
]


class FastDecodeError(Exception):
    """Base class of every error fastdecode raises on purpose.

    ``path`` names the file the data came from, when it is known.

    Parameters
    ----------
    message : str
        The reason, kept as the ``reason`` attribute.
    path : str or None, optional
        The file the data came from (default None: not known), kept as the
        ``path`` attribute. When given, ``str()`` of the error is
        ``"{path}: {message}"``; else the message alone.

    Notes
    -----
    The error pickles with its ``reason`` and ``path`` (what a DataLoader
    worker sends to the main process), and so do its subclasses.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self):  # keeps `path` across DataLoader worker pickling
        return (type(self), (self.reason, self.path))


class DecodeError(FastDecodeError, ValueError):
    """The data is corrupt, truncated or cannot be decoded."""


class UnsupportedFormatError(DecodeError):
    """The data is not in a format (or a variant of one) that can be decoded."""


class ImageTooLargeError(DecodeError):
    """The declared image size is above ``max_pixels``; nothing was allocated."""


class ImageFileError(DecodeError, OSError):
    """A dataset sample's file cannot be read or decoded: a :class:`DecodeError`
    and an :class:`OSError` (what ImageFolder's loader raises for bad files).

    ``path`` and ``filename`` name the file; ``errno`` is the operating
    system's when the read itself failed (missing file, no permission), else
    None. The message is the reason alone, as for every FastDecodeError.

    Parameters
    ----------
    message : str
        The reason, kept as the ``reason`` attribute; ``str()`` of the error
        is this message alone (the path is not prefixed, and there is no
        ``[Errno ...]`` form).
    path : str or None, optional
        The sample's file (default None), kept as both ``path`` and
        ``filename``.
    errno : int or None, optional
        The operating system's error number when reading the file failed
        (default None: the read succeeded and decoding failed), kept as
        ``errno``.
    """

    def __init__(self, message: str, path: str | None = None, errno: int | None = None) -> None:
        super().__init__(message, path)
        self.filename = path
        self.errno = errno

    def __str__(self) -> str:  # OSError's "[Errno ...]" form only when there is an errno
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (type(self), (self.reason, self.path, self.errno))


class UnsupportedImageFileError(ImageFileError, UnsupportedFormatError):
    """A dataset sample's file is not an image format that can be decoded."""


class ImageFileTooLargeError(ImageFileError, ImageTooLargeError):
    """A dataset sample's file declares an image above the size limits."""


class CacheSpaceError(FastDecodeError, MemoryError):
    """A dataset's ``cache=`` budget does not fit: /dev/shm or the available
    RAM has less free than it needs (checked before anything is filled).
    The message says how much each has and what to change."""


class ResumeError(FastDecodeError, ValueError):
    """A saved state does not fit what it is loaded into: a loader state
    (``FastLoader.state_dict()``) another dataset, another seed, another
    sampler, a global batch the new world size does not divide; a dataset
    state (``FastImageFolder.state_dict()``, torchdata's protocol) another
    kind or size of dataset; either an unknown version. The message names
    what differs."""


def file_error(exc: BaseException, message: str, path: str) -> ImageFileError:
    """The ImageFileError for ``exc`` raised while loading ``path``: the
    narrowest class that keeps what ``exc`` was (too large, unsupported).

    Parameters
    ----------
    exc : BaseException
        The error loading the file raised. An :class:`ImageTooLargeError`
        gives an :class:`ImageFileTooLargeError`, an
        :class:`UnsupportedFormatError` an :class:`UnsupportedImageFileError`,
        anything else a plain :class:`ImageFileError`; an :class:`OSError`'s
        ``errno`` is carried over.
    message : str
        The new error's message (its ``reason``).
    path : str
        The file that was being loaded.

    Returns
    -------
    ImageFileError
        The new error, not raised: the caller raises it (typically
        ``from exc``).
    """
    if isinstance(exc, ImageTooLargeError):
        cls: type[ImageFileError] = ImageFileTooLargeError
    elif isinstance(exc, UnsupportedFormatError):
        cls = UnsupportedImageFileError
    else:
        cls = ImageFileError
    errno = exc.errno if isinstance(exc, OSError) else None
    return cls(message, path=path, errno=errno)
