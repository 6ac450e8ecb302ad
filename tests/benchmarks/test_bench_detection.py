"""benchmarks/bench_detection.py runs end to end on two photos, one round: every
preset row with its ratio, and the JSON names its command."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchvision")
pytest.importorskip("pycocotools")

from benchmarks import bench_detection  # noqa: E402
from fastdecode.targets import presets  # noqa: E402

from helpers.corpus import corpus_dir  # noqa: E402

PHOTOS = corpus_dir("photos")


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
@pytest.mark.skipif(PHOTOS is None, reason="shared corpus 'photos' absent")
def test_every_preset_has_its_row(tmp_path, capsys):
    out = tmp_path / "detection.json"
    assert bench_detection.main(["--data", str(PHOTOS), "--limit", "2", "--rounds", "1",
                                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    names = [f"{p} {k}" for p in presets.DETECTION for k in ("masks", "boxes")]
    loaders = [f"{p} masks, DataLoader 2 workers" for p in ("ssdlite", "lsj")]
    assert list(report["rows"]) == names + ["segmentation (label PNG)"] + loaders
    assert all(row["ratio"] > 0 for row in report["rows"].values())
    assert report["command"].startswith("python -m benchmarks.bench_detection --data")
    assert "| ssd masks |" in capsys.readouterr().out
