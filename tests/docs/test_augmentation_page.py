"""docs/augmentation.md's examples run as written, one after the other in a scratch folder (the
first writes the dataset the others read), each as a script of its own. The torchvision example
needs a torchvision that imports beside this torch: it is skipped where none does."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from tests.docs.pages import ROOT, python_blocks, run_examples

PAGE = ROOT / "docs" / "augmentation.md"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None and \
            subprocess.run([sys.executable, "-c", f"import {module}"],
                           capture_output=True).returncode == 0
    except ImportError:
        return False


def _lacks_a_module(code: str) -> bool:
    needs = re.findall(r"^import (torchvision|kornia)", code, re.M)
    return any(not _importable(module) for module in needs)


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 11
    for _ in run_examples(blocks, tmp_path, skip=_lacks_a_module):
        pass
    assert (tmp_path / "photos" / "manifest.json").exists()
