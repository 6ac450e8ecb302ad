"""fastdecode.ray on a real 2-node Ray cluster: read_images and Decode rows
against FastImageFolder / the fused transform for the same per-row seeds,
decode tasks on both nodes, a killed node's tasks retried exactly once.

The slow tests (a killed node, `convert --engine ray`) add their phases to
the same cluster run when selected.

The cluster (a head and a worker node, 1 CPU and a small object store each)
runs inside a network + PID namespace the test creates (``unshare``, through
benchmarks/_ray_cluster.py, the code bench_ray uses too) with only loopback
up: Ray never picks or touches another address, and when the namespace's
first process (this file run as the driver) ends, the kernel ends every Ray
process with it. Skipped without ray or without the rights to
create the namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# the one copy of the loopback cluster code, shared with bench_ray (the repository
# root is on the path under `python -m pytest`, as for benchmarks.presets)
from benchmarks import _ray_cluster as cluster

SEED = 7
CLUSTER_TIMEOUT = 240  # seconds for the whole driver run (start, checks, stop)
NODE_CPUS = 1
pytestmark = pytest.mark.timeout(CLUSTER_TIMEOUT + 60)
# Ray Data's DataContext warns about its own deprecated settings when created
RAY_OWN_WARNINGS = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


def chains():
    from torchvision import transforms as T

    return {
        "float": T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
        "uint8": T.Compose([T.RandomResizedCrop(40, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                            T.PILToTensor()]),
    }


# --------------------------------------------------------------------------
# The driver: runs as the namespace's first process.


def _alive_nodes(ray) -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"]]


def _with_node(batch):
    import ray

    batch["node"] = np.full(len(batch["label"]), ray.get_runtime_context().get_node_id())
    return batch


def _slow_with_node(batch):
    time.sleep(0.4)  # keeps tasks in flight on the worker node when it is killed
    return _with_node(batch)


def _train_loop(config):
    import ray.train

    shard = ray.train.get_dataset_shard("train")
    images, labels = [], []
    for batch in shard.iter_torch_batches(batch_size=None):
        images.append(batch["image"].numpy().copy())
        labels.append(batch["label"].numpy().copy())
    np.savez(config["out"], image=np.concatenate(images), label=np.concatenate(labels))


def _rows(ds, columns) -> dict[str, np.ndarray]:
    parts: dict[str, list] = {c: [] for c in columns}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for c in columns:
            parts[c].append(batch[c])
    return {c: _plain(np.concatenate(v)) for c, v in parts.items()}


def _plain(values: np.ndarray) -> np.ndarray:
    """Strings as a str array (np.load refuses object arrays)."""
    return values.astype(str) if values.dtype == object else values


def driver(out: Path, tree: Path, slow: bool) -> None:
    """The namespace's first process: the cluster up, the phases, always stopped."""
    import ray

    cluster.loopback_up()
    with cluster.ray_start_cluster(2, object_store_bytes=80 * 2**20, cpus=NODE_CPUS) as nodes:
        try:
            ray.init(address=nodes.address, _node_ip_address="127.0.0.1", log_to_driver=False)
            cluster.wait_for_nodes(ray, 2, 60)
            _phases(out, tree, slow, nodes)
        finally:
            ray.shutdown()


