"""bench_text's epoch-planning measurement at smoke size: the script's own collect() on the
1 MB corpus, every loader skipped but the planning table."""

from __future__ import annotations

from benchmarks import bench_text


def test_planning_budgets_reach_a_million_batches() -> None:
    assert bench_text.planning_budgets(300_000) == [1, 16, 256, 4096]
    assert bench_text.planning_budgets(2_500_000) == [2, 16, 256, 4096]
    # No more than 16 / 4: the first two rows' batches are 4x apart or more.
    assert bench_text.planning_budgets(9_000_000) == [4, 16, 256, 4096]
    assert bench_text.planning_budgets(16_000_000) == [16, 256, 4096]  # 16 is small enough


def test_text_bench_times_epoch_planning_at_every_budget() -> None:
    args = bench_text.parse_args(["--corpus-mb", "1", "--repeats", "2", "--settle", "0",
                                  "--skip", "datasets,memmap,datapipe"])
    report, data = bench_text.collect(args)
    tokens = data["inputs"]["tokens"]
    rows = data["planning"]
    assert [r["max_tokens"] for r in rows] == bench_text.planning_budgets(tokens)
    assert rows[0]["batches"] >= tokens // rows[0]["max_tokens"], "a batch per budget at least"
    assert [r["batches"] for r in rows] == sorted((r["batches"] for r in rows), reverse=True)
    for row in rows:
        assert len(row["runs_s"]) == 2 and row["seconds"] > 0, row
    goals = [goal for goal, _, _ in data["goals"]]
    assert goals[0] == "epoch planning ≤ 1 s per 1,000,000 batches"
    assert goals[1].startswith(f"epoch planning linear: time per batch at "
                               f"{rows[0]['batches']:,} batches ≤ 2× that at "
                               f"{rows[1]['batches']:,} (fastest runs; quadratic: ")
    assert len(goals) == 2
    assert "## Epoch planning" in report
    assert f"| {rows[0]['max_tokens']:,} " in report.split("## Epoch planning")[1]
