"""fastdecode.webdataset: shards written from an ImageFolder tree (labels,
keys, sizes, resume, atomicity) and read back through the installed
webdataset with the fastdecode handler and batch collation, against
FastImageFolder for the same seeds."""

from __future__ import annotations

import errno
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from helpers.trees import corrupt_file, encoded_jpeg, make_tree

pytest.importorskip("torchvision")

import fastdecode.webdataset as fwds  # noqa: E402
from fastdecode import FastImageFolder  # noqa: E402


def train_chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])])


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree", per_class=4)


def members(shard: Path) -> list[str]:
    with tarfile.open(shard) as tar:
        return tar.getnames()


def shards_of(dst: Path) -> list[Path]:
    return sorted(dst.glob("shard-*.tar"))


@pytest.mark.parametrize("count", [1, 3, 5])
def test_shard_count(tree, tmp_path, count):
    summary = fwds.write_shards(tree, tmp_path / "wds", shard_count=count, workers=1)
    assert summary.shards == summary.written == len(shards_of(tmp_path / "wds")) == count
    keys = [m for s in shards_of(tmp_path / "wds") for m in members(s) if m.endswith(".cls")]
    assert len(keys) == summary.samples == len(FastImageFolder(tree))


@pytest.mark.parametrize("shuffle_seed", [None, 0], ids=["imagefolder-order", "shuffled"])
def test_labels_and_keys_name_the_imagefolder_sample(tree, tmp_path, shuffle_seed):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=2, shuffle_seed=shuffle_seed, workers=1)
    ref = FastImageFolder(tree)
    seen = []
    for shard in shards_of(tmp_path / "wds"):
        with tarfile.open(shard) as tar:
            names = tar.getnames()
            for name in names[1::2]:
                key = int(name.split(".")[0])
                path, target = ref.samples[key]
                assert int(tar.extractfile(name).read()) == target
                image = next(n for n in names if n.startswith(f"{key:08d}.") and n != name)
                assert tar.extractfile(image).read() == Path(path).read_bytes()
                seen.append(key)
    assert sorted(seen) == list(range(len(ref)))
    assert (seen == sorted(seen)) == (shuffle_seed is None)
    plan = json.loads((tmp_path / "wds" / "wds.json").read_text())
    assert plan["classes"] == ref.classes


def test_shard_size_bounds_each_shard(tree, tmp_path):
    limit = 6000
    fwds.write_shards(tree, tmp_path / "wds", shard_size=limit, workers=1)
    plan = json.loads((tmp_path / "wds" / "wds.json").read_text())
    ref = FastImageFolder(tree)
    for shard in plan["shards"]:
        sizes = [Path(ref.samples[i][0]).stat().st_size for i in shard["indices"]]
        assert len(sizes) == 1 or sum(sizes) <= limit
    assert len(plan["shards"]) > 1


def test_resume_skips_finished_shards_and_redoes_missing(tree, tmp_path):
    dst = tmp_path / "wds"
    first = fwds.write_shards(tree, dst, shard_count=3, workers=1)
    before = {p.name: p.read_bytes() for p in shards_of(dst)}
    shards_of(dst)[1].unlink()
    again = fwds.write_shards(tree, dst, shard_count=3, workers=1)
    assert (first.written, again.written, again.skipped) == (3, 1, 2)
    assert {p.name: p.read_bytes() for p in shards_of(dst)} == before  # reproducible bytes


def test_another_plan_is_refused(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=3, workers=1)
    with pytest.raises(ValueError, match="holds shards of another plan"):
        fwds.write_shards(tree, tmp_path / "wds", shard_count=2, workers=1)


def test_interrupted_shard_leaves_nothing(tree, tmp_path, monkeypatch):
    import fastdecode.conversion.jobs as convert

    calls = {"n": 0}
    real = convert.load_pixels

    def failing(data, max_side):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(data, max_side)

    monkeypatch.setattr(convert, "load_pixels", failing)
    with pytest.raises(KeyboardInterrupt):
        fwds.write_shards(tree, tmp_path / "wds", shard_count=1, max_side=32, workers=1)
    assert not shards_of(tmp_path / "wds")
    assert not list((tmp_path / "wds").glob("*.partial"))


def test_unreadable_input_is_listed(tree, tmp_path):
    bad = corrupt_file(next((tree / "dog").glob("*.jpg")))
    bad.write_bytes(b"not an image at all")
    summary = fwds.write_shards(tree, tmp_path / "wds", shard_count=2, workers=1)
    assert [f["path"] for f in summary.failures] == [str(bad)]
    names = [m for s in shards_of(tmp_path / "wds") for m in members(s)]
    assert len(names) == 2 * (summary.samples - 1)


