"""docs/WRITER.md's examples run as written, one after the other in a scratch folder (the
reading examples read what the writing ones wrote), each as a script of its own: a documented
recipe that fails is a wrong answer a user meets first."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, python_blocks, run_examples

PAGE = ROOT / "docs" / "WRITER.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 5
    without_ray = importlib.util.find_spec("ray") is None
    for code, proc in run_examples(blocks, tmp_path,
                                   skip=lambda code: "import ray" in code and without_ray):
        if "merge_parts" in code:
            written, merged = re.findall(r"(\d+) samples", proc.stdout)
            assert written == merged == "2000", proc.stdout
    assert (tmp_path / "photos" / "manifest.json").exists()


@pytest.mark.parametrize("page", ["README.md", "docs/CONVERT.md"])
def test_the_page_is_linked(page: str) -> None:
    assert "WRITER.md" in (ROOT / page).read_text()
