"""The gpu group (datapipe.suite.groups.gpu): the suite skips without CUDA, the overlap
arithmetic, the report; the measurements themselves only where a CUDA device is present."""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from pathlib import Path

import pytest
import torch

from datapipe.suite import suite
from datapipe.suite.groups import gpu, gpu_peers, handoff
from datapipe.suite.options import Options
from datapipe.suite.runner import NO_CUDA, GroupResult, Outcome
from tests.conftest import convert, run_cli_process
from tests.imagegen import make_image_folder

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
MACHINE = {"cpu": "CPU", "cores": 2, "ram_gb": 8.0, "gpu": "Test GPU", "python": "3.11",
           "pil": "PIL", "versions": {"torch": "2", "DALI": None, "kornia": "0.9"},
           "date": "2026-11-24", "revision": "abc"}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu-bench")
    src = make_image_folder(root / "src", classes=2, per_class=5, size=(72, 48))
    convert("images", src, root / "out", "--short-side", "48")
    return root / "out"


# ---------------------------------------------------------------- without CUDA


def test_gpu_suite_says_it_skipped_without_cuda(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user runs it, with every GPU hidden (so also on a CUDA machine)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = run_cli_process("bench", "--suite", "gpu", "--smoke", "--out", tmp_path / "out",
                             "--data", tmp_path / "data", timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"== gpu: {NO_CUDA}" in result.stdout
    data = json.loads((tmp_path / "out" / "suite.json").read_text())
    (panel,) = data["suites"]["gpu"]
    assert [e["status"] for e in panel["entries"]] == [NO_CUDA]
    assert f"| gpu and handoff and hf_train | {NO_CUDA}" in \
        (tmp_path / "out" / "suite.md").read_text()
    assert not (tmp_path / "data").exists()  # no photos, no shards


def test_the_suite_skips_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for group in (gpu, handoff):
        monkeypatch.setattr(group, "cuda_missing", lambda: NO_CUDA)
        monkeypatch.setattr(group, "datapipe_shards", pytest.fail)
    opts = Options.smoke_test(("gpu",), tmp_path / "out", data=tmp_path / "data")
    assert suite.run(opts) == 0
    assert f"== gpu: {NO_CUDA}" in capsys.readouterr().out
    assert not (tmp_path / "out" / "gpu.md").exists() and not (tmp_path / "data").exists()


# ---------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(("step", "loader", "both", "expected"), [
    (100.0, 40.0, 100.0, 1.0),  # the loader entirely under the step: max(a, b)
    (100.0, 40.0, 140.0, 0.0),  # one after the other: a + b
    (100.0, 40.0, 120.0, 0.5),  # half of the 40 ms hidden
    (30.0, 60.0, 75.0, 0.5),  # loader-bound: half of the 30 ms step hidden
    (100.0, 40.0, 150.0, 0.0),  # worse than serial: clipped
    (100.0, 40.0, 90.0, 1.0),  # faster than the step alone (noise): clipped
])
def test_overlap_fraction(step: float, loader: float, both: float, expected: float) -> None:
    assert gpu.overlap_fraction(step, loader, both) == pytest.approx(expected)


@pytest.mark.parametrize(("step", "both", "copy", "expected"), [
    (10.0, 10.0, 2.0, 1.0),  # the copy added nothing
    (10.0, 12.0, 2.0, 0.0),  # the copy added all of itself
    (10.0, 10.5, 2.0, 0.75),
    (10.0, 13.0, 2.0, 0.0),  # more than the copy (hand-over costs): clipped
    (10.0, 9.8, 2.0, 1.0),  # noise below the step alone: clipped
])
def test_hidden_fraction(step: float, both: float, copy: float, expected: float) -> None:
    assert gpu.hidden_fraction(step, both, copy) == pytest.approx(expected)


def test_fractions_without_a_denominator_are_nan() -> None:
    assert math.isnan(gpu.hidden_fraction(10.0, 11.0, 0.0))
    assert math.isnan(gpu.overlap_fraction(0.0, 5.0, 5.0))


@pytest.mark.parametrize(("target", "per", "expected"), [
    (100.0, 2.0, 50), (100.0, 3.0, 33), (0.5, 2.0, 1), (10.0, 0.0, 1)])
def test_matmuls_for(target: float, per: float, expected: int) -> None:
    assert gpu_peers.matmuls_for(target, per) == expected


def test_medians_of_numbers_first_value_of_the_rest() -> None:
    runs = [{"rate": 10.0, "gpu": "A", "n": 1}, {"rate": 30.0, "gpu": "A", "n": 3},
            {"rate": 20.0, "gpu": "B", "n": 2}]
    assert gpu.medians(runs) == {"rate": 20.0, "gpu": "A", "n": 2}
    assert gpu.medians([]) == {}


def test_per_step_ms_times_only_the_steps_after_the_warm_up() -> None:
    taken, calls = [], {"wait": 0, "drain": 0}

    def body(item: int) -> None:
        taken.append(item)
        time.sleep(0.5 if item == 0 else 0.02)  # a slow first step must not count

    ms = gpu_peers.per_step_ms(itertools.count(), 5, body,
                               wait=lambda: calls.__setitem__("wait", calls["wait"] + 1),
                               drain=lambda: calls.__setitem__("drain", calls["drain"] + 1))
    assert taken == [0, 1, 2, 3, 4, 5]
    assert calls == {"wait": 5, "drain": 2}
    assert 19.0 <= ms < 200.0  # 20 ms a step; generous above for a busy machine


# ---------------------------------------------------------------- the report


