"""benchmarks/bench_loader.py's arithmetic on given rounds: medians, spread,
the noisy mark, the limit and the efficiency against it, the summary."""

from __future__ import annotations

import math
import statistics

import pytest

pytest.importorskip("torchvision")

bench = pytest.importorskip("benchmarks.bench_loader")


def row(loader: str, workers: int, rates: list[float], cpu: float = 0.004) -> "bench.Row":
    r = bench.Row("train", loader, workers, source=None, cold_first_batch_s=0.9,
                  batch_images=64.0)
    r.rates, r.walls = list(rates), [1536 / x for x in rates]
    r.cpu, r.first_batch, r.peak_pss_mib = [cpu] * len(rates), [0.4] * len(rates), 100.0
    return r


ROUNDS = {
    "ImageFolder+PIL": [300.0, 310.0, 320.0],
    "FastImageFolder": [600.0, 500.0, 620.0],
    "FastLoader": [640.0, 650.0, 660.0],
}


@pytest.fixture
def result() -> dict:
    rows = [row(kind, 2, rates) for kind, rates in ROUNDS.items()]
    return bench.chain_result(rows, fused=[0.0020, 0.0021, 0.0019], usable=2)


def test_limit_is_usable_cpus_over_the_median_fused_cost(result):
    limit = result["limit"]
    assert limit["fused_ms_per_image"] == pytest.approx(2.0)
    assert limit["images_per_s"] == pytest.approx(2 / 0.002)
    assert limit["spread"] == pytest.approx((0.0021 - 0.0019) / 0.002)


@pytest.mark.parametrize("kind", list(ROUNDS))
def test_each_row_is_the_median_with_its_spread_and_efficiency(result, kind):
    r = next(x for x in result["rows"] if x["loader"] == kind)
    rates = ROUNDS[kind]
    median = statistics.median(rates)
    assert r["images_per_s"] == median
    assert (r["min_images_per_s"], r["max_images_per_s"]) == (min(rates), max(rates))
    assert r["spread"] == pytest.approx((max(rates) - min(rates)) / median)
    assert r["noisy"] == (r["spread"] > bench.NOISY_SPREAD)
    assert r["efficiency"] == pytest.approx(median / 1000)
    assert r["speedup"] == pytest.approx(median / statistics.median(ROUNDS["ImageFolder+PIL"]))
    assert r["startup_s"] == pytest.approx(max(0.0, 0.9 - 2 * 64 / median))  # less one wave


def test_only_the_wide_row_is_noisy(result):
    assert [r["loader"] for r in result["rows"] if r["noisy"]] == ["FastImageFolder"]
    assert result["summary"]["noisy_rows"] == 1
    assert not result["limit"]["noisy"]


@pytest.mark.parametrize("fused, noisy", [([0.0020, 0.0021, 0.0019], False),
                                          ([0.0020, 0.0024, 0.0019], True)],
                         ids=["limit-steady", "limit-wide"])
def test_a_wide_limit_is_noisy_and_counted(fused, noisy):
    rows = [row(kind, 2, [600.0, 601.0, 602.0]) for kind in ROUNDS]
    result = bench.chain_result(rows, fused=fused, usable=2)
    assert result["limit"]["noisy"] is noisy
    assert result["summary"]["noisy_rows"] == int(noisy)
    assert ("(noisy)" in bench.table(result)) is noisy


def test_summary_is_at_the_usable_cpus(result):
    s = result["summary"]
    assert s["num_workers"] == 2
    assert s["efficiency_fastloader"] == pytest.approx(650 / 1000)
    assert s["speedup_fastimagefolder"] == pytest.approx(600 / 310)


def test_markdown_marks_noisy_rows_and_shows_the_limit(result):
    text = bench.chain_markdown("train", result, dict(bench.MODES["default"]))
    assert "| FastImageFolder | 2 | 600 (noisy) | 500-620 |" in text
    assert "| **limit** | 2 CPUs | 1,000 |" in text
    assert "1 row(s) marked (noisy): their fastest and slowest rounds differed by more than 10%" in text


@pytest.mark.parametrize("mode, said", [
    ("default", "only up to the batches 8 s hold at the row's first-epoch rate"),
    ("quick", "not lengthened to keep start-up under 5% of them: --quick")])
def test_the_round_cap_says_what_it_caps(result, mode, said):
    text = bench.chain_markdown("train", result, dict(bench.MODES[mode]))
    assert said in text and "capped at" not in text


@pytest.mark.parametrize("mode", list(bench.MODES))
def test_every_mode_has_at_least_three_rounds(mode):
    assert bench.MODES[mode]["rounds"] >= 3