@pytest.mark.parametrize("bad", [{"shard_count": 0}, {"shard_size": 0},
                                 {"shard_count": 2, "shard_size": 10}],
                         ids=["count-0", "size-0", "both"])
def test_bad_arguments(tree, tmp_path, bad):
    with pytest.raises(ValueError, match="shard_count|shard_size"):
        fwds.write_shards(tree, tmp_path / "wds", workers=1, **bad)


def test_max_side_reencodes_jpeg(tree, tmp_path):
    from fastdecode import read_header

    fwds.write_shards(tree, tmp_path / "wds", shard_count=1, max_side=40, workers=1)
    with tarfile.open(shards_of(tmp_path / "wds")[0]) as tar:
        images = [n for n in tar.getnames() if not n.endswith(".cls")]
        assert all(n.endswith(".jpg") for n in images)
        for name in images:
            header = read_header(tar.extractfile(name).read())
            assert header.format == "jpeg" and max(header.height, header.width) <= 40


def test_parallel_writers_write_the_same_shards(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "one", shard_count=3, workers=1)
    fwds.write_shards(tree, tmp_path / "two", shard_count=3, workers=2)
    assert [p.read_bytes() for p in shards_of(tmp_path / "one")] == [
        p.read_bytes() for p in shards_of(tmp_path / "two")]


# --------------------------------------------------------------------------
# Reading back through webdataset.


def read_all(pipeline, limit=None) -> list:
    """The pipeline's samples. webdataset 1.0.2 leaves the shard files it
    opened to the garbage collector: collect them here, where their
    ResourceWarning is expected, not in a later test."""
    import gc
    import itertools
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        samples = list(itertools.islice(pipeline, limit))
        del pipeline
        gc.collect()
    return samples


def _expected(tree, chain, seed):
    import torch

    ref = FastImageFolder(tree, chain)
    torch.manual_seed(seed)
    return [ref[i] for i in range(len(ref))]


@pytest.fixture
def shards(tree, tmp_path):
    fwds.write_shards(tree, tmp_path / "wds", shard_count=2, shuffle_seed=None, workers=1)
    return [str(p) for p in shards_of(tmp_path / "wds")]


def test_handler_equals_fast_image_folder(tree, shards):
    wds = pytest.importorskip("webdataset")
    import torch

    expected = _expected(tree, train_chain(), seed=3)
    torch.manual_seed(3)
    ds = wds.WebDataset(shards, shardshuffle=False).decode(fwds.handler(train_chain()))
    got = read_all(ds.to_tuple("jpg;png", "cls"))
    assert len(got) == len(expected)
    for (image, label), (x, y) in zip(got, expected):
        assert label == y
        np.testing.assert_array_equal(image.numpy(), x.numpy())


def test_collate_equals_fast_image_folder(tree, shards):
    wds = pytest.importorskip("webdataset")
    import torch

    expected = _expected(tree, train_chain(), seed=4)
    torch.manual_seed(4)
    ds = (wds.WebDataset(shards, shardshuffle=False).to_tuple("jpg;png", "cls")
          .batched(5, collation_fn=fwds.collate(train_chain()), partial=True))
    images, labels = zip(*read_all(ds))
    images, labels = torch.cat(images), torch.cat(labels)
    np.testing.assert_array_equal(images.numpy(), torch.stack([x for x, _ in expected]).numpy())
    assert labels.tolist() == [y for _, y in expected]


def test_handler_leaves_other_keys(shards):
    wds = pytest.importorskip("webdataset")
    [sample] = read_all(wds.WebDataset(shards[:1], shardshuffle=False)
                        .decode(fwds.handler(train_chain())), limit=1)
    assert isinstance(sample["cls"], int)


def test_collate_names_the_bad_sample():
    pytest.importorskip("webdataset")  # collate collates the other fields as webdataset does
    from fastdecode import DecodeError

    with pytest.raises(DecodeError, match="sample 1 of the batch"):
        fwds.collate(train_chain())([(encoded_jpeg(), 0), (b"garbage", 1)])


# --------------------------------------------------------------------------
# tarfile_to_samples: webdataset's reading stage, each member bounded


