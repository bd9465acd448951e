"""datapipe/suite/runner.py and the report helpers: the scaffolding every group of the suite
shares, on fake runs (no child process, no timing)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from datapipe.errors import ArgumentError
from datapipe.suite import fixtures, runner
from datapipe.suite.options import Options, parse_skip
from datapipe.suite.report import goal_verdict, ratio
from datapipe.suite.runner import Outcome, Peer

# ---------------------------------------------------------------- formatting


@pytest.mark.parametrize(("ours", "theirs", "unit", "expected"), [
    (300.0, 100.0, "×", "3.00×"),
    (1.0, 3.0, "", "0.33"),
    (None, 100.0, "×", "–"),
    (100.0, None, "×", "–"),
    (100.0, 0.0, "×", "–"),
])
def test_ratio(ours: float | None, theirs: float | None, unit: str, expected: str) -> None:
    assert ratio(ours, theirs, unit) == expected


def test_verdicts() -> None:
    assert goal_verdict(2.0, True) == "goal ≥ 2×: met"
    assert goal_verdict(0.85, False, "") == "goal ≥ 0.85: NOT met"


def test_build_once_builds_once_and_rebuilds_a_killed_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, built = tmp_path / "corpus", []

    def build(into: Path) -> None:
        assert into.is_dir() and not any(into.iterdir())  # fresh every time
        built.append(into)
        (into / "a.txt").write_text("a")

    assert fixtures.build_once(out, "building", build) == out
    assert fixtures.build_once(out, "building", build) == out
    assert len(built) == 1 and capsys.readouterr().out == "building\n"
    (out / ".complete").unlink()  # as a build killed before its end leaves it
    (out / "stray").write_text("half-made")
    fixtures.build_once(out, "again", build)
    assert len(built) == 2 and sorted(p.name for p in out.iterdir()) == [".complete", "a.txt"]


def test_zipf_weights() -> None:
    cumulative = fixtures.zipf_cumulative()
    assert len(cumulative) == len(fixtures.WORDS)
    assert cumulative[:3] == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])


# ---------------------------------------------------------------- before any run


def test_skip_names() -> None:
    assert parse_skip("") == frozenset()
    assert parse_skip("a,,b, ") == {"a", "b"}


def test_options_are_checked() -> None:
    with pytest.raises(ArgumentError, match="choose from images, text, convert, gpu"):
        Options(("pictures",))
    with pytest.raises(ArgumentError, match="repeats, photos and text_mb must be at least 1"):
        Options(("images",), repeats=0)
    with pytest.raises(ArgumentError, match="--readme with --smoke"):
        Options(("images",), smoke=True, readme=Path("README.md"))


def peer(name: str, *modules: str, tag: str = "", dists: tuple[str, ...] = ()) -> Peer:
    return Peer(name, name, None, modules, dists, tag=tag)


def test_initial_outcome() -> None:
    opts = Options(("images",), skip=frozenset({"photos-tools", "images:dali"}))
    assert runner.initial_outcome("images", peer("litdata", tag="photos-tools"),
                                  opts).status == "skipped"
    assert runner.initial_outcome("images", peer("dali"), opts).status == "skipped"
    assert runner.initial_outcome("convert", peer("dali", "no_such_module_3141"),
                                  opts).status == "not installed (no_such_module_3141)"
    assert runner.initial_outcome("images", peer("x", "json", "no_such_module_3141",
                                                 dists=("no-such-dist-3141",)), opts).status \
        == "not installed (no_such_module_3141, no-such-dist-3141)"
    assert runner.initial_outcome("images", peer("torch", "json"), opts) == Outcome("ok", [])


def test_a_skipped_tool_is_not_looked_for() -> None:
    opts = Options(("images",), skip=frozenset({"dali"}))
    assert runner.initial_outcome("images", peer("dali", "no_such_module_3141"),
                                  opts).status == "skipped"


def test_what_is_absent() -> None:
    assert not runner.module_absent("json") and runner.module_absent("no_such_module_3141")
    assert runner.module_absent("no_such_package_3141.sub")


# ---------------------------------------------------------------- running


def test_one_line() -> None:
    assert runner.one_line(RuntimeError("exit 1:  a\n  b |\tc ")) == "exit 1: a b | c"
    assert runner.one_line(ValueError("x" * 500)) == "x" * 300


@dataclass(frozen=True)
class FakeJob:
    data: str
    workers: int = 2


def test_run_in_child_asks_the_child_for_one_run(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_run_child(argv: list[str], result: Path, log: Path,
                       env: dict[str, str] | None) -> dict[str, Any]:
        calls.append((argv, result, log, env))
        return {"seconds": 1.0}

    monkeypatch.setattr(runner, "run_child", fake_run_child)
    record = runner.run_in_child("images", peer("torch"), FakeJob("d"), tmp_path)
    assert record == {"seconds": 1.0}
    assert calls == [(["-m", "datapipe.suite.child", "images", "torch",
                       '{"data": "d", "workers": 2}', str(tmp_path / "result.json")],
                      tmp_path / "result.json", tmp_path / "log.txt", runner.CHILD_ENV)]
    before = Peer("datapipe-before", "x", None, code="/checkout")
    runner.run_in_child("images", before, FakeJob("d"), tmp_path)
    assert calls[1][3] == {**runner.CHILD_ENV, runner.CODE_ENV: "/checkout"}


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
    run = runner.least_disturbed(fake_runs(others), settle=0, retries=retries)
    assert run == {"others_cores": kept, "attempts": attempts}
    assert capsys.readouterr().out == "".join(
        f"(disturbed: {o:.2f} cores of other work, again) " for o in said)


def test_run_rounds_interleaves_and_drops_a_failed_tool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = {"a": Outcome("ok"), "b": Outcome("ok"), "c": Outcome("skipped")}
    (tmp_path / "a-1").mkdir()
    (tmp_path / "a-1" / "old").write_text("from an earlier run")
    calls = []

    def attempt(p: Peer, run_dir: Path) -> dict[str, Any]:
        calls.append((p.name, run_dir.name))
        assert run_dir.is_dir() and not any(run_dir.iterdir())
        if p.name == "b":
            raise RuntimeError("exit 1: line one |\n line two")
        return {"rate": 10.0 * len(calls), "others_cores": 0.0}

    runner.run_rounds(2, [peer("a"), peer("b"), peer("c")], outcomes, tmp_path, 0, attempt,
                      lambda name, run: f"{name} {run['rate']:.0f}", brief_failures=False)
    assert calls == [("a", "a-1"), ("b", "b-1"), ("a", "a-2")]
    assert [r["rate"] for r in outcomes["a"].runs] == [10.0, 30.0]
    assert outcomes["b"] == Outcome("failed: exit 1: line one |\n line two", [])
    assert outcomes["c"] == Outcome("skipped", [])
    assert capsys.readouterr().out.splitlines() == [
        "round 1/2: a ... a 10", "round 1/2: b ... failed: exit 1: line one |",
        " line two", "round 2/2: a ... a 30"]


def test_every_other_round_goes_through_the_peers_backwards(tmp_path: Path) -> None:
    outcomes = {name: Outcome("ok") for name in "abc"}
    calls = []

    def attempt(p: Peer, run_dir: Path) -> dict[str, Any]:
        calls.append(run_dir.name)
        return {"rate": 1.0, "others_cores": 0.0}

    runner.run_rounds(3, [peer(n) for n in "abc"], outcomes, tmp_path, 0, attempt,
                      lambda name, run: name)
    assert calls == ["a-1", "b-1", "c-1", "c-2", "b-2", "a-2", "a-3", "b-3", "c-3"]


def test_run_rounds_brief_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = {"crash": Outcome("ok"), "caught": Outcome("ok"), "slow": Outcome("ok")}

    def attempt(p: Peer, run_dir: Path) -> dict[str, Any]:
        if p.name == "crash":
            raise RuntimeError("exit 1: a |\n b")
        if p.name == "slow":
            raise subprocess.TimeoutExpired(["python"], 900)
        return {"error": "ValueError: bad batch"}  # the child caught it and said so

    runner.run_rounds(1, [peer(n) for n in outcomes], outcomes, tmp_path, 0, attempt,
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
    runner.write_child_result(result, lambda: {"rate": 5.0})
    assert json.loads(result.read_text()) == {"rate": 5.0}

    def fails() -> dict[str, Any]:
        raise ValueError("no\n   images")

    runner.write_child_result(result, fails)
    assert json.loads(result.read_text()) == {"error": "ValueError: no images"}
    assert "Traceback" in capsys.readouterr().err


# ---------------------------------------------------------------- reporting


def test_medians_and_the_busy_warning() -> None:
    quiet = {"a": Outcome("ok", [{"others_cores": 0.1, "rate": 3.0},
                                 {"others_cores": 0.2, "rate": 1.0}]),
             "b": Outcome("failed: x")}
    assert quiet["a"].median("rate") == 2.0 and quiet["b"].median("rate") is None
    assert runner.busy_warning(quiet.values()) is None and runner.busy_warning([]) is None
    busy = {**quiet, "c": Outcome("ok", [{"others_cores": 0.96}])}
    assert runner.busy_warning(busy.values()) == (
        "Warning: other processes used up to 1.0 cores during some runs; those runs are "
        "slower than this machine can do.")


def test_results_as_data() -> None:
    result = runner.GroupResult("g", {"cpu": "x"}, {"photos": 1},
                                {"a": Outcome("ok", [{"rate": 1.0}]), "b": Outcome("skipped")})
    assert result.data() == {"machine": {"cpu": "x"}, "meta": {"photos": 1}, "outcomes": {
        "a": {"status": "ok", "runs": [{"rate": 1.0}]}, "b": {"status": "skipped", "runs": []}}}
    assert result.median("a", "rate") == 1.0 and result.median("zz", "rate") is None
