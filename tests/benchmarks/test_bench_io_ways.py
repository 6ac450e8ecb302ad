"""benchmarks/bench_io_ways.py's paced rows (no timing asserted): every
paced way (inline, the window on Python threads, the window on threads in C)
reads the same files, in interleaved passes, and reports a CPU figure."""

from __future__ import annotations

import pytest

from helpers.trees import random_files

bench = pytest.importorskip("benchmarks.bench_io_ways")


def test_every_paced_way_reads_the_files_and_reports_cpu(tmp_path):
    paths = random_files(tmp_path, [20_000] * 70)
    seen = []

    def counting(way):
        def run(files, pace_s):
            seen.append((way, len(files)))
            return ways[way](files, pace_s)
        return run

    ways = {"inline": bench.paced_inline, "python": bench.paced_window(False),
            "c": bench.paced_window(True)}
    result = bench.paced({name: counting(name) for name in ways}, paths, 0.0, passes=2)
    assert set(result) == set(ways)
    assert all(cpu >= 0 for cpu in result.values())
    # interleaved: the second pass runs the ways in the reverse order
    assert [way for way, _ in seen] == ["inline", "python", "c", "c", "python", "inline"]
    assert {n for _, n in seen} == {70}


def test_the_gil_held_rows_report_both_windows(tmp_path):
    paths = random_files(tmp_path, [20_000] * 70)
    result = bench.held(paths, 0.0001, passes=2)
    assert list(result) == ["Python threads", "threads in C"]
    for row in result.values():
        assert row["files_per_s"] > 0 and 0 <= row["waited"] <= 70