def handmade_shard(path: Path, members: list[tuple[str, bytes]], odd: bool = False) -> str:
    """A tar of ``members`` (name, bytes); with ``odd`` also what webdataset
    skips: a folder, a link and ``__...__`` metadata members."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        extras = [("__meta__", b"{}"), ("__index__/a", b"x")] if odd else []
        for name, data in extras + members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if odd:
            for kind, name in [(tarfile.DIRTYPE, "d"), (tarfile.SYMTYPE, "d/00000.jpg")]:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, "00000.jpg"
                tar.addfile(info)
    return str(path)


def declared_size(shard: str, member: int, size: int, kind: bytes = b"") -> None:
    """Rewrites member ``member``'s header in place to declare ``size`` bytes
    (GNU base-256) and, given, the type ``kind``, its bytes left as they
    are: a corrupt or hostile header."""
    with tarfile.open(shard) as tar:
        offset = tar.getmembers()[member].offset
    with open(shard, "r+b") as f:
        f.seek(offset)
        header = bytearray(f.read(512))
        header[124:136] = bytes([0x80]) + size.to_bytes(11, "big")
        header[156:157] = kind or header[156:157]
        f.seek(offset)
        f.write(checksummed(header))


def checksummed(header: bytearray) -> bytes:
    """A tar header block with its checksum made again after an edit."""
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def pipeline(stage, shards):
    wds = pytest.importorskip("webdataset")
    return wds.DataPipeline(wds.SimpleShardList(shards), stage)


class Collected:
    """A webdataset handler that keeps each error and goes on."""

    def __init__(self) -> None:
        self.errors: list[Exception] = []

    def __call__(self, exc: Exception) -> bool:
        self.errors.append(exc)
        return True


def small_members(n: int = 3, big: int = -1, big_size: int = 5000) -> list[tuple[str, bytes]]:
    out = []
    for k in range(n):
        out += [(f"{k:05d}.jpg", bytes([k]) * (big_size if k == big else 100)),
                (f"{k:05d}.cls", str(k).encode())]
    return out


@pytest.mark.parametrize("odd", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["written-shards", "odd-members"])
@pytest.mark.parametrize("options", [
    {}, {"select_files": lambda name: not name.endswith(".cls")},
    {"rename_files": lambda name: name.replace(".jpg", ".jpeg")},
], ids=["defaults", "select", "rename"])
def test_stage_gives_webdatasets_samples(tree, tmp_path, shards, odd, options):
    wds = pytest.importorskip("webdataset")
    if odd:
        shards = [handmade_shard(tmp_path / "odd.tar", small_members(), odd=True), *shards]
    ours = read_all(pipeline(fwds.tarfile_to_samples(**options), shards))
    theirs = read_all(pipeline(wds.tarfile_to_samples(**options), shards))
    assert len(ours) == len(FastImageFolder(tree)) + 3 * odd
    assert ours == theirs  # keys, urls, bytes, the same grouping


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_member_over_the_limit_is_refused_from_its_header(tmp_path, monkeypatch, how):
    from fastdecode import ImageFileError

    shard = handmade_shard(tmp_path / "s.tar", small_members(big=1))
    if how == "environment":
        monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "1000")
    stage = fwds.tarfile_to_samples(max_file_bytes=1000 if how == "argument" else None)
    with pytest.raises(ImageFileError, match=r"s\.tar/00001\.jpg: tar member of 5,000 bytes "
                                             r"\(its header's size\), larger than the per-file "
                                             r"limit of 1,000 bytes \(set FASTDECODE_MAX_FILE_BYTES"
                       ) as e:
        read_all(pipeline(stage, [shard]))
    assert e.value.errno == errno.EFBIG and e.value.path == f"{shard}/00001.jpg"


def test_a_refused_member_goes_to_the_handler_and_the_shard_goes_on(tmp_path):
    shard = handmade_shard(tmp_path / "s.tar", small_members(big=1))
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler, max_file_bytes=1000), [shard]))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == \
        [["cls", "jpg"], ["cls"], ["cls", "jpg"]]  # the big one's image alone left out
    assert [str(e).partition(", larger")[0] for e in handler.errors] == \
        [f"{shard}/00001.jpg: tar member of 5,000 bytes (its header's size)"]


def test_a_header_declaring_exabytes_is_refused_unread(tmp_path):
    from fastdecode import ImageFileError

    shard = handmade_shard(tmp_path / "s.tar", small_members())
    declared_size(shard, 2, 1 << 62)  # 00001.jpg
    with pytest.raises(ImageFileError, match=r"00001\.jpg: tar member of "
                                             r"4,611,686,018,427,387,904 bytes"):
        read_all(pipeline(fwds.tarfile_to_samples(), [shard]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", [b"0", b"Z"], ids=["regular-file", "unknown-type"])
def test_exabytes_declared_end_their_shard_and_the_next_is_read(tmp_path, kind):
    """Going on past a header declaring 2^62 bytes: tarfile's stream would
    seek over them a 10 KiB read at a time (webdataset's stage, with a
    handler that goes on, was still looping after 20 s); here the shard ends
    at its end and the next is read whole."""
    cut = handmade_shard(tmp_path / "cut.tar", small_members())
    declared_size(cut, 2, 1 << 62, kind)  # 00001.jpg's header
    whole = handmade_shard(tmp_path / "whole.tar", small_members())
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler), [cut, whole]))
    assert [(Path(s["__url__"]).stem, s["__key__"]) for s in got] == \
        [("cut", "00000")] + [("whole", f"{k:05d}") for k in range(3)]
    [error] = handler.errors
    if kind == b"0":
        assert str(error).startswith(f"{cut}/00001.jpg: tar member of 4,611,686,018,427,387,904 "
                                     "bytes (its header's size), the shard ending inside it, "
                                     "larger than the per-file limit")
    else:  # not a member webdataset keeps: the shard's end alone is an error
        assert (type(error), error.args) == (tarfile.ReadError, ("unexpected end of data", cut))


def header_data_shard(path: Path, kind: str) -> str:
    """small_members() with ~20 KB of header data tarfile reads whole: a pax
    record of 00001.jpg's (``pax-extended``), a global pax header before
    every member (``pax-global``), or 00001.jpg's GNU long name."""
    big = "x" * 20_000
    fmt = tarfile.GNU_FORMAT if kind == "gnu-long-name" else tarfile.PAX_FORMAT
    with tarfile.open(path, "w", format=fmt,
                      pax_headers={"comment": big} if kind == "pax-global" else None) as tar:
        for name, data in small_members():
            info = tarfile.TarInfo(name)
            if name == "00001.jpg" and kind == "pax-extended":
                info.pax_headers = {"comment": big}
            elif name == "00001.jpg" and kind == "gnu-long-name":
                info.name = f"{big}/00001.jpg"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


