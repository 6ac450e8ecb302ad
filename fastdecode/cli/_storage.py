"""The storage under a dataset, for ``fastdecode doctor ROOT``: what it is
(from /proc/self/mountinfo), how long an open and its first bytes take, how
fast whole files read, and what to do about it.

It reads a seeded sample of the files, each as the datasets read it (a FIFO,
a device or a file over the per-file limit is named among the errors, never
waited for or read), and advises the read-ahead depth the decode rate and
the latency need. Decision record: docs/decisions/storage.md (Storage
reports).
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from fastdecode import _native
from fastdecode.storage._folder import IMG_EXTENSIONS

__all__ = ["MountInfo", "StorageProbe", "classify", "mount_of", "probe", "storage_advice"]

MOUNTINFO = "/proc/self/mountinfo"
FIRST_BYTES = 4096
LISTING_CAP = 100_000  # file names listed at most, to pick the sample from
# fstype -> kind; fuse.* is fuse, anything unnamed with a block device is local
KINDS = {"nfs": "nfs", "nfs4": "nfs", "lustre": "lustre", "gpfs": "gpfs", "overlay": "overlay",
         "tmpfs": "tmpfs", "ramfs": "tmpfs", "fuse": "fuse", "fuseblk": "fuse",
         "cifs": "network", "smb3": "network", "ceph": "network", "9p": "network",
         "glusterfs": "network", "beegfs": "network", "afs": "network", "virtiofs": "network"}
NETWORK = {"nfs", "lustre", "gpfs", "fuse", "network"}
SLOW_OPEN_S = 1e-3  # an open + first byte above this is storage, not the page cache


@dataclass
class MountInfo:
    mount_point: str
    fstype: str
    source: str
    kind: str  # nfs, fuse, lustre, gpfs, overlay, tmpfs, network, local


def classify(fstype: str) -> str:
    """The kind of a file system type as /proc/self/mountinfo names it."""
    if fstype.startswith("fuse."):
        return "fuse"
    return KINDS.get(fstype, "local")


def _unescape(field_: str) -> str:
    return (field_.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            .replace("\\134", "\\"))


def mount_of(path: os.PathLike | str, mountinfo: Optional[str] = None) -> MountInfo:
    """The mount holding ``path``: the longest mount point above its real
    path in ``mountinfo`` (the text of /proc/self/mountinfo; read when None)."""
    if mountinfo is None:
        with open(MOUNTINFO) as f:
            mountinfo = f.read()
    target = os.path.realpath(path)
    best: Optional[MountInfo] = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # a later mount at the same point covers the earlier one
        if inside and (best is None or len(point) >= len(best.mount_point)):
            fstype, source = fields[dash + 1], _unescape(fields[dash + 2])
            best = MountInfo(point, fstype, source, classify(fstype))
    if best is None:
        raise FileNotFoundError(f"{target}: no mount holds it in {MOUNTINFO}")
    return best


@dataclass
class StorageProbe:
    root: str
    mount: MountInfo
    files_listed: int
    listing_complete: bool  # False: more than LISTING_CAP files, the count is a floor
    sampled: int
    open_first_byte_s: list[float] = field(default_factory=list)
    bytes_read: int = 0
    read_s: float = 0.0
    decode_s_per_image: Optional[float] = None
    errors: list[str] = field(default_factory=list)

    @property
    def latency_s(self) -> float:
        """The median open + first-byte time."""
        return statistics.median(self.open_first_byte_s) if self.open_first_byte_s else 0.0

    @property
    def latency_p90_s(self) -> float:
        if not self.open_first_byte_s:
            return 0.0
        ordered = sorted(self.open_first_byte_s)
        return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]

    @property
    def throughput_bps(self) -> float:
        return self.bytes_read / self.read_s if self.read_s > 0 else 0.0

    @property
    def estimated_bytes(self) -> float:
        """The dataset's bytes: the files listed times the sample's mean size."""
        n = len(self.open_first_byte_s)
        return self.files_listed * self.bytes_read / n if n else 0.0


def image_files(root: Path, cap: int = LISTING_CAP) -> Iterator[str]:
    """Image files under ``root`` (the extensions ImageFolder loads), at most ``cap``."""
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.lower().endswith(IMG_EXTENSIONS):
                yield os.path.join(folder, name)
                count += 1
                if count >= cap:
                    return


def probe(root: os.PathLike | str, sample: int = 64, seed: int = 0,
          mountinfo: Optional[str] = None) -> StorageProbe:
    """Lists ``root``, then times ``sample`` of its files (see the module doc)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a folder")
    files = list(image_files(root))
    picked = random.Random(seed).sample(files, min(sample, len(files)))
    result = StorageProbe(str(root), mount_of(root, mountinfo), len(files),
                          len(files) < LISTING_CAP, len(picked))
    payloads = []
    for path in picked:
        try:
            start = time.perf_counter()
            file = _native.LocalFile(path)  # as the datasets open it: odd files refused
            try:
                os.pread(file.fileno(), FIRST_BYTES, 0)
                result.open_first_byte_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                data = file.read()  # from the start: pread left the offset there
                result.read_s += time.perf_counter() - start
            finally:
                file.close()
            result.bytes_read += len(data)
            payloads.append(data)
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
    result.decode_s_per_image = _decode_cost(payloads[:16])
    return result