@pytest.mark.parametrize("workers", [pytest.param([2], id="default"),
                                     pytest.param([0, 1, 2, 4, 8], id="full-sweep")])
def test_groups_cover_every_row_once_within_the_live_worker_bound(workers):
    chains = ["train", "eval"]
    layout = bench.groups(chains, workers)
    rows = [row for group in layout for row in group]
    assert sorted(rows) == sorted((c, w) for c in chains for w in workers)
    for group in layout:
        assert len(bench.LOADERS) * sum(w for _, w in group) <= max(
            bench.MAX_LIVE_WORKERS, len(bench.LOADERS) * max(w for _, w in group))


def opened(workers: int, build_s: float, cold_s: float, rate: float,
           ahead: int = 0) -> "bench.Row":
    r = bench.Row("train", "FastLoader", workers, source=None, build_s=build_s,
                  cold_first_batch_s=cold_s, first_epoch_rate=rate, ahead=ahead)
    return r


STARTS = [
    pytest.param(opened(2, 0.0, 0.52, 1000.0), id="no-start-up"),
    pytest.param(opened(2, 0.05, 0.60, 1000.0), id="short-start-up"),
    pytest.param(opened(2, 0.30, 0.80, 1000.0), id="long-start-up"),
    pytest.param(opened(0, 0.01, 0.30, 900.0), id="in-process"),
    pytest.param(opened(8, 0.20, 3.0, 700.0), id="eight-workers"),
    pytest.param(opened(2, 0.05, 0.60, 1000.0, ahead=4), id="made-ahead"),
    pytest.param(opened(8, 0.20, 3.0, 1200.0, ahead=16), id="eight-workers-made-ahead"),
]


@pytest.mark.parametrize("cap_s", [4.0, 8.0, 60.0])
@pytest.mark.parametrize("r", STARTS)
def test_rounds_hold_start_up_and_ramp_wave_under_five_percent_up_to_the_cap(r, cap_s):
    """The timed part of a round (after what was made ahead and the ramp
    wave) is long enough that start-up and the ramp wave are each under 5 %
    of it, unless the cap holds it back."""
    batch, least = 256, 6
    n = bench.round_batches(r, batch, least, cap_s)
    wave = max(r.num_workers, 1)
    timed = n - r.ahead - 2 * wave  # made ahead, the ramp and the final waves: not timed
    assert timed % wave == 0 and timed >= least
    startup = r.build_s + r.cold_first_batch_s - batch * wave / r.first_epoch_rate
    timed_s = timed * batch / r.first_epoch_rate
    capped = math.floor(cap_s * r.first_epoch_rate / batch)

    def fits(batches: int) -> bool:  # start-up and the excluded ramp wave (~1 wave's time)
        share = bench.STARTUP_SHARE * batches * batch / r.first_epoch_rate
        return startup <= share + 1e-9 and wave * batch / r.first_epoch_rate <= share + 1e-9

    if timed < capped:  # not held back by the cap: both fit
        assert fits(timed)
        if timed > math.ceil(least / wave) * wave:  # grown: one wave less would not do
            assert not fits(timed - wave)
    else:  # held back: about cap_s seconds (rounded up to a whole wave)
        assert timed_s <= cap_s + wave * batch / r.first_epoch_rate


def test_quick_rounds_never_grow():
    r = opened(2, 0.30, 0.80, 1000.0)
    # 2 timed batches, between the ramp wave and the final one
    assert bench.round_batches(r, 16, 2, bench.MODES["quick"]["round_cap_s"]) == 2 + 2 + 2


class Waves:
    """A loader whose workers start together: each wave of ``workers`` batches
    arrives at once, ``wave_s`` after the previous one."""

    def __init__(self, workers: int, batches: int, wave_s: float, batch: int) -> None:
        self.workers, self.batches, self.wave_s, self.batch = workers, batches, wave_s, batch

    def __iter__(self):
        import time

        import torch

        for i in range(self.batches):
            if i % max(self.workers, 1) == 0:
                time.sleep(self.wave_s)
            yield torch.empty(self.batch, 1), None