def fake_outcomes() -> dict[str, Outcome]:
    base = {"gpu": "Test GPU", "others_cores": 0.0}
    dali = {**base, "images_per_s": 5120.0, "loader_ms": 50.0, "start_s": 1.5, "matmuls": 9,
            "step_async_ms": 100.0, "step_synced_ms": 100.0, "both_async_ms": 100.0,
            "both_synced_ms": 125.0}
    cpu = {**dali, "images_per_s": 2560.0, "loader_ms": 100.0, "both_async_ms": 110.0,
           "both_synced_ms": 200.0}
    copy = {**base, "batch_mb": 38.5, "copy_ms": 2.0, "copy_gbps": 19.3, "torch": "2",
            "cuda": "13", "matmuls": 5, "step_async_ms": 6.0, "both_async_ms": 6.5,
            "step_synced_ms": 6.0, "both_synced_ms": 8.0}
    return {"dali": Outcome("ok", [dali]), "cpu": Outcome("ok", [cpu]),
            "copy": Outcome("ok", [copy]),
            "recipe": Outcome("ok", [{**cpu, "images_per_s": 1280.0, "loader_ms": 200.0}])}


def fake_result(outcomes: dict[str, Outcome]) -> GroupResult:
    meta = {"data": {"path": "x", "count": 10}, "dtype": "bfloat16", "batch_size": 256,
            "workers": 2, "repeats": 1, "batches": 30, "copy_factor": 3.0}
    return GroupResult("gpu", MACHINE, meta, outcomes, list(gpu.GROUP.peers))


def test_summary_derives_fractions_from_the_medians() -> None:
    summary = gpu.summarise(fake_outcomes())
    assert summary["dali"]["overlap_async"] == pytest.approx(1.0)  # c = max(100, 50)
    assert summary["dali"]["overlap_synced"] == pytest.approx(0.5)  # 25 of 50 ms serial
    assert summary["cpu"]["overlap_async"] == pytest.approx(0.9)  # (100 + 100 - 110) / 100
    assert summary["copy"]["hidden_async"] == pytest.approx(0.75)
    assert summary["copy"]["hidden_synced"] == pytest.approx(0.0)


def test_report_leads_with_the_answer() -> None:
    result = fake_result(fake_outcomes())
    details = gpu.GROUP.details(result)
    report = suite.group_report(gpu.GROUP.title, result, gpu.GROUP.panels(result), details)
    first = details[0]
    assert first.startswith("**On Test GPU: ") and 'decode="dali" 5,120 images/s (2.00×' in first
    assert 'decode="cpu" 2,560 images/s' in first
    assert "75% of it hidden" in first and "0% when every step waits" in first
    assert first in report and "| synced | 2.00 " in report and "+2.00" in report
    assert 'decode="dali" 1.5 s' in report  # start-up


def test_the_suite_panel_is_the_loaders_images_per_second() -> None:
    (panel,) = gpu.GROUP.panels(fake_result(fake_outcomes()))
    assert (panel.key, panel.title, panel.unit, panel.lead, panel.baseline) == \
        ("gpu", "Loading onto the GPU", "images/s", "dali", "cpu")
    assert [(e.name, e.values, e.ours) for e in panel.entries] == \
        [("dali", [5120.0], True), ("cpu", [2560.0], True), ("recipe", [1280.0], True)]


def test_the_recipe_run_is_a_row_of_the_overlap_table() -> None:
    result = fake_result(fake_outcomes())
    report = re.sub(" +", " ", "\n".join(gpu.GROUP.details(result)))
    assert "| recipe | async | 100.0 | 200.0 | 110.0 | 200.0 |" in report
    assert 'decode="cpu" 1.5 s; recipe 1.5 s.' in report  # start-up


def test_report_names_what_did_not_run() -> None:
    outcomes = fake_outcomes()
    outcomes["dali"] = Outcome("not installed (nvidia.dali)")
    line = gpu.headline(gpu.summarise(outcomes), outcomes)
    assert 'decode="dali": not installed (nvidia.dali)' in line and "×" not in line


# ---------------------------------------------------------------- the loader side, on the CPU


def test_endless_batches_run_on_across_epochs(shards: Path) -> None:
    import datapipe as dp

    transform = gpu_peers.gpu_transform("float32")
    with dp.Loader(shards, batch_size=4, num_workers=0, drop_last=True,
                   transform=transform) as loader:
        per_epoch = len(loader)
        images = list(itertools.islice(gpu_peers.endless(loader), per_epoch + 1))
    assert per_epoch == 2 and len(images) == 3
    assert images[0]["image"].shape == (4, 3, gpu_peers.CROP, gpu_peers.CROP)
    assert images[0]["image"].dtype == torch.float32


# ---------------------------------------------------------------- on a GPU


@pytest.mark.cuda
@needs_cuda
def test_copy_run_on_the_gpu() -> None:
    job = gpu_peers.Job(shards="", workers=1, batches=3, batch_size=8)
    result = gpu_peers.copy_run(job)
    assert result["copy_ms"] > 0 and result["matmuls"] >= 1
    for loop in gpu_peers.LOOPS:
        assert result[f"step_{loop}_ms"] > 0 and result[f"both_{loop}_ms"] > 0


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("decode", gpu.LOADERS)
def test_loader_run_on_the_gpu(shards: Path, decode: str) -> None:
    if decode == "dali":
        pytest.importorskip("nvidia.dali")
    pytest.importorskip("kornia")
    job = gpu_peers.Job(shards=str(shards), workers=1, batches=2, batch_size=4, step_ms=2.0)
    result = gpu_peers.loader_run(job, decode)
    assert result["images_per_s"] > 0 and result["loader_ms"] > 0
    assert set(gpu_peers.LOOPS) == {k.split("_")[1] for k in result if k.startswith("both_")}
