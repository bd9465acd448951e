"""benchmarks/ffcv_peer.py: FFCV as a peer of bench_loader, in .venv-ffcv. Without that venv it
is reported as not installed, saying how to install it; with it, a tiny real run through
bench_loader's command line, and the batches FFCV hands out."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_loader, common, ffcv_peer, fixtures
from tests.imagegen import make_image_folder

NOT_INSTALLED = "not installed (run bash tools/setup_ffcv.sh)"
OTHERS = ",".join(name for name in bench_loader.PEERS_BY_NAME if name != "ffcv")
PHOTOS = 260  # one full batch of 256 (what bench_loader checks) and a short one of 4
needs_ffcv = pytest.mark.skipif(not ffcv_peer.ready(), reason=".venv-ffcv is absent (FFCV's "
                                "own venv): run bash tools/setup_ffcv.sh")


def run_bench(src: Path, root: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict:
    """bench_loader's command line with every tool but ffcv skipped; the results' JSON."""
    monkeypatch.setattr(bench_loader, "BENCH_DATA", root / "data")
    monkeypatch.setattr(fixtures, "BENCH_DATA", root / "data")
    monkeypatch.setattr(common, "BENCH_RESULTS", root / "results")
    code = bench_loader.main(["--photos", str(src), "--repeats", "1", "--settle", "0",
                              "--skip", OTHERS, *args])
    assert code == 0
    return json.loads((root / "results" / "loader.json").read_text())


def test_a_half_made_venv_is_not_installed(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffcv_peer, "VENV", tmp_path / ".venv-ffcv")
    assert ffcv_peer.initial(set()).status == NOT_INSTALLED
    python = ffcv_peer.venv_python()
    python.parent.mkdir(parents=True)
    python.touch()  # set-up killed before its end: no marker yet
    assert ffcv_peer.initial(set()).status == NOT_INSTALLED
    (tmp_path / ".venv-ffcv" / ffcv_peer.SETUP_MARKER).touch()
    assert ffcv_peer.initial(set()).status == "ok"
    assert ffcv_peer.initial({"ffcv"}).status == "skipped"


def test_without_its_venv_the_benchmark_reports_ffcv_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffcv_peer, "VENV", tmp_path / "absent")
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2, size=(72, 48))
    data = run_bench(src, tmp_path, monkeypatch, "--workers", "1")
    assert data["outcomes"]["ffcv"] == {"status": NOT_INSTALLED, "runs": []}
    report = (tmp_path / "results" / "loader.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| FFCV"))
    assert NOT_INSTALLED in row and ffcv_peer.FORM_LABEL in row
    assert not (tmp_path / "data" / "loader").exists()  # no .beton made for a missing tool


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real run of the ffcv peer on PHOTOS tiny photos, through bench_loader's main."""
    root = tmp_path_factory.mktemp("ffcv")
    src = make_image_folder(root / "src", classes=2, per_class=PHOTOS // 2, size=(72, 48))
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_bench(src, root, monkeypatch, "--workers", "2", "--warmup", "1",
                         "--epochs", "1")


@pytest.mark.slow
@needs_ffcv
def test_a_tiny_run_measures_ffcv(bench_run: dict) -> None:
    outcome = bench_run["outcomes"]["ffcv"]
    assert outcome["status"] == "ok", outcome["status"]  # a wrong first batch fails the run
    (run,) = outcome["runs"]
    assert run["rate"] > 0 and run["images"] == PHOTOS and run["start_s"] > 0
    assert run["epoch_images"] == [PHOTOS, PHOTOS]
    beton = Path(bench_run["meta"]["forms"]["ffcv"]["path"]) / ffcv_peer.BETON
    assert beton.stat().st_size > 0


SHAPES = """
import json, sys
from benchmarks.bench_loader import Job
from benchmarks.ffcv_peer import ffcv_batches
batches = [[epoch, list(images.shape), str(images.dtype)]
           for epoch, images in ffcv_batches(Job(sys.argv[1], workers=2, epochs=1, warmup=1))]
print(json.dumps({"batches": batches, "datapipe": any(m.startswith("datapipe")
                                                      for m in sys.modules)}))
"""


@pytest.mark.slow
@needs_ffcv
def test_ffcv_hands_out_uint8_chw_batches_without_datapipe(bench_run: dict) -> None:
    form = bench_run["meta"]["forms"]["ffcv"]["path"]
    proc = subprocess.run([str(ffcv_peer.venv_python()), "-c", SHAPES, form],
                          env={**ffcv_peer.child_env(), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not result["datapipe"]
    crop, batch = fixtures.CROP, fixtures.BATCH
    assert result["batches"] == [
        [epoch, [n, 3, crop, crop], "torch.uint8"]
        for epoch in (0, 1) for n in (batch, PHOTOS - batch)]


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds `text` (FFCV's forked workers share theirs)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # ended meanwhile
            pass
    return found


@pytest.mark.slow
@needs_ffcv
def test_an_unreadable_photo_fails_the_beton_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffcv_peer, "WRITE_TIMEOUT_S", 120)  # FFCV's writer alone would hang
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=4, size=(72, 48))
    bad = photos / "class_1" / "img_002.jpg"
    bad.write_bytes(b"not a JPEG")
    out = tmp_path / "form" / "ffcv"
    with pytest.raises(RuntimeError, match=re.escape(f"{bad}: cannot read this photo")):
        ffcv_peer.make_beton(photos, out, 2)
    assert processes_naming(str(out / ffcv_peer.BETON)) == []


@pytest.mark.slow
@needs_ffcv
def test_a_writer_past_its_timeout_is_ended_with_its_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffcv_peer, "WRITE_TIMEOUT_S", 15)
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=4, size=(72, 48))
    stuck = photos / "class_1" / "img_002.jpg"
    stuck.unlink()
    os.mkfifo(stuck)  # a read that never returns, as from a hung network disk
    out = tmp_path / "form" / "ffcv"
    with pytest.raises(RuntimeError, match=r"writer failed \(exit -9\): still busy after 15 s"):
        ffcv_peer.make_beton(photos, out, 2)
    assert processes_naming(str(out / ffcv_peer.BETON)) == []
