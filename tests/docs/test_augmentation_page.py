"""docs/augmentation.md's examples run as written, one after the other in a scratch folder (the
first writes the dataset the others read), each as a script of its own. The torchvision example
needs a torchvision that imports beside this torch: it is skipped where none does."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "augmentation.md"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None and \
            subprocess.run([sys.executable, "-c", f"import {module}"],
                           capture_output=True).returncode == 0
    except ImportError:
        return False


def test_every_example_of_the_page_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 11
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for number, code in enumerate(blocks):
        needs = re.findall(r"^import (torchvision|kornia)", code, re.M)
        if any(not _importable(module) for module in needs):
            continue
        script = tmp_path / f"example{number}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"example {number} failed:\n{code}\n{proc.stderr[-3000:]}"
    assert (tmp_path / "photos" / "manifest.json").exists()
