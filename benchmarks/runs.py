"""What the benchmark scripts share around their measured runs: each tool's outcome, the
rounds of one-child-per-run measurements, and the child's side of a run."""

from __future__ import annotations

import argparse
import json
import subprocess
import traceback
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from benchmarks.common import fresh_dir, installed, run_child, wait_for_quiet

BUSY_ELSEWHERE = 0.2  # cores of other work during a run above which the report warns
# What a run that crashed, could not start or outlived CHILD_TIMEOUT_S raises in the parent.
CHILD_FAILURES = (RuntimeError, OSError, subprocess.TimeoutExpired)

Record = dict[str, Any]  # one run's measurements, as its child wrote them plus run_child's


@dataclass
class Outcome:
    """Everything measured of one tool (or variant) in one invocation of a script."""

    status: str  # "ok", "skipped", "not installed: ...", "failed: ..."
    runs: list[Record] = field(default_factory=list)


# ---------------------------------------------------------------- before any run


def skip_names(text: str) -> set[str]:
    """The names in a comma-separated --skip value."""
    return set(filter(None, text.split(",")))


def check_skip(parser: argparse.ArgumentParser, text: str, known: Iterable[str]) -> None:
    """Stop with a usage error if --skip names anything outside `known`."""
    unknown = skip_names(text) - set(known)
    if unknown:
        parser.error(f"--skip: unknown {', '.join(sorted(unknown))}")


def module_absent(name: str) -> bool:
    """True if module `name` cannot be imported here (found without importing it)."""
    try:
        return find_spec(name) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing altogether
        return True


def dist_absent(name: str) -> bool:
    """True if distribution `name` is not installed (its metadata, no import)."""
    return installed(name) is None


def initial_outcome(names: Iterable[str], skip: Collection[str], needs: Iterable[str] = (),
                    absent: Callable[[str], bool] = module_absent) -> Outcome:
    """"skipped" if `skip` holds any of `names` (a tool's name, its group), else "not
    installed (...)" naming each of `needs` that is `absent`, else "ok"."""
    if any(name in skip for name in names):
        return Outcome("skipped")
    missing = [need for need in needs if absent(need)]
    return Outcome(f"not installed ({', '.join(missing)})" if missing else "ok")


# ---------------------------------------------------------------- running (the parent)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters: fit for a table cell."""
    return " ".join(str(exc).split())[:300]


def run_one(module: str, name: str, job: Any, run_dir: Path,
            env: dict[str, str] | None = None) -> Record:
    """Measure one run of `name` in a fresh `python -m module --one name --job JSON` process.

    `job` is the script's Job dataclass; the child writes run_dir/result.json and its output
    goes to run_dir/log.txt (see common.run_child)."""
    argv = ["-m", module, "--one", name, "--job", json.dumps(asdict(job)),
            "--result", str(run_dir / "result.json")]
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt", env)


def least_disturbed(measure: Callable[[], Record], settle: float, retries: int,
                    busy: float = BUSY_ELSEWHERE) -> Record:
    """measure(), redone up to `retries` times while other work used more than `busy` cores
    during it, each redo after waiting up to `settle` s for quiet.

    On a shared machine a run that competed with someone's test suite measures them, not the
    tool; the least disturbed attempt is kept, its `attempts` saying how many runs it was."""
    best: Record | None = None
    for attempt in range(retries + 1):
        if attempt:
            wait_for_quiet(settle)
        run = measure()
        run["attempts"] = attempt + 1
        if best is None or run["others_cores"] < best["others_cores"]:
            best = run
        if run["others_cores"] <= busy:
            break
        print(f"(disturbed: {run['others_cores']:.2f} cores of other work, again)", end=" ",
              flush=True)
    assert best is not None
    return best


def run_rounds(repeats: int, names: Sequence[str], outcomes: dict[str, Outcome],
               runs_dir: Path, settle: float, attempt: Callable[[str, Path], Record],
               progress: Callable[[str, Record], str], *, brief_failures: bool = False) -> None:
    """`repeats` rounds, each measuring once every name whose outcome is still "ok", so slow
    drift of the machine spreads over all tools alike.

    Each run gets a fresh runs_dir/NAME-ROUND, a wait of up to `settle` s for other work to
    stop, a "round i/n: NAME ..." line, then attempt(name, run_dir); its record is kept and
    progress(name, record) ends the line. A run that raises one of CHILD_FAILURES, or whose
    record holds "error" (a failure the child caught), fails its tool, which then sits out the
    later rounds. brief_failures: show a failure as one line and the path of the run's log
    (for children that log their own traceback) instead of the whole message."""
    for repeat in range(1, repeats + 1):
        for name in names:
            outcome = outcomes[name]
            if outcome.status != "ok":
                continue
            run_dir = fresh_dir(runs_dir / f"{name}-{repeat}")
            wait_for_quiet(settle)
            print(f"round {repeat}/{repeats}: {name} ...", end=" ", flush=True)
            try:
                run = attempt(name, run_dir)
            except CHILD_FAILURES as exc:  # report the tool as failed, go on with the others
                run = {"error": one_line(exc) if brief_failures else str(exc)}
            if "error" in run:
                outcome.status = f"failed: {run['error']}"
                where = f" (log: {run_dir / 'log.txt'})" if brief_failures else ""
                print(outcome.status + where, flush=True)
                continue
            outcome.runs.append(run)
            print(progress(name, run), flush=True)


# ---------------------------------------------------------------- the child's side


def write_child_result(result_file: Path, measure: Callable[[], Record]) -> None:
    """Write measure()'s record to result_file; should it raise, write {"error": one line}
    instead (the traceback goes to the run's log), so the table can say what went wrong."""
    try:
        result = measure()
    except Exception as exc:  # the tool's own failure: one line for the table, the log has all
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {one_line(exc)}"}
    result_file.write_text(json.dumps(result))


# ---------------------------------------------------------------- reporting


def busiest(outcomes: dict[str, Outcome]) -> float:
    """The most cores other work used during any kept run (0 when there is none)."""
    return max((r["others_cores"] for o in outcomes.values() for r in o.runs), default=0.0)


def busy_warning(outcomes: dict[str, Outcome]) -> str | None:
    """The report's warning when other work took more than BUSY_ELSEWHERE cores in a run."""
    most = busiest(outcomes)
    if not most > BUSY_ELSEWHERE:
        return None
    return (f"Warning: other processes used up to {most:.1f} cores during some runs; those "
            "runs are slower than this machine can do.")


def outcomes_data(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """The outcomes as plain data for the results' JSON."""
    return {name: asdict(outcome) for name, outcome in outcomes.items()}
