"""The exceptions fastdecode raises.

Every failure that comes from the data is a :class:`DecodeError` (and so also
a :class:`ValueError`, which is what Pillow-based code already catches).
"""

from __future__ import annotations

__all__ = [
    "FastDecodeError",
    "DecodeError",
    "UnsupportedFormatError",
    "ImageTooLargeError",
]


class FastDecodeError(Exception):
    """Base class of every error fastdecode raises on purpose.

    ``path`` names the file the data came from, when it is known.
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
