"""What ``fastdecode convert`` reports: the run's :class:`Summary` (its
``--json`` file) and the text printed at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TIMING_REPEATS", "Summary", "format_bytes", "format_summary"]

TIMING_REPEATS = 3  # the decode timing of a sample: best of this many


@dataclass
class Summary:
    """What a conversion did; ``asdict`` of it is the ``--json`` file."""

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


def format_bytes(size: float) -> str:
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def format_summary(summary: Summary) -> str:
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
    if summary.failures:
        lines.append("failed inputs:")
        lines += [f"  {failure['path']}: {failure['error']}" for failure in summary.failures]
    return "\n".join(lines)
