"""The local engine: results in task order, read by the calling thread, and a worker that dies
stopping the run in one line instead of hanging it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from preprocess.engine import LocalEngine


def test_the_calling_process_runs_no_helper_threads() -> None:
    """Results are read by the thread that asked for them: no pool threads competing for the
    GIL with the shard writer."""
    before = threading.active_count()
    during = [threading.active_count() for _ in LocalEngine(3).map_ordered(
        _square, None, range(40))]
    assert during == [before] * 40


def _square(_: object, task: int) -> int:
    return task * task


def test_results_come_in_task_order_and_a_task_error_in_its_turn() -> None:
    results = LocalEngine(3).map_ordered(_fail_at_seven, None, range(20))
    assert [next(results) for _ in range(7)] == list(range(7))
    with pytest.raises(ValueError, match="task 7"):
        next(results)


def _fail_at_seven(_: object, task: int) -> int:
    if task == 7:
        raise ValueError("task 7")
    return task


def test_a_worker_that_dies_stops_the_run_in_one_line_not_a_hang() -> None:
    code = ("import os; from preprocess.engine import LocalEngine\n"
            "def work(_, task):\n"
            "    if task == 5: os._exit(3)\n"
            "    return task\n"
            "try:\n"
            "    list(LocalEngine(2).map_ordered(work, None, range(50)))\n"
            "except Exception as exc: print(type(exc).__name__, exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("DatapipeError a conversion worker (pid ")
    assert "died (exit code 3)" in result.stdout
