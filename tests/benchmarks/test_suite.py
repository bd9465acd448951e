"""`datapipe bench --suite ... --smoke`: every installed peer really runs on tiny data, and the
JSON, Markdown and charts come out; a peer whose environment is missing is reported as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_loader, suite
from benchmarks.runs import module_absent
from benchmarks.suite_report import README_END, README_START, update_readme
from datapipe.errors import ArgumentError
from tests.conftest import run_cli_process

MISSING = bench_loader.Peer("absent-peer", "A peer without its environment", "photos",
                            bench_loader.torch_batches, ("no_such_module_for_this_peer",))


def installed_peers(entries: list[dict]) -> list[dict]:
    return [e for e in entries if not e["status"].startswith(("not installed", "skipped"))]


def check_outputs(out: Path, panels: list[str]) -> dict:
    data = json.loads((out / "suite.json").read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["versions"]["torch"]
    report = (out / "suite.md").read_text()
    for key in panels:
        png = out / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
        assert f"]({key}.png)" in report
    return data


@pytest.fixture
def with_missing_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_loader with one more peer, whose module is absent (as FFCV's venv may be)."""
    assert module_absent(MISSING.modules[0])
    monkeypatch.setattr(bench_loader, "PEERS", (*bench_loader.PEERS, MISSING))
    monkeypatch.setattr(bench_loader, "PEERS_BY_NAME",
                        {**bench_loader.PEERS_BY_NAME, MISSING.name: MISSING})


@pytest.mark.usefixtures("with_missing_peer")
def test_images_suite_runs_every_installed_peer(tmp_path: Path) -> None:
    assert suite.run(suite.Options.smoke_test(("images",), tmp_path)) == 0
    data = check_outputs(tmp_path, ["images"])
    (panel,) = data["suites"]["images"]
    ran = installed_peers(panel["entries"])
    assert {"torch", "datapipe", "ceiling"} <= {e["name"] for e in ran}
    for entry in ran:
        assert entry["status"] == "ok" and entry["median"] > 0, entry
    missing = next(e for e in panel["entries"] if e["name"] == MISSING.name)
    assert missing["status"] == "not installed (no_such_module_for_this_peer)"
    report = (tmp_path / "suite.md").read_text()
    assert "not installed (no_such_module_for_this_peer); install: bash tools/setup.sh" in report
    assert report.splitlines()[2].startswith("- **Image loading: datapipe Loader")
    assert "× torch DataLoader + PIL" in report and "× the fastest peer (" in report
    assert (tmp_path / "loader.md").is_file()  # the script's own detailed report


@pytest.mark.parametrize("name, panels", [("text", ["text", "text-planning"]),
                                          ("convert", ["convert-images", "convert-text"])])
def test_text_and_convert_suites_run_every_installed_peer(tmp_path: Path, name: str,
                                                          panels: list[str]) -> None:
    assert suite.run(suite.Options.smoke_test((name,), tmp_path)) == 0
    data = check_outputs(tmp_path, panels)
    for panel in data["suites"][name]:
        if panel["key"] == "text-planning":  # datapipe alone: seconds per 1M batches per budget
            assert all(e["ours"] and e["status"] == "ok" and e["median"] > 0
                       for e in panel["entries"]) and len(panel["entries"]) >= 3, panel
            continue
        ran = installed_peers(panel["entries"])
        assert any(e["ours"] for e in ran) and any(not e["ours"] for e in ran)
        for entry in ran:
            assert entry["status"] == "ok" and entry["median"] > 0, entry


