"""The images group: how a loader run is clocked (on fake batches and a fake clock), and a real
smoke run of every installed peer through the suite."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from datapipe.suite import Options, run
from datapipe.suite.fixtures import BATCH, CROP
from datapipe.suite.groups import images
from datapipe.suite.groups.image_peers import Job, torch_batches
from datapipe.suite.isolated import clock
from datapipe.suite.runner import Peer
from tests.suite.outputs import check_outputs, installed_peers

IMAGES_PER_EPOCH = 600  # batches of 256, 256, 88


def fake_batches(epochs: int) -> Iterator[tuple[int, torch.Tensor]]:
    full = torch.zeros(BATCH, 3, CROP, CROP, dtype=torch.uint8)
    for epoch in range(epochs):
        for start in range(0, IMAGES_PER_EPOCH, BATCH):
            yield epoch, full[: min(BATCH, IMAGES_PER_EPOCH - start)]


@pytest.fixture
def one_second_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch arrives one second (and half a CPU-second) after the previous one."""
    ticks = iter(range(1000))
    now = {"t": 0.0}

    def tick() -> float:
        now["t"] = float(next(ticks))
        return now["t"]

    monkeypatch.setattr(clock.time, "perf_counter", tick)
    monkeypatch.setattr(clock.TreeCPU, "seconds", lambda self, rescan: now["t"] / 2)


@pytest.mark.usefixtures("one_second_per_batch")
def test_clock_runs_from_the_warmup_s_last_batch() -> None:
    result = clock.measure(fake_batches(3), Job("x", 2, epochs=2, warmup=1), CROP)
    # Arrivals at t = 1..9 (t = 0 is the start); epoch 0 ends at t = 3.
    assert result["images"] == 2 * IMAGES_PER_EPOCH
    assert result["seconds"] == 6.0 and result["rate"] == 200.0
    assert result["cpu_s"] == 3.0 and result["cpu_rate"] == 400.0
    assert result["first_epoch_rate"] == (IMAGES_PER_EPOCH - BATCH) / 2.0
    assert result["start_s"] == 1.0
    assert result["epoch_images"] == [IMAGES_PER_EPOCH] * 3


@pytest.mark.usefixtures("one_second_per_batch")
def test_without_warmup_the_clock_starts_at_the_first_batch() -> None:
    result = clock.measure(fake_batches(2), Job("x", 2, epochs=2, warmup=0), CROP)
    assert result["images"] == 2 * IMAGES_PER_EPOCH - BATCH
    assert result["seconds"] == 5.0
    assert result["rate"] == (2 * IMAGES_PER_EPOCH - BATCH) / 5.0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_per_batch_cpu_clock_agrees_with_a_full_scan() -> None:
    """Between rescans only the known processes' own stat files are read: a worker's CPU is
    counted while it runs and, once reaped, in its parent, as the full scan counts it."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\n"
                              "while time.time() - t < 1.2: pass"])
    try:
        time.sleep(0.2)
        cpu = clock.TreeCPU()
        start, start_full = cpu.seconds(rescan=True), clock.tree_cpu_seconds()
        time.sleep(0.6)
        assert cpu.seconds(rescan=False) - start == pytest.approx(
            clock.tree_cpu_seconds() - start_full, abs=0.05)
        assert cpu.seconds(rescan=False) - start > 0.3  # the child's busy loop
    finally:
        child.wait()
    assert cpu.seconds(rescan=False) - start == pytest.approx(
        clock.tree_cpu_seconds() - start_full, abs=0.05)


def test_a_tool_that_skips_part_of_the_job_fails_its_run() -> None:
    wrong = iter([(0, torch.zeros(BATCH, 3, CROP, CROP - 1, dtype=torch.uint8))])
    with pytest.raises(RuntimeError, match=r"first batch is \(256, 3, 224, 223\)"):
        clock.measure(wrong, Job("x", 2, epochs=1, warmup=0), CROP)


MISSING = Peer("absent-peer", "A peer without its environment", torch_batches,
               ("no_such_module_for_this_peer",), tag="photos")


@pytest.fixture
def with_missing_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The images group with one more peer, whose module is absent (as FFCV's venv may be)."""
    monkeypatch.setattr(images.ImagesGroup, "peers", (*images.ImagesGroup.peers, MISSING))


@pytest.mark.usefixtures("with_missing_peer")
def test_images_suite_runs_every_installed_peer(tmp_path: Path) -> None:
    assert run(Options.smoke_test(("images",), tmp_path / "out", data=tmp_path / "data")) == 0
    out = tmp_path / "out"
    data = check_outputs(out, ["images"])
    panel = next(p for p in data["suites"]["images"] if p["key"] == "images")
    ran = installed_peers(panel["entries"])
    assert {"torch", "datapipe", "ceiling"} <= {e["name"] for e in ran}
    for entry in ran:
        assert entry["status"] == "ok" and entry["median"] > 0, entry
    missing = next(e for e in panel["entries"] if e["name"] == MISSING.name)
    assert missing["status"] == "not installed (no_such_module_for_this_peer)"
    report = (out / "suite.md").read_text()
    assert "not installed (no_such_module_for_this_peer); install: pip install " \
        "'datapipe[bench]'" in report
    assert report.splitlines()[2].startswith("- **Image loading: datapipe Loader")
    assert "× torch DataLoader + PIL" in report and "× the fastest peer (" in report
    details = (out / "loader.md").read_text()  # the group's own detailed report
    assert details.startswith("# Image loading\n\n**Image loading: datapipe Loader")
    assert "images/CPU-s" in details and "goal ≥ 3×" in details
    assert json.loads((out / "loader.json").read_text())["meta"]["batch"] == 16


def test_a_before_checkout_runs_datapipe_beside_itself(tmp_path: Path) -> None:
    """--before: datapipe's own peers also run from another checkout, in the same rounds."""
    checkout = tmp_path / "checkout"
    for package in ("datapipe", "preprocess"):
        shutil.copytree(Path(__file__).resolve().parents[2] / package, checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    opts = replace(Options.smoke_test(("images",), tmp_path / "out", data=tmp_path / "data",
                                      before=checkout),
                   skip=frozenset({"torch", "dali", "webdataset", "litdata", "ffcv",
                                   "datapipe-dali", "ceiling", "recipe", "openclip",
                                   "datapipe-pairs", "datapipe-images", "aspect-jpegs",
                                   "aspect-datapipe"}))
    assert run(opts) == 0
    panels = json.loads((tmp_path / "out" / "suite.json").read_text())["suites"]["images"]
    panel = next(p for p in panels if p["key"] == "images")
    before = next(e for e in panel["entries"] if e["name"] == "datapipe-before")
    assert before["status"] == "ok" and before["median"] > 0 and before["ours"]
    assert before["label"] == 'datapipe Loader, decode="cpu" (--before)'
    runs = json.loads((tmp_path / "out" / "loader.json").read_text())["outcomes"]
    assert runs["datapipe-before"]["runs"][0]["code"] == str(checkout)
    assert "code" not in runs["datapipe"]["runs"][0]
