"""benchmarks/bench_augment_ops.py's code path on a tiny folder (no timing
asserted): every op's row in each layout, the same-pixels check before the
timed rounds, the table and the JSON report; a kernel that differs from
Pillow stops the run."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("PIL")
bench = pytest.importorskip("benchmarks.bench_augment_ops")
from PIL import Image  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (30, 40, 3), np.uint8)).save(tmp_path / f"{i}.png")
    return tmp_path


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_every_op_has_a_row_in_the_report(folder, tmp_path, capsys, layout):
    report = tmp_path / "report.json"
    bench.main(["--data", str(folder), "--limit", "2", "--rounds", "2", "--sizes", "16", "9",
                "--layout", layout, "--json", str(report)])
    rows = json.loads(report.read_text())["rows"]
    names = list(bench.ops(16))
    assert [(r["op"], r["size"]) for r in rows] == [(n, s) for s in (16, 9) for n in names]
    assert all(r["layout"] == layout and r["speedup"] > 0 for r in rows)
    table = capsys.readouterr().out
    assert f"| rotate bicubic | 16 {layout} |" in table and "--layout" in table


def test_a_kernel_that_differs_from_pillow_stops_the_run(folder, monkeypatch):
    from fastdecode import _native

    real = _native.augment

    def off(pixels, layout, steps):
        real(pixels, layout, steps)
        pixels.reshape(-1)[0] ^= 1
        return pixels

    monkeypatch.setattr(_native, "augment", off)
    with pytest.raises(SystemExit, match="rotate nearest at 16: fastdecode and Pillow differ"):
        bench.main(["--data", str(folder), "--limit", "1", "--rounds", "1", "--sizes", "16"])
