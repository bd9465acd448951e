"""One runner for every group of the suite: each peer measured in a fresh process per run, in
rounds that interleave the peers (slow drift of the machine spreads over all alike), with the
run's CPU and the other work on the machine recorded beside its figures.

A group says what its peers are, how to prepare their inputs, what job each run gets and how
its results read (see Group); the runner does the rest, the same way for every group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from datapipe.suite.machine import installed, machine_busy_seconds, wait_for_quiet
from datapipe.suite.options import Options
from datapipe.suite.report import Panel

CHILD_TIMEOUT_S = 900
BUSY_ELSEWHERE = 0.2  # cores of other work during a run above which the report warns
# What a run that crashed, could not start or outlived CHILD_TIMEOUT_S raises in the parent.
CHILD_FAILURES = (RuntimeError, OSError, subprocess.TimeoutExpired)
# No tool may reach the network: LitData checks PyPI for updates, `datasets` asks the Hub.
CHILD_ENV = {"LITDATA_DISABLE_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1",
             "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
CODE_ENV = "DATAPIPE_SUITE_CODE"  # a run of a --before peer: the checkout its datapipe is from
BEFORE = "-before"  # a --before twin's name: its peer's, then this
NO_CUDA = "skipped: no CUDA device"  # why a group (or peer) that needs one did not run

Record = dict[str, Any]  # one run's measurements, as its child wrote them plus run_child's


@dataclass
class Outcome:
    """Everything measured of one peer in one run of its group."""

    status: str  # "ok", "skipped", "not installed (...)", "failed: ..."
    runs: list[Record] = field(default_factory=list)

    def median(self, key: str) -> float | None:
        """The median of `key` over the runs, or None when the peer did not run."""
        values = sorted(r[key] for r in self.runs if r.get(key) is not None)
        if self.status != "ok" or not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def paired_ratio(ours: Outcome, base: Outcome, rate: Callable[[Record], float]) -> float | None:
    """The median over rounds of our run's rate over the base's: each round runs the two one
    after the other, so a few percent is measured against the run beside it, not against
    runs the machine's speed drifted from meanwhile (on a shared virtual machine the same
    row's runs spread by 10 % and more). None unless both ran every round."""
    if ours.status != "ok" or base.status != "ok" or not ours.runs or \
            len(ours.runs) != len(base.runs):
        return None
    ratios = sorted(rate(a) / rate(b) for a, b in zip(ours.runs, base.runs, strict=True))
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


@dataclass(frozen=True)
class Peer:
    """A tool (or one setting of it) as a group runs it."""

    name: str  # for --skip and the child's command line
    label: str
    measure: Callable[[Any], Record] | None  # one run, in a fresh child; None: the group's own
    modules: tuple[str, ...] = ()  # needed: checked without importing them
    dists: tuple[str, ...] = ()  # needed distributions (a tokenizer wheel has no module)
    ours: bool = False  # datapipe's own
    reference: bool = False  # a yardstick (a decode-only ceiling), not a peer
    tag: str = ""  # the group's own grouping (the data form it reads, its kind)
    code: str = ""  # another checkout to run datapipe from (--before)

    def missing(self) -> list[str]:
        return [m for m in self.modules if module_absent(m)] + \
            [d for d in self.dists if installed(d) is None]


def module_absent(name: str) -> bool:
    """True if module `name` cannot be imported here (found without importing it)."""
    try:
        return find_spec(name) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing altogether
        return True


def cuda_missing() -> str | None:
    """NO_CUDA where torch sees no CUDA device, else None: a GPU group's available()."""
    import torch

    return None if torch.cuda.is_available() else NO_CUDA


@dataclass
class GroupResult:
    """One group's run: the machine, what it prepared and measured (meta), every outcome."""

    group: str
    machine: dict[str, Any]
    meta: dict[str, Any]
    outcomes: dict[str, Outcome]
    peers: list[Peer] = field(default_factory=list)  # in order, --before twins included

    def median(self, name: str, key: str) -> float | None:
        outcome = self.outcomes.get(name)
        return outcome.median(key) if outcome is not None else None

    def data(self) -> dict[str, Any]:
        return {"machine": self.machine, "meta": self.meta,
                "outcomes": {n: asdict(o) for n, o in self.outcomes.items()}}