HEADER_DATA = [  # (kind, the header's type in the message, its name, keys read before it)
    pytest.param("pax-extended", "pax extended header", "././@PaxHeader", ["00000"],
                 id="pax-extended"),
    pytest.param("pax-global", "pax global header", "././@PaxHeader", [], id="pax-global"),
    pytest.param("gnu-long-name", "GNU long name", "././@LongLink", ["00000"],
                 id="gnu-long-name"),
]


@pytest.mark.parametrize("kind, what, header, before", HEADER_DATA)
def test_header_data_over_the_limit_is_refused_and_ends_its_shard(tmp_path, kind, what, header,
                                                                  before):
    """tarfile reads pax records and GNU long names whole before the member
    they name; over the limit they are refused unread, the shard ends there
    (its later names would be wrong) and the next shard is read whole."""
    from fastdecode import ImageFileError

    bad = header_data_shard(tmp_path / "bad.tar", kind)
    whole = handmade_shard(tmp_path / "whole.tar", small_members())
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler, max_file_bytes=8192), [bad, whole]))
    assert [(Path(s["__url__"]).stem, s["__key__"]) for s in got] == \
        [("bad", key) for key in before] + [("whole", f"{k:05d}") for k in range(3)]
    [error] = handler.errors
    assert type(error) is ImageFileError and error.errno == errno.EFBIG
    assert error.path == f"{bad}/{header}"
    with pytest.raises(ImageFileError, match=rf"bad\.tar/{re.escape(header)}: tar {what} of "
                                             r"2\d,\d{3} bytes \(its header's size\), larger than "
                                             r"the per-file limit of 8,192 bytes"):
        read_all(pipeline(fwds.tarfile_to_samples(max_file_bytes=8192), [bad]))


@pytest.mark.parametrize("kind", ["pax-extended", "pax-global", "gnu-long-name"])
def test_header_data_within_the_limit_is_read_as_webdataset_reads_it(tmp_path, kind):
    wds = pytest.importorskip("webdataset")
    shard = header_data_shard(tmp_path / "s.tar", kind)
    ours = read_all(pipeline(fwds.tarfile_to_samples(), [shard]))
    assert ours == read_all(pipeline(wds.tarfile_to_samples(), [shard]))
    # the long name's image is a sample of its own, apart from its .cls
    assert len(ours) == (4 if kind == "gnu-long-name" else 3)


