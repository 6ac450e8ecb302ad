"""benchmarks/bench_remote: its rounds, ratios and report from fake rows and
fake servers (no server, no timing), and its command line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from benchmarks import bench_loader as bl  # noqa: E402
from benchmarks import bench_remote  # noqa: E402
from benchmarks.bench_remote import FAST, LOCAL, Cell, server_of  # noqa: E402

# images/s of each place, round by round (three rounds)
RATES = {(LOCAL, None): [400.0, 420.0, 380.0], ("http", 0.0): [300.0, 320.0, 280.0],
         ("http", 5.0): [290.0, 160.0, 270.0], ("s3", 0.0): [100.0, 110.0, 90.0],
         ("s3", 5.0): [80.0, 88.0, 72.0],
         ("http" + FAST, 0.0): [310.0, 330.0, 290.0], ("http" + FAST, 5.0): [300.0, 320.0, 280.0],
         ("s3" + FAST, 0.0): [100.0, 110.0, 90.0], ("s3" + FAST, 5.0): [95.0, 100.0, 85.0]}


class FakeServer:
    """set_delay/cpu_seconds/requests as a server process gives them: each
    round costs ``cpu_per_image`` of CPU and one request per image."""

    def __init__(self, cpu_per_image: float) -> None:
        self.cpu_per_image = cpu_per_image
        self.delay = 0.0
        self.cpu = 0.0
        self.served = 0
        self.delays: list[float] = []

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds
        self.delays.append(seconds)

    def cpu_seconds(self) -> float:
        return self.cpu

    def requests(self) -> int:
        return self.served


class FakeSampler:
    count = 100


def fake_rows(servers):
    rows = {kind: bl.Row("train_uint8", kind, 2, None, FakeSampler())
            for kind in (LOCAL, "http", "s3", "http" + FAST, "s3" + FAST)}
    calls = []

    def run_round(row):
        server = servers.get(server_of(row.loader))
        delay = None if server is None else server.delay * 1000
        calls.append((row.loader, delay))
        rate = RATES[(row.loader, delay)][sum(1 for c in calls if c == calls[-1]) - 1]
        row.rates.append(rate)
        row.cpu.append(0.002)
        if server is not None:
            server.cpu += server.cpu_per_image * row.sampler.count
            server.served += row.sampler.count
    return rows, run_round, calls


class Bar:
    def set_postfix_str(self, _):
        pass

    def update(self):
        pass


PLACES = list(RATES)


def test_rounds_interleave_every_place_and_set_each_servers_delay(monkeypatch):
    servers = {"http": FakeServer(0.001), "s3": FakeServer(0.005)}
    rows, run_round, calls = fake_rows(servers)
    monkeypatch.setattr(bl, "run_round", run_round)
    cells = bench_remote.measure(rows, servers, PLACES, {"rounds": 3}, Bar())
    assert calls[:9] == PLACES and calls[9:18] == PLACES[::-1] and len(calls) == 27
    # each round sets s3's delay for its DataLoader's rows and its FastLoader's
    assert servers["s3"].delays[:8] == [0.0, 0.005, 0.0, 0.005, 0.005, 0.0, 0.005, 0.0]
    assert cells[("http", 5.0)].rates == RATES[("http", 5.0)]
    assert cells[("s3", 5.0)].server_cpu == pytest.approx([0.005] * 3)
    assert cells[("s3", 5.0)].requests == [1.0] * 3
    assert cells[(LOCAL, None)].server_cpu == []


def cells_of_rates() -> dict:
    return {place: Cell(rates, [0.002] * 3, [] if place[0] == LOCAL else [0.001] * 3,
                        [] if place[0] == LOCAL else [1.0] * 3)
            for place, rates in RATES.items()}


@pytest.mark.parametrize("place,vs_0ms,vs_local", [
    (("http", 5.0), 270 / 280, 270 / 380),  # per round 0.97, 0.5, 0.96: median 0.96
    (("s3", 5.0), 0.8, 0.2),
    (("http", 0.0), 1.0, 0.75),
    ((LOCAL, None), None, None),
], ids=["http-5ms", "s3-5ms", "http-0ms", "local"])
def test_ratios_are_medians_of_round_by_round_ratios(place, vs_0ms, vs_local):
    rows = bench_remote.results(cells_of_rates())
    row = next(r for r in rows if (r["place"], r["delay_ms"]) == place)
    assert row["vs_0ms"] == (pytest.approx(vs_0ms) if vs_0ms is not None else None)
    assert row["vs_local"] == (pytest.approx(vs_local) if vs_local is not None else None)
    if place[0] != LOCAL:
        assert row["server_cpu_ms_per_image"] == pytest.approx(1.0)
        assert row["requests_per_image"] == 1.0
    assert [(r["place"], r["delay_ms"]) for r in rows][0] == (LOCAL, None)


def test_summary_judges_the_issues_target():
    out = bench_remote.summary(bench_remote.results(cells_of_rates()))
    assert out["http_5ms_vs_0ms"] == pytest.approx(270 / 280)
    assert out["targets_met"] == {"http 5 ms >= 0.9x of 0 ms": True,
                                  "s3 5 ms >= 0.9x of 0 ms": False,
                                  "http FastLoader 5 ms >= 0.9x of 0 ms": True,
                                  "s3 FastLoader 5 ms >= 0.9x of 0 ms": True}
    cells = cells_of_rates()
    for kind in ("s3", "s3" + FAST):  # no moto: no s3 row to judge
        del cells[(kind, 0.0)], cells[(kind, 5.0)]
    assert bench_remote.summary(bench_remote.results(cells))["targets_met"][
        "s3 5 ms >= 0.9x of 0 ms"] is None


def test_table_has_a_line_per_place():
    text = bench_remote.table(bench_remote.results(cells_of_rates()))
    assert text.count("\n") == 1 + len(RATES)
    assert "| s3 | 5 ms | 80 | 0.80x | 0.20x | 2.00 | 1.00 | 1.00 |" in text


def test_main_runs_end_to_end_with_fake_servers_and_rows(tmp_path, monkeypatch):
    servers = {"http": FakeServer(0.001), "s3": FakeServer(0.005)}
    rows, run_round, _ = fake_rows(servers)
    monkeypatch.setattr(bl, "run_round", run_round)
    monkeypatch.setattr(bl, "open_row", lambda chain, kind, *a, **k: rows[kind])
    monkeypatch.setattr(bl, "round_batches", lambda *a: 10)
    monkeypatch.setattr(bench_remote, "subset", lambda data, limit, into: into / "tree")
    monkeypatch.setattr(bench_remote, "start_servers", lambda stack, tree: (
        servers, {"http": "http://x/tree", "s3": "s3://b/tree"},
        {LOCAL: None, "http": None, "s3": {}}, []))
    out = tmp_path / "remote.json"
    assert bench_remote.main(["--data", str(tmp_path), "--quick", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["summary"]["targets_met"]["s3 5 ms >= 0.9x of 0 ms"] is False
    assert len(report["rows"]) == 9 and report["settings"]["rounds"] == 3
    assert report["command"].startswith("python -m benchmarks.bench_remote")


@pytest.mark.parametrize("argv,message", [
    (["--rounds", "2"], "--rounds must be >= 3"),
    (["--limit", "0"], "--limit must be >= 1"),
], ids=["two-rounds", "no-images"])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench_remote.parse_args(argv)
    assert message in capsys.readouterr().err


def test_subset_spreads_over_the_classes_as_hard_links(tmp_path):
    from helpers.trees import make_tree

    data = make_tree(tmp_path / "data")
    tree = bench_remote.subset(data, 6, tmp_path / "served")
    picked = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    # every other sample of ImageFolder's 12 (cat/img0, img1, img3, nested/img2; dog...)
    assert picked == ["cat/img0.jpg", "cat/img3.png", "dog/img0.jpg", "dog/img3.png",
                      "eel/img0.jpg", "eel/img3.png"]
    assert (tree / "cat/img0.jpg").stat().st_ino == (data / "cat/img0.jpg").stat().st_ino


def test_the_local_rows_loader_reads_the_served_tree(tmp_path):
    from helpers.trees import make_tree

    tree = make_tree(tmp_path / "tree")
    chain = bl.chains(["train_uint8"])["train_uint8"]
    loader, sampler = bench_remote.make_loader_for(LOCAL, "", None)(LOCAL, tree, chain, 0, 4, 8)
    assert sampler.count == 8 and [x.shape for x, _ in loader] == [(4, 3, 224, 224)] * 2


def test_a_fast_loader_row_is_a_fast_loader_over_the_url(tmp_path):
    import fastdecode as fd

    from helpers.trees import make_tree

    tree = make_tree(tmp_path / "tree")
    chain = bl.chains(["train_uint8"])["train_uint8"]
    make = bench_remote.make_loader_for("http" + FAST, str(tree), None)
    loader, sampler = make("http" + FAST, tmp_path / "elsewhere", chain, 0, 4, 8)
    assert isinstance(loader, fd.FastLoader) and loader.dataset.root == str(tree)
    assert [x.shape for x, _ in loader] == [(4, 3, 224, 224)] * 2
