"""Fake rounds of benchmarks/bench_storage (no timing): cells at the local
disk, latencyfs 0 and 5 ms, read-ahead on and off, and the rows' recorded
read-ahead peaks; shared by tests/benchmarks/test_bench_storage_*.py."""

from __future__ import annotations

from benchmarks.bench_storage import LOCAL, OFF, Cell

MIB = 1 << 20


def cells() -> dict:
    def cell(rates, cpu_ms):
        return Cell(list(rates), [c / 1000 for c in cpu_ms], [512] * len(rates),
                    [0.05] * len(rates))

    return {
        ("ImageFolder+PIL", 2, 0): cell([200, 200, 200], [4, 4, 4]),
        ("ImageFolder+PIL", 2, 5): cell([100, 100, 100], [4, 4, 4]),
        ("FastImageFolder", 2, LOCAL): Cell([1000.0, 500.0, 990.0], [0.0015] * 3),
        ("FastImageFolder" + OFF, 2, LOCAL): Cell([1000.0, 1000.0, 1000.0], [0.0014] * 3),
        ("FastImageFolder", 2, 0): cell([800, 900, 700], [1.6, 1.6, 1.6]),
        ("FastImageFolder" + OFF, 2, 0): cell([800, 1000, 680], [1.5, 1.5, 1.5]),
        ("FastImageFolder", 2, 5): cell([780, 880, 700], [1.5, 1.8, 1.7]),
        ("FastLoader", 2, LOCAL): Cell([900.0] * 3, [0.002] * 3),
        ("FastLoader" + OFF, 2, LOCAL): Cell([900.0] * 3, [0.002] * 3),
        ("FastLoader", 2, 0): cell([900, 900, 900], [2.1, 2.1, 2.1]),
        ("FastLoader" + OFF, 2, 0): cell([1000, 1000, 1000], [2, 2, 2]),
        ("FastLoader", 2, 5): Cell([880.0] * 3, [0.0019] * 3, [512] * 3, [0.05] * 3,
                                   [(6.0, 2.0), (5.0, 3.0), (7.0, 4.0)]),
        ("FastLoader+cache", 2, 5): cell([900, 900, 900], [1.0, 1.0, 1.0]),
    }


def peaks() -> dict:
    def at(peak, cap=64 * MIB):
        return {"readahead_peak_bytes": peak, "readahead_cap_bytes": cap,
                "readahead_peak_in_flight": 16, "readahead_peak_depth": 16,
                "readahead_processes": 2}

    return {("FastImageFolder", 2, LOCAL): at(2 * MIB), ("FastImageFolder", 2, "fuse"): at(3 * MIB),
            ("FastImageFolder" + OFF, 2, "fuse"): at(0), ("FastLoader", 2, "fuse"): at(10 * MIB)}