def test_a_pax_header_declaring_exabytes_is_refused_unread(tmp_path):
    from fastdecode import ImageFileError

    shard = header_data_shard(tmp_path / "s.tar", "pax-extended")
    declared_size(shard, 2, 1 << 62)  # 00001.jpg's first header: its pax header's
    with pytest.raises(ImageFileError, match=r"s\.tar/\./\./@PaxHeader: tar pax extended header "
                                             r"of 4,611,686,018,427,387,904 bytes"):
        read_all(pipeline(fwds.tarfile_to_samples(), [shard]))


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def header_block(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytearray:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return bytearray(info.tobuf(format=tarfile.GNU_FORMAT))


def sparse_entries(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(tarfile.itn(n, 12, tarfile.GNU_FORMAT) for entry in entries for n in entry)


def gnu_sparse(name: str, stored: int, realsize: int, extension_blocks: int,
               cut: bool = False) -> bytes:
    """An old GNU sparse member ('S', what ``tar --sparse --format=gnu``
    writes): 100 bytes at 0 in its header's map, then ``extension_blocks``
    blocks (empty entries, but the last: 21 entries of 1 byte each, at
    200-220), its header declaring ``stored`` bytes and ``realsize`` (the
    size made on reading); with ``cut``, the shard ends inside the
    extension blocks."""
    header = header_block(name, stored, tarfile.GNUTYPE_SPARSE)
    header[386:410] = sparse_entries([(0, 100)])
    header[482] = extension_blocks > 0
    header[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)
    out = checksummed(header)
    for k in range(extension_blocks):
        block = bytearray(512)
        if k == extension_blocks - 1:
            block[:504] = sparse_entries([(200 + i, 1) for i in range(21)])
        block[504] = k < extension_blocks - 1  # another follows
        out += bytes(block)
    if cut:
        return out[:-512]
    return out + padded(b"s" * 100 + b"t" * 21 * (extension_blocks > 0))


def sparse_shard(path: Path, kind: str) -> str:
    """small_members() with 00001.jpg a sparse member: ``gnu`` (its map in
    two extension blocks) or ``pax`` (a 1.0 map), read as 300 bytes; or a
    hostile one: its size made on reading 2^62 bytes (``size``), its stored
    bytes 2^62 (``stored``), 40 extension blocks (``extensions``, 20 KiB
    of header), the shard ending inside its extension blocks (``cut``), or
    a 1.0 map declaring a billion entries (``pax-map``)."""
    members = {
        "gnu": lambda: gnu_sparse("00001.jpg", 512, 300, 2),
        "size": lambda: gnu_sparse("00001.jpg", 512, 1 << 62, 0),
        "stored": lambda: gnu_sparse("00001.jpg", 1 << 62, 300, 0),
        "extensions": lambda: gnu_sparse("00001.jpg", 512, 300, 40),
        "cut": lambda: gnu_sparse("00001.jpg", 512, 300, 3, cut=True),
        "pax": lambda: pax_sparse_member([b"1", b"0", b"100"]),
        "pax-map": lambda: pax_sparse_member([b"1000000000"] + [b"1"] * 10_000),
    }
    with open(path, "wb") as f:
        for name, data in small_members():
            if name == "00001.jpg":
                f.write(members[kind]())
                if kind == "cut":
                    break
            else:
                f.write(bytes(header_block(name, len(data))) + padded(data))
        else:
            f.write(bytes(1024))
    return str(path)


def pax_sparse_member(map_lines: list[bytes]) -> bytes:
    """00001.jpg as GNU 1.0 sparse: a pax record (the name, the size made on
    reading: 300), a header of GNUSparseFile.0/00001.jpg, then its data: the
    map's lines (their count first) and 100 bytes."""
    records = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
               "GNU.sparse.name": "00001.jpg", "GNU.sparse.realsize": "300"}
    pax = tarfile.TarInfo._create_pax_generic_header(records, tarfile.XHDTYPE, "utf-8")
    data = padded(b"".join(line + b"\n" for line in map_lines)) + b"s" * 100
    return pax + bytes(header_block("GNUSparseFile.0/00001.jpg", len(data))) + padded(data)


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_a_sparse_member_within_the_limit_is_read_as_webdataset_reads_it(tmp_path, kind):
    wds = pytest.importorskip("webdataset")
    shard = sparse_shard(tmp_path / "s.tar", kind)
    ours = read_all(pipeline(fwds.tarfile_to_samples(max_file_bytes=8192), [shard]))
    assert ours == read_all(pipeline(wds.tarfile_to_samples(), [shard]))
    image = ours[1]["jpg"]  # its holes made zeros, up to its size made on reading
    assert len(image) == 300 and image[:100] == b"s" * 100 and image[100:200] == bytes(100)
    if kind == "gnu":  # the last extension block's 21 bytes
        assert image[200:221] == b"t" * 21 and image[221:] == bytes(79)


@pytest.mark.timeout(60)
def test_a_sparse_member_made_exabytes_on_reading_is_refused_and_its_shard_goes_on(tmp_path):
    """Its size is what reading makes of it, zeros in its holes: reading it
    through (as a regular member over the limit is) would make 2^62 bytes.
    It is refused from its header; its stored bytes, within the limit, are
    passed over and the shard goes on."""
    from fastdecode import ImageFileError

    shard = sparse_shard(tmp_path / "s.tar", "size")
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler, max_file_bytes=8192), [shard]))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == \
        [["cls", "jpg"], ["cls"], ["cls", "jpg"]]
    [error] = handler.errors
    assert type(error) is ImageFileError and error.errno == errno.EFBIG
    assert str(error).startswith(f"{shard}/00001.jpg: tar member of 4,611,686,018,427,387,904 "
                                 "bytes (its header's size), larger than the per-file limit")


