"""docs/patches.md's examples run as written, one after the other in a scratch folder (the
later ones read the dataset the first one writes; the third mixes it with one of its own),
each as a script of its own."""

from __future__ import annotations

from pathlib import Path

from tests.docs.pages import ROOT, python_blocks, run_examples

PAGE = ROOT / "docs" / "patches.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 4
    results = list(run_examples(blocks, tmp_path))
    assert len(results) == 4 and "patch efficiency" in results[1][1].stdout
    assert "'patches':" in results[2][1].stdout  # a mixture's progress per source
    assert "patches.md" in (ROOT / "README.md").read_text()
