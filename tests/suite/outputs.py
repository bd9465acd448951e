"""What every smoke run of the suite must leave in its output folder."""

from __future__ import annotations

import json
from pathlib import Path


def installed_peers(entries: list[dict]) -> list[dict]:
    return [e for e in entries if not e["status"].startswith(("not installed", "skipped"))]


def check_outputs(out: Path, panels: list[str]) -> dict:
    """suite.json with the machine, suite.md linking one PNG per panel; the JSON's data."""
    data = json.loads((out / "suite.json").read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["versions"]["torch"]
    report = (out / "suite.md").read_text()
    for key in panels:
        png = out / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
        assert f"]({key}.png)" in report
    return data
