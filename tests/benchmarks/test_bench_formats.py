"""benchmarks/bench_formats.py: PNG and WebP rows per format and measure, the floor of the
fused chains (the crop decoded alone) beside them, and the acceptance targets in the JSON."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchvision")

bench = pytest.importorskip("benchmarks.bench_formats")

from helpers.trees import make_tree  # noqa: E402


@pytest.mark.parametrize("height,width", [(375, 500), (500, 375), (100, 100), (40, 300)])
@pytest.mark.parametrize("kind", ["train", "eval"])
def test_the_kept_box_lies_in_the_image(kind, height, width):
    import torch

    torch.manual_seed(0)
    for _ in range(20):
        top, left, h, w = bench.kept_box(kind, height, width)
        assert 0 <= top and 0 <= left and h >= 1 and w >= 1
        assert top + h <= height and left + w <= width


def test_the_eval_box_is_the_centre_the_chain_keeps():
    # Resize(256) of 500 x 375 keeps 224 of 256 rows: 328.125 source rows, rounded out
    assert bench.kept_box("eval", 375, 500) == (23, 85, 329, 329)


@pytest.mark.timeout(300)
def test_every_format_and_measure_has_its_rows_and_the_floor(tmp_path, capsys):
    root = make_tree(tmp_path / "t", per_class=2, classes=("a",))
    out = tmp_path / "formats.json"
    assert bench.main(["--data", str(root), "--limit", "2", "--rounds", "1",
                       "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for fmt in bench.FORMATS:
        for kind in ("train", "eval"):
            rows = result["formats"][fmt][kind]
            assert list(rows)[0] == "torchvision+PIL" and rows[bench.FLOOR]["ms_per_image"] > 0
    floors = {k: v.get("floor") for k, v in result["targets"].items()}
    assert floors["webp-lossy train >= 2.0x"] > 0 and floors["webp-lossy decode >= 1.0x"] is None
    assert "crop decode alone (floor)" in capsys.readouterr().out