def _phases(out: Path, tree: Path, slow: bool, nodes: cluster.Nodes) -> None:
    import pyarrow as pa
    import ray

    alive = _alive_nodes(ray)
    head = ray.get_runtime_context().get_node_id()
    import fastdecode.ray as fray

    result: dict[str, np.ndarray] = {}
    # one warm-up task per CPU, spread: a warmed worker process on each node
    result["warm_pids"] = np.array(ray.get(fray.warm_up()))
    c = chains()
    # read_images, default (fast) mode, float chain, rows tagged with their node
    ds = fray.read_images(str(tree), c["float"], seed=SEED, include_paths=True, block_rows=2)
    for k, v in _rows(ds.map_batches(_with_node), ("image", "label", "path", "node")).items():
        result[f"float_{k}"] = v
    # exact mode, uint8 chain
    ds = fray.read_images(str(tree), c["uint8"], exact=True, seed=SEED, include_paths=True,
                          block_rows=3)
    for k, v in _rows(ds, ("image", "label", "path")).items():
        result[f"exact_{k}"] = v
    # Decode over an encoded-bytes column, pyarrow and numpy batches
    paths = sorted(str(p) for p in tree.rglob("*") if p.suffix in (".jpg", ".jpeg", ".png"))
    table = pa.table({"jpg": [Path(p).read_bytes() for p in paths],
                      "id": np.arange(len(paths), dtype=np.int64)})
    for fmt, batch_size in (("pyarrow", 3), ("numpy", 3), ("pyarrow-blocks", None)):
        ds = ray.data.from_arrow(table).repartition(4).map_batches(
            fray.Decode(c["float"], column="jpg", seed=SEED, seed_column="id"),
            batch_format=fmt.split("-")[0], batch_size=batch_size)  # None: a block a batch
        for k, v in _rows(ds, ("jpg", "id")).items():
            result[f"decode_{fmt}_{k}"] = v
    result["decode_paths"] = np.array(paths)
    # fastdecode convert's per-file conversion over the cluster
    from fastdecode.cli.convert import plan_conversion, source_classes
    from fastdecode.conversion.output import EncodeOptions

    plan = plan_conversion(tree, out.parent / "bmp", "bmp", source_classes(tree))
    outcomes = list(fray.run_convert_jobs(plan.todo, EncodeOptions("bmp"), None, chunk=5))
    result["convert_sources"] = np.array(sorted(o.source for o in outcomes))
    result["convert_errors"] = np.array([o.error or "" for o in outcomes])
    if slow:
        _slow_phases(out, tree, nodes, head, result, c)
    np.savez(out, **result)
    out.with_suffix(".json").write_text(json.dumps({"nodes": alive, "head": head,
                                                    "alive_after": _alive_nodes(ray)}))


def _slow_phases(out: Path, tree: Path, nodes: cluster.Nodes, head: str, result: dict,
                 c: dict) -> None:
    """fastdecode convert --engine ray, then a worker node killed mid-read."""
    import fastdecode.ray as fray

    cli = subprocess.run([sys.executable, "-m", "fastdecode", "convert", str(tree),
                          str(out.parent / "cli-bmp"), "--to", "bmp", "--engine", "ray",
                          "--time-sample", "0"],
                         env=dict(os.environ, RAY_ADDRESS=nodes.address),
                         capture_output=True, text=True, timeout=120)
    result["cli_rc"] = np.array(cli.returncode)
    # Ray Train: the documented recipe, one training worker iterating its shard
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ds = fray.read_images(str(tree), c["float"], seed=SEED, include_paths=True, block_rows=4)
    trainer = TorchTrainer(_train_loop, train_loop_config={"out": str(out.parent / "train")},
                           datasets={"train": ds.drop_columns(["path"])},
                           scaling_config=ScalingConfig(num_workers=1,
                                                        resources_per_worker={"CPU": 0.5}),
                           run_config=RunConfig(storage_path=str(out.parent / "ray-train")))
    trainer.fit()
    # a worker node killed while its tasks run: every row once, the same rows
    ds = fray.read_images(str(tree), c["float"], seed=SEED, include_paths=True,
                          block_rows=1).map_batches(_slow_with_node)
    parts: dict[str, list] = {"image": [], "path": [], "node": []}
    killed = False
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for k in parts:
            parts[k].append(batch[k])
        if not killed and any((b != head).any() for b in parts["node"]):
            cluster.kill_node(nodes.workers[0])  # the worker node's raylet and agents
            killed = True
    for k, v in parts.items():
        result[f"killed_{k}"] = _plain(np.concatenate(v))
    result["killed"] = np.array(killed)
    # the rows can all be in before the health checks (~2 s) mark the node dead
    import ray

    deadline = time.monotonic() + 30
    while killed and len(_alive_nodes(ray)) > 1 and time.monotonic() < deadline:
        time.sleep(0.5)


