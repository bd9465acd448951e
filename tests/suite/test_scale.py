"""The scale suite at smoke size (10^3 and 10^4 documents and images): every row runs each size
in a fresh process and the reports judge the goals; its corpora are what DatasetWriter writes
for the same samples; the goals and the extrapolation read the figures right; --before runs
datapipe's rows from another checkout; --scale-max picks the sizes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from datapipe.format.dataset import Dataset
from datapipe.suite import Options, run
from datapipe.suite.groups import scale, scale_report
from datapipe.suite.groups import scale_peers as sp
from datapipe.suite.runner import GroupResult, Outcome
from tests.suite.outputs import check_outputs

DATA = Path(__file__).resolve().parents[2] / "bench-data"  # kept between runs, as the suite's
ROWS = ("tokens-w1", "tokens-r0of8", "tokens-mix", "tokens-memmap", "images-w1", "images-r0of8",
        "images-mix")
SIZES = ("1000", "10000")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str, Path]:
    """suite.json's data, suite.md, scale.md and the folder of `bench --suite scale --smoke`."""
    out = tmp_path_factory.mktemp("scale")
    assert run(Options.smoke_test(("scale",), out, data=DATA)) == 0
    data = check_outputs(out, ["scale-tokens", "scale-images"])
    return data, (out / "suite.md").read_text(), (out / "scale.md").read_text(), out


def test_every_row_measures_every_size_in_a_process_of_its_own(smoke: tuple) -> None:
    data = smoke[0]
    outcomes = data["groups"]["scale"]["outcomes"]
    assert set(outcomes) == set(ROWS)
    for name in ROWS:
        assert outcomes[name]["status"] == "ok", name
        (record,) = outcomes[name]["runs"]
        assert tuple(record["sizes"]) == SIZES, name
        for size, figures in record["sizes"].items():
            for key in ("construct_s", "first_batch_s", "resume_s"):
                assert 0 < figures[key] < figures["wall_s"], (name, size, key)
            assert figures["training_mb"] > 20, (name, size)  # an interpreter and torch
            # The loaders' two workers hold memory of their own; the floor has none.
            assert (figures["workers_mb"] > 20) == (name != "tokens-memmap"), (name, size)
            # Resumed mid-epoch: a state saved after some batches, not at the end.
            assert figures["resumed_at"] >= 1 and figures["resumed_mid_epoch"], (name, size)
    meta = data["groups"]["scale"]["meta"]
    assert meta["sizes"] == {"tokens": [1000, 10000], "images": [1000, 10000]}
    for part in ("tokens", "images"):
        for size in SIZES:
            with Dataset(Path(meta["corpora"][part][size]) / "dataset") as ds:
                assert len(ds) == int(size)


