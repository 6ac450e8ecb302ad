"""Remote roots through fsspec: fsspec's memory filesystem and a threaded HTTP
server on 127.0.0.1 (started per test, bounded, always stopped) give the same
rows, targets and tensors as the local tree, in 0 and 2 workers, fork and
spawn; the listing index is reused, goes stale and is refreshed; transient
failures are retried within the bound, then a typed error naming the URL
that on_error handles; credentials stay out of messages, logs and pickles."""

from __future__ import annotations

import logging
import pickle
import time
import uuid
from pathlib import Path

import pytest
import torch

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("torchvision")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from fastdecode.data import _remote  # noqa: E402
from fastdecode.datasets import FastDatasetFolder, FastImageFolder  # noqa: E402
from fastdecode.errors import ImageFileError  # noqa: E402

from helpers import netns  # noqa: E402
from helpers.http_tree import HttpTree  # noqa: E402
from helpers.trees import make_tree  # noqa: E402

SECRET = "s3cr3t-Pa55w0rd-XYZ"
TF = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "2")
    _remote._TREES.clear()
    _remote._ROOTS.clear()


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "site" / "tree")


@pytest.fixture
def memory_root(tree):
    """The tree copied onto fsspec's memory filesystem; removed after."""
    fs = MemoryFileSystem()
    name = f"/t-{uuid.uuid4().hex}"
    fs.pipe({f"{name}/{p.relative_to(tree).as_posix()}": p.read_bytes()
             for p in tree.rglob("*") if p.is_file()})
    yield f"memory://{name}"
    fs.rm(name, recursive=True)


LEAD = "test_the_http_cases_run_in_a_loopback_only_namespace"


@pytest.fixture
def loopback(request):
    """Every HTTP test is marked ``loopback`` and runs inside a loopback-only
    network namespace (helpers/netns.py), by the LEAD test."""
    assert request.node.get_closest_marker("loopback"), "an HTTP test must be marked loopback"
    reason = netns.skip_reason(LEAD)
    if reason:
        pytest.skip(reason)


@pytest.fixture
def server(tree, loopback):
    with HttpTree(str(tree.parent)) as s:
        yield s


def test_the_http_cases_run_in_a_loopback_only_namespace(request):
    """The ``loopback`` tests of this module, in one pytest process inside a
    new network namespace where only lo is up, bounded in time."""
    if netns.inside():
        pytest.skip("already inside the namespace")
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"{reason}: the loopback tests run in this process, on 127.0.0.1 only")
    extra = ["--full"] if request.config.getoption("full", default=False) else []
    done = netns.run_marked(Path(__file__), extra, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]


@pytest.fixture(params=["memory", pytest.param("http", marks=pytest.mark.loopback)])
def root(request, tree):
    """(URL of the tree, the local tree): each kind of remote root."""
    if request.param == "memory":
        return request.getfixturevalue("memory_root"), tree
    return request.getfixturevalue("server").url + "/tree", tree


def local_paths(ds, url, tree):
    return [(p.replace(url, str(tree)), t) for p, t in ds.samples]


def rows(loader):
    images, labels = [], []
    for x, y in loader:
        images.append(x)
        labels.append(y)
    return torch.cat(images), torch.cat(labels)


# -- rows, targets, tensors ------------------------------------------------


def test_classes_samples_and_targets_are_imagefolders(root):
    url, tree = root
    ds, ref = FastImageFolder(url), ImageFolder(str(tree))
    assert ds.classes == ref.classes and ds.class_to_idx == ref.class_to_idx
    assert local_paths(ds, url, tree) == ref.samples and ds.targets == ref.targets
    assert ds.root == url


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (2, "spawn")],
                         ids=["0-workers", "2-workers-fork", "2-workers-spawn"])
def test_batches_are_bit_identical_to_the_local_trees(root, workers, context, request):
    url, tree = root
    if context == "spawn" and url.startswith("memory://"):
        pytest.skip("the memory filesystem lives in one process: spawn is tested over http")
    ds = FastImageFolder(url, TF, exact=True)
    ds[0]  # the client exists in this process before the workers fork
    ref = FastImageFolder(str(tree), TF, exact=True)
    kw = dict(batch_size=5, num_workers=workers, multiprocessing_context=context)
    got, want = rows(torch.utils.data.DataLoader(ds, **kw)), rows(
        torch.utils.data.DataLoader(ref, batch_size=5))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_fast_dataset_folder_takes_a_url_with_extensions(root):
    url, tree = root
    ds = FastDatasetFolder(url, loader=None, extensions=(".png",))
    assert [p for p, _ in local_paths(ds, url, tree)] == sorted(
        str(p) for p in tree.rglob("*.png"))


def test_a_batch_is_fetched_in_one_call(memory_root, monkeypatch):
    ds = FastImageFolder(memory_root, TF)
    calls = []
    fetch = _remote.Remote._fetch
    monkeypatch.setattr(_remote.Remote, "_fetch", lambda self, urls: calls.append(len(urls))
                        or fetch(self, urls))
    ds.__getitems__([0, 1, 2, 3])
    assert calls == [4]


# -- the listing index -------------------------------------------------------


def count_finds(monkeypatch):
    calls = []
    find = MemoryFileSystem.find
    monkeypatch.setattr(MemoryFileSystem, "find",
                        lambda self, *a, **k: calls.append(a[0]) or find(self, *a, **k))
    return calls


def test_reopening_a_root_lists_nothing(memory_root, monkeypatch):
    finds = count_finds(monkeypatch)
    first = FastImageFolder(memory_root)
    _remote._TREES.clear()  # a new process: only the index file is left
    again = FastImageFolder(memory_root)
    assert len(finds) == 1 and again.samples == first.samples
    assert list((Path(_remote.cache_dir()) / "index").glob("*.npz"))


