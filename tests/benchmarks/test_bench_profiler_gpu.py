"""benchmarks/bench_profiler_gpu.py: the no-CUDA exits, the truth arithmetic, the report; the
runs themselves only where CUDA and torchvision are present."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import bench_profiler_gpu as bench
from benchmarks.scripts import ROOT
from tests.conftest import convert
from tests.imagegen import make_image_folder


def run_script(*args: str) -> subprocess.CompletedProcess:
    """The script as a user runs it, with every GPU hidden (so also on a CUDA machine)."""
    return subprocess.run([sys.executable, "-m", bench.__name__, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def test_without_cuda_it_says_so_and_exits_0_or_2() -> None:
    proc = run_script()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == bench.SKIP_LINE
    proc = run_script("--require-cuda")
    assert proc.returncode == 2 and bench.SKIP_LINE in proc.stderr


def test_bad_arguments_are_refused() -> None:
    proc = run_script("--decoders", "cpu,gpu")
    assert proc.returncode == 2 and "--decoders takes cpu and/or dali" in proc.stderr


def _row(real: float, profiler: float, regime: str) -> dict:
    return {"model": "resnet50", "decode": "cpu", "synthetic_ips": 1000.0, "real_ips": real,
            "profiler": profiler, "host": 0.13, "regime": regime, "timing": "device",
            "verdict": f"{regime}: ...", "oracle": "oracle: steps run 1.0% faster", "blame": None}


def test_truth_and_goal() -> None:
    assert bench.truth_fraction(890.0, 1000.0) == pytest.approx(0.11)
    near = bench.judge(_row(990.0, 0.012, "compute-bound"))  # truth 1%, profiler 1.2%
    assert near["truth"] == pytest.approx(0.01) and near["within_goal"]
    assert not bench.judge(_row(990.0, 0.13, "input-bound"))["within_goal"]  # the old misread
    assert not bench.judge(_row(890.0, 0.11, "compute-bound"))["within_goal"]  # wrong verdict
    assert bench.judge(_row(600.0, 0.38, "input-bound"))["within_goal"]


def test_report_lists_every_run_and_failures() -> None:
    rows = [bench.judge(_row(990.0, 0.012, "compute-bound")),
            {"model": "resnet50", "decode": "dali", "synthetic_ips": 1000.0,
             "error_text": "ArgumentError: decode='dali' needs NVIDIA DALI"}]
    info = {"cpu": "a CPU", "cores": 16, "gpu": "a GPU"}
    text = bench.render(info, bench.Job("s", 16, 100), rows)
    assert "**1 of 1 runs within 3 points of the truth with the right verdict** (1 failed)" in text
    assert "| resnet50 | cpu " in text and "+0.2" in text and "failed: ArgumentError" in text
    assert "oracle: steps run 1.0% faster" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_the_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    src = make_image_folder(tmp_path / "src", classes=2, per_class=8, size=(72, 48))
    convert("images", src, tmp_path / "out", "--short-side", "48")
    job = bench.Job(str(tmp_path / "out"), workers=1, steps=3, batch_size=4)
    (row,) = bench.measure_model("resnet18", ["cpu"], job)
    assert "error_text" not in row, row.get("error_text")
    assert row["timing"] == "device" and 0 <= row["profiler"] <= 1