def test_gpu_suite_says_it_skipped_without_cuda(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the gpu suite runs")
    result = run_cli_process("bench", "--suite", "gpu", "--smoke", "--out", tmp_path,
                             timeout=60)
    assert result.returncode == 0, result.stderr
    assert "skipped: no CUDA device" in result.stdout
    data = json.loads((tmp_path / "suite.json").read_text())
    (panel,) = data["suites"]["gpu"]
    assert [e["status"] for e in panel["entries"]] == ["skipped: no CUDA device"]
    assert "| bench_gpu and bench_handoff | skipped: no CUDA device" in \
        (tmp_path / "suite.md").read_text()


def test_readme_region_is_replaced_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Benchmarks\n{README_START}\nold figures\n{README_END}\n"
                      "\n## Next\nkept\n")
    update_readme(readme, "new figures\n![chart](docs/bench/images.png)")
    text = readme.read_text()
    assert "old figures" not in text and "new figures\n![chart]" in text
    assert text.endswith(f"{README_END}\n\n## Next\nkept\n")
    real = (suite.REPO / "README.md").read_text()  # the project's own README has the region
    readme.write_text(real)
    update_readme(readme, "regenerated")
    assert readme.read_text() == real.replace(real[real.index(README_START):
                                                   real.index(README_END)],
                                              f"{README_START}\nregenerated\n")
    readme.write_text("# no markers\n")
    with pytest.raises(ArgumentError, match="no <!-- bench:start"):
        update_readme(readme, "x")


def _machine(gpu: str, date: str) -> dict:
    return {"cpu": f"CPU of {gpu}", "cores": 2, "ram_gb": 24.0, "gpu": gpu, "python": "3.11",
            "pil": "pillow-simd", "versions": {"torch": "2.13.0"}, "date": date,
            "revision": "abc1234"}


def _gpu_panel(rate: float) -> list:
    return [suite.Panel("gpu", "Loading onto the GPU", "images/s",
                        [suite.Entry("ours", "datapipe", "ok", [rate, rate + 1], ours=True),
                         suite.Entry("dali", "DALI GPU pipeline", "ok", [rate / 2] * 2)],
                        lead="ours", baseline="dali")]


def test_readme_keeps_the_suites_not_run_and_gpu_figures_from_a_gpu_machine(
        tmp_path: Path) -> None:
    """The GPU suite can be run alone on a GPU machine: the README then shows its figures under
    that machine, and the other suites' as recorded, under theirs; a later run without CUDA
    keeps the GPU figures."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{README_START}\n{README_END}\n")
    charts = tmp_path / "docs" / "bench"
    opts = suite.Options(("images", "gpu"), workers=2)
    images = [suite.Panel("images", "Image loading", "images/s",
                          [suite.Entry("ours", "datapipe", "ok", [900.0, 1000.0], ours=True),
                           suite.Entry("torch", "torch DataLoader", "ok", [300.0, 310.0])],
                          lead="ours", baseline="torch")]
    cpu_box = _machine("none", "2026-11-23")
    suite.write_readme(cpu_box, {"images": images, "gpu": [suite.skipped_gpu_panel()]}, opts,
                       readme, charts)
    first = readme.read_text()
    assert first.count("Machine: CPU of none") == 1 and "skipped: no CUDA device" in first
    assert "![Image loading](docs/bench/images.png)" in first

    gpu_box = _machine("NVIDIA H200", "2026-11-24")
    suite.write_readme(gpu_box, {"gpu": _gpu_panel(4000.0)},
                       suite.Options(("gpu",), workers=16), readme, charts)
    both = readme.read_text()
    assert "Machine: CPU of none" in both and "Machine: CPU of NVIDIA H200" in both
    assert both.index("CPU of none") < both.index("#### gpu") < both.index("CPU of NVIDIA H200")
    assert "datapipe: 950 images/s, 3.11× torch DataLoader" in both
    assert "datapipe: 4,000 images/s, 2.00× DALI GPU pipeline" in both
    assert "skipped: no CUDA device" not in both
    assert (charts / "gpu.png").is_file() and "![Loading onto the GPU](docs/bench/gpu.png)" in both

    suite.write_readme(cpu_box, {"gpu": [suite.skipped_gpu_panel()]}, opts, readme, charts)
    assert readme.read_text() == both
    record = json.loads((charts / "results.json").read_text())
    assert list(record) == ["images", "gpu"]
    assert record["gpu"]["machine"]["gpu"] == "NVIDIA H200"

    (charts / "results.json").write_text("{not json")
    with pytest.raises(ArgumentError, match=r"results\.json: not a record of benchmark results"):
        suite.write_readme(cpu_box, {"images": images}, opts, readme, charts)
