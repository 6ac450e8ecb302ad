"""The results figure explains itself (issue 51, item 10): each panel names
its baseline, a noisy row's bar is hatched and its ratio marked, and a
legend says what the colours, the hatching and the limit's line mean."""

from __future__ import annotations

import pytest

from benchmarks import results

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _report() -> dict:
    def row(name, ips, **extra):
        return {"name": name, "images_per_s": ips, "ms_per_image": 1000 / ips, **extra}

    loader_rows = [{"loader": name, "num_workers": 2, "images_per_s": ips, "speedup": ips / 500,
                    "noisy": noisy}
                   for name, ips, noisy in (("ImageFolder+PIL", 500.0, False),
                                            ("FastImageFolder", 1400.0, True),
                                            ("FastLoader", 1450.0, False))]
    return {"sections": {
        "decode": {"sections": [{"key": "jpeg_full", "rows": [
            row("Pillow", 500.0, speedup=1.0), row("fastdecode", 800.0, speedup=1.6)]}]},
        "loader": {"chains": {"train": {
            "summary": {"num_workers": 2}, "rows": loader_rows,
            "limit": {"usable_cpus": 2, "fused_ms_per_image": 1.2, "images_per_s": 1666.0,
                      "noisy": False}}}}}}


def test_a_panel_names_its_baseline_and_marks_a_noisy_bar():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    results._bars(ax, ["ImageFolder", "DL(FastImageFolder)"], [500.0, 1400.0], [1.0, 2.8],
                  "loader: train chain, 2 workers", "images/s", 0, [False, True])
    assert ax.get_title() == "loader: train chain, 2 workers\nbaseline: ImageFolder"
    assert [bar.get_hatch() or "" for bar in ax.patches] == ["", results.NOISY_HATCH]
    assert [t.get_text() for t in ax.texts] == ["1.00x", "2.80x (noisy)"]
    plt.close(fig)


def test_the_figure_has_a_legend(tmp_path, monkeypatch):
    drawn = []
    legend = results._legend

    def keep(fig, **kwargs):
        legend(fig, **kwargs)
        drawn.append([t.get_text() for t in fig.legends[0].get_texts()])

    monkeypatch.setattr(results, "_legend", keep)
    assert results.figure(_report(), tmp_path / "f.png") == f"figure written to {tmp_path / 'f.png'}"
    (labels,) = drawn
    assert labels == ["baseline: the ratios are over it (1.00x)", "fastdecode", "other libraries",
                      "noisy: its rounds differed by more than 10%",
                      "limit: usable CPUs / fused cost per image"]
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
