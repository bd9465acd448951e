"""benchmarks/bench_handoff.py: the arithmetic, the report, and a tiny real run (the CI smoke
test) that times next() on every path this machine has and says which it skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import bench_handoff, common
from benchmarks.runs import Outcome
from tests.conftest import convert
from tests.imagegen import make_image_folder


def test_percentile_interpolates_between_ranks() -> None:
    assert bench_handoff.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert bench_handoff.percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert bench_handoff.percentile([5.0], 95) == 5.0


def _handoff(cpu: float) -> dict:
    return {"cpu": {"median": cpu, "p95": cpu * 2}, "wall": {"median": cpu + 1, "p95": cpu + 2},
            "dtype": "torch.uint8", "others_cores": 0.0}


def test_summary_ratios_and_headline() -> None:
    outcomes = {name: Outcome("skipped: no CUDA device") for name in bench_handoff.PATHS_BY_NAME}
    outcomes["cpu"] = Outcome("ok", [_handoff(0.4), _handoff(0.6), _handoff(0.5)])
    outcomes["cpu-float32"] = Outcome("ok", [_handoff(0.7)])
    outcomes["rate-uint8"] = Outcome("ok", [{"rate": 1000.0, "cpu_rate": 500.0,
                                             "others_cores": 0.0}])
    outcomes["rate-float32"] = Outcome("ok", [{"rate": 850.0, "cpu_rate": 450.0,
                                               "others_cores": 0.0}])
    summary = bench_handoff.summarise(outcomes)
    assert summary["cpu"]["cpu_median"] == 0.5 and summary["cpu"]["cpu_p95"] == 1.0
    assert summary["rate-float32"]["rate_ratio"] == 0.85
    assert summary["rate-float32"]["cpu_rate_ratio"] == 0.9
    line = bench_handoff.headline(summary, 256)
    assert line.startswith("**The training thread spends at most 0.70 ms")
    assert "worst path: cpu-float32; goal ≤ 1 ms: met" in line
    assert "runs at 0.85 of uint8's images/s" in line and "goal ≥ 0.8: met" in line
    info = {"cpu": "a CPU", "cores": 2, "ram_gb": 8, "python": "3.11", "pil": "PIL"}
    meta = {"batch_size": 256, "workers": 2, "batches": 40, "repeats": 3, "rate_batch": 64,
            "rate_workers": 2, "epochs": 2, "torch": "2.13", "revision": "abc"}
    report = bench_handoff.render(info, meta, outcomes)
    assert "| cuda " in report and "skipped: no CUDA device" in report


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("handoff")
    src = make_image_folder(root / "src", classes=2, per_class=5, size=(72, 48))
    convert("images", src, root / "out", "--short-side", "48")
    return root / "out"


def test_a_tiny_run_measures_what_it_can_and_says_what_it_skipped(
        shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_handoff, "BENCH_DATA", tmp_path / "data")
    monkeypatch.setattr(common, "BENCH_RESULTS", tmp_path / "results")
    code = bench_handoff.main(["--shards", str(shards), "--batch-size", "2", "--workers", "1",
                               "--batches", "2", "--rate-batch", "2", "--rate-workers", "1",
                               "--epochs", "1", "--repeats", "1", "--settle", "0", "--wait",
                               "0.05", "--skip", "cpu-bfloat16,dali-cpu,rate-bfloat16"])
    assert code == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "results" / "handoff.json").read_text())
    assert (tmp_path / "results" / "handoff.md").read_text().startswith("# Training-thread")
    for name in ("cpu", "cpu-float32", "rate-uint8", "rate-float32"):
        assert data["outcomes"][name]["status"] == "ok", data["outcomes"][name]["status"]
    for name in ("cpu", "cpu-float32"):
        assert data["summary"][name]["cpu_median"] > 0
    assert data["summary"]["cpu-float32"]["dtype"] == "torch.float32"
    assert data["summary"]["rate-float32"]["rate_ratio"] > 0
    if not torch.cuda.is_available():
        for name in ("cuda", "cuda-normalize", "dali"):
            assert f"{name}: skipped (needs a CUDA device)" in out
            assert data["outcomes"][name]["status"] == "skipped: no CUDA device"


def test_a_throughput_run_too_short_for_the_cpu_clock_has_no_cpu_ratio() -> None:
    outcomes = {name: Outcome("skipped") for name in bench_handoff.PATHS_BY_NAME}
    for name, cpu_rate in (("rate-uint8", 0.0), ("rate-float32", 400.0)):
        outcomes[name] = Outcome("ok", [{"rate": 900.0, "cpu_rate": cpu_rate,
                                         "others_cores": 0.0}])
    summary = bench_handoff.summarise(outcomes)
    assert summary["rate-float32"]["rate_ratio"] == 1.0
    assert summary["rate-float32"]["cpu_rate_ratio"] != summary["rate-float32"]["cpu_rate_ratio"]