SPARSE_HOSTILE = [  # (kind, the error's type, its message)
    pytest.param("stored", "ImageFileError",
                 r"s\.tar/00001\.jpg: tar GNU sparse member's stored data of "
                 r"4,611,686,018,427,387,904 bytes \(its header's size\), larger than the "
                 r"per-file limit of 8,192 bytes", id="stored-exabytes"),
    pytest.param("extensions", "ImageFileError",
                 r"s\.tar/00001\.jpg: tar header data of more than 10,240 bytes before its "
                 r"member \(records, names or a sparse map\), larger than the per-file limit "
                 r"of 8,192 bytes", id="extension-blocks"),
    pytest.param("pax-map", "ImageFileError",
                 r"s\.tar/\./\./@PaxHeader: tar header data of more than 10,240 bytes before "
                 r"its member", id="pax-map"),
    pytest.param("cut", "ReadError", r"^\('unexpected end of data', '[^']*s\.tar'\)$",
                 id="cut-in-extensions"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind, error_type, message", SPARSE_HOSTILE)
def test_a_hostile_sparse_header_ends_its_shard_and_the_next_is_read(tmp_path, kind, error_type,
                                                                    message):
    """tarfile reads a sparse map whole before the member it maps: extension
    blocks one at a time until one says it is the last, or a 1.0 map's
    declared count of numbers, bounded only by the shard's bytes (past its
    end, an IndexError or a ValueError). Here the map is held to the
    per-file limit and a few header blocks, and a shard ending inside it is
    "unexpected end of data"; the shard ends there, the next is read whole."""
    shard = sparse_shard(tmp_path / "s.tar", kind)
    whole = handmade_shard(tmp_path / "whole.tar", small_members())
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler, max_file_bytes=8192),
                            [shard, whole]))
    assert [(Path(s["__url__"]).stem, s["__key__"]) for s in got] == \
        [("s", "00000")] + [("whole", f"{k:05d}") for k in range(3)]
    [error] = handler.errors
    assert type(error).__name__ == error_type
    assert re.search(message, str(error) if error_type == "ImageFileError" else str(error.args))
    if error_type == "ImageFileError":
        assert error.errno == errno.EFBIG


@pytest.mark.parametrize("damage", ["checksum", "cut"])
def test_a_broken_header_inside_a_shard_is_an_error_not_its_end(tmp_path, damage):
    """tarfile takes a header that is not one (a bad checksum), or one the
    shard ends inside, after the first for the archive's end: webdataset's
    stage gives the samples before it and no error, the rest of the shard
    lost with no word. Here it is an error naming the shard and the byte
    where the header was; the next shard is read whole."""
    wds = pytest.importorskip("webdataset")
    shard = handmade_shard(tmp_path / "s.tar", small_members())
    whole = handmade_shard(tmp_path / "whole.tar", small_members())
    with open(shard, "r+b") as f:  # 00001.jpg's header, the third block
        if damage == "checksum":
            f.seek(512 * 4 + 140)
            f.write(b"\x01")  # its mode: the sum no longer matches
        else:
            f.truncate(512 * 4 + 100)
    what = {"checksum": "bad checksum", "cut": "truncated header"}[damage]
    handler = Collected()
    got = read_all(pipeline(fwds.tarfile_to_samples(handler), [shard, whole]))
    assert [(Path(s["__url__"]).stem, s["__key__"]) for s in got] == \
        [("s", "00000")] + [("whole", f"{k:05d}") for k in range(3)]
    assert [(type(e), e.args) for e in handler.errors] == [(tarfile.ReadError, (
        f"{what} at byte 2,048: the shard's members from there on are not read", shard))]
    theirs = Collected()
    assert [s["__key__"] for s in read_all(pipeline(wds.tarfile_to_samples(handler=theirs),
                                                    [shard]))] == ["00000"]
    assert theirs.errors == []


