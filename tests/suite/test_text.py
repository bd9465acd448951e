"""The text group at smoke size: `bench --suite text` runs every installed peer, and its
epoch-planning measurement (on the 1 MB corpus, every loader skipped) times each budget; the
padding efficiency at 4,096 is counted whether or not the loaders ran."""

from __future__ import annotations

import json
from pathlib import Path

from datapipe.suite import Options, run
from datapipe.suite.groups import text
from datapipe.suite.machine import describe
from datapipe.suite.runner import run_group
from datapipe.suite.suite import group_report

DATA = Path(__file__).resolve().parents[2] / "bench-data"  # kept between runs, as the suite's


def test_planning_budgets_reach_a_million_batches() -> None:
    assert text.planning_budgets(300_000) == [1, 16, 256, 4096]
    assert text.planning_budgets(2_500_000) == [2, 16, 256, 4096]
    # No more than 16 / 4: the first two rows' batches are 4x apart or more.
    assert text.planning_budgets(9_000_000) == [4, 16, 256, 4096]
    assert text.planning_budgets(16_000_000) == [16, 256, 4096]  # 16 is small enough


def test_text_group_times_epoch_planning_at_every_budget(tmp_path: Path) -> None:
    opts = Options(("text",), repeats=2, text_mb=1, workers=2, out=tmp_path, data=DATA,
                   settle=0.0, skip=frozenset({"datasets", "memmap", "datapipe", "flattening"}))
    result = run_group(text.GROUP, opts, describe())
    assert all(o.status == "skipped" for o in result.outcomes.values())
    tokens = result.meta["tokens"]
    rows = result.meta["planning"]
    assert [r["max_tokens"] for r in rows] == text.planning_budgets(tokens)
    assert rows[0]["batches"] >= tokens // rows[0]["max_tokens"], "a batch per budget at least"
    assert [r["batches"] for r in rows] == sorted((r["batches"] for r in rows), reverse=True)
    for row in rows:
        assert len(row["runs_s"]) == 2 and row["seconds"] > 0, row
    goals = [goal for goal, _, _ in text.goals(result)]
    assert goals[0] == "epoch planning ≤ 1 s per 1,000,000 batches"
    assert goals[1].startswith(f"epoch planning linear: time per batch at "
                               f"{rows[0]['batches']:,} batches ≤ 2× that at "
                               f"{rows[1]['batches']:,} (fastest runs; quadratic: ")
    # Padding efficiency at 4,096 is counted after the rounds, whichever loaders ran.
    assert goals[2] == "fixed layout padding efficiency at 4,096 ≥ 0.99" and len(goals) == 3
    panels = text.GROUP.panels(result)
    report = group_report(text.GROUP.title, result, panels, text.GROUP.details(result))
    assert "## TokenLoader epoch planning" in report
    assert f"| **max_tokens {rows[0]['max_tokens']:,} (" in \
        report.split("## TokenLoader epoch planning")[1]


def test_text_suite_runs_every_installed_peer(tmp_path: Path) -> None:
    assert run(Options.smoke_test(("text",), tmp_path, data=DATA)) == 0
    data = json.loads((tmp_path / "suite.json").read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["versions"]["torch"]
    report = (tmp_path / "suite.md").read_text()
    for key in ("text", "text-planning", "text-packing"):
        assert (tmp_path / f"{key}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
        assert f"]({key}.png)" in report
    for panel in data["suites"]["text"]:
        if panel["key"] == "text-planning":  # datapipe alone: seconds per 1M batches per budget
            assert all(e["ours"] and e["status"] == "ok" and e["median"] > 0
                       for e in panel["entries"]) and len(panel["entries"]) >= 3, panel
            continue
        ran = [e for e in panel["entries"]
               if not e["status"].startswith(("not installed", "skipped"))]
        assert any(e["ours"] for e in ran) and any(not e["ours"] for e in ran)
        for entry in ran:
            assert entry["status"] == "ok" and entry["median"] > 0, entry
    assert (tmp_path / "text.md").is_file()  # the group's own detailed report
