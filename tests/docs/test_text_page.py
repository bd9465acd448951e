"""docs/text.md's examples run as written, one after the other in a scratch folder (the later
ones read the dataset the first one writes), each as a script of its own."""

from __future__ import annotations

from pathlib import Path

from tests.docs.pages import ROOT, python_blocks, run_examples

PAGE = ROOT / "docs" / "text.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 3
    assert len(list(run_examples(blocks, tmp_path))) == 3
    assert "num_loss_tokens" in PAGE.read_text() and "text.md" in (ROOT / "README.md").read_text()
