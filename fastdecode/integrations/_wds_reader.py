"""The bounded WebDataset shard reader, ``tarfile_to_samples``: webdataset's
stage of that name (shard URLs in, samples out) with every tar member, and
the header data tarfile reads before it, held to the per-file limit from the
header, before its bytes are read; a broken header inside a shard an error
naming its byte. Everything else (members skipped, grouping by key, the
handler protocol) is webdataset's. ``fastdecode.webdataset`` re-exports it
and its docstring is the user's guide; decision record: docs/decisions/webdataset.md.
"""

from __future__ import annotations

import errno
import re
import tarfile
from typing import Any, Optional

__all__ = ["tarfile_to_samples"]


class tarfile_to_samples:  # noqa: N801 - a pipeline stage, as webdataset's own
    """``wds.DataPipeline(..., tarfile_to_samples(), ...)``: webdataset's
    stage of the same name (shard URLs in, samples out) with every member
    bounded by the per-file limit, checked from the member's tar header
    before its bytes are read.

    webdataset's own reader reads each member whole, whatever its header
    says: a shard holding a video, or a corrupt or hostile header with an
    endless stream behind it, is read into the worker's memory. Here a
    member over the limit is refused as an :class:`~fastdecode.errors.ImageFileError`
    (errno EFBIG; its ``path`` is ``"{shard}/{member}"``), handed to ``handler`` as
    webdataset hands every error, and its bytes are skipped unread (read
    through in small blocks, never held). The header data tarfile reads
    whole before the member it describes (pax records, GNU long names,
    sparse maps) is held to the same limit, from its declared size where
    it has one; over it, the error (the same type, its ``path`` the
    header's) ends the shard, whose later members it would have named. A
    sparse member over the limit once its holes are filled is refused from
    its header. Everything else is webdataset's: the same members skipped
    (non-regular files, ``__...__`` metadata), the same grouping into
    samples by key, ``__key__`` and ``__url__``. Three things differ: each
    shard's stream is closed when the shard ends (webdataset leaves it to
    the garbage collector); a shard that fails part-way still ends its last
    sample (webdataset's merges it with the next shard's first when their
    keys match, losing that one to a "duplicate file name" error); and a
    header broken after the shard's first (a bad checksum, or the shard
    cut inside it) is a ``tarfile.ReadError`` naming the byte, where
    webdataset's reader ends the shard there without a word. Picklable
    (DataLoader workers).

    Parameters
    ----------
    handler : callable, optional
        Called with each exception (webdataset's protocol: True to go on,
        False to stop the stream); default webdataset's
        ``reraise_exception``. ``wds.warn_and_continue`` skips what fails.
    select_files : callable, optional
        A member's name to True to keep it, as webdataset's.
    rename_files : callable, optional
        A member's name to the name it is grouped by, as webdataset's.
    max_file_bytes : int, optional
        The bound on one member's bytes; default None: the per-file limit
        in force where the pipeline runs (``FASTDECODE_MAX_FILE_BYTES``,
        else 1 GiB), read as each shard is opened.

    Raises
    ------
    ValueError
        ``max_file_bytes`` is less than one byte.
    """

    def __init__(self, handler: Any = None, select_files: Any = None, rename_files: Any = None,
                 *, max_file_bytes: Optional[int] = None) -> None:
        if max_file_bytes is not None and max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be at least 1 byte, got {max_file_bytes}")
        self.handler = handler
        self.select_files = select_files
        self.rename_files = rename_files
        self.max_file_bytes = max_file_bytes

    def __call__(self, src: Any) -> Any:
        """The samples of the shards ``src`` names.

        Parameters
        ----------
        src : iterable of dict
            The shards, each ``{"url": ...}`` (what ``wds.SimpleShardList``,
            ``wds.ResampledShards`` and the node and worker splitters yield).

        Returns
        -------
        iterator of dict
            One dict per sample: ``__key__``, ``__url__`` and one entry of
            bytes per member of the sample, keyed by its extension.
        """
        from webdataset.handlers import reraise_exception
        from webdataset.tariterators import group_by_keys, url_opener

        handler = self.handler or reraise_exception
        return group_by_keys(self._members(url_opener(src, handler=handler), handler),
                             handler=handler)

    def _members(self, streams: Any, handler: Any) -> Any:
        """Each opened shard's members, then ``{}`` at its end, each shard's
        stream closed when it ends (webdataset's tar_file_expander, bounded;
        it leaves the streams to the garbage collector)."""
        for source in streams:
            try:
                try:
                    yield from self._shard(source, handler)
                finally:
                    source["stream"].close()
            except Exception as exc:  # noqa: BLE001 - webdataset's handler protocol
                if not handler(_naming(exc, source["url"])):
                    return
            # the shard's end, failed or not (webdataset marks only a whole
            # shard's, so a cut shard's last key merged with the next's first)
            yield {}

    def _shard(self, source: dict, handler: Any) -> Any:
        """The members of one opened shard as ``{"fname", "data", "__url__"}``
        (and ``__local_path__`` where webdataset's cache gives one).

        A member over the limit whose bytes tarfile would pass over (a
        regular file, or a type it does not know) is read through here in
        blocks, never seeked over: a stream's seek past its end loops once
        per 10 KiB the header declares (2^62 bytes: a hang), where the read
        through stops at the end and ends the shard."""
        from fastdecode._options import max_file_bytes
        from fastdecode.storage._remote import scrub_url

        url, limit = source["url"], self.max_file_bytes or max_file_bytes()
        shard = scrub_url(url)  # where an error names it
        tar = tarfile.open(fileobj=source["stream"], mode="r|*",
                           tarinfo=_bounded_headers(limit, shard))
        for info in tar:
            tar.members = []  # type: ignore[attr-defined]  # every header read so far
            ended = False
            try:
                name = self._name(info)
                if info.size > limit and (info.isreg() or info.type not in tarfile.SUPPORTED_TYPES):
                    # a sparse member's size is what reading makes of it, its
                    # holes zeros (2^62 of them: a hang): never read through;
                    # its stored bytes, within the limit (BoundedHeader), are
                    # passed over by tarfile
                    ended = not info.issparse() and not _read_through(tar, info)
                    if name is None:  # not wanted: an error only where the shard ends in it
                        if ended:
                            raise tarfile.ReadError("unexpected end of data")
                        continue
                    raise _over_limit("member", info, shard, limit,
                                      ", the shard ending inside it" if ended else "")
                if name is None:
                    continue
                member = tar.extractfile(info)
                assert member is not None  # a regular file's
                sample = {"fname": name, "data": member.read(), "__url__": url}
                if source.get("local_path") is not None:
                    sample["__local_path__"] = source["local_path"]
                yield sample
            except Exception as exc:  # noqa: BLE001 - webdataset's handler protocol
                if not handler(_naming(exc, url)) or ended:
                    return  # this shard's members end here, as webdataset's

    def _name(self, info: tarfile.TarInfo) -> Optional[str]:
        """The name ``info`` is grouped by, or None where webdataset's
        tar_file_iterator skips it (not a regular file, metadata, renamed
        and then not selected)."""
        from webdataset.tariterators import meta_prefix, meta_suffix

        name = info.name
        if (not info.isreg() or _META.match(name)
                or ("/" not in name and name.startswith(meta_prefix)
                    and name.endswith(meta_suffix))):
            return None
        if self.rename_files:
            name = self.rename_files(name)
        if self.select_files is not None and not self.select_files(name):
            return None
        return name