def _decode_cost(payloads: list[bytes]) -> Optional[float]:
    """Seconds per image of a full decode of ``payloads`` (None: none decodes)."""
    from fastdecode.api import decode_image
    from fastdecode.errors import FastDecodeError

    times = []
    for data in payloads:
        try:
            start = time.perf_counter()
            decode_image(data)
            times.append(time.perf_counter() - start)
        except (FastDecodeError, OSError, ValueError):
            continue
    return statistics.median(times) if times else None


def storage_advice(p: StorageProbe, usable_cpus: int, num_workers: int,
                   ram_bytes: Optional[int], shm_bytes: Optional[int],
                   default_depth: int) -> tuple[str, str, str]:
    """(status, finding, recommendation) for the doctor's storage check."""
    kind = p.mount.kind
    finding = (f"{p.root} is on {kind} ({p.mount.fstype} at {p.mount.mount_point}); "
               f"open + first {FIRST_BYTES // 1024} KiB: median {p.latency_s * 1e3:.2f} ms, "
               f"p90 {p.latency_p90_s * 1e3:.2f} ms over {len(p.open_first_byte_s)} files; "
               f"whole files {p.throughput_bps / 1e6:,.1f} MB/s; "
               f"{'' if p.listing_complete else 'at least '}{p.files_listed:,} images, "
               f"~{p.estimated_bytes / 2**20:,.0f} MiB")
    if p.errors:
        finding += f"; {len(p.errors)} sampled file(s) unreadable: {p.errors[0]}"
    if not p.open_first_byte_s:
        return "warn", finding, "no sampled file could be read: check the path and permissions"
    slow = p.latency_s >= SLOW_OPEN_S
    if not slow and kind not in NETWORK:
        return "ok", finding, "nothing to change"
    advice = []
    if p.decode_s_per_image:
        rate = usable_cpus / p.decode_s_per_image
        workers = max(1, num_workers)
        depth = math.ceil(rate * p.latency_s / workers)
        advice.append(
            f"keep >= {depth} reads in flight per worker (Little's law: {rate:,.0f} images/s "
            f"that {usable_cpus} CPU(s) decode x {p.latency_s * 1e3:.2f} ms / {workers} "
            f"worker(s)); fastdecode's read-ahead keeps up to {default_depth} by default"
            + ("" if depth <= default_depth else
               f": raise it with readahead={depth} or FASTDECODE_READAHEAD={depth}"))
    fits = [b for b in (ram_bytes, shm_bytes) if b is not None]
    if fits and p.estimated_bytes * 2 <= min(fits):
        advice.append(f"the dataset (~{p.estimated_bytes / 2**30:,.2f} GiB) fits in RAM: "
                      f"cache='{math.ceil(p.estimated_bytes * 1.1 / 2**30 * 100) / 100:g}GiB' "
                      "holds its encoded bytes from the second epoch on")
    else:
        advice.append("too large to cache in RAM here: convert it to shards "
                      "(fastdecode convert ROOT DST --to wds), one open per shard, not per file")
    return "warn" if slow else "ok", finding, "; ".join(advice)
