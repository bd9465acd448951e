"""The handoff group (datapipe.suite.groups.handoff): the arithmetic, the report, and a tiny real
run (the CI smoke test) that times next() on every path this machine has and says which it
skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from datapipe.suite import suite
from datapipe.suite.groups import handoff
from datapipe.suite.machine import describe
from datapipe.suite.options import Options
from datapipe.suite.runner import NO_CUDA, GroupResult, Outcome, run_group
from tests.conftest import convert
from tests.imagegen import make_image_folder

MACHINE = {"cpu": "a CPU", "cores": 2, "ram_gb": 8, "gpu": "none", "python": "3.11",
           "pil": "PIL", "versions": {"torch": "2.13"}, "date": "2026-11-24", "revision": "abc"}


def test_percentile_interpolates_between_ranks() -> None:
    assert handoff.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert handoff.percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert handoff.percentile([5.0], 95) == 5.0


def _handoff(cpu: float, batch_mb: float = 12.6) -> dict:
    return {"cpu_median": cpu, "cpu_p95": cpu * 2, "wall_median": cpu + 1, "wall_p95": cpu + 2,
            "dtype": "torch.uint8", "batch_mb": batch_mb, "others_cores": 0.0}


def test_summary_ratios_and_headline() -> None:
    outcomes = {name: Outcome(NO_CUDA) for name in handoff.PATHS}
    outcomes["cpu"] = Outcome("ok", [_handoff(0.4), _handoff(0.6), _handoff(0.5)])
    outcomes["cpu-float32"] = Outcome("ok", [_handoff(0.7)])
    outcomes["patches-siglip2"] = Outcome("ok", [_handoff(0.9, 25.2)])
    outcomes["rate-uint8"] = Outcome("ok", [{"rate": 1000.0, "cpu_rate": 500.0,
                                             "others_cores": 0.0}])
    outcomes["rate-float32"] = Outcome("ok", [{"rate": 850.0, "cpu_rate": 450.0,
                                               "others_cores": 0.0}])
    summary = handoff.summarise(outcomes)
    assert summary["cpu"]["cpu_median"] == 0.5 and summary["cpu"]["cpu_p95"] == 1.0
    assert summary["rate-float32"]["rate_ratio"] == 0.85
    assert summary["rate-float32"]["cpu_rate_ratio"] == 0.9
    line = handoff.headline(summary, 256)
    assert line.startswith("**The training thread spends at most 0.70 ms")
    assert "worst path: cpu-float32; goal ≤ 1 ms: met" in line
    assert "PatchLoader's at most 0.90 ms (patches-siglip2, 25 MB of pixel_values)" in line
    assert "runs at 0.85 of uint8's images/s" in line and "goal ≥ 0.8: met" in line
    meta = {"batch_size": 256, "workers": 2, "batches": 40, "repeats": 3, "rate_batch": 64,
            "rate_workers": 2, "epochs": 2}
    result = GroupResult("handoff", MACHINE, meta, outcomes, list(handoff.GROUP.peers))
    (panel,) = panels = handoff.GROUP.panels(result)
    report = suite.group_report(handoff.GROUP.title, result, panels,
                                handoff.GROUP.details(result))
    assert "| cuda " in report and "skipped: no CUDA device" in report
    assert (panel.key, panel.title, panel.unit, panel.lead, panel.higher_is_better) == \
        ("handoff", "Training-thread CPU per next()", "ms", "cuda", False)
    assert [e.name for e in panel.entries] == handoff.HANDOFF
    assert panel.entry("cpu").values == [0.4, 0.6, 0.5]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("handoff")
    src = make_image_folder(root / "src", classes=2, per_class=10, size=(72, 48))
    convert("images", src, root / "out", "--short-side", "48")
    return root / "out"


def test_a_tiny_run_measures_what_it_can_and_says_what_it_skipped(
        shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(handoff, "datapipe_shards",
                        lambda *_: (shards, {"path": str(shards), "count": 20}))
    skip = frozenset(f"handoff:{name}" for name in ("cpu-bfloat16", "dali-cpu", "rate-bfloat16"))
    opts = Options.smoke_test(("gpu",), tmp_path / "out", workers=1, data=tmp_path / "data",
                              skip=skip)
    result = run_group(handoff.GROUP, opts, describe())
    out = capsys.readouterr().out
    data = json.loads(json.dumps(result.data()))
    report = suite.group_report(handoff.GROUP.title, result, handoff.GROUP.panels(result),
                                handoff.GROUP.details(result))
    assert report.startswith("# Training-thread")
    for name in ("cpu", "cpu-float32", "patches-siglip2", "rate-uint8", "rate-float32"):
        assert data["outcomes"][name]["status"] == "ok", data["outcomes"][name]["status"]
    for name in ("cpu-bfloat16", "dali-cpu", "rate-bfloat16"):
        assert data["outcomes"][name]["status"] == "skipped"
    summary = handoff.summarise(result.outcomes)
    for name in ("cpu", "cpu-float32", "patches-siglip2"):
        assert summary[name]["cpu_median"] > 0
    assert summary["cpu-float32"]["dtype"] == "torch.float32"
    assert summary["patches-siglip2"]["dtype"] == "torch.float32"
    assert summary["patches-siglip2"]["batch_mb"] > summary["cpu"]["batch_mb"]
    assert summary["rate-float32"]["rate_ratio"] > 0
    if not torch.cuda.is_available():
        for name in ("cuda", "cuda-normalize", "dali", "patches-siglip2-cuda",
                     "patches-qwen2_vl-cuda"):
            assert f"{name}: skipped (needs a CUDA device)" in out
            assert data["outcomes"][name]["status"] == NO_CUDA


def test_a_throughput_run_too_short_for_the_cpu_clock_has_no_cpu_ratio() -> None:
    outcomes = {name: Outcome("skipped") for name in handoff.PATHS}
    for name, cpu_rate in (("rate-uint8", 0.0), ("rate-float32", 400.0)):
        outcomes[name] = Outcome("ok", [{"rate": 900.0, "cpu_rate": cpu_rate,
                                         "others_cores": 0.0}])
    summary = handoff.summarise(outcomes)
    assert summary["rate-float32"]["rate_ratio"] == 1.0
    assert summary["rate-float32"]["cpu_rate_ratio"] != summary["rate-float32"]["cpu_rate_ratio"]