class Clock:
    """A fake clock for the rounds: time passes only when a source says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeWaves:
    """Waves of ``workers`` batches, each ``wave_s`` of fake time after the
    previous, the first ``made_ahead`` batches made before the round began
    (a FastLoader's persistent workers): those arrive at once. The first
    wave after them takes ``ramp_s`` longer: the workers, idle when the
    round began, start it together (measured on 8 workers: ~1.2x a wave).
    The last wave takes ``tail_s`` longer: a FastLoader's workers that are
    done start the next epoch's batches beside those still on this one's
    (a DataLoader's go idle and hand them their CPU: shorter, < 0)."""

    def __init__(self, clock, workers, batches, wave_s, batch, made_ahead=0, ramp_s=0.0,
                 tail_s=0.0):
        self.clock, self.workers, self.batches = clock, workers, batches
        self.wave_s, self.batch, self.made_ahead, self.ramp_s = wave_s, batch, made_ahead, ramp_s
        self.tail_s = tail_s
        self.prefetch_factor = 2

    def __iter__(self):
        import torch

        wave = max(self.workers, 1)
        for i in range(self.batches):
            if i >= self.made_ahead and (i - self.made_ahead) % wave == 0:
                self.clock.now += (self.wave_s + (self.ramp_s if i == self.made_ahead else 0.0)
                                   + (self.tail_s if i == self.batches - wave else 0.0))
            yield torch.empty(self.batch, 1), None


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_the_first_epoch_rate_is_read_after_the_first_wave(monkeypatch, workers):
    """Counting from the first batch, an 8-worker wave looked 8x faster than it
    is and sized rounds of minutes."""
    batch, wave_s = 16, 0.05
    clock = Clock()
    monkeypatch.setattr(bench, "clock", clock)
    monkeypatch.setattr(bench, "wait_idle", lambda pids: None)
    monkeypatch.setattr(bench, "make_loader",
                        lambda kind, root, chain, w, b, samples:
                        (FakeWaves(clock, w, samples // b, wave_s, b), None))
    r = bench.open_row("train", "FastImageFolder", None, None, workers, batch,
                       3 * workers * batch)
    assert r.first_epoch_rate == pytest.approx(workers * batch / wave_s)


ROUND_SOURCES = [
    pytest.param(dict(workers=2, batches=12), id="first-wave-excluded"),
    pytest.param(dict(workers=1, batches=8), id="one-worker"),
    pytest.param(dict(workers=2, batches=12, made_ahead=4), id="made-ahead-excluded"),
    pytest.param(dict(workers=8, batches=40, made_ahead=16), id="eight-workers-made-ahead"),
    pytest.param(dict(workers=2, batches=12, made_ahead=4, ramp_s=0.01), id="ramp-excluded"),
    pytest.param(dict(workers=8, batches=40, made_ahead=16, ramp_s=0.01),
                 id="eight-workers-ramp-excluded"),
    pytest.param(dict(workers=8, batches=40, ramp_s=0.01), id="eight-workers-ramp-no-made-ahead"),
    pytest.param(dict(workers=8, batches=40, made_ahead=16, tail_s=0.01),
                 id="eight-workers-final-wave-slower"),
    pytest.param(dict(workers=8, batches=40, tail_s=-0.01), id="eight-workers-final-wave-sooner"),
    pytest.param(dict(workers=2, batches=12, made_ahead=4, tail_s=0.01),
                 id="final-wave-slower"),
]


@pytest.mark.parametrize("kwargs", ROUND_SOURCES)
def test_a_round_is_timed_in_steady_state(monkeypatch, kwargs):
    """After the batches made before the round began and the ramp wave
    after them: counted from the first wave, a loader that made two waves
    ahead would look 25 % faster over 12 batches; counted from the last
    batch made ahead (the workers then start together, from idle), an
    8-worker round of 3 timed waves looked ~7 % slower than its steady
    state (the ramp wave took ~1.2x a wave). And before the final wave,
    which the loaders spend differently (FakeWaves): timed to the end,
    FastLoader's same work looked 3-5 % slower at 8 workers."""
    clock = Clock()
    monkeypatch.setattr(bench, "clock", clock)
    monkeypatch.setattr(bench, "wait_idle", lambda pids: None)
    src = FakeWaves(clock, wave_s=0.05, batch=16, **kwargs)
    r = bench.Row("train", "FastLoader", src.workers, source=src)
    bench.run_round(r)
    steady = src.workers * src.batch / src.wave_s
    assert r.rates[0] == pytest.approx(steady)
    # the ramp wave and the final wave
    assert r.excluded[0] == pytest.approx(src.wave_s + src.ramp_s + src.wave_s + src.tail_s)
    assert r.walls[0] == pytest.approx(clock.now)


class Work:
    """Fake CPU seconds: ``per_batch`` for every batch made, in the round or
    in the wait after it (the next round's batches made ahead)."""

    def __init__(self, per_batch: float) -> None:
        self.per_batch, self.seconds = per_batch, 0.0


class WorkingWaves(FakeWaves):
    def __init__(self, work: Work, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.work = work

    def __iter__(self):
        for i, item in enumerate(super().__iter__()):
            if i >= self.made_ahead:  # made in this round; the others before it
                self.work.seconds += self.work.per_batch
            yield item


@pytest.mark.parametrize("made_ahead", [pytest.param(0, id="first-round-given-none"),
                                        pytest.param(16, id="steady-round")])
def test_a_rounds_cpu_is_over_the_batches_it_made(monkeypatch, made_ahead):
    """A FastLoader round's CPU (the round and the wait after it) pays for
    the batches its workers make ahead for the next round, and not for those
    it was given: per image, that is the work of the batches made in that
    time. The first round is given none (its prediction was dropped when the
    round's length was set) and makes the next round's: counted over its own
    images only, it looked (n + ahead) / n times as costly (1.4x at 8
    workers, 40 batches)."""
    work = Work(per_batch=0.256)  # 1 ms per image at 256 per batch
    clock = Clock()
    ahead = 16
    monkeypatch.setattr(bench, "clock", clock)
    monkeypatch.setattr(bench.procs, "cpu_seconds", lambda pids: work.seconds)
    # 2 voluntary and 0.5 involuntary switches per image's work
    monkeypatch.setattr(bench.procs, "context_switches",
                        lambda pids: (2000 * work.seconds, 500 * work.seconds))

    def idle(pids):  # the workers make the next round's first batches
        work.seconds += ahead * work.per_batch

    monkeypatch.setattr(bench, "wait_idle", idle)
    src = WorkingWaves(work, clock, 8, 40, 0.05, 256, made_ahead=made_ahead)
    r = bench.Row("train", "FastLoader", 8, source=src, ahead=ahead)
    bench.run_round(r)
    assert r.cpu[0] == pytest.approx(0.001)
    assert r.switches[0] == pytest.approx((2.0, 0.5))  # per image, as its CPU


def test_context_switches_count_every_live_thread():
    """A thread of this process that sleeps 20 times between the two counts
    adds at least 20 voluntary switches (each sleep gives up its CPU)."""
    import threading
    import time

    from benchmarks import _procs

    go, slept, leave = threading.Event(), threading.Event(), threading.Event()

    def sleeper():
        go.wait()
        for _ in range(20):
            time.sleep(0.001)
        slept.set()
        leave.wait()

    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        voluntary0, involuntary0 = _procs.context_switches([])
        go.set()
        assert slept.wait(30)
        voluntary, involuntary = _procs.context_switches([])
    finally:
        go.set()
        leave.set()
        thread.join()
    assert voluntary - voluntary0 >= 20 and involuntary >= involuntary0


def test_a_round_needs_batches_after_what_it_excludes(monkeypatch):
    monkeypatch.setattr(bench, "wait_idle", lambda pids: None)
    src = FakeWaves(Clock(), 2, 6, 0.0, 16, made_ahead=4)
    with pytest.raises(ValueError, match="a round needs more than 8 batches"):
        bench.run_round(bench.Row("train", "FastLoader", 2, source=src))


@pytest.mark.parametrize("workers", [2, 8])
def test_a_fastloader_row_adds_what_it_makes_ahead_to_its_rounds(monkeypatch, workers):
    """A FastLoader row's rounds hold the batches its workers make ahead and
    the ramp wave on top of the timed part (a DataLoader row: the ramp wave)."""
    monkeypatch.setattr(bench, "make_loader",
                        lambda kind, root, chain, w, b, samples:
                        (FakeLoader(w, samples // b, b), None))
    monkeypatch.setattr(bench, "wait_idle", lambda pids: None)
    r = bench.open_row("train", "FastLoader", None, None, workers, 16, 3 * workers * 16)
    assert r.ahead == 2 * workers
    plain = bench.Row("train", "FastImageFolder", workers, source=None, ahead=0,
                      first_epoch_rate=r.first_epoch_rate, build_s=r.build_s,
                      cold_first_batch_s=r.cold_first_batch_s)
    assert bench.round_batches(r, 16, 6, 8.0) == bench.round_batches(plain, 16, 6, 8.0) + r.ahead


class FakeLoader(Waves):
    """Waves with FastLoader's made_ahead and prefetch_factor."""

    made_ahead = 0
    prefetch_factor = 2

    def __init__(self, workers: int, batches: int, batch: int) -> None:
        super().__init__(workers, batches, 0.001, batch)


def test_wait_idle_waits_for_busy_processes(tmp_path):
    import subprocess
    import sys

    marker = tmp_path / "done"
    code = (f"import time, pathlib\nend = time.process_time() + 0.3\n"
            f"while time.process_time() < end: pass\n"
            f"pathlib.Path({str(marker)!r}).write_text('x')\ntime.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        bench.wait_idle([child.pid])
        assert marker.exists()  # it returned only after the 0.3 CPU-s of work
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("workers", [2, 8])
def test_fastloader_is_read_against_fastimagefolder_round_by_round(workers):
    """The per-round ratios of two rows whose rounds ran back to back: a host
    that slows down between rounds moves both rows of a pair alike."""
    def row(kind, chain, w, rates):
        return bench.Row(chain, kind, w, source=None, rates=rates)

    rows = [row("FastImageFolder", "train", workers, [1000.0, 500.0, 800.0]),
            row("FastLoader", "train", workers, [1050.0, 520.0, 760.0]),
            row("FastImageFolder", "eval", workers, [10.0, 10.0, 10.0]),
            row("FastLoader", "train", workers + 1, [1.0, 1.0, 1.0])]
    got = bench.paired(rows, "FastLoader", "FastImageFolder")
    assert list(got) == [workers]
    assert got[workers]["rounds"] == pytest.approx([1.05, 1.04, 0.95])
    assert (got[workers]["median"], got[workers]["min"], got[workers]["max"]) == \
        pytest.approx((1.04, 0.95, 1.05))


def test_rows_take_turns_in_the_other_order_every_other_round(monkeypatch):
    """A B, then B A: a machine drifting within a pair of rounds favours
    neither row of the pair."""
    turns = []

    def opened_row(chain, kind, root, transform, workers, batch, samples):
        return bench.Row(chain, kind, workers, source=None, sampler=bench.Draws(range(4), 4),
                         first_epoch_rate=1000.0)

    monkeypatch.setattr(bench, "open_row", opened_row)
    monkeypatch.setattr(bench, "fused_cost", lambda root, chain, count, batch: 0.001)
    monkeypatch.setattr(bench, "run_round", lambda row: turns.append(row.loader))

    class Bar:
        def set_postfix_str(self, text): pass
        def update(self): pass

    settings = dict(bench.MODES["quick"], workers=[2], rounds=4,
                    loaders=["FastImageFolder", "FastLoader"])
    bench.measure(None, {"train": None}, settings, Bar())
    assert turns == ["FastImageFolder", "FastLoader", "FastLoader", "FastImageFolder"] * 2


@pytest.mark.parametrize("warm_first_s", [pytest.param(0.0, id="made-ahead"),
                                          pytest.param(0.4, id="made-in-the-round")])
def test_start_up_is_the_cold_first_batch_less_one_waves_work(warm_first_s):
    """Less one wave at the row's steady rate, not less a warm round's first
    batch: FastLoader's warm first batches were made ahead (~0 s), so its
    start-up kept a whole wave that a stock row's had taken off."""
    r = row("FastLoader", 8, [1000.0, 1000.0, 1000.0])
    r.build_s, r.cold_first_batch_s, r.first_batch = 1.0, 2.0, [warm_first_s] * 3
    got = bench.row_result(r, limit=1000.0, baseline={})
    assert got["startup_s"] == pytest.approx(1.0 + 2.0 - 8 * 64 / 1000.0)
    assert got["warm_first_batch_s"] == warm_first_s


@pytest.mark.parametrize("images, count, batch", [(3, 10, 4), (10, 10, 4), (12, 5, 2)],
                         ids=["fewer-than-count", "as-many", "more-than-count"])
def test_the_fused_cost_is_per_image_decoded_in_batches(monkeypatch, images, count, batch):
    """The limit's single-thread cost runs the workers' path (__getitems__
    in batches), once untimed, and divides by the images it decoded: a
    dataset under ``count`` images (252 photos, 512) read as half the cost,
    twice the limit."""
    clock = Clock()
    calls: list[list[int]] = []

    class Timed:
        def __init__(self, root, transform) -> None:
            pass

        def __len__(self) -> int:
            return images

        def __getitems__(self, indices: list[int]):
            calls.append(list(indices))
            clock.now += 0.002 * len(indices)  # 2 ms an image
            return [None] * len(indices)

    monkeypatch.setattr(bench, "clock", clock)
    monkeypatch.setattr(bench.fd, "FastImageFolder", Timed)
    assert bench.fused_cost(None, None, count, batch) == pytest.approx(0.002)
    decoded = min(images, count)
    sizes = [min(batch, decoded - k) for k in range(0, decoded, batch)]
    assert [len(c) for c in calls] == 2 * sizes  # untimed, then timed: the same batches
    assert calls[:len(sizes)] == calls[len(sizes):]
    assert len({i for c in calls for i in c}) == decoded
