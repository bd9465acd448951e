"""The convert group: `datapipe bench --suite convert --smoke` runs every installed peer on tiny
data and writes JSON, Markdown and charts; --before runs datapipe's conversions from another
checkout too, fidelity included; goals and warnings read from the runs as they should."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import datapipe
from datapipe.suite import Options, run
from datapipe.suite.groups.convert import GROUP
from datapipe.suite.runner import GroupResult, Outcome
from tests.suite.outputs import check_outputs, installed_peers

CHECKOUT = Path(datapipe.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Photos and corpus shared by this module's runs."""
    return tmp_path_factory.mktemp("bench-data")




def test_convert_suite_runs_every_installed_peer(tmp_path: Path, data: Path) -> None:
    assert run(Options.smoke_test(("convert",), tmp_path, data=data)) == 0
    suite = check_outputs(tmp_path, ["convert-images", "convert-sources", "convert-writer",
                                     "convert-text"])
    for panel in suite["suites"]["convert"]:
        ran = installed_peers(panel["entries"])
        assert any(e["ours"] for e in ran) and any(not e["ours"] for e in ran)
        for entry in ran:
            assert entry["status"] == "ok" and entry["median"] > 0, entry
    assert "## Goals" in (tmp_path / "convert.md").read_text()  # the group's own report


def test_before_runs_datapipe_from_another_checkout_with_fidelity(tmp_path: Path,
                                                                   data: Path) -> None:
    opts = Options.smoke_test(("convert",), tmp_path, data=data, before=CHECKOUT,
                              skip=frozenset({"litdata", "webdataset", "text"}))
    assert run(opts) == 0
    meta = json.loads((tmp_path / "convert.json").read_text())["meta"]
    assert set(meta["psnr"]) == {"datapipe", "datapipe-before"}
    assert all(s["median_db"] > 25 and not s["wrong_size"] for s in meta["psnr"].values())
    report = (tmp_path / "convert.md").read_text()
    assert "× --before's" in report and "(goal: within 0.5 dB, " in report
    assert "| **datapipe convert_images (--before)** |" in report


def fake_run(items: int, seconds: float, tokens: int | None = None) -> dict:
    counts = {"items": items, **({"tokens": tokens} if tokens else {})}
    return {**counts, "seconds": seconds, "import_s": 0.1, "cpu_s": 2.0, "others_cores": 0.0,
            "output_bytes": 2_000_000, "rate": (tokens or items) / seconds}


def fake_result(litdata_s: float, litdata_items: int = 100,
                datasets_tokens: int = 5000) -> GroupResult:
    outcomes = {"datapipe": Outcome("ok", [fake_run(100, 1.0)]),
                "litdata": Outcome("ok", [fake_run(litdata_items, litdata_s)]),
                "webdataset": Outcome("not installed (webdataset)"),
                "datapipe-text-bytes": Outcome("skipped"),
                "datapipe-text-wordpiece": Outcome("ok", [fake_run(10, 0.5, 5000)]),
                "datasets": Outcome("ok", [fake_run(10, 1.0, datasets_tokens)]),
                "datapipe-tars": Outcome("ok", [fake_run(100, 1.05)]),
                "datapipe-parquet": Outcome("ok", [fake_run(100, 1.25)]),
                "litdata-tars": Outcome("ok", [fake_run(100, 3.0)]),
                "litdata-parquet": Outcome("not installed (litdata)"),
                "webdataset-tars": Outcome("skipped"),
                "mds-tars": Outcome("ok", [fake_run(100, 2.0)]),
                "mds-parquet": Outcome("not installed (run bash tools/setup_vision.sh)"),
                "mds-writer": Outcome("skipped"),
                "datapipe-writer": Outcome("ok", [{**fake_run(50, 1.0), "rate": 700.0}]),
                "disk": Outcome("ok", [{**fake_run(50, 1.0), "rate": 1000.0}])}
    psnr = {"median_db": 34.6, "images": 4, "wrong_size": 0}
    meta = {"photos": {"count": 100, "megabytes": 5.0, "min_short_side": 300,
                       "max_short_side": 640}, "workers": 2, "repeats": 1, "retries": 0,
            "before": None, "text": {"megabytes": 1.0}, "psnr": {"datapipe": psnr},
            "writer_mb": 1000,
            "full_decode_psnr": {**psnr, "median_db": 34.9}}
    return GroupResult("convert", {}, meta, outcomes, list(GROUP.peers))


def test_panels_goals_and_warnings_read_from_the_runs() -> None:
    images, sources, writer, text = GROUP.panels(fake_result(2.5))
    assert (sources.key, sources.lead, sources.baseline, writer.key, writer.unit, writer.lead,
            writer.baseline) == ("convert-sources", "datapipe-tars", "litdata-tars",
                                 "convert-writer", "MB/s", "datapipe-writer", "disk")
    assert writer.entry("disk").reference and not writer.entry("datapipe-writer").reference
    assert [e.name for e in sources.entries][:3] == ["datapipe", "litdata", "webdataset"]
    assert (images.key, images.title, images.unit, images.lead, images.baseline) == \
        ("convert-images", "Converting images", "images/s", "datapipe", "litdata")
    assert (text.key, text.title, text.unit, text.lead, text.baseline) == \
        ("convert-text", "Tokenizing text", "tokens/s", "datapipe-text-wordpiece", "datasets")
    assert [(e.name, e.values, e.ours) for e in images.entries] == \
        [("datapipe", [100.0], True), ("litdata", [40.0], False), ("webdataset", [], False)]
    assert text.entry("datapipe-text-wordpiece").values == [10_000.0]
    report = "\n".join(GROUP.details(fake_result(2.5)))
    assert "datapipe: 100 images/s = 2.50× LitData's 40 images/s (goal ≥ 2×: met)" in report
    assert "0.30 dB apart (goal: within 0.5 dB, met)" in report
    assert "datapipe-tars: 95 images/s = 0.95× from the folder 100 images/s (goal ≥ 0.9×: met)" \
        in report
    assert "datapipe-parquet: 80 images/s = 0.80× from the folder 100 images/s (goal ≥ 0.9×: " \
        "NOT met)" in report
    assert "datapipe-tars: 95 images/s = 2.86× LitData's from the tars 33 images/s (goal ≥ 2×: " \
        "met)" in report
    assert "datapipe-parquet ≥ 2× LitData's from the Parquet images/s: not measured." in report
    assert "datapipe-tars: 95 images/s = 1.90× MDSWriter's from the tars 50 images/s (goal ≥ " \
        "1.5×: met)" in report
    assert "datapipe-parquet ≥ 1.5× MDSWriter's from the Parquet images/s: not measured." \
        in report
    assert "datapipe-writer: 700 MB/s = 0.70× the disk's sequential 1,000 MB/s (goal ≥ 0.8×: " \
        "NOT met)" in report
    assert "Warning" not in report and "converted" not in report
    report = "\n".join(GROUP.details(fake_result(1.5, litdata_items=99, datasets_tokens=5001)))
    assert "= 1.52× LitData's 66 images/s (goal ≥ 2×: NOT met)" in report
    assert "LitData optimize() converted 99 of the 100 photos." in report
    assert "Warning: HF datasets .map(num_proc) (wordpiece) made 5,001 tokens, datapipe 5,000; " \
        "their tokens/s are not comparable." in report