# the header blocks whose data tarfile reads whole into memory, by type
_HEADER_DATA = {tarfile.XHDTYPE: "pax extended header", tarfile.XGLTYPE: "pax global header",
                tarfile.SOLARIS_XHDTYPE: "Solaris extended header",
                tarfile.GNUTYPE_LONGNAME: "GNU long name", tarfile.GNUTYPE_LONGLINK: "GNU long link"}


def _over_limit(kind: str, info: tarfile.TarInfo, shard: str, limit: int,
                note: str = "") -> Exception:
    """The ImageFileError (EFBIG) of a tar header of ``kind`` (a member, or
    header data) that declares more than ``limit`` bytes, naming it in
    ``shard``."""
    return _refused(f"tar {kind} of {info.size:,} bytes (its header's size){note}", info,
                    shard, limit)


def _refused(what: str, info: tarfile.TarInfo, shard: str, limit: int) -> Exception:
    """The ImageFileError (EFBIG) of ``what``, over the per-file limit
    ``limit``, naming ``info``'s header in ``shard``: the one builder of
    this module's refusals."""
    from fastdecode._options import over_file_limit
    from fastdecode.errors import ImageFileError

    return ImageFileError(f"{what}, {over_file_limit(info.name, limit).strerror}",
                          path=f"{shard}/{info.name}", errno=errno.EFBIG)


