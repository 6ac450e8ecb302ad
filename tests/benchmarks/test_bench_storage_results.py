"""benchmarks/results.py renders the storage section: its rows (local disk
and read-ahead off included), the targets judged in the run, the command,
the README block's rows and the figure's storage panel (a report built from
fake rounds, no timing)."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from benchmarks import bench_storage as bs  # noqa: E402
from benchmarks import results  # noqa: E402

from helpers.bench_storage_rounds import cells, peaks  # noqa: E402


def report() -> dict:
    rows = bs.results(cells(), peaks())
    storage = {"command": "python -m benchmarks.bench_storage --data /tmp/x/data --json "
                          "/tmp/x/storage.json", "mode": "default", "batch_size": 64,
               "settings": {"rounds": 5}, "readahead": "ReadAheadOptions(depth=16)",
               "machine": {"load_average_start": [3.0, 2.5, 2.0],
                           "load_average_end": [4.0, 3.0, 2.5]},
               "rows": rows, "summary": bs.summary(rows, 2)}
    return {"mode": "default", "date": "the run's date",
            "command": "fastdecode bench --sections storage --json bench.json",
            "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "cpu_count": 2},
            "versions": {}, "summary": [], "skipped": {}, "sections": {"storage": storage}}


def test_page_shows_every_storage_row_and_not_the_targets():
    text = results.page(report(), results.PAGE, "results.png")
    assert "| DataLoader(FastImageFolder) | on | 2 | local disk | 990 |" in text
    assert "| FastLoader | off | 2 | 0 ms | 1,000 |" in text
    assert "| 0.99x |" in text  # FastImageFolder on vs off, local disk
    assert "| 3.0 (64.0) |" in text  # peak read-ahead MiB (cap)
    # the project's thresholds stay in the JSON (issue 51 item 5)
    assert report()["sections"]["storage"]["summary"]["targets_met"]
    assert "read-ahead on >= 0.98x off" not in text and "met" not in text.split()
    assert "median of 5 interleaved rounds" in text
    assert "start 3.00, 2.50, 2.00 and end 4.00, 3.00, 2.50" in text
    assert "`storage` ran `python -m benchmarks.bench_storage --data DATA --json " \
           "SECTION.json`." in text
    assert "- **Command:** `fastdecode bench --sections storage --json bench.json`" in text


def test_summary_block_has_the_5ms_rows():
    block = results.summary_block(report())
    assert "| DataLoader(FastImageFolder), 5 ms per open, 2 workers (images/s) | median of " \
           "5 rounds; the ratio the median of per-round ratios | ImageFolder at 5 ms | 780 | " \
           "7.80x |" in block
    assert "local disk" not in block  # the on/off pairs are on the results page only


def test_an_older_storage_report_still_renders():
    old = report()
    for row in old["sections"]["storage"]["rows"]:
        for key in ("readahead", "storage", "vs_readahead_off", "cpu_vs_local",
                    "readahead_peak_bytes"):
            row.pop(key, None)
    old["sections"]["storage"]["rows"] = [r for r in old["sections"]["storage"]["rows"]
                                          if r["delay_ms"] is not None]
    text = results.page(old, results.PAGE, "results.png")
    assert "| FastLoader |  | 2 | 5 ms | 880 |" in text


def test_main_writes_the_figure_with_a_storage_panel(tmp_path):
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(report()))
    readme = tmp_path / "README.md"
    readme.write_text(f"{results.START}\n{results.END}\n")
    page, figure = tmp_path / "results.md", tmp_path / "results.png"
    assert results.main([str(source), "--page", str(page), "--figure", str(figure),
                         "--readme", str(readme)]) == 0
    assert "5 ms per open, 2 workers" in readme.read_text()
    assert "spread up to 2.0x" in page.read_text()  # FastImageFolder on the local disk
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: no figure")
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_the_figure_draws_the_5ms_rows(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    drawn = []
    monkeypatch.setattr(results, "_bars", lambda ax, names, values, ratios, title, *a:
                        drawn.append((title, names, ratios)))
    results.figure(report(), tmp_path / "f.png")
    (title, names, ratios), = drawn
    assert title == "storage: 5 ms per open, 2 workers"
    assert names == ["ImageFolder", "DataLoader(FastImageFolder)", "FastLoader",
                     "FastLoader+cache"]
    assert ratios[1] == pytest.approx(7.8)
