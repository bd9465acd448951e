"""docs/mixtures.md's examples run as written, each as a script of its own (they check what
they print): the semantics the page states are the ones the planners have."""

from __future__ import annotations

from pathlib import Path

from tests.docs.pages import ROOT, python_blocks, run_examples

PAGE = ROOT / "docs" / "mixtures.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 8
    assert len(list(run_examples(blocks, tmp_path))) == 8
