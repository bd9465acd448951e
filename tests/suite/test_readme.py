"""The README's benchmark region: replaced between its markers, and kept for the suites a run
did not measure (the GPU figures come from a GPU machine, the rest from another)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datapipe.errors import ArgumentError
from datapipe.suite import Options, suite
from datapipe.suite.report import README_END, README_START, Entry, Panel, update_readme

REPO = Path(__file__).resolve().parents[2]


def test_readme_region_is_replaced_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Benchmarks\n{README_START}\nold figures\n{README_END}\n"
                      "\n## Next\nkept\n")
    update_readme(readme, "new figures\n![chart](docs/bench/images.png)")
    text = readme.read_text()
    assert "old figures" not in text and "new figures\n![chart]" in text
    assert text.endswith(f"{README_END}\n\n## Next\nkept\n")
    real = (REPO / "README.md").read_text()  # the project's own README has the region
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
    return [Panel("gpu", "Loading onto the GPU", "images/s",
                  [Entry("ours", "datapipe", "ok", [rate, rate + 1], ours=True),
                   Entry("dali", "DALI GPU pipeline", "ok", [rate / 2] * 2)],
                  lead="ours", baseline="dali")]


def _skipped_gpu_panel() -> Panel:
    return Panel("gpu", "Loading onto the GPU", "images/s",
                 [Entry("gpu", "GPU loading and hand-off", suite.NO_CUDA)])


def test_readme_keeps_the_suites_not_run_and_gpu_figures_from_a_gpu_machine(
        tmp_path: Path) -> None:
    """The GPU suite can be run alone on a GPU machine: the README then shows its figures under
    that machine, and the other suites' as recorded, under theirs; a later run without CUDA
    keeps the GPU figures."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{README_START}\n{README_END}\n")
    charts = tmp_path / "docs" / "bench"
    opts = Options(("images", "gpu"), workers=2)
    images = [Panel("images", "Image loading", "images/s",
                    [Entry("ours", "datapipe", "ok", [900.0, 1000.0], ours=True),
                     Entry("torch", "torch DataLoader", "ok", [300.0, 310.0])],
                    lead="ours", baseline="torch")]
    cpu_box = _machine("none", "2026-11-23")
    suite.write_readme(cpu_box, {"images": images, "gpu": [_skipped_gpu_panel()]}, opts,
                       readme)
    first = readme.read_text()
    assert first.count("Machine: CPU of none") == 1 and "skipped: no CUDA device" in first
    assert "![Image loading](docs/bench/images.png)" in first

    gpu_box = _machine("NVIDIA H200", "2026-11-24")
    suite.write_readme(gpu_box, {"gpu": _gpu_panel(4000.0)}, Options(("gpu",), workers=16),
                       readme)
    both = readme.read_text()
    assert "Machine: CPU of none" in both and "Machine: CPU of NVIDIA H200" in both
    assert both.index("CPU of none") < both.index("#### gpu") < both.index("CPU of NVIDIA H200")
    assert "datapipe: 950 images/s, 3.11× torch DataLoader" in both
    assert "datapipe: 4,000 images/s, 2.00× DALI GPU pipeline" in both
    assert "skipped: no CUDA device" not in both
    assert (charts / "gpu.png").is_file() and "![Loading onto the GPU](docs/bench/gpu.png)" in both

    suite.write_readme(cpu_box, {"gpu": [_skipped_gpu_panel()]}, opts, readme)
    assert readme.read_text() == both
    record = json.loads((charts / "results.json").read_text())
    assert list(record) == ["images", "gpu"]
    assert record["gpu"]["machine"]["gpu"] == "NVIDIA H200"

    (charts / "results.json").write_text("{not json")
    with pytest.raises(ArgumentError, match=r"results\.json: not a record of benchmark results"):
        suite.write_readme(cpu_box, {"images": images}, opts, readme)


def test_an_unknown_skip_name_is_refused_before_any_work(tmp_path: Path) -> None:
    opts = Options(("images",), out=tmp_path / "out", skip=frozenset({"torch", "tf"}))
    with pytest.raises(ArgumentError, match=r"--skip: no tool tf in suite\(s\) images$"):
        suite.run(opts)
    assert not (tmp_path / "out").exists()


def test_with_before_a_twin_can_be_skipped_by_its_own_name(tmp_path: Path) -> None:
    """Skipping a peer leaves its --before twin to run (a run of the twin alone); the twin is
    skipped by its own name, which only --before makes known."""
    twin = frozenset({"patches:datapipe-siglip2-before"})
    (tmp_path / "datapipe").mkdir()  # a checkout, as --before checks one
    suite.check_skip(Options(("patches",), out=tmp_path, skip=twin, before=tmp_path))
    with pytest.raises(ArgumentError, match=r"--skip: no tool patches:datapipe-siglip2-before"):
        suite.check_skip(Options(("patches",), out=tmp_path, skip=twin))
