"""Streaming's MDSWriter as a peer of the convert group, in .venv-vision: reported as not
installed (with the command that makes the venv) without it; with it, a real conversion of the
same tars and Parquet the other peers read, which Streaming reads back whole."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from datapipe.suite import Options, run
from datapipe.suite.groups import convert, vision
from datapipe.suite.groups import convert_sources as held
from tests.imagegen import make_image_folder

NOT_INSTALLED = "not installed (run bash tools/setup_vision.sh)"
ONLY_MDS = frozenset(p.name for p in convert.GROUP.peers if p.name not in convert.MDS_PEERS)
needs_vision = pytest.mark.skipif(not vision.VENV.ready(), reason=".venv-vision is absent "
                                  "(Streaming's own venv): run bash tools/setup_vision.sh")
PHOTOS = 12


def test_without_the_vision_venv_mdswriter_says_how_to_make_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPIPE_VISION_VENV", str(tmp_path / "absent"))
    opts = replace(Options.smoke_test(("convert",), tmp_path / "out", data=tmp_path / "data"),
                   skip=ONLY_MDS)
    assert run(opts) == 0
    outcomes = json.loads((tmp_path / "out" / "convert.json").read_text())["outcomes"]
    for name in convert.MDS_PEERS:
        assert outcomes[name] == {"status": NOT_INSTALLED, "runs": []}, name
    report = (tmp_path / "out" / "convert.md").read_text()
    assert "MDSWriter" in report and NOT_INSTALLED in report
    assert not (tmp_path / "data" / "forms").exists()  # no tars made for a missing tool


READ_BACK = """
import json, sys
from streaming import LocalDataset
data = LocalDataset(sys.argv[1])
print(json.dumps([[len(data[i]["image"]), data[i]["label"]] for i in range(len(data))]))
"""


@pytest.mark.slow
@needs_vision
@pytest.mark.parametrize("source", ["tars", "parquet"])
def test_mdswriter_converts_every_photo_of_the_source(tmp_path: Path, source: str) -> None:
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=PHOTOS // 2,
                               size=(96, 64))
    src = tmp_path / source
    {"tars": held.make_tars, "parquet": held.make_parquet}[source](photos, src, 2)
    out, run_dir = tmp_path / "mds", tmp_path / "run"
    run_dir.mkdir()
    record = vision.run_isolated(convert.MDS_CHILD, {
        "src": str(src), "out": str(out), "workers": 2, "source": source,
        "shard_bytes": convert.SHARD_BYTES}, run_dir)
    assert record["items"] == PHOTOS and record["rate"] > 0 and record["import_s"] > 0
    proc = subprocess.run([str(vision.VENV.python()), "-c", READ_BACK, str(out)],
                          env=vision.isolated_env(), capture_output=True, text=True,
                          timeout=300, check=True)
    samples = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(label for _, label in samples) == [0] * (PHOTOS // 2) + [1] * (PHOTOS // 2)
    assert all(size > 1000 for size, _ in samples)  # re-encoded JPEGs, shorter side 256


@needs_vision
def test_mdswriter_writes_the_encoded_samples_of_the_writer_row(tmp_path: Path) -> None:
    out, run_dir = tmp_path / "mds", tmp_path / "run"
    run_dir.mkdir()
    record = vision.run_isolated(convert.MDS_CHILD, {
        "src": "", "out": str(out), "workers": 2, "source": "writer", "megabytes": 4,
        "shard_bytes": convert.SHARD_BYTES}, run_dir)
    assert record["items"] == 20 and record["bytes"] == 4_000_000 and record["rate"] > 0
    assert sum(p.stat().st_size for p in out.iterdir()) > 4_000_000  # samples + index
