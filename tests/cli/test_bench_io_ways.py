"""benchmarks/bench_io_ways.py's paced rows (no timing asserted): the read
pool in C (benchmarks/pool_read.c) reads every file whole, in order, across
batches and past its depth, and names a file it cannot read; every paced way
reads the same files and reports a CPU figure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.trees import random_files

bench = pytest.importorskip("benchmarks.bench_io_ways")


@pytest.fixture(scope="module")
def pool_lib():
    lib = bench.build_pool()
    if lib is None:
        pytest.skip("no gcc to build benchmarks/pool_read.c")
    return lib


@pytest.mark.parametrize("sizes", [
    [0], [1], [100_000], [5] * (bench.PACE_DEPTH + 1), [3_000] * (bench.PACE_BATCH + 1),
    [0, 70_000, 1, 1 << 20] * 50,
], ids=["empty", "one-byte", "100KB", "past-the-depth", "past-a-batch", "mixed-200"])
def test_the_pool_reads_every_file_whole_in_order(pool_lib, tmp_path, sizes):
    paths = random_files(tmp_path, sizes)
    got = list(bench.pool_files(pool_lib, paths))
    assert got == [Path(p).read_bytes() for p in paths]


@pytest.mark.parametrize("where", [0, 1, bench.PACE_DEPTH + 3], ids=["first", "second", "later"])
def test_the_pool_names_a_file_it_cannot_read(pool_lib, tmp_path, where):
    paths = random_files(tmp_path, [10] * (bench.PACE_DEPTH + 5))
    os.unlink(paths[where])
    files = bench.pool_files(pool_lib, paths)
    for _ in range(where):
        next(files)
    with pytest.raises(FileNotFoundError, match=os.path.basename(paths[where])):
        next(files)


def test_every_paced_way_reads_the_files_and_reports_cpu(pool_lib, tmp_path):
    paths = random_files(tmp_path, [20_000] * 70)
    seen = []

    def counting(way):
        def run(files, pace_s):
            seen.append((way, len(files)))
            return ways[way](files, pace_s)
        return run

    ways = {"inline": bench.paced_inline, "window": bench.paced_window,
            "pool": bench.paced_pool(pool_lib)}
    result = bench.paced({name: counting(name) for name in ways}, paths, 0.0, passes=2)
    assert set(result) == set(ways)
    assert all(cpu >= 0 for cpu in result.values())
    # interleaved: the second pass runs the ways in the reverse order
    assert [way for way, _ in seen] == ["inline", "window", "pool", "pool", "window", "inline"]
    assert {n for _, n in seen} == {70}
