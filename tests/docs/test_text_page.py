"""docs/text.md's examples run as written, one after the other in a scratch folder (the later
ones read the dataset the first one writes), each as a script of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.test_writer_page import python_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "text.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 3
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for number, code in enumerate(blocks):
        script = tmp_path / f"example{number}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"example {number} failed:\n{code}\n{proc.stderr[-3000:]}"
    assert "num_loss_tokens" in PAGE.read_text() and "text.md" in (ROOT / "README.md").read_text()