class Group:
    """A set of peers measured on one job. Subclasses name the peers and fill in the steps."""

    name = ""
    title = ""
    report = ""  # file stem of its own report in OUT
    peers: tuple[Peer, ...] = ()
    job_type: type = dict
    # Converted forms of the photos the peers read, by name: maker(src, out, workers).
    forms: dict[str, Callable[[Path, Path, int], None]] = {}  # noqa: RUF012 - read only
    brief_failures = True  # children log their own traceback: a failure shows as one line

    def available(self, opts: Options) -> str | None:
        """Why the group cannot run here (no CUDA device), or None."""
        return None

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The inputs, made or found (outside any timing), described as plain data: the meta
        of the results. A failure to prepare one peer's input fails that peer."""
        raise NotImplementedError

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Any:
        """What one run of `peer` gets (an instance of job_type, passed to the child)."""
        raise NotImplementedError

    def attempt(self, peer: Peer, job: Any, run_dir: Path, opts: Options) -> Record:
        """One measured run: by default a fresh `python -m datapipe.suite.child` process."""
        return run_in_child(self.name, peer, job, run_dir)

    def progress(self, peer: Peer, run: Record) -> str:
        """The end of a run's progress line: its figure."""
        raise NotImplementedError

    def after(self, opts: Options, meta: dict[str, Any], outcomes: dict[str, Outcome]) -> None:
        """Measurements of the group's own, after the rounds (kept in meta)."""

    def panels(self, result: GroupResult) -> list[Panel]:
        """The tables and charts of the suite's report."""
        raise NotImplementedError

    def details(self, result: GroupResult) -> list[str]:
        """Markdown of the group's own report after its panels: detailed tables and notes."""
        return []

    def all_peers(self, opts: Options) -> list[Peer]:
        """The peers, and with --before a twin of each of datapipe's run from that checkout."""
        twins = [replace(p, name=p.name + BEFORE, label=f"{p.label} (--before)",
                         code=str(opts.before.resolve()))
                 for p in self.peers if p.ours and p.measure is not None] \
            if opts.before is not None else []
        return [*self.peers, *twins]


# ---------------------------------------------------------------- running a group


def run_group(group: Group, opts: Options, machine: dict[str, Any]) -> GroupResult:
    """Prepare the group's inputs, measure every peer `opts.repeats` times, interleaved."""
    peers = group.all_peers(opts)
    outcomes = {p.name: initial_outcome(group.name, p, opts) for p in peers}
    start = time.perf_counter()
    meta = group.prepare(opts, outcomes)
    meta["prepare_s"] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()
    by_name = {p.name: p for p in peers}
    run_rounds(opts.repeats, peers, outcomes, opts.data / "runs" / group.name, opts.settle,
               lambda peer, run_dir: group.attempt(peer, group.job(peer, meta, opts, run_dir),
                                                   run_dir, opts),
               lambda name, run: group.progress(by_name[name], run), group.brief_failures)
    group.after(opts, meta, outcomes)
    meta["benchmark_s"] = round(time.perf_counter() - start, 1)
    return GroupResult(group.name, machine, meta, outcomes, peers)


def initial_outcome(group: str, peer: Peer, opts: Options) -> Outcome:
    if opts.skips(group, peer.name) or opts.skips(group, peer.tag):
        return Outcome("skipped")
    missing = peer.missing()
    return Outcome(f"not installed ({', '.join(missing)})" if missing else "ok")