# --------------------------------------------------------------------------
# The tests.


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory, request):
    pytest.importorskip("ray.data")
    pytest.importorskip("torchvision")
    prefix = cluster.namespace_prefix()
    if prefix is None:
        pytest.skip("cannot create a network namespace (unshare --net needs CAP_SYS_ADMIN)")
    from helpers.trees import make_tree

    base = tmp_path_factory.mktemp("ray")
    tree = make_tree(base / "tree", per_class=4)
    out = base / "rows.npz"
    # health checks shortened: the killed node is seen dead in ~2 s
    env = cluster.driver_env(Path(__file__).resolve().parents[2],
                             RAY_health_check_period_ms="500",
                             RAY_health_check_timeout_ms="1000",
                             RAY_health_check_failure_threshold="4")
    start = time.monotonic()
    # the slow phases run only when a slow test of this module was selected
    slow = any(item.module is sys.modules[__name__] and item.get_closest_marker("slow")
               for item in request.session.items)
    proc = cluster.run_driver(prefix, [sys.executable, __file__, "--driver", str(out), str(tree),
                                       *(["--slow"] if slow else [])], env, CLUSTER_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"cluster driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = dict(np.load(out))
    facts = json.loads(out.with_suffix(".json").read_text())
    facts["seconds"] = time.monotonic() - start
    return tree, rows, facts


def _expected(tree: Path, chain, exact_seeds=SEED):
    """FastImageFolder's rows, each under torch.manual_seed(row_seed(SEED, index))."""
    import torch

    from fastdecode import FastImageFolder
    from fastdecode.batching._seeding import row_seed

    ref = FastImageFolder(str(tree), chain)
    out = {}
    for i, (path, _) in enumerate(ref.samples):
        torch.manual_seed(row_seed(exact_seeds, i))
        out[path] = ref[i]
    return out


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_two_nodes_came_up(cluster_run):
    _, _, facts = cluster_run
    assert len(facts["nodes"]) == 2


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_warm_up_warms_one_worker_per_cpu(cluster_run):
    _, rows, facts = cluster_run
    assert len(set(rows["warm_pids"].tolist())) == NODE_CPUS * len(facts["nodes"])


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_decode_tasks_ran_on_both_nodes(cluster_run):
    _, rows, facts = cluster_run
    assert set(rows["float_node"]) == set(facts["nodes"])


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_read_images_rows_equal_fast_image_folder(cluster_run):
    tree, rows, _ = cluster_run
    expected = _expected(tree, chains()["float"])
    assert sorted(rows["float_path"]) == sorted(expected)
    for path, image, label in zip(rows["float_path"], rows["float_image"], rows["float_label"]):
        x, y = expected[path]
        np.testing.assert_array_equal(image, x.numpy(), err_msg=path)
        assert label == y


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_exact_mode_rows_equal_fused_exact(cluster_run):
    import torch

    from fastdecode import FastImageFolder
    from fastdecode.batching._seeding import row_seed
    from fastdecode.transforms import fuse

    tree, rows, _ = cluster_run
    fused = fuse(chains()["uint8"], exact=True)
    index = {p: i for i, (p, _) in enumerate(FastImageFolder(str(tree)).samples)}
    assert sorted(rows["exact_path"]) == sorted(index)
    for path, image in zip(rows["exact_path"], rows["exact_image"]):
        torch.manual_seed(row_seed(SEED, index[path]))
        np.testing.assert_array_equal(image, fused(Path(path).read_bytes()).numpy(), err_msg=path)


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
@pytest.mark.parametrize("fmt", ["pyarrow", "numpy", "pyarrow-blocks"])
def test_decode_map_rows_equal_fused(cluster_run, fmt):
    import torch

    from fastdecode.batching._seeding import row_seed
    from fastdecode.transforms import fuse

    _, rows, _ = cluster_run
    fused = fuse(chains()["float"])
    paths = rows["decode_paths"]
    ids = rows[f"decode_{fmt}_id"]
    assert sorted(ids) == list(range(len(paths)))
    for i, image in zip(ids, rows[f"decode_{fmt}_jpg"]):
        torch.manual_seed(row_seed(SEED, int(i)))
        np.testing.assert_array_equal(image, fused(Path(paths[i]).read_bytes()).numpy())


@pytest.mark.slow
def test_killed_node_rows_once_and_equal(cluster_run):
    tree, rows, facts = cluster_run
    assert rows["killed"], "no row came from the worker node before the end"
    assert len(facts["alive_after"]) == 1
    expected = _expected(tree, chains()["float"])
    assert sorted(rows["killed_path"]) == sorted(expected)  # none lost, none twice
    for path, image in zip(rows["killed_path"], rows["killed_image"]):
        np.testing.assert_array_equal(image, expected[path][0].numpy(), err_msg=path)


@pytest.mark.slow  # the 2-node cluster: make test-full (tests/conftest.py tiers)
def test_convert_jobs_over_the_cluster_write_the_local_tree(cluster_run, tmp_path):
    from fastdecode.cli.convert import convert_tree, plan_conversion, source_classes

    tree, rows, _ = cluster_run
    remote = tree.parent / "bmp"
    todo = plan_conversion(tree, tmp_path / "x", "bmp", source_classes(tree)).todo
    assert list(rows["convert_sources"]) == sorted(source for source, _ in todo)
    assert not any(rows["convert_errors"])
    convert_tree(tree, tmp_path / "local", to="bmp", workers=1, time_sample=0)
    local = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.bmp"))
    assert sorted(p.relative_to(remote) for p in remote.rglob("*.bmp")) == local
    for rel in local:
        assert (remote / rel).read_bytes() == (tmp_path / "local" / rel).read_bytes()


@pytest.mark.slow
def test_ray_train_shard_gets_every_row(cluster_run):
    tree, _, _ = cluster_run
    got = np.load(tree.parent / "train.npz")
    expected = _expected(tree, chains()["float"])
    want = sorted((x.numpy().tobytes(), y) for x, y in expected.values())
    assert sorted((x.tobytes(), int(y)) for x, y in zip(got["image"], got["label"])) == want


@pytest.mark.slow
def test_cli_engine_ray_writes_the_local_tree(cluster_run, tmp_path):
    from fastdecode.cli.convert import convert_tree

    tree, rows, _ = cluster_run
    assert int(rows["cli_rc"]) == 0
    convert_tree(tree, tmp_path / "local", to="bmp", workers=1, time_sample=0)
    local = {p.relative_to(tmp_path / "local"): p.read_bytes()
             for p in (tmp_path / "local").rglob("*.bmp")}
    cli = tree.parent / "cli-bmp"
    assert {p.relative_to(cli): p.read_bytes() for p in cli.rglob("*.bmp")} == local


# --------------------------------------------------------------------------
# Without a cluster.


@pytest.mark.slow  # a subprocess; make test keeps tests/cli's light-import probes
def test_import_fastdecode_imports_neither_ray_nor_webdataset():
    code = ("import sys, fastdecode; fastdecode.FastImageFolder; "
            "assert 'ray' not in sys.modules and 'webdataset' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_ray_names_the_extra():
    code = ("import sys; sys.modules['ray'] = None\n"
            "try:\n    import fastdecode.ray\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout
    assert "pip install fastdecode[ray]" in out


def test_row_seeds_depend_on_seed_and_key_only():
    from fastdecode.batching._seeding import row_seed, row_seeds

    keys = np.arange(1000)
    seeds = row_seeds(3, keys)
    assert len(set(seeds.tolist())) == 1000 and (seeds >= 0).all()
    assert row_seed(3, 17) == seeds[17]
    assert not np.array_equal(seeds, row_seeds(4, keys))
    np.testing.assert_array_equal(row_seeds(3, keys[::-1]), seeds[::-1])


@pytest.fixture
def small_tree(tmp_path):
    from helpers.trees import make_tree

    return make_tree(tmp_path / "tree", per_class=2)


def test_listing_is_fast_image_folder_order(small_tree):
    from fastdecode import FastImageFolder
    from fastdecode.storage._listing import list_images

    listing = list_images(small_tree)
    ref = FastImageFolder(str(small_tree))
    assert listing.paths == [p for p, _ in ref.samples]
    assert listing.labels.tolist() == list(ref.targets) and listing.classes == ref.classes


def test_listing_of_files_has_no_labels(small_tree):
    from fastdecode.storage._listing import list_images

    listing = list_images([small_tree / "cat", small_tree / "dog" / "img0.jpg"])
    assert len(listing.paths) == 3 and listing.paths[-1].endswith("dog/img0.jpg")
    assert set(listing.labels.tolist()) == {-1}


def test_listing_through_a_pyarrow_filesystem(small_tree):
    pytest.importorskip("pyarrow")
    from fastdecode.storage._listing import list_images

    local = list_images(small_tree)
    uri = list_images(f"file://{small_tree}")
    assert uri.paths == local.paths
    import pyarrow.fs as pafs

    via_fs = list_images(str(small_tree), filesystem=pafs.LocalFileSystem())
    assert via_fs.paths == local.paths and via_fs.labels.tolist() == local.labels.tolist()


def test_missing_path_raises(tmp_path):
    from fastdecode.storage._listing import list_images

    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        list_images([tmp_path / "nope"])


def test_chain_without_a_fixed_size_is_refused(small_tree):
    pytest.importorskip("ray.data")
    from torchvision import transforms as T

    import fastdecode.ray as fray

    with pytest.raises(ValueError, match="same shape"):
        fray.read_images(small_tree, T.Compose([T.Resize(32), T.ToTensor()]))
    with pytest.raises(ValueError, match="seed and seed_column go together"):
        fray.Decode(chains()["float"], seed=1)


@RAY_OWN_WARNINGS
def test_decode_on_an_arrow_batch_in_process(small_tree):
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("ray.data")
    import torch

    import fastdecode.ray as fray
    from fastdecode.batching._seeding import row_seed
    from fastdecode.transforms import fuse

    paths = sorted(p for p in small_tree.rglob("*.jpg"))
    table = pa.table({"jpg": [p.read_bytes() for p in paths], "id": np.arange(len(paths)),
                      "path": [str(p) for p in paths]})
    out = fray.Decode(chains()["uint8"], column="jpg", seed=2, seed_column="id")(table.slice(1))
    assert out.column_names == ["jpg", "id", "path"]
    images = out.column("jpg").chunks[0].to_numpy()  # the tensor extension: (N, C, H, W)
    fused = fuse(chains()["uint8"])
    for i, image in zip(range(1, len(paths)), images):
        torch.manual_seed(row_seed(2, i))
        np.testing.assert_array_equal(image, fused(paths[i].read_bytes()).numpy())


@RAY_OWN_WARNINGS
def test_a_read_task_imports_no_torch(small_tree, tmp_path):
    """What a Ray worker runs for a read task (the datasource's task
    function, unpickled in a fresh process, seeded and unseeded): the rows,
    and no torch module loaded (the detached plan's draws are torch-free)."""
    pytest.importorskip("ray.data")
    import pickle

    import fastdecode.ray as fray
    from fastdecode.batching._rows import BatchDecoder
    from fastdecode.storage._listing import list_images

    ds = fray.ImageDatasource(list_images(small_tree), BatchDecoder(chains()["float"]),
                              seed=SEED, include_paths=False)
    unseeded = fray.ImageDatasource(ds.listing, ds.decoder, seed=None, include_paths=False)
    blob = tmp_path / "tasks.pkl"
    blob.write_bytes(pickle.dumps([t.read_fn for t in (ds.get_read_tasks(1)[0],
                                                       unseeded.get_read_tasks(1)[0])]))
    code = (
        "import pickle, sys, numpy as np\n"
        f"seeded, unseeded = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        "rows = [np.concatenate([t.column('image').chunks[0].to_numpy() for t in f()]) for f in\n"
        "        (seeded, unseeded, unseeded)]\n"
        f"np.save({str(tmp_path / 'rows.npy')!r}, np.stack(rows))\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    assert out.split() == ["False"]
    seeded, once, again = np.load(tmp_path / "rows.npy")
    want = np.stack([image.numpy() for image, _ in _expected(small_tree, chains()["float"])
                     .values()])
    np.testing.assert_array_equal(seeded, want)
    assert not np.array_equal(once, again)  # unseeded rows: fresh draws from the OS each time


def test_bench_epoch_repeat_repeats_the_loader_rows(small_tree):
    from benchmarks import bench_ray
    from fastdecode import FastImageFolder

    make = bench_ray.dataloader(str(small_tree), chains()["float"], 0, repeat=3)
    assert len(make().dataset) == 3 * len(FastImageFolder(str(small_tree)))


@RAY_OWN_WARNINGS
def test_decode_names_the_bad_row_by_path():
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("ray.data")
    import fastdecode.ray as fray
    from fastdecode import DecodeError

    table = pa.table({"image": [b"garbage"], "path": ["s3://b/bad.jpg"]})
    with pytest.raises(DecodeError, match="s3://b/bad.jpg"):
        fray.Decode(chains()["float"])(table)


if __name__ == "__main__" and sys.argv[1:2] == ["--driver"]:
    driver(Path(sys.argv[2]), Path(sys.argv[3]), slow="--slow" in sys.argv[4:])


def test_the_datasource_names_itself_and_sizes_its_rows(small_tree):
    pytest.importorskip("ray.data")
    from fastdecode.batching._rows import BatchDecoder
    from fastdecode.integrations.ray import ImageDatasource
    from fastdecode.storage._listing import list_images

    listing = list_images(small_tree)
    source = ImageDatasource(listing, BatchDecoder(chains()["uint8"]), seed=1,
                             include_paths=False)
    assert source.get_name() == "FastdecodeImages"
    # one uint8 3x40x40 image and an 8-byte label per row
    assert source.estimate_inmemory_data_size() == (3 * 40 * 40 + 8) * len(listing.paths)


class InProcessRay:
    """Ray's task API as fastdecode.integrations.ray uses it (remote, wait, get,
    cluster_resources, is_initialized), run in this process: each task runs
    when submitted, ``wait`` hands back the oldest. Records each remote's
    options, the tasks in flight at each submission and the init calls."""

    def __init__(self, cpus):
        self.cpus, self.options, self.in_flight, self.inits = cpus, [], [], []
        self.running = 0

    def is_initialized(self):
        return bool(self.inits)

    def init(self, **kwargs):
        self.inits.append(kwargs)

    def cluster_resources(self):
        return {"CPU": float(self.cpus)}

    def remote(self, **options):
        self.options.append(options)

        def wrap(fn):
            ray = self

            class Task:
                @staticmethod
                def remote(*args):
                    ray.running += 1
                    ray.in_flight.append(ray.running)
                    return ("ref", fn(*args))

            return Task

        return wrap

    def wait(self, refs, num_returns):
        assert num_returns == 1
        self.running -= 1
        return refs[:1], refs[1:]

    def get(self, ref):
        return ref[1]


def test_warm_up_starts_one_spread_task_per_cluster_cpu(monkeypatch):
    pytest.importorskip("ray.data")
    import fastdecode.integrations.ray as fray

    ray = InProcessRay(cpus=3)
    monkeypatch.setattr(fray, "ray", ray)
    refs = fray.warm_up()
    assert [ray.get(r) for r in refs] == [os.getpid()] * 3
    assert ray.options == [{"num_cpus": 1, "scheduling_strategy": "SPREAD"}]
    assert len(fray.warm_up(cpus=5)) == 5


@pytest.mark.parametrize("workers, chunk", [(None, 2), (1, 3)], ids=["twice-the-cpus", "one"])
def test_convert_jobs_chunk_bound_and_yield_every_outcome(small_tree, tmp_path, monkeypatch,
                                                          workers, chunk):
    pytest.importorskip("ray.data")
    import fastdecode.conversion.ray_jobs as fray
    from fastdecode.conversion.output import EncodeOptions

    ray = InProcessRay(cpus=1)
    monkeypatch.setattr(fray, "ray", ray)
    sources = sorted(small_tree.rglob("*.jpg"))
    jobs = [(str(s), str(tmp_path / f"{i}.bmp")) for i, s in enumerate(sources)]
    jobs.append((str(tmp_path / "missing.jpg"), str(tmp_path / "missing.bmp")))
    outcomes = list(fray.run_convert_jobs(jobs, EncodeOptions(to="bmp"), workers, chunk=chunk))
    assert ray.inits == [{"address": os.environ.get("RAY_ADDRESS"), "log_to_driver": False}]
    assert ray.options == [{"num_cpus": 1, "max_retries": 3}]
    assert max(ray.in_flight) == (workers or 2)  # the bound: default twice the CPUs
    assert len(ray.in_flight) == -(-len(jobs) // chunk)  # one task per chunk
    by_source = {o.source: o for o in outcomes}
    assert sorted(by_source) == sorted(s for s, _ in jobs)
    assert "missing.jpg" in str(by_source[jobs[-1][0]].error)
    for source, output in jobs[:-1]:
        assert by_source[source].error is None and Path(output).stat().st_size > 0
