"""FFCV as a peer of the images group, in its own venv. Without that venv it is reported as not
installed, saying how to install it; with it, a tiny real run through the suite, and the
batches FFCV hands out."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from datapipe.suite import Options, fixtures, run
from datapipe.suite.groups import ffcv
from datapipe.suite.groups.buckets import GROUP as BUCKETS
from datapipe.suite.groups.images import GROUP
from datapipe.suite.groups.pairs import GROUP as PAIRS
from datapipe.suite.isolated import ffcv_run
from tests.imagegen import make_image_folder

NOT_INSTALLED = "not installed (run bash tools/setup_ffcv.sh)"
# The recipe group (the images suite's other group) too: it has no FFCV peer.
OTHERS = frozenset(p.name for g in (GROUP, PAIRS, BUCKETS) for p in g.peers
                   if p.name != "ffcv") | {"recipe", "aspect-jpegs", "aspect-datapipe"}
PHOTOS = 260  # one full batch of 256 (what every run checks) and a short one of 4
needs_ffcv = pytest.mark.skipif(not ffcv.ready(), reason=".venv-ffcv is absent (FFCV's "
                                "own venv): run bash tools/setup_ffcv.sh")


def run_bench(root: Path, count: int, workers: int) -> dict:
    """The images group with every tool but ffcv skipped, on COUNT tiny photos made here;
    the group's results' JSON."""
    photos = root / "data" / f"photos-{count}"
    make_image_folder(photos, classes=2, per_class=count // 2, size=(72, 48))
    (photos / ".complete").touch()  # the suite's own photos, as if made by an earlier run
    opts = Options(("images",), repeats=1, photos=count, workers=workers, out=root / "results",
                   data=root / "data", skip=OTHERS, settle=0.0)
    assert run(opts) == 0
    return json.loads((root / "results" / "loader.json").read_text())


def test_a_half_made_venv_is_not_installed(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPIPE_FFCV_VENV", str(tmp_path / ".venv-ffcv"))
    assert not ffcv.ready()
    python = ffcv.venv_python()
    python.parent.mkdir(parents=True)
    python.touch()  # set-up killed before its end: no marker yet
    assert not ffcv.ready()
    (tmp_path / ".venv-ffcv" / ffcv.SETUP_MARKER).touch()
    assert ffcv.ready()


def test_without_its_venv_the_benchmark_reports_ffcv_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPIPE_FFCV_VENV", str(tmp_path / "absent"))
    data = run_bench(tmp_path, 4, workers=1)
    assert data["outcomes"]["ffcv"] == {"status": NOT_INSTALLED, "runs": []}
    report = (tmp_path / "results" / "loader.md").read_text()
    *_, row = (line for line in report.splitlines() if line.startswith("| FFCV"))
    assert NOT_INSTALLED in row and ffcv.FORM_LABEL in row
    assert not (tmp_path / "data" / "forms").exists()  # no .beton made for a missing tool


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real run of the ffcv peer on PHOTOS tiny photos, through the suite."""
    return run_bench(tmp_path_factory.mktemp("ffcv"), PHOTOS, workers=2)


@pytest.mark.slow
@needs_ffcv
def test_a_tiny_run_measures_ffcv(bench_run: dict) -> None:
    outcome = bench_run["outcomes"]["ffcv"]
    assert outcome["status"] == "ok", outcome["status"]  # a wrong first batch fails the run
    (run_record,) = outcome["runs"]
    assert run_record["rate"] > 0 and run_record["images"] == 2 * PHOTOS
    assert run_record["start_s"] > 0 and run_record["epoch_images"] == [PHOTOS] * 3
    beton = Path(bench_run["meta"]["forms"]["ffcv"]["path"]) / ffcv_run.BETON
    assert beton.stat().st_size > 0


SHAPES = """
import json, sys
from types import SimpleNamespace
sys.path.insert(0, sys.argv[2])
from ffcv_run import ffcv_batches
job = SimpleNamespace(data=sys.argv[1], workers=2, epochs=1, warmup=1, total_epochs=2, seed=0,
                      batch=256, crop=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
batches = [[epoch, list(images.shape), str(images.dtype)] for epoch, images in ffcv_batches(job)]
print(json.dumps({"batches": batches, "datapipe": any(m.startswith("datapipe")
                                                      for m in sys.modules)}))
"""


@pytest.mark.slow
@needs_ffcv
def test_ffcv_hands_out_uint8_chw_batches_without_datapipe(bench_run: dict) -> None:
    form = bench_run["meta"]["forms"]["ffcv"]["path"]
    proc = subprocess.run([str(ffcv.venv_python()), "-c", SHAPES, form,
                           str(Path(ffcv_run.__file__).parent)],
                          env={**ffcv.child_env(), "PATH": "/usr/bin:/bin"},
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
    monkeypatch.setattr(ffcv, "WRITE_TIMEOUT_S", 120)  # FFCV's writer alone would hang
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=4, size=(72, 48))
    bad = photos / "class_1" / "img_002.jpg"
    bad.write_bytes(b"not a JPEG")
    out = tmp_path / "form" / "ffcv"
    with pytest.raises(RuntimeError, match=re.escape(f"{bad}: cannot read this photo")):
        ffcv.make_beton(photos, out, 2)
    assert processes_naming(str(out / ffcv_run.BETON)) == []


@pytest.mark.slow
@needs_ffcv
def test_a_writer_past_its_timeout_is_ended_with_its_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffcv, "WRITE_TIMEOUT_S", 15)
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=4, size=(72, 48))
    stuck = photos / "class_1" / "img_002.jpg"
    stuck.unlink()
    os.mkfifo(stuck)  # a read that never returns, as from a hung network disk
    out = tmp_path / "form" / "ffcv"
    with pytest.raises(RuntimeError, match=r"writer failed \(exit -9\): still busy after 15 s"):
        ffcv.make_beton(photos, out, 2)
    assert processes_naming(str(out / ffcv_run.BETON)) == []