def run_rounds(repeats: int, peers: list[Peer], outcomes: dict[str, Outcome], runs_dir: Path,
               settle: float, attempt: Callable[[Peer, Path], Record],
               progress: Callable[[str, Record], str], brief_failures: bool = True) -> None:
    """`repeats` rounds, each measuring once every peer whose outcome is still "ok".

    Each run gets a fresh runs_dir/NAME-ROUND, a wait of up to `settle` s for other work to
    stop, a "round i/n: NAME ..." line, then attempt(peer, run_dir), whose record is kept and
    whose figure ends the line. A run that raises one of CHILD_FAILURES, or whose record holds
    "error" (a failure the child caught), fails its peer, which then sits out later rounds.
    Every other round goes through the peers backwards: a machine that slows as a round goes
    on (a virtual machine's CPU credit, heat) then favours no peer by its place in the list."""
    for repeat in range(1, repeats + 1):
        for peer in peers if repeat % 2 else peers[::-1]:
            outcome = outcomes[peer.name]
            if outcome.status != "ok":
                continue
            run_dir = fresh_dir(runs_dir / f"{peer.name}-{repeat}")
            wait_for_quiet(settle)
            print(f"round {repeat}/{repeats}: {peer.name} ...", end=" ", flush=True)
            try:
                run = attempt(peer, run_dir)
            except CHILD_FAILURES as exc:  # report the peer as failed, go on with the others
                run = {"error": one_line(exc) if brief_failures else str(exc)}
            if "error" in run:
                outcome.status = f"failed: {run['error']}"
                where = f" (log: {run_dir / 'log.txt'})" if brief_failures else ""
                print(outcome.status + where, flush=True)
                continue
            outcome.runs.append(run)
            print(progress(peer.name, run), flush=True)


def least_disturbed(measure: Callable[[], Record], settle: float, retries: int,
                    busy: float = BUSY_ELSEWHERE) -> Record:
    """measure(), redone up to `retries` times while other work used more than `busy` cores
    during it, each redo after waiting up to `settle` s for quiet; the least disturbed
    attempt is kept, its `attempts` saying how many runs it was."""
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


# ---------------------------------------------------------------- child processes


def run_in_child(group: str, peer: Peer, job: Any, run_dir: Path) -> Record:
    """One run of `peer` in a fresh `python -m datapipe.suite.child` process."""
    payload = json.dumps(asdict(job) if not isinstance(job, dict) else job)
    argv = ["-m", "datapipe.suite.child", group, peer.name, payload,
            str(run_dir / "result.json")]
    env = {**CHILD_ENV, **({CODE_ENV: peer.code} if peer.code else {})}
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt", env)


def run_child(argv: list[str], result_file: Path, log_file: Path,
              env: dict[str, str] | None = None, python: str | None = None) -> Record:
    """Run `python *argv` in a fresh interpreter (this one's, or `python`: a tool that needs a
    venv of its own); it writes its answer as JSON to result_file.

    A fresh process per run keeps one tool's global state (multiprocessing start method, Rust
    thread pools, imported modules) from changing the next tool's numbers. Also returns the
    CPU time of the run's process tree and of everything else on the machine meanwhile, so
    that a run disturbed by other work shows as such."""
    import resource

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    result_file.unlink(missing_ok=True)
    busy, ours, start = machine_busy_seconds(), children_cpu(), time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.run([python or sys.executable, *argv], stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                              timeout=CHILD_TIMEOUT_S, check=False)
    wall = time.perf_counter() - start
    cpu = children_cpu() - ours
    others = max(0.0, machine_busy_seconds() - busy - cpu)
    if proc.returncode != 0 or not result_file.exists():
        tail = log_file.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"exit {proc.returncode}: " + " | ".join(tail))
    return {**json.loads(result_file.read_text()), "wall_s": wall, "cpu_s": cpu,
            "others_cores": others / wall}


def write_child_result(result_file: Path, measure: Callable[[], Record]) -> None:
    """Write measure()'s record to result_file; should it raise, write {"error": one line}
    instead (the traceback goes to the run's log), so the table can say what went wrong."""
    try:
        result = measure()
    except Exception as exc:  # the tool's own failure: one line for the table, the log has all
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {one_line(exc)}"}
    result_file.write_text(json.dumps(result))


# ---------------------------------------------------------------- small helpers


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters: fit for a table cell."""
    return " ".join(str(exc).split())[:300]


def fresh_dir(path: Path) -> Path:
    """An empty directory at `path`, replacing whatever an earlier run left there."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def busy_warning(outcomes: Iterable[Outcome]) -> str | None:
    """The report's warning when other work took more than BUSY_ELSEWHERE cores in a run."""
    most = max((r["others_cores"] for o in outcomes for r in o.runs), default=0.0)
    if not most > BUSY_ELSEWHERE:
        return None
    return (f"Warning: other processes used up to {most:.1f} cores during some runs; those "
            "runs are slower than this machine can do.")
