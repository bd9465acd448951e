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


@pytest.mark.parametrize("name, panels", [("text", ["text"]),
                                          ("convert", ["convert-images", "convert-text"])])
def test_text_and_convert_suites_run_every_installed_peer(tmp_path: Path, name: str,
                                                          panels: list[str]) -> None:
    assert suite.run(suite.Options.smoke_test((name,), tmp_path)) == 0
    data = check_outputs(tmp_path, panels)
    for panel in data["suites"][name]:
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
