"""docs/mixtures.md's examples run as written, each as a script of its own (they check what
they print): the semantics the page states are the ones the planners have."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.test_writer_page import python_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "mixtures.md"


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 4
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for number, code in enumerate(blocks):
        script = tmp_path / f"example{number}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"example {number} failed:\n{code}\n{proc.stderr[-3000:]}"
