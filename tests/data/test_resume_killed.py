"""Resume after a SIGKILL, in a fresh process, with another num_workers (issue 30).

A training process (``helpers/resume_run.py``) saves its checkpoint (the
loader's state, the epoch, torch's RNG state) with ``fastdecode.save_state``
right after batch ``k`` of epoch 0 and is SIGKILLed; a fresh process loads it
with ``fastdecode.load_state`` (``weights_only=True``) into a loader with
another ``num_workers`` (0, 1, or ``threads=2``) and runs through the end of
epoch 1. Its batches, digested
sample by sample (pixels and label), are exactly the uninterrupted run's from
batch ``k + 1`` on: the same samples in the same order with the same
augmentations. ``k`` is the epoch's first, middle and last batch (after the
last, the resumed run starts at epoch 1's first batch). Every sampler kind
is killed at every stop with some chain, and every chain at every stop
(slow tier; the default tier runs one case).

The stock path too: torchdata's ``StatefulDataLoader(FastImageFolder(...))``,
killed and resumed the same way (with the same ``num_workers``: torchdata
asserts it), yields the uninterrupted run's batches through the end of epoch 1,
for each of its samplers at every stop and each chain at every stop, under
worker settings the resume guide documents as exact through the next epoch
(slow tier; the default tier runs one case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from helpers.resume_run import CHAINS, SAMPLERS, TD_SAMPLERS, TD_WORKERS, td_exact_next_epoch
from helpers.trees import make_tree

TESTS = Path(__file__).resolve().parents[1]
# the batch k after which the run is killed (of an epoch of n batches), and the
# resumed loader's workers (N: num_workers, tN: threads=N in-process)
STOPS = {"first": (lambda n: 1, "0"), "middle": (lambda n: n // 2, "1"),
         "last": (lambda n: n, "t2")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("killedtree"), per_class=8)  # 24 samples


def run(mode: str, tree: Path, chain: str, sampler: str, workers: str, loader: str = "fastloader",
        **kw) -> subprocess.CompletedProcess:
    args = [sys.executable, "-W", "error", "-m", "helpers.resume_run", mode, "--root", str(tree),
            "--chain", chain, "--sampler", sampler, "--workers", workers, "--loader", loader]
    for key, value in kw.items():
        args += [f"--{key}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)


_uninterrupted: dict = {}


def uninterrupted(tree: Path, tmp_path: Path, chain: str, sampler: str, workers: str = "2",
                  loader: str = "fastloader") -> list:
    """The two epochs of an uninterrupted run, once per loader, sampler, chain and workers."""
    key = (loader, chain, sampler, workers)
    if key not in _uninterrupted:
        out = tmp_path / "uninterrupted.json"
        done = run("run", tree, chain, sampler, workers, loader, out=out)
        assert done.returncode == 0, done.stderr[-3000:]
        _uninterrupted[key] = json.loads(out.read_text())
    return _uninterrupted[key]


# every sampler with every chain, the stop rotating so that each sampler and each
# chain is killed at every stop (21 cases, three processes each, ~10-17 s a case,
# ~25 s under make test's load: slow tier, make test-full; make test runs the
# in-process resume of test_resume.py)
CASES = [pytest.param(c, s, k, id=f"{c}-{s}-{k}", marks=pytest.mark.slow)
         for n, (c, s) in enumerate((c, s) for c in sorted(CHAINS) for s in sorted(SAMPLERS))
         for k in [sorted(STOPS)[n % len(STOPS)]]]
assert {(s, k) for _, s, k in (p.values for p in CASES)} == \
    {(s, k) for s in SAMPLERS for k in STOPS}, "every sampler at every stop"
assert {(c, k) for c, _, k in (p.values for p in CASES)} == \
    {(c, k) for c in CHAINS for k in STOPS}, "every chain at every stop"


@pytest.mark.parametrize("chain, sampler, stop", CASES)
def test_a_killed_run_resumes_exactly_in_a_fresh_process(tree, tmp_path, chain, sampler, stop):
    full = uninterrupted(tree, tmp_path, chain, sampler)
    n = len(full) // 2  # 8 batches of 3 (4 for one of 2 distributed ranks)
    assert len(full) == 2 * n and n >= 4
    at, resumed_workers = STOPS[stop]
    k = at(n)
    resumed = killed_and_resumed(tree, tmp_path, chain, sampler, k, "2", resumed_workers)
    assert resumed == full[k:], f"the resumed batches differ from batch {k + 1} on"


def killed_and_resumed(tree: Path, tmp_path: Path, chain: str, sampler: str, k: int,
                       saved_workers: str, resumed_workers: str,
                       loader: str = "fastloader") -> list:
    """A run killed right after its save at batch ``k``, then the fresh
    process that resumes it: the resumed batches' digests."""
    checkpoint = tmp_path / "ckpt.pt"
    killed = run("save", tree, chain, sampler, saved_workers, loader, k=k, checkpoint=checkpoint)
    assert killed.returncode == -9, f"the run was not killed after its save: {killed.stderr[-2000:]}"
    assert checkpoint.is_file() and [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    out = tmp_path / "resumed.json"
    done = run("resume", tree, chain, sampler, resumed_workers, loader, checkpoint=checkpoint,
               out=out)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


# torchdata's StatefulDataLoader(FastImageFolder): each of its samplers with each
# chain, the stop rotating so that each sampler and each chain is killed at every
# stop (12 cases), with the worker setting (the same on both sides) alternating
# between two the guide documents as exact through the next epoch
TD_WORKERS_EXACT = {"random": ("in-process", "2-persistent-workers"),
                    "random-generator": ("2-workers", "2-persistent-workers"),
                    "random-sampler-generator": ("in-process", "2-persistent-workers"),
                    "sequential": ("in-process", "2-persistent-workers")}
TD_CASES = [pytest.param(c, s, k, w, id=f"{c}-{s}-{k}-{w}", marks=pytest.mark.slow)
            for n, (c, s) in enumerate((c, s) for c in sorted(CHAINS) for s in sorted(TD_SAMPLERS))
            for k in [sorted(STOPS)[n % len(STOPS)]]
            for w in [TD_WORKERS_EXACT[s][n // len(TD_SAMPLERS) % 2]]]
assert {(s, k) for _, s, k, _ in (p.values for p in TD_CASES)} == \
    {(s, k) for s in TD_SAMPLERS for k in STOPS}, "every sampler at every stop"
assert {(c, k) for c, _, k, _ in (p.values for p in TD_CASES)} == \
    {(c, k) for c in CHAINS for k in STOPS}, "every chain at every stop"
assert {w for *_, w in (p.values for p in TD_CASES)} == set(TD_WORKERS)
assert all(td_exact_next_epoch(s, w) for _, s, _, w in (p.values for p in TD_CASES))


@pytest.mark.parametrize("chain, sampler, stop, workers", TD_CASES)
def test_a_killed_stateful_dataloader_run_resumes_exactly_in_a_fresh_process(
        tree, tmp_path, chain, sampler, stop, workers):
    pytest.importorskip("torchdata")
    full = uninterrupted(tree, tmp_path, chain, sampler, workers, "torchdata")
    n = len(full) // 2  # 8 batches of 3
    assert len(full) == 2 * n and n >= 4
    k = STOPS[stop][0](n)
    resumed = killed_and_resumed(tree, tmp_path, chain, sampler, k, workers, workers, "torchdata")
    assert resumed == full[k:], f"the resumed batches differ from batch {k + 1} on"
