"""Helpers shared by the benchmark scripts: timing, isolated runs, the machine line, Markdown."""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
BENCH_DATA = REPO / "bench-data"
BENCH_RESULTS = REPO / "bench-results"
CHILD_TIMEOUT_S = 900


def cores() -> int:
    """CPUs this process may run on (what a container or taskset allows, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def installed(dist: str) -> str | None:
    """Version of an installed distribution, or None; never imports it."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------- describing the machine


def _proc_field(path: str, key: str) -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def cpu_model() -> str:
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or "unknown CPU"


def ram_gb() -> float:
    total_kb = _proc_field("/proc/meminfo", "MemTotal")
    return int(total_kb.split()[0]) / (1 << 20) if total_kb else float("nan")


def pil_description() -> str:
    from datapipe.doctor import pil_build

    pil = pil_build()
    turbo = "libjpeg-turbo" if pil["libjpeg_turbo"] else "no libjpeg-turbo"
    return f"{pil['build']} {pil['version']} ({turbo})"


def git_revision() -> str:
    """Commit the measured code is at, with "+changes" when the work tree differs from it."""
    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                check=False)
        return result.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": cores(), "ram_gb": round(ram_gb(), 1),
            "python": platform.python_version(), "pil": pil_description()}


def machine_line(info: dict[str, Any]) -> str:
    return (f"{info['cpu']}, {info['cores']} cores, {info['ram_gb']:.0f} GB RAM, "
            f"Python {info['python']}, PIL: {info['pil']}")


def announce_machine() -> dict[str, Any]:
    """machine(), after printing it as a benchmark's first line."""
    info = machine()
    print(f"Machine: {machine_line(info)}", flush=True)
    return info


# ---------------------------------------------------------------- files and processes


def fresh_dir(path: Path) -> Path:
    """An empty directory at `path`, replacing whatever an earlier run left there."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def build_once(out: Path, message: str, build: Callable[[Path], None]) -> Path:
    """`out`, filled by build(out) in a fresh directory unless a finished build is there.

    The `.complete` marker is written last, so a killed build is rebuilt, not measured
    half-made; `message` is printed before building."""
    if not (out / ".complete").exists():
        print(message, flush=True)
        build(fresh_dir(out))
        (out / ".complete").touch()
    return out


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def warm_page_cache(paths: Iterable[Path]) -> int:
    """Read every file once so that no tool pays, or is spared, the cold-disk reads."""
    total = 0
    for path in paths:
        if path.is_file():
            total += len(path.read_bytes())
    return total


def machine_busy_seconds() -> float:
    """CPU-seconds all CPUs have spent not idle since boot (steal included: lost to us)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU-seconds of it and of the children it has reaped), from /proc."""
    tick, stats = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
        stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return stats


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU-seconds used so far by process `root` (default: this one), its threads, its live
    descendants and every process they have reaped. The difference of two readings is what a
    tool's whole process tree (worker processes and threads) spent in between, however busy
    the rest of the machine was. NaN where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return float("nan")
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    todo, total = [root or os.getpid()], 0.0
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


def wait_for_quiet(limit_s: float, idle_cores: float = 0.2) -> float:
    """Wait up to limit_s for other work on the machine to stop; returns the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        busy = machine_busy_seconds()
        time.sleep(1.0)
        if machine_busy_seconds() - busy < idle_cores:
            break
    return time.perf_counter() - start


def run_child(argv: list[str], result_file: Path, log_file: Path,
              env: dict[str, str] | None = None, python: str | None = None) -> dict[str, Any]:
    """Run `python *argv` in a fresh interpreter (this one's executable, or `python`: a tool
    that needs a venv of its own); it writes its answer as JSON to result_file.

    A fresh process per run keeps one tool's global state (multiprocessing start method, Rust
    thread pools, imported modules) from changing the next tool's numbers. Also returns the
    CPU time of the run's process tree and of everything else on the machine meanwhile, so
    that a run disturbed by other work shows as such.
    """
    result_file.unlink(missing_ok=True)
    # `python -m benchmarks.NAME` finds the package wherever the parent was started from.
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    busy, ours, start = machine_busy_seconds(), children_cpu_seconds(), time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.run([python or sys.executable, *argv], stdout=log,
                              stderr=subprocess.STDOUT, env=env,
                              timeout=CHILD_TIMEOUT_S, check=False)
    wall = time.perf_counter() - start
    cpu = children_cpu_seconds() - ours
    others = max(0.0, machine_busy_seconds() - busy - cpu)
    if proc.returncode != 0 or not result_file.exists():
        tail = log_file.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"exit {proc.returncode}: " + " | ".join(tail))
    return {**json.loads(result_file.read_text()), "wall_s": wall, "cpu_s": cpu,
            "others_cores": others / wall}


# ---------------------------------------------------------------- reporting


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table padded so that it also reads well as plain text."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def ratio(ours: float | None, theirs: float | None, unit: str = "×") -> str:
    """ours / theirs to two decimals with `unit`, or "–" when either is missing or zero."""
    return f"{ours / theirs:.2f}{unit}" if ours and theirs else "–"


def verdict(ok: bool) -> str:
    """A goal's verdict: "met" or "NOT met"."""
    return "met" if ok else "NOT met"


def goal_verdict(goal: float, ok: bool, unit: str = "×") -> str:
    """"goal ≥ 2×: met", for a goal that a measured value must reach."""
    return f"goal ≥ {goal:g}{unit}: {verdict(ok)}"


def write_results(stem: str, markdown: str, data: dict[str, Any],
                  out: Path | None = None) -> tuple[Path, Path]:
    out = out or BENCH_RESULTS  # looked up now: tests point it elsewhere
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown + "\n")
    js.write_text(json.dumps(data, indent=2) + "\n")
    return md, js


def publish(stem: str, report: str, data: dict[str, Any], prepare_s: float,
            bench_s: float) -> None:
    """Print the report, save it and `data` as bench-results/STEM.md and .json, say where."""
    print("\n" + report)
    md, js = write_results(stem, report, data)
    print(f"\nsaved {md} and {js} (inputs {prepare_s:.0f} s, runs {bench_s:.0f} s)")