def test_an_unwanted_member_over_the_limit_is_passed_over_quietly(tmp_path):
    shard = handmade_shard(tmp_path / "s.tar", small_members(big=1))
    handler = Collected()
    stage = fwds.tarfile_to_samples(handler, select_files=lambda name: name != "00001.jpg",
                                    max_file_bytes=1000)
    got = read_all(pipeline(stage, [shard]))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == \
        [["cls", "jpg"], ["cls"], ["cls", "jpg"]] and handler.errors == []


def test_a_refused_members_bytes_are_skipped_not_held(tmp_path):
    """A 32 MB member over a 1 MiB limit: read through, never held; the
    member after it still arrives. webdataset's own stage holds it whole."""
    import tracemalloc

    wds = pytest.importorskip("webdataset")
    shard = handmade_shard(tmp_path / "s.tar", small_members(big=1, big_size=32 << 20))
    peaks = {}
    for name, stage in [("ours", fwds.tarfile_to_samples(Collected(), max_file_bytes=1 << 20)),
                        ("theirs", wds.tarfile_to_samples())]:
        tracemalloc.start()
        got = read_all(pipeline(stage, [shard]))
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert [s["__key__"] for s in got] == ["00000", "00001", "00002"]
    assert peaks["ours"] < 4 << 20 < 32 << 20 < peaks["theirs"], peaks


def test_a_truncated_shard_goes_to_the_handler_and_the_next_shard_is_read_whole(tmp_path):
    """The cut shard's errors reach the handler (webdataset's two: the member
    cut short, then the next header) and the next shard is read whole.
    webdataset's own stage marks no end for a shard that failed, so the next
    shard's first sample (the same key) merges into the cut one's last and is
    lost to a "duplicate file name" error."""
    wds = pytest.importorskip("webdataset")
    whole = handmade_shard(tmp_path / "whole.tar", small_members())
    cut = handmade_shard(tmp_path / "cut.tar", small_members())
    with open(cut, "r+b") as f:
        f.truncate(512 * 5 + 50)  # inside 00001.jpg's bytes
    keys = {}
    for name, stage in [("ours", fwds.tarfile_to_samples(handler := Collected())),
                        ("theirs", wds.tarfile_to_samples(handler=Collected()))]:
        got = read_all(pipeline(stage, [cut, whole]))
        keys[name] = [(Path(s["__url__"]).stem, s["__key__"]) for s in got]
    assert keys["ours"] == [("cut", "00000")] + [("whole", f"{k:05d}") for k in range(3)]
    assert keys["theirs"] == [k for k in keys["ours"] if k != ("whole", "00000")]
    assert [(type(e), e.args) for e in handler.errors] == \
        [(tarfile.ReadError, ("unexpected end of data", cut))] * 2


def test_stage_closes_each_shard(shards):
    """webdataset's own stage leaves each shard's file to the garbage
    collector (a ResourceWarning); this one closes it when the shard ends."""
    import gc
    import warnings

    wds = pytest.importorskip("webdataset")
    leaked = {}
    for name, stage in [("ours", fwds.tarfile_to_samples()), ("theirs", wds.tarfile_to_samples())]:
        with warnings.catch_warnings():  # what earlier tests left
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert len(list(pipeline(stage, shards))) > 0
            gc.collect()
        leaked[name] = sum(issubclass(w.category, ResourceWarning) for w in caught)
    assert leaked == {"ours": 0, "theirs": len(shards)}


def test_stage_pickles_and_checks_its_bound(shards):
    import pickle

    wds = pytest.importorskip("webdataset")
    stage = pickle.loads(pickle.dumps(fwds.tarfile_to_samples(wds.warn_and_continue,
                                                              max_file_bytes=1 << 20)))
    assert len(read_all(pipeline(stage, shards))) == len(read_all(pipeline(
        wds.tarfile_to_samples(), shards)))
    with pytest.raises(ValueError, match="max_file_bytes must be at least 1 byte, got 0"):
        fwds.tarfile_to_samples(max_file_bytes=0)


# --------------------------------------------------------------------------
# WebDataset: webdataset's class, its reader the bounded stage's


