"""Read-ahead's options: the datasets' ``readahead=`` as :class:`ReadAheadOptions`.

``readahead=`` is an int depth (0: off, every file read in the decoding
thread; N: N reads in flight, fixed), a :class:`ReadAheadOptions`, or None:
``FASTDECODE_READAHEAD`` ("0", "16", "16,64MiB", "auto", "auto,256MiB"), else
the adaptive default (:meth:`ReadAheadOptions.adaptive`: 16 to 128 reads, 64
MiB). The window that keeps them is :mod:`fastdecode.storage._window`.
Decision record: docs/decisions/storage.md, "Slow storage: read-ahead".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from fastdecode._options import parse_bytes

__all__ = ["DEFAULT_DEPTH", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_DEPTH", "ENV", "ReadAheadOptions"]

DEFAULT_DEPTH = 16
DEFAULT_MAX_DEPTH = 128
DEFAULT_MAX_BYTES = 64 << 20
ENV = "FASTDECODE_READAHEAD"


@dataclass(frozen=True)
class ReadAheadOptions:
    """How many reads a process keeps in flight: ``depth`` reads started
    and not yet taken (0: off), holding at most ``max_bytes`` of file bytes.
    ``max_depth`` larger than ``depth``: adaptive, the window starts at
    ``depth`` and keeps as many reads in flight as Little's law asks of the
    latency it measures (up to ``max_depth``, always within ``max_bytes``);
    None: ``depth`` fixed. The default (``readahead=None``, no
    ``FASTDECODE_READAHEAD``) is :meth:`adaptive`.

    A frozen dataclass; the datasets take it as ``readahead=``.

    Parameters
    ----------
    depth : int, optional
        The reads started and not yet taken, >= 0 (default
        ``DEFAULT_DEPTH``, 16); 0 turns read-ahead off (every file is read in
        the decoding thread). With ``max_depth``, the depth the adaptive
        window starts at.
    max_bytes : int, optional
        The most file bytes the reads in flight may hold, >= 1 (default
        ``DEFAULT_MAX_BYTES``, 64 MiB). A single file larger than this is read
        only when nothing else is reserved.
    max_depth : int or None, optional
        None (the default): ``depth`` is fixed. An int >= ``depth``: the
        depth adapts to the measured read latency, between ``depth`` and
        ``max_depth``.

    Raises
    ------
    ValueError
        ``depth`` is not an int >= 0, ``max_bytes`` not an int >= 1, or
        ``max_depth`` neither None nor an int >= ``depth``.
    """

    depth: int = DEFAULT_DEPTH
    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: Optional[int] = None

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 0:
            raise ValueError(f"readahead depth must be an int >= 0, got {self.depth!r}")
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) \
                or self.max_bytes < 1:
            raise ValueError(f"readahead max_bytes must be an int >= 1, got {self.max_bytes!r}")
        if self.max_depth is not None and (isinstance(self.max_depth, bool)
                                           or not isinstance(self.max_depth, int)
                                           or self.max_depth < self.depth):
            raise ValueError(f"readahead max_depth must be None or an int >= depth "
                             f"({self.depth}), got {self.max_depth!r}")

    @classmethod
    def adaptive(cls, max_bytes: int = DEFAULT_MAX_BYTES) -> "ReadAheadOptions":
        """The default: ``DEFAULT_DEPTH`` reads in flight, grown up to
        ``DEFAULT_MAX_DEPTH`` where the measured latency asks for more.

        Parameters
        ----------
        max_bytes : int, optional
            The byte bound of the reads in flight (default
            ``DEFAULT_MAX_BYTES``, 64 MiB).

        Returns
        -------
        ReadAheadOptions
            ``ReadAheadOptions(DEFAULT_DEPTH, max_bytes, DEFAULT_MAX_DEPTH)``
            (16 to 128 reads).

        Raises
        ------
        ValueError
            ``max_bytes`` is not an int >= 1.
        """
        return cls(DEFAULT_DEPTH, max_bytes, DEFAULT_MAX_DEPTH)

    @property
    def limit(self) -> int:
        """The most reads in flight the window may ever keep."""
        return self.depth if self.max_depth is None else self.max_depth

    @classmethod
    def resolve(cls, value: Union[None, int, "ReadAheadOptions"]) -> "ReadAheadOptions":
        """The options of a ``readahead=`` argument (see the module doc).

        Parameters
        ----------
        value : None, int or ReadAheadOptions
            A ReadAheadOptions is returned as it is. An int is a fixed depth
            (``ReadAheadOptions(depth=value)``; 0: off). None reads the
            ``FASTDECODE_READAHEAD`` environment variable: ``"DEPTH"`` or
            ``"DEPTH,BYTES"`` (a fixed depth, e.g. ``"16,64MiB"``), ``"auto"``
            or ``"auto,BYTES"`` (:meth:`adaptive`); unset or empty:
            :meth:`adaptive` with its defaults.

        Returns
        -------
        ReadAheadOptions
            The options to use.

        Raises
        ------
        TypeError
            ``value`` is not None, an int (a bool is not one) or a
            ReadAheadOptions.
        ValueError
            The int or ``FASTDECODE_READAHEAD`` is not a valid depth or byte
            count (the message quotes the variable and gives examples).
        """
        if isinstance(value, ReadAheadOptions):
            return value
        if value is None:
            text = os.environ.get(ENV, "").strip()
            if not text:
                return cls.adaptive()
            depth, _, cap = text.partition(",")
            try:
                max_bytes = parse_bytes(cap) if cap.strip() else DEFAULT_MAX_BYTES
                if depth.strip().lower() == "auto":
                    return cls.adaptive(max_bytes)
                return cls(int(depth), max_bytes)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{ENV}={text!r}: {exc} (e.g. '0', '16', '16,64MiB', "
                                 f"'auto,64MiB')") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"readahead must be None, an int depth or ReadAheadOptions, "
                            f"got {value!r}")
        return cls(depth=value)
