"""benchmarks/bench_storage: read-ahead off ("today") against on, at 0 ms and
on the local disk; CPU per image against the local disk; the read-ahead
peaks gathered from the workers against the cap; the rounds' interleaving
(fake rows and a fake filesystem, no timing)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from benchmarks import bench_storage as bs  # noqa: E402
from benchmarks.bench_storage import LOCAL, OFF  # noqa: E402

from helpers.bench_storage_rounds import MIB, cells, peaks  # noqa: E402
from helpers.latency import make_storage_tree  # noqa: E402


def find(rows, loader, place, readahead="on"):
    return next(r for r in rows if r["loader"] == loader and r["readahead"] == readahead
                and (r["storage"] == LOCAL if place == LOCAL
                     else r["storage"] == "latencyfs" and r["delay_ms"] == place))


def test_read_ahead_on_against_off_is_the_median_of_round_ratios():
    rows = bs.results(cells(), peaks())
    local = find(rows, "FastImageFolder", LOCAL)
    assert local["vs_readahead_off"] == pytest.approx(0.99)  # rounds 1.0, 0.5, 0.99
    assert local["storage"] == LOCAL and local["delay_ms"] is None
    assert local["vs_0ms"] is None and local["vs_imagefolder"] is None  # not measured there
    assert local["opens_per_round"] is None and local["daemon_cpu_us_per_file"] is None
    zero = find(rows, "FastImageFolder", 0)
    assert zero["vs_readahead_off"] == pytest.approx(1.0)  # 1.0, 0.9, 1.029
    off = find(rows, "FastImageFolder", 0, "off")
    assert off["vs_readahead_off"] is None and off["vs_0ms"] == pytest.approx(1.0)
    assert find(rows, "FastImageFolder", 5)["vs_readahead_off"] is None  # no off row at 5 ms
    assert find(rows, "ImageFolder+PIL", 0, None)["readahead"] is None


def test_cpu_per_image_is_against_the_same_row_on_the_local_disk():
    rows = bs.results(cells(), peaks())
    assert find(rows, "FastImageFolder", 5)["cpu_vs_local"] == pytest.approx(1.7 / 1.5)
    assert find(rows, "FastImageFolder", 0, "off")["cpu_vs_local"] == pytest.approx(1.5 / 1.4)
    assert find(rows, "FastLoader", 0)["cpu_vs_local"] == pytest.approx(1.05)
    assert find(rows, "FastLoader+cache", 5)["cpu_vs_local"] == pytest.approx(0.5)  # FastLoader's
    assert find(rows, "FastImageFolder", LOCAL)["cpu_vs_local"] is None
    assert find(rows, "FastImageFolder", 5)["cpu_vs_0ms"] == pytest.approx(1.7 / 1.6)
    assert find(rows, "FastImageFolder", 0)["cpu_vs_readahead_off"] == pytest.approx(1.6 / 1.5)
    assert find(rows, "FastImageFolder", LOCAL)["cpu_vs_readahead_off"] == pytest.approx(1.5 / 1.4)
    assert find(rows, "FastImageFolder", LOCAL)["cpu_vs_0ms"] is None
    assert find(rows, "ImageFolder+PIL", 5, None)["cpu_vs_local"] is None  # no local row


def test_each_row_carries_its_median_context_switches_per_image():
    rows = bs.results(cells(), peaks())
    row = find(rows, "FastLoader", 5)
    assert (row["voluntary_switches_per_image"], row["involuntary_switches_per_image"]) == (6, 3)
    assert find(rows, "FastLoader", 0)["involuntary_switches_per_image"] is None  # none counted
    text = bs.table(rows)
    assert "| 0.90x |  | 3.0 | 512 |" in text  # CPU vs 0 ms, vs read-ahead off, switches, opens


def test_each_row_carries_its_read_ahead_peaks_and_cap():
    rows = bs.results(cells(), peaks())
    local, fuse = find(rows, "FastImageFolder", LOCAL), find(rows, "FastImageFolder", 5)
    assert local["readahead_peak_bytes"] == 2 * MIB and fuse["readahead_peak_bytes"] == 3 * MIB
    assert fuse["readahead_cap_bytes"] == 64 * MIB and fuse["readahead_peak_within_cap"] is True
    assert find(rows, "FastImageFolder", 0, "off")["readahead_peak_bytes"] == 0
    assert find(rows, "FastLoader", LOCAL)["readahead_peak_within_cap"] is None  # none recorded


def test_rows_are_ordered_local_disk_first_then_by_delay():
    rows = bs.results(cells(), peaks())
    assert [(bs.place_label(r), r["loader"], r["readahead"]) for r in rows][:6] == [
        ("local disk", "FastImageFolder", "on"), ("local disk", "FastLoader", "on"),
        ("local disk", "FastImageFolder", "off"), ("local disk", "FastLoader", "off"),
        ("0 ms", "ImageFolder+PIL", None), ("0 ms", "FastImageFolder", "on")]


def test_summary_judges_the_new_targets():
    out = bs.summary(bs.results(cells(), peaks()), 2)
    assert out["FastImageFolder_local_vs_off"] == pytest.approx(0.99)
    assert out["FastLoader_0ms_vs_off"] == pytest.approx(0.9)
    assert out["FastImageFolder_cpu_vs_local"] == pytest.approx(
        {"0 ms": 1.6 / 1.5, "5 ms": 1.7 / 1.5})
    assert out["FastImageFolder_cpu_vs_local_worst"] == pytest.approx(1.7 / 1.5)
    assert out["FastImageFolder_cpu_vs_0ms"] == pytest.approx({"5 ms": 1.7 / 1.6})
    assert out["FastLoader_cpu_local_vs_off"] == pytest.approx(1.0)
    assert out["FastLoader_cpu_0ms_vs_off"] == pytest.approx(1.05)
    assert out["readahead_peak_bytes"] == 10 * MIB and out["readahead_cap_bytes"] == 64 * MIB
    met = out["targets_met"]
    assert met["FastImageFolder local disk, read-ahead on >= 0.98x off"] is True
    assert met["FastLoader 0 ms, read-ahead on >= 0.98x off"] is False
    assert met["FastImageFolder CPU/image within 10 % of local, every delay"] is False  # 1.13x
    assert met["FastLoader CPU/image within 10 % of local, every delay"] is True  # 1.05x
    assert met["peak read-ahead bytes <= the cap, every row"] is True


@pytest.mark.parametrize("value, low, high, expected", [
    (None, 0.9, None, None), (0.95, 0.9, 1.1, True), (1.11, 0.9, 1.1, False),
    (0.89, 0.9, 1.1, False), (1.0, None, 1.0, True), (1.01, None, 1.0, False)])
def test_in_range(value, low, high, expected):
    assert bs.in_range(value, low, high) is expected


def test_a_peak_over_the_cap_fails_its_target():
    over = {("FastLoader", 2, "fuse"): {"readahead_peak_bytes": 65 * MIB,
                                        "readahead_cap_bytes": 64 * MIB}}
    rows = bs.results(cells(), over)
    assert find(rows, "FastLoader", 0)["readahead_peak_within_cap"] is False
    met = bs.summary(rows, 2)["targets_met"]
    assert met["peak read-ahead bytes <= the cap, every row"] is False


def test_table_shows_local_and_off_rows():
    text = bs.table(bs.results(cells(), peaks()))
    assert "| FastImageFolder | on | 2 | local disk | 990 |" in text
    assert "| FastImageFolder | off | 2 | 0 ms |" in text
    assert "| 3.0 (64.0) |" in text  # peak MiB (cap)


def test_plan_pairs_only_at_the_cpus():
    kinds = ["ImageFolder+PIL", "FastImageFolder", "FastLoader", "FastLoader+cache"]
    plan = bs.plan_for(kinds, 2, 2, True)
    assert plan.rows_at(LOCAL) == ["FastImageFolder", "FastImageFolder" + OFF,
                                   "FastLoader", "FastLoader" + OFF]
    assert plan.rows_at(0) == ["ImageFolder+PIL", "FastImageFolder", "FastImageFolder" + OFF,
                               "FastLoader", "FastLoader" + OFF, "FastLoader+cache"]
    assert plan.rows_at(5) == kinds
    assert bs.plan_for(kinds, 8, 2, True).rows_at(LOCAL) == []  # 4x the CPUs: no pairs
    assert bs.plan_for(kinds, 2, 2, False).rows_at(0) == kinds  # no readahead= in the build


class FakeFS:
    def __init__(self, path):
        self.path, self.delay, self.opens = path, None, 0

    def set_delay(self, ms):
        self.delay = ms

    def stats(self):
        return {"opens": self.opens, "in_flight": 0}

    def settle(self):
        return self.stats()

    def cpu_s(self):
        return 0.0


class Bar:
    def set_postfix_str(self, text):
        pass

    def update(self):
        pass


def test_measure_interleaves_places_and_rows(monkeypatch, tmp_path):
    fs = FakeFS(tmp_path / "mnt")
    data = tmp_path / "data"
    ran: list[tuple] = []
    rows = {}

    def open_row(chain, name, root, transform, workers, batch, samples, make):
        row = SimpleNamespace(loader=name, root=root, rates=[], cpu=[], switches=[],
                              source=object(), sampler=SimpleNamespace(count=0))
        rows[(name, root)] = row
        return row

    def run_round(row):
        place = LOCAL if row.root == data else fs.delay
        ran.append((row.loader, place))
        fs.opens += 0 if place == LOCAL else 64
        row.rates.append(100.0)
        row.cpu.append(0.001)
        row.switches.append((10.0, 2.0 if place == LOCAL else 3.0))

    monkeypatch.setattr(bs.bl, "open_row", open_row)
    monkeypatch.setattr(bs.bl, "run_round", run_round)
    monkeypatch.setattr(bs.bl, "round_batches", lambda *a: 4)
    settings = dict(bs.MODES["default"], usable=2, rounds=3)
    kinds = ["ImageFolder+PIL", "FastImageFolder", "FastLoader"]
    found, peaks = bs.measure(fs, data, None, settings, kinds, Bar(), 0, tmp_path / "stats")
    places = [LOCAL, 0, 2, 5, 20]
    firsts = [ran[0][1], ran[len(ran) // 3][1], ran[2 * len(ran) // 3][1]]
    assert firsts == [LOCAL, 20, LOCAL]  # every other round reversed
    assert ran[:2] == [("FastImageFolder", LOCAL), ("FastImageFolder" + OFF, LOCAL)]
    local_round2 = [name for name, place in ran[len(ran) // 3:2 * len(ran) // 3]
                    if place == LOCAL]
    assert local_round2 == ["FastLoader" + OFF, "FastLoader", "FastImageFolder" + OFF,
                            "FastImageFolder"]
    assert {p for name, p in ran if name.endswith(OFF)} == {LOCAL, 0}
    assert {p for name, p in ran if name == "ImageFolder+PIL"} == set(places) - {LOCAL}
    assert all(len(cell.rates) == 3 for cell in found.values())
    assert found[("FastLoader", 2, LOCAL)].opens == []  # the daemon saw none of them
    assert found[("FastLoader", 2, 5)].opens == [64] * 3
    assert found[("FastLoader", 2, 5)].switches == [(10.0, 3.0)] * 3
    assert all(row.source is None for row in rows.values())  # workers ended
    assert peaks[("FastLoader", 2, LOCAL)]["readahead_processes"] == 0  # fakes record none


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_storage_tree(tmp_path_factory.mktemp("bench-storage-tree"))


def test_recording_folder_leaves_its_peaks_for_the_benchmark(tree, tmp_path):
    import torchvision.transforms as T

    chain = T.Compose([T.RandomResizedCrop(32), T.PILToTensor()])
    make = bs.make_loader_for(0, tmp_path / "stats", tree)
    loader, sampler = make("FastImageFolder", tree, chain, 0, 8, 16)
    assert isinstance(loader.dataset, bs.RecordingFolder)
    assert sum(x.shape[0] for x, _ in loader) == 16
    peaks = bs.read_peaks(tmp_path / "stats" / bs.stats_tag("FastImageFolder", 0, LOCAL))
    assert peaks["readahead_processes"] == 1
    assert 0 < peaks["readahead_peak_bytes"] <= peaks["readahead_cap_bytes"]
    assert peaks["readahead_peak_in_flight"] >= 1

    elsewhere = tmp_path / "elsewhere"  # another root: the row is not on the local disk
    elsewhere.symlink_to(tree, target_is_directory=True)
    off, _ = make("FastLoader" + OFF, elsewhere, chain, 0, 8, 16)
    assert off.dataset._reads_here().options.depth == 0  # readahead=0: today's reads
    for _ in off:
        pass
    record = json.loads(next((tmp_path / "stats" / bs.stats_tag(
        "FastLoader" + OFF, 0, "fuse")).glob("*.json")).read_text())
    assert record["peak_bytes"] == 0 and record["depth"] == 0


def test_read_peaks_of_no_records(tmp_path):
    assert bs.read_peaks(tmp_path / "none")["readahead_peak_bytes"] is None