def test_the_reports_judge_the_goals_and_draw_log_charts(smoke: tuple) -> None:
    _, suite_md, own, out = smoke
    assert suite_md.count("### TokenLoader, first batch at 10,000 documents") == 1
    assert "### Loader, first batch at 10,000 images" in suite_md
    for goal in ("first batch ≤ 1 s at 10,000 documents: tokens-w1 ",
                 "resume, first batch ≤ 1 s at 10,000 images: images-w1 ",
                 "private memory at 10,000 ≤ 300 MB beyond that at 1,000: tokens-w1 ",
                 "tokens-r0of8 no dearer than tokens-w1 (≤ 1.1×, or within 0.1 s / 20 MB) at "
                 "10,000: first batch "):
        assert goal in suite_md and f"- {goal}" in own
    assert own.count("(met)") + own.count("(NOT met)") >= 14  # 7 goals per loader, each judged
    assert "| row " in own and "| training process MB | workers MB | resume, first batch s |" \
        in own
    assert table_row(own, "nanoGPT memmap sampler (no plan)", "10,000")
    assert "Extrapolated to 1,000,000,000 documents (not measured" in own
    for part in ("tokens", "images"):
        assert f"]({f'scale-{part}-sizes.png'})" in own
        assert (out / f"scale-{part}-sizes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Pss_Anon + Pss_Shmem" in own


def table_row(markdown: str, *cells: str) -> list[str]:
    """The cells of the first table row of `markdown` that begins with these cells."""
    for line in markdown.splitlines():
        found = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and found[:len(cells)] == list(cells):
            return found
    return []


def test_the_corpora_are_what_dataset_writer_writes() -> None:
    """The fast writer's shards are byte for byte DatasetWriter's for the same samples."""
    root = DATA / "scale-writer-check"
    shutil.rmtree(root, ignore_errors=True)
    try:
        fast = root / "fast"
        fast.mkdir(parents=True)
        sp.write_tokens(fast, 3000)
        sp.write_images(fast / "images", 50)
        lengths, ids = next(sp.document_chunks(3000))
        documents = np.split(ids, np.cumsum(lengths)[:-1])
        with dp.DatasetWriter(root / "tokens", {"tokens": "uint16[]"}) as writer:
            for document in documents:
                writer.write({"tokens": document})
        classes = [f"class-{i}" for i in range(sp.CLASSES)]
        with dp.DatasetWriter(root / "images", {"image": "jpeg", "label": "int64"},
                              classes=classes) as writer:
            for i in range(50):
                writer.write({"image": sp.tiny_jpeg(), "label": i % sp.CLASSES})
        for made, reference in ((fast / "dataset", root / "tokens"),
                                (fast / "images" / "dataset", root / "images")):
            with Dataset(made) as ours, Dataset(reference) as theirs:
                assert ours.manifest == theirs.manifest
        assert (fast / "train.bin").read_bytes() == np.concatenate(documents).tobytes()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sweep(**sizes: tuple[float, float, float]) -> dict:
    """A run's record: (first batch s, resume s, MB) at each size."""
    return {"others_cores": 0.0, "sizes": {
        size.removeprefix("n"): {"construct_s": 0.01, "first_batch_s": first, "resume_s": resume,
                                 "training_mb": mb / 2, "workers_mb": mb / 2}
        for size, (first, resume, mb) in sizes.items()}}


def test_goals_and_extrapolation_read_the_slope() -> None:
    """Rank 0 of 1 flat, rank 0 of 8 growing 1 µs and 100 bytes per document: the goals at
    10^8 are judged where measured, extrapolated (and not judged) where not."""
    flat = sweep(n100000=(0.2, 0.2, 200.0), n1000000=(0.2, 0.25, 200.0))
    growing = sweep(n100000=(0.3, 0.3, 210.0), n1000000=(1.2, 1.2, 210.0 + 0.9e6 * 100 / 2**20))
    peers = [p for p in scale.GROUP.peers if p.tag == "tokens" and p.name != "tokens-mix"]
    result = GroupResult("scale", {}, {
        "sizes": {"tokens": [10**5, 10**6, 10**7, 10**8], "images": []},
        "goal_sizes": {"tokens": 10**6, "images": 10**7}},
        {"tokens-w1": Outcome("ok", [flat]), "tokens-r0of8": Outcome("ok", [growing]),
         "tokens-memmap": Outcome("skipped")}, peers)
    lines = scale_report.goal_lines(result, "tokens")
    assert lines[0] == ("first batch ≤ 1 s at 1,000,000 documents: tokens-w1 0.20 (met), "
                        "tokens-r0of8 1.20 (NOT met)")
    assert lines[2] == ("private memory at 1,000,000 ≤ 300 MB beyond that at 100,000: "
                        "tokens-w1 +0 MB (met), tokens-r0of8 +86 MB (met)")
    assert lines[3].endswith("at 1,000,000: first batch 6.00×, resume 4.80×, memory 1.48× "
                             "(NOT met)")
    (w1, r8, _) = scale_report.extrapolations(result, "tokens")
    assert r8[1:] == ["1,000.20", "1,000.20", "95,568", "1.00", "100.00"]
    assert w1[1:4] == ["0.20", "55.75", "200"]  # never below the last figure measured
    result.meta["goal_sizes"]["tokens"] = 10**8
    lines = scale_report.goal_lines(result, "tokens")
    assert lines[0] == (
        "first batch ≤ 1 s at 100,000,000 documents: tokens-w1 not measured (at 1,000,000: "
        "0.20; extrapolated: 0.20), tokens-r0of8 not measured (at 1,000,000: 1.20; "
        "extrapolated: 100.20)")
    assert lines[2] == (
        "private memory at 100,000,000 ≤ 300 MB beyond that at 100,000: tokens-w1 not measured "
        "(at 1,000,000: +0 MB; extrapolated: +0 MB), tokens-r0of8 not measured (at 1,000,000: "
        "+86 MB; extrapolated: +9,527 MB)")


def test_before_runs_datapipes_rows_from_another_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    for package in ("datapipe", "preprocess"):
        shutil.copytree(Path(__file__).resolve().parents[2] / package, checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    opts = replace(Options.smoke_test(("scale",), tmp_path / "out", data=DATA, before=checkout),
                   skip=frozenset({"images", "tokens-memmap", "tokens-r0of8"}))
    assert run(opts) == 0
    outcomes = json.loads((tmp_path / "out" / "scale.json").read_text())["outcomes"]
    assert outcomes["tokens-r0of8"]["status"] == "skipped"
    for name in ("tokens-w1", "tokens-w1-before", "tokens-r0of8-before"):
        assert outcomes[name]["status"] == "ok", name
        codes = {r.get("code") for r in outcomes[name]["runs"][0]["sizes"].values()}
        assert codes == ({str(checkout)} if name.endswith("-before") else {None}), name
    own = (tmp_path / "out" / "scale.md").read_text()
    assert table_row(own, "datapipe TokenLoader (packed), rank 0 of 8 (--before)", "10,000")
    assert "tokens-r0of8-before no dearer than tokens-w1-before" in own


def test_scale_max_picks_the_sizes(cli) -> None:
    assert scale.corpus_sizes(Options(("scale",), scale_max=10**6)) == [10**5, 10**6]
    assert scale.corpus_sizes(Options(("scale",))) == [10**5, 10**6, 10**7, 10**8]
    assert scale.corpus_sizes(Options.smoke_test(("scale",), Path("x"))) == [10**3, 10**4]
    refused = cli("bench", "--suite", "scale", "--scale-max", "5000000")
    assert refused.code == 2 and refused.out == ""
    assert refused.err == ("datapipe: error: --scale-max: a power of ten from 100000 to "
                           "1000000000 (the scale suite's largest corpus), got 5000000\n")
