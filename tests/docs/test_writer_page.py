"""docs/WRITER.md's examples run as written, one after the other in a scratch folder (the
reading examples read what the writing ones wrote), each as a script of its own: a documented
recipe that fails is a wrong answer a user meets first."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "WRITER.md"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 5
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for number, code in enumerate(blocks):
        if "import ray" in code and importlib.util.find_spec("ray") is None:
            continue
        script = tmp_path / f"example{number}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"example {number} failed:\n{code}\n{proc.stderr[-3000:]}"
        if "merge_parts" in code:
            written, merged = re.findall(r"(\d+) samples", proc.stdout)
            assert written == merged == "2000", proc.stdout
    assert (tmp_path / "photos" / "manifest.json").exists()


@pytest.mark.parametrize("page", ["README.md", "docs/CONVERT.md"])
def test_the_page_is_linked(page: str) -> None:
    assert "WRITER.md" in (ROOT / page).read_text()
