"""Running a page's Python examples as written: one after the other in one scratch folder (a
later example may read what an earlier one wrote), each as a script of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def run_examples(blocks: list[str], folder: Path,
                 skip: Callable[[str], bool] = lambda code: False,
                 ) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    """Run each block not skipped, in order; yields (code, its finished process) once it
    succeeded, so a page's test can check what an example printed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for number, code in enumerate(blocks):
        if skip(code):
            continue
        script = folder / f"example{number}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"example {number} failed:\n{code}\n{proc.stderr[-3000:]}"
        yield code, proc
