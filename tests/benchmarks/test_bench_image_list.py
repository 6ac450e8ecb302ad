"""benchmarks/bench_image_list.py's code path with fakes (no timing
asserted): the rows it opens, their turns, the per-round ratio, the report;
its loaders over a small tree (FastImageList over FastImageFolder's samples,
the same draws; a --reads row sets how the read-ahead reads)."""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

bench = pytest.importorskip("benchmarks.bench_image_list")
from benchmarks import bench_loader as bl  # noqa: E402

from helpers.trees import make_tree  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeLoader:
    """Batches of ``batch`` images, ``per_image_s`` of fake time each; as
    many as the sampler's count says (a round's length is set on it)."""

    def __init__(self, clock, sampler, batch, per_image_s):
        self.clock, self.sampler, self.batch, self.per_image_s = clock, sampler, batch, per_image_s

    def __iter__(self):
        for _ in range(self.sampler.count // self.batch):
            self.clock.now += self.batch * self.per_image_s
            yield torch.empty(self.batch, 1), None


class Bar:
    def set_postfix_str(self, text): pass
    def update(self, n=1): pass
    def close(self): pass


@pytest.fixture
def fake_rounds(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(bl, "clock", clock)
    monkeypatch.setattr(bl, "wait_idle", lambda pids: None)
    turns: list[str] = []
    real_round = bl.run_round

    def run_round(row):
        turns.append(row.loader)
        real_round(row)

    monkeypatch.setattr(bl, "run_round", run_round)
    speeds = {bench.FOLDER: 1 / 500, bench.LIST: 1 / 495}

    def make(kind, root, chain, workers, batch, samples):
        sampler = bl.Draws(range(10), samples)
        return FakeLoader(clock, sampler, batch, speeds[kind]), sampler

    return make, turns


def test_rows_take_turns_and_the_ratio_is_per_round(fake_rounds):
    make, turns = fake_rounds
    rows = bench.measure(None, [bench.FOLDER, bench.LIST], workers=2, batch=8, rounds=4,
                         round_s=0.5, bar=Bar(), make=make)
    assert turns == [bench.FOLDER, bench.LIST, bench.LIST, bench.FOLDER] * 2
    assert [len(r.rates) for r in rows] == [4, 4]
    assert all(r.source is None for r in rows)  # the workers are let go
    out = bench.result(rows)
    ratio = out["ratios"]["FastImageList / FastImageFolder"]
    per_round = [a / b for a, b in zip(rows[1].rates, rows[0].rates)]
    assert ratio["rounds"] == per_round
    assert ratio["median"] == statistics.median(per_round)
    assert ratio["median"] == pytest.approx(495 / 500)
    assert [r["loader"] for r in out["rows"]] == [bench.FOLDER, bench.LIST]
    assert out["rows"][0]["images_per_s"] == pytest.approx(500)


def test_rounds_are_whole_waves_sized_by_the_first_epoch(fake_rounds):
    make, _ = fake_rounds
    rows = bench.measure(None, [bench.FOLDER], workers=2, batch=8, rounds=1, round_s=0.5,
                         bar=Bar(), make=make)
    # bench_loader's sizing: the ramp wave, the timed waves, the final wave
    assert rows[0].sampler.count == 8 * bl.round_batches(rows[0], 8, 6, 0.5)
    assert rows[0].sampler.count % (2 * 8) == 0


def test_the_report_names_the_ratio_and_the_settings(fake_rounds):
    make, _ = fake_rounds
    rows = bench.measure(None, [bench.FOLDER, bench.LIST], workers=2, batch=8, rounds=3,
                         round_s=0.5, bar=Bar(), make=make)
    text = bench.markdown({"settings": {"workers": 2, "batch": 8, "rounds": 3},
                           **bench.result(rows)})
    assert "num_workers=2, batch 8" in text and "3 interleaved rounds" in text
    assert "FastImageList / FastImageFolder: 0.990x" in text


def test_main_runs_the_rows_it_is_asked_for(monkeypatch, tmp_path, fake_rounds):
    make, turns = fake_rounds
    monkeypatch.setattr(bench, "make_loader", make)
    out = tmp_path / "r.json"
    assert bench.main(["--data", str(tmp_path), "--rounds", "2", "--batch", "8",
                       "--round-s", "0.5", "--json", str(out)]) == 0
    assert set(turns) == {bench.FOLDER, bench.LIST} and len(turns) == 4
    assert "FastImageList / FastImageFolder" in out.read_text()


def test_the_loaders_read_the_same_files(tmp_path, monkeypatch):
    import fastdecode as fd
    from fastdecode.storage import _readahead, _reads

    root = make_tree(tmp_path / "tree", per_class=3)
    folder, sampler_f = bench.make_loader(bench.FOLDER, root, bench.train_chain(), 0, 4, 12)
    listed, sampler_l = bench.make_loader(bench.LIST, root, bench.train_chain(), 0, 4, 12)
    assert type(folder.dataset) is fd.FastImageFolder
    assert type(listed.dataset) is fd.FastImageList
    assert list(listed.dataset.samples) == list(folder.dataset.samples)
    assert list(sampler_f) == list(sampler_l)  # the same draws
    batches = list(listed)
    assert len(batches) == 3 and batches[0][0].dtype == torch.uint8
    assert batches[0][0].shape == (4, 3, 224, 224)
    monkeypatch.setenv(_reads.NATIVE_READS_ENV, "1")
    heap, _ = bench.make_loader(bench.READS + "heap", root, None, 0, 4, 4)
    assert _reads.native_reads() is False and type(heap.dataset) is fd.FastImageFolder
    # a fixed depth: the threads read every file, on a local disk too
    assert heap.dataset._reads.options == _readahead.ReadAheadOptions(_readahead.DEFAULT_DEPTH)
    bench.make_loader(bench.READS + "mapped", root, None, 0, 4, 4)
    assert _reads.native_reads() is True
    with pytest.raises(ValueError, match="no row"):
        bench.make_loader("ImageFolder", root, None, 0, 4, 4)
