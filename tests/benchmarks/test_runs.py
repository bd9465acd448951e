"""benchmarks/runs.py and the report helpers of benchmarks/common.py: the scaffolding the
benchmark scripts share, on fake runs (no child process, no timing)."""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks import common, runs
from benchmarks.fixtures import WORDS, zipf_cumulative
from benchmarks.runs import Outcome

# ---------------------------------------------------------------- formatting (common.py)


@pytest.mark.parametrize(("ours", "theirs", "unit", "expected"), [
    (300.0, 100.0, "×", "3.00×"),
    (1.0, 3.0, "", "0.33"),
    (None, 100.0, "×", "–"),
    (100.0, None, "×", "–"),
    (100.0, 0.0, "×", "–"),
])
def test_ratio(ours: float | None, theirs: float | None, unit: str, expected: str) -> None:
    assert common.ratio(ours, theirs, unit) == expected


def test_verdicts() -> None:
    assert common.verdict(True) == "met" and common.verdict(False) == "NOT met"
    assert common.goal_verdict(2.0, True) == "goal ≥ 2×: met"
    assert common.goal_verdict(0.85, False, "") == "goal ≥ 0.85: NOT met"


def test_build_once_builds_once_and_rebuilds_a_killed_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, built = tmp_path / "corpus", []

    def build(into: Path) -> None:
        assert into.is_dir() and not any(into.iterdir())  # fresh every time
        built.append(into)
        (into / "a.txt").write_text("a")

    assert common.build_once(out, "building", build) == out
    assert common.build_once(out, "building", build) == out
    assert len(built) == 1 and capsys.readouterr().out == "building\n"
    (out / ".complete").unlink()  # as a build killed before its end leaves it
    (out / "stray").write_text("half-made")
    common.build_once(out, "again", build)
    assert len(built) == 2 and sorted(p.name for p in out.iterdir()) == [".complete", "a.txt"]


def test_publish_prints_saves_and_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(common, "BENCH_RESULTS", tmp_path)
    common.publish("x", "# Report", {"a": 1}, prepare_s=1.4, bench_s=62.6)
    assert (tmp_path / "x.md").read_text() == "# Report\n"
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
    assert capsys.readouterr().out == (f"\n# Report\n\nsaved {tmp_path / 'x.md'} and "
                                       f"{tmp_path / 'x.json'} (inputs 1 s, runs 63 s)\n")


def test_zipf_weights() -> None:
    cumulative = zipf_cumulative()
    assert len(cumulative) == len(WORDS)
    assert cumulative[:3] == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])


# ---------------------------------------------------------------- before any run


def test_skip_names() -> None:
    assert runs.skip_names("") == set()
    assert runs.skip_names("a,,b,") == {"a", "b"}


