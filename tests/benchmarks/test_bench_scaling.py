"""benchmarks/bench_scaling.py end to end on tiny inputs: real runs in child processes, a
report that says whether the output is identical and how busy the main process was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_scaling
from tests.imagegen import make_image_folder


def test_worker_counts() -> None:
    assert bench_scaling.default_workers(16) == [1, 2, 4, 8, 16]
    assert bench_scaling.default_workers(6) == [1, 2, 4, 6]
    assert bench_scaling.default_workers(1) == [1]
    assert bench_scaling.parse_workers("4,2") == [1, 2, 4]  # 1 is the reference


def test_small_run_reports_scaling_identity_and_the_main_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # bench-data/ and bench-results/ are under the current folder
    photos = make_image_folder(tmp_path / "photos", classes=2, per_class=6, size=(160, 120))
    code = bench_scaling.main(["--workers", "1,2", "--repeats", "1", "--photos", str(photos),
                               "--text-mb", "1", "--tokenizer", "bytes",
                               "--work-dir", str(tmp_path / "runs")])
    assert code == 0
    data = json.loads((tmp_path / "bench-results" / "scaling.json").read_text())
    for kind in ("images", "text"):
        rows = data["results"][kind]["rows"]
        assert [r["workers"] for r in rows] == [1, 2]
        assert all(r["identical"] and r["rate"] > 0 for r in rows)
        assert rows[0]["efficiency"] == 1.0
        assert rows[1]["workers_cpu_s"] > 0 and rows[1]["main_busy"] > 0
        assert data["results"][kind]["profile"], "the main thread's profile"
    report = (tmp_path / "bench-results" / "scaling.md").read_text()
    assert "## images" in report and "## text" in report and "identical to 1" in report
