"""benchmarks/bench_detection.py runs end to end on two photos, one round: every
preset row with its ratio, and the JSON names its command; ``--transfer`` reports
both sides' compute and transfer costs and the ratio they allow, ``--decode-share``
hflip's decode share and ceiling."""

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
    loaders = [f"{case}, {how} 2 workers" for case in ("ssdlite masks", "lsj masks", "segmentation")
               for how in ("DataLoader", "FastLoader")]
    assert list(report["rows"]) == names + ["segmentation (label PNG)"] + loaders
    assert all(row["ratio"] > 0 for row in report["rows"].values())
    assert report["command"].startswith("python -m benchmarks.bench_detection --data")
    assert "| ssd masks |" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
@pytest.mark.skipif(PHOTOS is None, reason="shared corpus 'photos' absent")
def test_transfer_and_decode_share_report_both_sides(tmp_path):
    out = tmp_path / "transfer.json"
    assert bench_detection.main(["--data", str(PHOTOS), "--limit", "2", "--rounds", "1",
                                 "--transfer", "--decode-share", "--json", str(out)]) == 0
    share = json.loads(out.read_text())["decode_share"]
    assert share["decode_share"] > 0 and share["ceiling"] > 0
    report = json.loads(out.read_text())["transfer"]
    assert list(report["sides"]) == ["torchvision", "fastdecode", "fastdecode, FastLoader"]
    for side in report["sides"].values():
        assert side["compute_ms"] > 0 and side["sample_mb"] > 12  # a 1024 x 1024 float image
    assert report["allowed_ratio"] > 0 and report["fastloader_allowed_ratio"] > 0
