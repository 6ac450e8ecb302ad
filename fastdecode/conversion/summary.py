"""What a conversion did, and its report: ``fastdecode convert``'s one
summary, for a tree re-encoded (:class:`Summary`) and for WebDataset shards
written (:class:`ShardSummary`), printed as text at the end of the run
(:func:`format_summary`) and written as the ``--json`` file
(:func:`summary_json`). Decision record: docs/decisions/cli.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Union

__all__ = ["TIMING_REPEATS", "ShardSummary", "Summary", "format_bytes", "format_summary",
           "summary_json"]

TIMING_REPEATS = 3  # the decode timing of a sample: best of this many


@dataclass
class Summary:
    """What a conversion of a tree did; ``asdict`` of it is the ``--json`` file.

    Parameters
    ----------
    source, destination : str
        The source tree (a folder or a URL) and the destination folder.
    to : str
        The output format (``"bmp"`` or ``"jpeg"``).
    converted, skipped, failed : int, default 0
        Files written now, outputs an earlier run finished, inputs that failed.
    failures : list of dict, default []
        ``{"path", "error"}`` of each failed input, sorted by path.
    bytes_before, bytes_after : int, default 0
        The sizes of the sources that have an output, and of their outputs.
    seconds : float, default 0.0
        The run's wall time.
    timed_images : int, default 0
        The files whose decode was timed before and after.
    decode_ms_before, decode_ms_after, decode_speedup : float or None
        Their decode time per image, before and after, and its ratio.
    timing_error : str or None
        Why the decode was not timed.
    classes : int, default 0
        The class folders of the source, every one made in the destination.
    empty_classes : list of str, default []
        Those holding no converted image.
    """

    source: str
    destination: str
    to: str
    converted: int = 0
    skipped: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    bytes_before: int = 0  # sources that have an output (converted or skipped)
    bytes_after: int = 0
    seconds: float = 0.0
    timed_images: int = 0
    decode_ms_before: float | None = None
    decode_ms_after: float | None = None
    decode_speedup: float | None = None
    timing_error: str | None = None
    classes: int = 0  # class folders of the source, every one mirrored in the destination
    empty_classes: list[str] = field(default_factory=list)  # mirrored with no image in them


@dataclass
class ShardSummary:
    """What a shard conversion did; ``asdict`` of it is the ``--json`` file.

    Parameters
    ----------
    source, destination : str
        The ImageFolder root and the folder of the shards.
    to : str, default "wds"
        The output format.
    shards : int, default 0
        The shards of the plan.
    written, skipped : int, default 0
        Shards written now, and shards an earlier run finished.
    samples : int, default 0
        The samples of the plan.
    bytes_after : int, default 0
        The size of the plan's shards on disk.
    seconds : float, default 0.0
        The run's wall time.
    failed : int, default 0
        Inputs left out of their shards.
    failures : list of dict, default []
        ``{"path", "error"}`` of each input left out, sorted by path.
    """

    source: str
    destination: str
    to: str = "wds"
    shards: int = 0
    written: int = 0
    skipped: int = 0
    samples: int = 0
    bytes_after: int = 0
    seconds: float = 0.0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)


def format_bytes(size: float) -> str:
    """A size for people to read.

    Parameters
    ----------
    size : float
        A number of bytes.

    Returns
    -------
    str
        ``"512 B"`` under 1 KiB, else one decimal in KiB, MiB or GiB (the
        largest unit it reaches, GiB at most).
    """
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def format_summary(summary: Union[Summary, ShardSummary]) -> str:
    """The text ``fastdecode convert`` prints at the end of a run.

    Parameters
    ----------
    summary : Summary or ShardSummary
        The run's summary.

    Returns
    -------
    str
        A first line of counts and time, then (a tree) the sizes before and
        after, the decode times measured and the empty classes; then one
        line per failed input.
    """
    if isinstance(summary, ShardSummary):
        return "\n".join([_shard_counts(summary), *_failure_lines(summary.failures)])
    lines = _tree_lines(summary)
    if summary.failures:
        lines.append("failed inputs:")
        lines += _failure_lines(summary.failures)
    return "\n".join(lines)


def summary_json(summary: Union[Summary, ShardSummary]) -> str:
    """The ``--json`` file of a run.

    Parameters
    ----------
    summary : Summary or ShardSummary
        What the run did; its fields are the file's keys, in their order.

    Returns
    -------
    str
        ``asdict(summary)`` as one JSON object, indented by 2, with a final
        newline.
    """
    return json.dumps(asdict(summary), indent=2) + "\n"


def _tree_lines(summary: Summary) -> list[str]:
    rate = f" ({summary.converted / summary.seconds:.0f} images/s)" if summary.converted else ""
    lines = [
        f"converted {summary.converted} images in {summary.seconds:.1f} s{rate}, "
        f"skipped {summary.skipped} already done, failed {summary.failed}",
    ]
    if summary.bytes_before:
        lines.append(f"size:   {format_bytes(summary.bytes_before)} -> "
                     f"{format_bytes(summary.bytes_after)} "
                     f"({summary.bytes_after / summary.bytes_before:.2f}x)")
    if summary.decode_speedup is not None:
        lines.append(f"decode: {summary.decode_ms_before:.2f} ms/image -> "
                     f"{summary.decode_ms_after:.2f} ms/image ({summary.decode_speedup:.1f}x "
                     f"faster; {summary.timed_images} images, best of {TIMING_REPEATS})")
    elif summary.timing_error:
        lines.append(f"decode: not measured ({summary.timing_error})")
    if summary.empty_classes:
        lines.append(f"empty classes: {len(summary.empty_classes)} of {summary.classes} class "
                     "folders hold no converted image (their folders are kept, so the other "
                     "classes keep their indices; ImageFolder refuses an empty class unless "
                     "allow_empty=True): " + ", ".join(summary.empty_classes))
    return lines


def _shard_counts(summary: ShardSummary) -> str:
    return (f"wrote {summary.written} shards, skipped {summary.skipped} already done "
            f"({summary.shards} in all, {summary.samples} samples, "
            f"{summary.bytes_after / 2**20:.1f} MiB) in {summary.seconds:.1f} s, "
            f"failed {summary.failed}")


def _failure_lines(failures: list[dict[str, str]]) -> list[str]:
    return [f"  {failure['path']}: {failure['error']}" for failure in failures]