# a header that is not one, and one the stream ends inside (not in typeshed)
_BROKEN_HEADER: tuple[type[Exception], ...] = (
    tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError)  # type: ignore[attr-defined]


def _bounded_headers(limit: int, shard: str) -> type[tarfile.TarInfo]:
    """The TarInfo class of one shard's headers, with three bounds tarfile
    lacks:

    - a header whose data tarfile reads whole (_HEADER_DATA), and a GNU
      sparse member's stored bytes, over ``limit`` are refused from the
      declared size, before any of it is read;
    - what tarfile reads to make one member of its headers (pax records,
      long names, the headers after them, sparse maps in extension blocks
      or pax 1.0 data) is held to ``limit`` and a few header blocks
      (_HeaderBudget): a chain of sparse extension blocks is read one block
      at a time until one says it is the last;
    - a header that is not one (a bad checksum) or is cut short after the
      first ends the shard with an error; tarfile ends the archive there in
      silence, the members after it lost with no word."""

    class BoundedHeader(tarfile.TarInfo):
        @classmethod
        def fromtarfile(cls, tar: tarfile.TarFile) -> BoundedHeader:
            """The next header, read by tarfile, its errors past the first
            header raised, not taken for the archive's end."""
            try:
                return super().fromtarfile(tar)
            except _BROKEN_HEADER as exc:
                at = tar.offset
                if at == 0:
                    raise  # tarfile's "not a tar" (ReadError)
                raise tarfile.ReadError(f"{exc} at byte {at:,}: the shard's members from "
                                        "there on are not read") from None

        def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
            """tarfile's one dispatch on a header's type."""
            kind = _HEADER_DATA.get(self.type)
            if self.type == tarfile.GNUTYPE_SPARSE:
                kind = "GNU sparse member's stored data"
            if kind is not None and self.size > limit:
                raise _over_limit(kind, self, shard, limit)
            raw = tar.fileobj
            if isinstance(raw, _HeaderBudget):  # a header after another: its budget
                return super()._proc_member(tar)  # type: ignore[misc]
            budget = _HeaderBudget(raw, limit + 4 * tarfile.BLOCKSIZE, self, shard, limit)
            tar.fileobj = budget  # type: ignore[assignment]
            try:
                return super()._proc_member(tar)  # type: ignore[misc]
            finally:
                tar.fileobj = raw

    return BoundedHeader


class _HeaderBudget:
    """A shard's stream while tarfile makes one member of its headers: the
    bytes read through it are held to ``budget`` (the per-file limit and the
    header blocks around a record at that limit), and a read cut short by
    the stream's end is tarfile's "unexpected end of data", not an
    IndexError from a sparse map read off the end."""

    def __init__(self, raw: Any, budget: int, info: tarfile.TarInfo, shard: str,
                 limit: int) -> None:
        self.raw, self.left, self.budget = raw, budget, budget
        self.info, self.shard, self.limit = info, shard, limit

    def read(self, size: int) -> bytes:
        if size > self.left:
            raise _refused(f"tar header data of more than {self.budget:,} bytes before its "
                           "member (records, names or a sparse map)", self.info, self.shard,
                           self.limit)
        data = self.raw.read(size)
        if len(data) < size:
            raise tarfile.ReadError("unexpected end of data")
        self.left -= size
        return data

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.raw.seek(pos, whence)


def _read_through(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bool:
    """Reads ``info``'s bytes in blocks of 1 MiB, holding none: True, or
    False where the stream ends inside them."""
    member = tar.extractfile(info)
    assert member is not None  # a regular file or an unknown type's bytes
    try:
        while member.read(1 << 20):
            pass
    except tarfile.ReadError:  # "unexpected end of data"
        return False
    return True


def _naming(exc: Exception, url: str) -> Exception:
    """``exc`` with the shard's URL last in its args (once), as webdataset
    names the shard of an error for its handler."""
    if url not in exc.args:
        exc.args = (*exc.args, url)
    return exc


# webdataset's tar_file_iterator skips these members (its skip_meta default)
_META = re.compile(r"__[^/]*__($|/)")
