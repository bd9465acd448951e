"""tests/integration/fault_injection.py, as CI runs it: two real SIGKILLs of a training process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration import fault_injection


@pytest.mark.slow
def test_two_kills_leave_no_worker_and_no_memory_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code = fault_injection.main(["--kills", "2", "--data", str(tmp_path / "data"),
                                 "--out", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Goal (nothing left behind): met" in out
    saved = json.loads((tmp_path / "results" / "fault_injection.json").read_text())
    summary = saved["summary"]
    assert summary["kills"] == 2 and summary["kills_with_workers"] == 2, out
    assert summary["survivors"] == 0 and summary["late"] == 0
    assert (tmp_path / "results" / "fault_injection.md").read_text().startswith(
        "# Fault injection")