def test_a_stale_index_is_refreshed_on_request(memory_root, monkeypatch):
    finds = count_finds(monkeypatch)
    before = FastImageFolder(memory_root)
    MemoryFileSystem().pipe(f"{memory_root}/cat/zz-new.jpg",
                            MemoryFileSystem().cat(before.samples[0][0]))
    _remote._TREES.clear()
    assert len(FastImageFolder(memory_root)) == len(before)  # the index, as it was
    fresh = FastImageFolder(memory_root, refresh_index=True)
    assert len(fresh) == len(before) + 1 and len(finds) == 2
    assert _remote.refresh_index(memory_root).fingerprint == _remote._TREES[
        _remote._index_key("memory", memory_root, {})].fingerprint


def test_a_root_with_nothing_under_it_is_file_not_found():
    with pytest.raises(FileNotFoundError, match="memory://nowhere-"):
        FastImageFolder(f"memory://nowhere-{uuid.uuid4().hex}")


# -- errors: deleted keys, retries, a server that goes away ------------------


def test_a_key_deleted_after_listing_names_the_url(memory_root):
    ds = FastImageFolder(memory_root, TF)
    gone = ds.samples[2][0]
    MemoryFileSystem().rm(gone)
    with pytest.raises(ImageFileError, match=f"sample 2: cannot read {gone}") as info:
        ds[2]
    assert isinstance(info.value, OSError) and info.value.filename == gone


@pytest.mark.parametrize("path", ["item", "batch"])
def test_a_deleted_key_is_skipped_under_on_error_skip(memory_root, path):
    ds = FastImageFolder(memory_root, TF, on_error="skip")
    MemoryFileSystem().rm(ds.samples[2][0])
    if path == "item":
        image, _ = ds[2]
        assert image.shape == (3, 32, 32)
    else:
        assert len(ds.__getitems__([1, 2, 3])) == 3
    assert ds.skipped == 1


@pytest.mark.loopback
@pytest.mark.parametrize("fault", ["503", "reset"])
def test_transient_failures_are_retried(server, tree, fault):
    ds = FastImageFolder(server.url + "/tree", TF, exact=True)
    ref = FastImageFolder(str(tree), TF, exact=True)
    server.faults["/tree/cat/img1.jpg"] = [fault, fault]
    assert torch.equal(ds[1][0], ref[1][0])
    assert server.requests["/tree/cat/img1.jpg"] == 3


@pytest.mark.loopback
def test_a_persistent_5xx_gives_up_within_the_bound(server, monkeypatch):
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "1")
    ds = FastImageFolder(server.url + "/tree", TF)
    server.faults["/tree/cat/img1.jpg"] = ["503"] * 1000
    start = time.monotonic()
    with pytest.raises(ImageFileError, match=r"cannot read http://127\.0\.0\.1:\d+/tree/cat/"
                       r"img1\.jpg: .*503.*transient; gave up after \d+ attempts"):
        ds[1]
    assert time.monotonic() - start < 30  # bounded (the bound is 1 s; generous for a busy host)


@pytest.mark.loopback
@pytest.mark.timeout(120)
def test_a_server_killed_mid_epoch_is_a_typed_error_not_a_hang(server, monkeypatch):
    monkeypatch.setenv("FASTDECODE_RETRY_SECONDS", "1")
    ds = FastImageFolder(server.url + "/tree", TF)
    loader = iter(torch.utils.data.DataLoader(ds, batch_size=4))
    next(loader)
    server.stop()
    with pytest.raises(ImageFileError, match=r"cannot read http://127\.0\.0\.1:\d+/tree/"):
        next(loader)


# -- credentials -----------------------------------------------------------------


def test_secret_options_stay_out_of_pickles_messages_and_reprs(memory_root):
    options = {"secret": SECRET, "client_kwargs": {"aws_session_token": SECRET}}
    ds = FastImageFolder(memory_root, TF, storage_options=options)
    assert SECRET.encode() not in pickle.dumps(ds)
    assert SECRET not in repr(ds._remote) and SECRET not in repr(ds)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._remote.fs.storage_options["secret"] == SECRET  # the client still gets it
    MemoryFileSystem().rm(ds.samples[0][0])
    with pytest.raises(ImageFileError) as info:
        clone[0]
    assert SECRET not in str(info.value)


@pytest.mark.loopback
def test_url_userinfo_is_an_http_credential_never_shown(tree, caplog, loopback):
    import base64

    token = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    with HttpTree(str(tree.parent), auth=token) as server, caplog.at_level(logging.DEBUG):
        host = server.url.split("://", 1)[1]
        ds = FastImageFolder(f"http://alice:{SECRET}@{host}/tree", TF)
        assert ds[0][0].shape == (3, 32, 32)  # authorized
        assert ds.root == f"http://{host}/tree"
        assert all(SECRET not in p for p, _ in ds.samples)
        assert SECRET.encode() not in pickle.dumps(ds)
        (tree / "cat" / "img0.jpg").unlink()
        with pytest.raises(ImageFileError) as info:
            ds[0]
        assert SECRET not in str(info.value)
    assert SECRET not in caplog.text


def test_scrub_url_removes_userinfo():
    assert _remote.scrub_url(f"https://bob:{SECRET}@h.example/x") == "https://h.example/x"
    assert _remote.scrub_url("s3://bucket/x") == "s3://bucket/x"


def test_the_index_holds_no_secret(memory_root):
    FastImageFolder(memory_root, storage_options={"token": SECRET})
    for index in (Path(_remote.cache_dir()) / "index").glob("*.npz"):
        assert SECRET.encode() not in index.read_bytes()


def test_local_trees_still_read_locally(tree):
    ds = FastImageFolder(str(tree))
    assert "_remote" not in ds.__dict__
