"""The storage guide's S3-compatible options work as written (issue 51, item
6): an ``s3://`` root on a store of one's own (moto's S3 server on
127.0.0.1, as MinIO or Ceph would serve it) reads the tree the local root
reads, with ``endpoint_url`` at the top level of ``storage_options`` or in
``client_kwargs``, and with the credentials in ``storage_options`` or in the
environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``). The server
runs inside a loopback-only network namespace (helpers/netns.py), started by
the lead test of this module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torchvision")
pytest.importorskip("fsspec")

from torchvision import transforms as T  # noqa: E402

from fastdecode.datasets import FastImageFolder  # noqa: E402

from helpers import netns, s3_server  # noqa: E402
from helpers.remote_roots import fresh_remote_roots  # noqa: E402
from helpers.s3_server import KEY, S3Server  # noqa: E402
from helpers.trees import make_tree  # noqa: E402

SECRET = "guide-s3cr3t"
TF = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
LEAD = "test_the_s3_cases_run_in_a_loopback_only_namespace"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "storage.md"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    fresh_remote_roots(tmp_path / "cache", monkeypatch)


@pytest.mark.slow  # moto's S3 server in a namespace, ~20 s: make test-full
def test_the_s3_cases_run_in_a_loopback_only_namespace():
    if netns.inside():
        pytest.skip("already inside the namespace")
    reason = netns.unavailable() or s3_server.unavailable()
    if reason:
        pytest.skip(f"{reason}: the loopback tests run in this process, on 127.0.0.1 only")
    done = netns.run_marked(Path(__file__), [], timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.match(r"4 passed(, \d+ deselected)? in ", last), done.stdout[-2000:]


@pytest.fixture(scope="module")
def store():
    reason = s3_server.unavailable() or netns.skip_reason(LEAD)
    if reason:
        pytest.skip(reason)
    with S3Server() as s3:
        yield s3


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "tree")


def _targets_and_first(ds):
    return ds.targets, ds[0][0]


@pytest.mark.loopback
@pytest.mark.parametrize("where", ["top-level", "client_kwargs"])
def test_an_s3_compatible_endpoint_reads_the_tree(store, tree, where, request):
    url = store.upload(tree, f"guide/{request.node.callspec.id}", SECRET)
    options = {"key": KEY, "secret": SECRET}
    if where == "top-level":
        options["endpoint_url"] = store.url
    else:
        options["client_kwargs"] = {"endpoint_url": store.url, "region_name": "us-east-1"}
    remote, local = FastImageFolder(url, TF, storage_options=options), FastImageFolder(tree, TF)
    assert remote.classes == local.classes and remote.targets == local.targets
    assert (remote[0][0] == local[0][0]).all()


@pytest.mark.loopback
def test_credentials_from_the_environment(store, tree, monkeypatch):
    url = store.upload(tree, "guide/env", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    ds = FastImageFolder(url, TF, storage_options={"endpoint_url": store.url,
                                                   "client_kwargs": {"region_name": "us-east-1"}})
    assert ds.targets == FastImageFolder(tree, TF).targets


@pytest.mark.loopback
def test_without_credentials_the_store_is_not_read(store, tree, monkeypatch, tmp_path):
    """The environment's credentials are what the test above used: without
    them (and no file or role to fall back on) the root cannot be listed."""
    url = store.upload(tree, "guide/none", SECRET)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(Exception):  # noqa: B017 - botocore's or fsspec's, whichever refuses first
        FastImageFolder(url, TF, storage_options={"endpoint_url": store.url,
                                                  "client_kwargs": {"region_name": "us-east-1"}})


def test_the_guide_shows_both_endpoint_forms_and_the_environment():
    text = GUIDE.read_text()
    assert '"endpoint_url": "https://minio.lab.example:9000"' in text
    assert '"client_kwargs": {"endpoint_url":' in text
    assert "AWS_ACCESS_KEY_ID" in text and "GOOGLE_APPLICATION_CREDENTIALS" in text
    assert '"gs://bucket/imagenet/train"' in text and '"https://data.lab.example/' in text