@pytest.mark.parametrize("odd", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["written-shards", "odd-members"])
@pytest.mark.parametrize("options", [
    {}, {"select_files": lambda name: not name.endswith(".cls")},
    {"rename_files": lambda name: name.replace(".jpg", ".jpeg")}, {"cache": True},
], ids=["defaults", "select", "rename", "cache-dir"])
def test_webdataset_class_gives_webdatasets_samples(tree, tmp_path, shards, odd, options):
    wds = pytest.importorskip("webdataset")
    if odd:
        shards = [handmade_shard(tmp_path / "odd.tar", small_members(), odd=True), *shards]
    if options.pop("cache", False):  # webdataset's FileCache: samples carry __local_path__
        options["cache_dir"] = str(tmp_path / "cache")
        (tmp_path / "cache").mkdir()
    ours = read_all(fwds.WebDataset(shards, shardshuffle=False, **options))
    theirs = read_all(wds.WebDataset(shards, shardshuffle=False, **options))
    assert len(ours) == len(FastImageFolder(tree)) + 3 * odd
    assert ours == theirs  # keys, urls, bytes, the same grouping


def test_webdataset_class_is_webdatasets_and_chains_and_pickles(tree, shards):
    import pickle

    wds = pytest.importorskip("webdataset")
    ds = (fwds.WebDataset(shards, shardshuffle=False, max_file_bytes=1 << 20)
          .to_tuple("jpg;png", "cls"))
    assert isinstance(ds, wds.WebDataset) and isinstance(ds, fwds.WebDataset)
    again = pickle.loads(pickle.dumps(ds))
    assert [label for _, label in read_all(again)] == [label for _, label in read_all(ds)] == \
        [label for _, label in read_all(wds.WebDataset(shards, shardshuffle=False)
                                        .to_tuple("jpg;png", "cls"))]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_webdataset_class_refuses_a_member_over_the_limit(tmp_path, monkeypatch, how):
    from fastdecode import ImageFileError

    pytest.importorskip("webdataset")
    shard = handmade_shard(tmp_path / "s.tar", small_members(big=1))
    if how == "environment":
        monkeypatch.setenv("FASTDECODE_MAX_FILE_BYTES", "1000")
    limit = 1000 if how == "argument" else None
    with pytest.raises(ImageFileError, match=r"s\.tar/00001\.jpg: tar member of 5,000 bytes "
                                             r"\(its header's size\), larger than the per-file "
                                             r"limit of 1,000 bytes"):
        read_all(fwds.WebDataset([shard], shardshuffle=False, max_file_bytes=limit))
    got = read_all(fwds.WebDataset([shard], shardshuffle=False, handler=Collected(),
                                   max_file_bytes=1000))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == \
        [["cls", "jpg"], ["cls"], ["cls", "jpg"]]  # the big one's image alone left out


def test_webdataset_class_in_dataloader_workers_gives_every_sample_once(tree, shards):
    import torch

    wds = pytest.importorskip("webdataset")
    keys = {}
    for name, cls in [("ours", fwds.WebDataset), ("theirs", wds.WebDataset)]:
        ds = cls(shards, shardshuffle=False).to_tuple("__key__", "cls")
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        keys[name] = sorted(read_all(loader))
    assert keys["ours"] == keys["theirs"] and len(keys["ours"]) == len(FastImageFolder(tree))


def test_webdataset_class_refuses_a_webdataset_it_cannot_bound(shards, monkeypatch):
    """A webdataset whose WebDataset reads shards some other way: no dataset
    is built, rather than one left unbounded."""
    pytest.importorskip("webdataset")
    from fastdecode.integrations import _wds_dataset

    monkeypatch.setattr(_wds_dataset, "tar_file_expander", object())
    with pytest.raises(RuntimeError, match=r"WebDataset has 0 tar_file_expander stages, not "
                                           r"one, so its shard reader cannot be bounded"):
        fwds.WebDataset(shards, shardshuffle=False)
    with pytest.raises(ValueError, match="max_file_bytes must be at least 1 byte, got 0"):
        fwds.WebDataset(shards, shardshuffle=False, max_file_bytes=0)


# --------------------------------------------------------------------------
# fastdecode convert --to wds


def test_cli_writes_shards_and_resumes(tree, tmp_path, capsys):
    from fastdecode.cli.__main__ import main

    argv = ["convert", str(tree), str(tmp_path / "wds"), "--to", "wds", "--shard-count", "2",
            "--workers", "1", "--json", str(tmp_path / "s.json")]
    assert main(argv) == 0
    assert "wrote 2 shards" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["samples"] == len(FastImageFolder(tree))
    assert main(argv) == 0
    assert "skipped 2 already done" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--engine", "ray"], ["--subsampling", "4:4:4"]],
                         ids=["engine-ray", "subsampling"])
def test_cli_refuses_wds_options_it_cannot_honour(tree, tmp_path, capsys, extra):
    from fastdecode.cli.__main__ import main

    assert main(["convert", str(tree), str(tmp_path / "wds"), "--to", "wds", *extra]) == 2
    assert "go with --to wds" in capsys.readouterr().err