def test_check_skip(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    runs.check_skip(parser, "a,b", ["a", "b", "c"])
    with pytest.raises(SystemExit):
        runs.check_skip(parser, "a,zz,y", {"a": 1})  # a dict's keys are its names
    assert "--skip: unknown y, zz" in capsys.readouterr().err


def test_initial_outcome() -> None:
    absent = {"litdata", "nvidia.dali"}.__contains__
    assert runs.initial_outcome(("litdata", "images"), {"images"}, ("litdata",),
                                absent).status == "skipped"
    assert runs.initial_outcome(("dali",), set(), ("torch", "nvidia.dali", "litdata"),
                                absent).status == "not installed (nvidia.dali, litdata)"
    assert runs.initial_outcome(("torch",), {"dali"}, ("torch",), absent).status == "ok"
    assert runs.initial_outcome(("torch",), set()) == Outcome("ok", [])


def test_a_skipped_tool_is_not_looked_for() -> None:
    def absent(name: str) -> bool:
        raise AssertionError(f"looked for {name}")

    assert runs.initial_outcome(("dali",), {"dali"}, ("nvidia.dali",), absent).status == "skipped"


def test_what_is_absent() -> None:
    assert not runs.module_absent("json") and runs.module_absent("no_such_module_3141")
    assert not runs.dist_absent("pytest") and runs.dist_absent("no-such-dist-3141")


# ---------------------------------------------------------------- running


def test_one_line() -> None:
    assert runs.one_line(RuntimeError("exit 1:  a\n  b |\tc ")) == "exit 1: a b | c"
    assert runs.one_line(ValueError("x" * 500)) == "x" * 300


@dataclass(frozen=True)
class FakeJob:
    data: str
    workers: int = 2


def test_run_one_asks_the_script_for_one_run(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_run_child(argv: list[str], result: Path, log: Path,
                       env: dict[str, str] | None) -> dict[str, Any]:
        calls.append((argv, result, log, env))
        return {"seconds": 1.0}

    monkeypatch.setattr(runs, "run_child", fake_run_child)
    record = runs.run_one("benchmarks.bench_x", "torch", FakeJob("d"), tmp_path, {"K": "1"})
    assert record == {"seconds": 1.0}
    assert calls == [(["-m", "benchmarks.bench_x", "--one", "torch", "--job",
                       '{"data": "d", "workers": 2}', "--result", str(tmp_path / "result.json")],
                      tmp_path / "result.json", tmp_path / "log.txt", {"K": "1"})]


def fake_runs(others: list[float]) -> Any:
    """A measure() whose successive runs saw these cores of other work."""
    queue = iter(others)
    return lambda: {"others_cores": next(queue)}


@pytest.mark.parametrize(("others", "retries", "kept", "attempts", "said"), [
    ([0.1, 0.0], 2, 0.1, 1, []),  # quiet at once: no redo
    ([0.9, 0.5, 0.1], 2, 0.1, 3, [0.9, 0.5]),  # quiet at the last try
    ([0.9, 0.3, 0.6], 2, 0.3, 2, [0.9, 0.3, 0.6]),  # never quiet: the least disturbed counts
    ([0.9, 0.1], 0, 0.9, 1, [0.9]),  # no retries (the line says "again" all the same)
])
def test_least_disturbed(others: list[float], retries: int, kept: float, attempts: int,
                         said: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    run = runs.least_disturbed(fake_runs(others), settle=0, retries=retries)
    assert run == {"others_cores": kept, "attempts": attempts}
    assert capsys.readouterr().out == "".join(
        f"(disturbed: {o:.2f} cores of other work, again) " for o in said)


def test_run_rounds_interleaves_and_drops_a_failed_tool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = {"a": Outcome("ok"), "b": Outcome("ok"), "c": Outcome("skipped")}
    (tmp_path / "a-1").mkdir()
    (tmp_path / "a-1" / "old").write_text("from an earlier run")
    calls = []

    def attempt(name: str, run_dir: Path) -> dict[str, Any]:
        calls.append((name, run_dir.name))
        assert run_dir.is_dir() and not any(run_dir.iterdir())
        if name == "b":
            raise RuntimeError("exit 1: line one |\n line two")
        return {"rate": 10.0 * len(calls), "others_cores": 0.0}

    runs.run_rounds(2, ["a", "b", "c"], outcomes, tmp_path, 0, attempt,
                    lambda name, run: f"{name} {run['rate']:.0f}")
    assert calls == [("a", "a-1"), ("b", "b-1"), ("a", "a-2")]
    assert [r["rate"] for r in outcomes["a"].runs] == [10.0, 30.0]
    assert outcomes["b"] == Outcome("failed: exit 1: line one |\n line two", [])
    assert outcomes["c"] == Outcome("skipped", [])
    assert capsys.readouterr().out.splitlines() == [
        "round 1/2: a ... a 10", "round 1/2: b ... failed: exit 1: line one |",
        " line two", "round 2/2: a ... a 30"]


def test_run_rounds_brief_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = {"crash": Outcome("ok"), "caught": Outcome("ok"), "slow": Outcome("ok")}

    def attempt(name: str, run_dir: Path) -> dict[str, Any]:
        if name == "crash":
            raise RuntimeError("exit 1: a |\n b")
        if name == "slow":
            raise subprocess.TimeoutExpired(["python"], 900)
        return {"error": "ValueError: bad batch"}  # the child caught it and said so

    runs.run_rounds(1, list(outcomes), outcomes, tmp_path, 0, attempt,
                    lambda name, run: "", brief_failures=True)
    assert outcomes["crash"].status == "failed: exit 1: a | b"
    assert outcomes["caught"].status == "failed: ValueError: bad batch"
    assert outcomes["slow"].status.startswith("failed: Command '['python']' timed out")
    lines = capsys.readouterr().out.splitlines()
    log = tmp_path / "crash-1" / "log.txt"
    assert lines[0] == f"round 1/1: crash ... failed: exit 1: a | b (log: {log})"
    assert lines[1].endswith(f"bad batch (log: {tmp_path}/caught-1/log.txt)")


# ---------------------------------------------------------------- the child's side


def test_write_child_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "result.json"
    runs.write_child_result(result, lambda: {"rate": 5.0})
    assert json.loads(result.read_text()) == {"rate": 5.0}

    def fails() -> dict[str, Any]:
        raise ValueError("no\n   images")

    runs.write_child_result(result, fails)
    assert json.loads(result.read_text()) == {"error": "ValueError: no images"}
    assert "Traceback" in capsys.readouterr().err


# ---------------------------------------------------------------- reporting


def test_busiest_and_its_warning() -> None:
    quiet = {"a": Outcome("ok", [{"others_cores": 0.1}, {"others_cores": 0.2}]),
             "b": Outcome("failed: x")}
    assert runs.busiest(quiet) == 0.2 and runs.busy_warning(quiet) is None
    assert runs.busiest({}) == 0.0
    busy = {**quiet, "c": Outcome("ok", [{"others_cores": 0.96}])}
    assert runs.busiest(busy) == 0.96
    assert runs.busy_warning(busy) == ("Warning: other processes used up to 1.0 cores during "
                                       "some runs; those runs are slower than this machine "
                                       "can do.")


def test_outcomes_data() -> None:
    assert runs.outcomes_data({"a": Outcome("ok", [{"rate": 1.0}]), "b": Outcome("skipped")}) \
        == {"a": {"status": "ok", "runs": [{"rate": 1.0}]}, "b": {"status": "skipped", "runs": []}}
