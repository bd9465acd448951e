"""docs/accelerate.md's commands run as written, and start the processes the page says.

A documented launch line that silently starts one process instead of two is a wrong answer a
user only notices in their throughput; here each line runs in a scratch folder laid out as the
repository root, and its comment's process count is checked against what the script reports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "accelerate.md"


def documented_commands(page: Path) -> list[tuple[str, str]]:
    """(command, trailing comment) for each line of the page's first bash block."""
    block = re.search(r"```bash\n(.*?)```", page.read_text(), re.S)
    assert block, f"{page} has no bash block"
    lines = []
    for line in block.group(1).splitlines():
        command, _, comment = line.partition("  #")
        if command.strip():
            lines.append((command.strip(), comment.strip()))
    return lines


@pytest.fixture(scope="module")
def repo_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the page's relative paths (examples/, tools/) resolve as in a checkout."""
    where = tmp_path_factory.mktemp("docs-run")
    for name in ("examples", "tools"):
        (where / name).symlink_to(ROOT / name)
    return where


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)  # python, accelerate, torchrun of this venv
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_every_command_of_the_page_runs_and_starts_the_processes_it_says(repo_like) -> None:
    pytest.importorskip("accelerate")
    commands = documented_commands(PAGE)
    assert any(c.startswith("accelerate launch") for c, _ in commands)
    for command, comment in commands:
        proc = _run(command, repo_like)
        assert proc.returncode == 0, f"`{command}` failed:\n{proc.stderr[-2000:]}"
        expected = re.match(r"(\d+)", comment)
        if expected:  # a training line: the comment says how many processes it starts
            assert f"on {expected.group(1)} processes" in proc.stdout, (command, proc.stdout)
