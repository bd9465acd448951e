"""What the training thread pays per batch: `next(loader)` when batches are already waiting.

    .venv/bin/python -m benchmarks.bench_handoff [--photos DIR | --shards DIR] [--batches 40]
        [--batch-size 256] [--workers N] [--repeats 2] [--skip dali-cpu,rate-bfloat16]

Hand-off, per path: a fresh process makes a Loader (RandomResizedCrop(224) | HorizontalFlip,
batches of --batch-size, --workers processes or DALI threads, every batch full), takes one
batch, then --batches times waits until every batch in flight is built (the prefetch queue is
full; for DALI, whose queue is out of sight, --wait seconds) and times `next()` alone: by the
wall clock, and by `time.thread_time()` of the calling thread, the CPU time the training thread
spent whatever else ran. Each figure: median and 95th percentile of those batches, ms.

  cpu             device="cpu", uint8 batches
  cpu-float32     device="cpu" + Normalize(dtype="float32")
  cpu-bfloat16    device="cpu" + Normalize(dtype="bfloat16")
  cuda            device="cuda", uint8 batches
  cuda-normalize  device="cuda" + Normalize(dtype="bfloat16"), on the device
  dali            decode="dali", device="cuda" (nvJPEG)
  dali-cpu        decode="dali", device="cpu" (DALI's CPU mode)

Paths that need CUDA say they were skipped where there is none.

Throughput: the Loader's images/s on the CPU with uint8 batches and with each Normalize dtype,
batches of --rate-batch (64) on --rate-workers (2) processes, clocked over --epochs epochs after
a warm-up one; also images per CPU-second of the whole process tree, which other work on the
machine disturbs less. Normalised / uint8 is the figure to watch (goal: >= 0.8).

Runs of all paths are interleaved, --repeats rounds, one fresh process each; the figures are
medians over the rounds. Saves bench-results/handoff.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BENCH_DATA,
    announce_machine,
    cores,
    git_revision,
    goal_verdict,
    installed,
    machine_line,
    markdown_table,
    median,
    publish,
    timed,
    tree_cpu_seconds,
    verdict,
)
from benchmarks.fixtures import CROP, prepare_shards
from benchmarks.runs import (
    Outcome,
    Record,
    busy_warning,
    check_skip,
    initial_outcome,
    outcomes_data,
    run_one,
    run_rounds,
    skip_names,
    write_child_result,
)

RATIO_GOAL = 0.8  # Normalize on the CPU: at least this fraction of the uint8 images/s
NEXT_GOAL_MS = 1.0  # training-thread ms per next() with batches waiting, batch of 256
QUEUE_WAIT_LIMIT_S = 30.0


@dataclass(frozen=True)
class Variant:
    """One way through the Loader, timed one way (hand-off, or throughput when `rate`)."""

    name: str  # for --skip and the child's --one
    label: str
    decode: str = "cpu"
    device: str = "cpu"
    normalize: str | None = None  # Normalize's dtype, or no Normalize
    modules: tuple[str, ...] = ()  # needed, checked for without importing them
    rate: bool = False  # a throughput run (else a hand-off run)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


PATHS = (
    Variant("cpu", 'device="cpu", uint8'),
    Variant("cpu-float32", 'device="cpu" + Normalize(float32)', normalize="float32"),
    Variant("cpu-bfloat16", 'device="cpu" + Normalize(bfloat16)', normalize="bfloat16"),
    Variant("cuda", 'device="cuda", uint8', device="cuda"),
    Variant("cuda-normalize", 'device="cuda" + Normalize(bfloat16)', device="cuda",
          normalize="bfloat16"),
    Variant("dali", 'decode="dali", device="cuda"', decode="dali", device="cuda",
          modules=("nvidia.dali",)),
    Variant("dali-cpu", 'decode="dali", device="cpu" (CPU mode)', decode="dali",
          modules=("nvidia.dali",)),
    Variant("rate-uint8", "uint8", rate=True),
    Variant("rate-float32", "Normalize(float32)", normalize="float32", rate=True),
    Variant("rate-bfloat16", "Normalize(bfloat16)", normalize="bfloat16", rate=True),
)
PATHS_BY_NAME = {p.name: p for p in PATHS}
HANDOFF = [p.name for p in PATHS if not p.rate]
RATES = [p.name for p in PATHS if p.rate]


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    shards: str
    batch_size: int
    workers: int
    batches: int = 40  # timed next() calls (hand-off) or measured epochs (throughput)
    wait_s: float = 0.5  # before each timed next() where the queue cannot be seen
    seed: int = 0


# ---------------------------------------------------------------- arithmetic (pure)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), by linear interpolation between the nearest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "p95": percentile(values, 95)}


# ---------------------------------------------------------------- the child's side


def make_loader(path: Variant, job: Job) -> Any:
    import datapipe as dp

    transform = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    if path.normalize:
        transform = transform | dp.image.Normalize(dtype=path.normalize)
    return dp.Loader(job.shards, batch_size=job.batch_size, num_workers=job.workers,
                     decode=path.decode, device=path.device, transform=transform,
                     seed=job.seed, drop_last=not path.rate)


def endless(loader: Any) -> Iterator[dict[str, Any]]:
    if len(loader) == 0:
        raise RuntimeError("the dataset holds fewer images than one batch")
    while True:
        yield from loader  # a finished epoch moves on to the next by itself


def queue_state(loader: Any) -> tuple[int, int] | None:
    """(batches built and waiting, batches in flight) of a Loader's worker pool, or None where
    that cannot be seen (DALI, no workers, or a Loader whose internals differ)."""
    producer = getattr(loader, "_producer", None)
    pool = getattr(producer, "_pool", None)
    in_flight = getattr(producer, "_in_flight", None)
    if pool is None or in_flight is None or not hasattr(pool, "ready_count"):
        return None
    return pool.ready_count(), in_flight


def wait_until_waiting(loader: Any, wait_s: float) -> None:
    """Until every batch in flight is built; where that cannot be seen, wait_s seconds."""
    if queue_state(loader) is None:
        time.sleep(wait_s)
        return
    deadline = time.perf_counter() + QUEUE_WAIT_LIMIT_S
    while time.perf_counter() < deadline:
        ready, in_flight = queue_state(loader)
        if ready >= in_flight:
            return
        time.sleep(0.002)
    raise RuntimeError(f"batches still in flight after {QUEUE_WAIT_LIMIT_S:.0f} s")


def handoff_run(path: Variant, job: Job) -> Record:
    """--batches timed next() calls, each with the queue full before it."""
    import torch

    walls, cpus = [], []
    with make_loader(path, job) as loader:
        batches = endless(loader)
        first = next(batches)["image"]
        shape = (job.batch_size, 3, CROP, CROP)
        if tuple(first.shape) != shape or first.is_cuda != path.cuda:
            raise RuntimeError(f"first batch is {tuple(first.shape)} on {first.device}")
        for _ in range(job.batches):
            wait_until_waiting(loader, job.wait_s)
            wall, cpu = time.perf_counter(), time.thread_time()
            batch = next(batches)
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            walls.append(wall * 1e3)
            cpus.append(cpu * 1e3)
            del batch
            if path.cuda:
                torch.cuda.synchronize()  # outside the clock: no GPU work left queued
    return {"wall_ms": walls, "cpu_ms": cpus, "wall": spread(walls), "cpu": spread(cpus),
            "dtype": str(first.dtype)}


def rate_run(path: Variant, job: Job) -> Record:
    """Images/s and images per CPU-second over job.batches epochs, after a warm-up epoch."""
    with make_loader(path, job) as loader:
        for _ in loader:
            pass
        started, cpu, images = time.perf_counter(), tree_cpu_seconds(), 0
        for _ in range(job.batches):
            for batch in loader:
                images += len(batch["index"])
        seconds, cpu = time.perf_counter() - started, tree_cpu_seconds() - cpu
    return {"images": images, "seconds": seconds, "rate": images / seconds,
            "cpu_rate": images / cpu if cpu > 0 else 0.0}


def child_main(name: str, job_json: str, result_file: Path) -> None:
    path, job = PATHS_BY_NAME[name], Job(**json.loads(job_json))
    write_child_result(result_file, lambda: rate_run(path, job) if path.rate
                       else handoff_run(path, job))


# ---------------------------------------------------------------- running (the parent)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def initial_outcomes(skip: set[str], cuda: bool) -> dict[str, Outcome]:
    outcomes = {}
    for path in PATHS:
        outcome = initial_outcome((path.name,), skip, path.modules)
        if outcome.status == "ok" and path.cuda and not cuda:
            outcome.status = "skipped: no CUDA device"
        outcomes[path.name] = outcome
    return outcomes


def job_for(path: Variant, shards: Path, args: argparse.Namespace) -> Job:
    if path.rate:
        return Job(str(shards), args.rate_batch, args.rate_workers, args.epochs)
    return Job(str(shards), args.batch_size, args.workers, args.batches, args.wait)


def run_all(args: argparse.Namespace, shards: Path, outcomes: dict[str, Outcome]) -> None:
    def attempt(name: str, run_dir: Path) -> Record:
        job = job_for(PATHS_BY_NAME[name], shards, args)
        return run_one("benchmarks.bench_handoff", name, job, run_dir)

    run_rounds(args.repeats, list(PATHS_BY_NAME), outcomes, BENCH_DATA / "handoff-runs",
               args.settle, attempt, progress, brief_failures=True)


def progress(name: str, run: Record) -> str:
    if PATHS_BY_NAME[name].rate:
        return f"{run['rate']:,.0f} images/s, {run['cpu_rate']:,.0f} per CPU-second"
    return (f"next() {run['cpu']['median']:.3f} ms CPU, {run['wall']['median']:.3f} ms wall "
            f"(other work: {run['others_cores']:.2f} cores)")


# ---------------------------------------------------------------- the report


def summarise(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """Per path that ran: medians over the rounds of each run's figures."""
    out: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        runs = outcome.runs
        if outcome.status != "ok" or not runs:
            continue
        if PATHS_BY_NAME[name].rate:
            out[name] = {key: median([r[key] for r in runs]) for key in ("rate", "cpu_rate")}
        else:
            out[name] = {f"{clock}_{stat}": median([r[clock][stat] for r in runs])
                         for clock in ("cpu", "wall") for stat in ("median", "p95")}
            out[name]["dtype"] = runs[0]["dtype"]
    for name in RATES[1:]:
        if name in out and RATES[0] in out:
            for key in ("rate", "cpu_rate"):
                base = out[RATES[0]][key]  # 0: a run too short for the CPU clock's ticks
                out[name][f"{key}_ratio"] = out[name][key] / base if base else float("nan")
    return out


def headline(summary: dict[str, dict[str, Any]], batch_size: int) -> str:
    measured = [name for name in HANDOFF if name in summary]
    parts = []
    if measured:
        worst = max(measured, key=lambda n: summary[n]["cpu_median"])
        ms = summary[worst]["cpu_median"]
        parts.append(f"the training thread spends at most {ms:.2f} ms of CPU per next() "
                     f"(median, batch of {batch_size}; worst path: {worst}; goal ≤ "
                     f"{NEXT_GOAL_MS:g} ms: {verdict(ms <= NEXT_GOAL_MS)})")
    for name in RATES[1:]:
        s = summary.get(name)
        if s and "rate_ratio" in s:
            ok = s["rate_ratio"] >= RATIO_GOAL
            parts.append(f"{PATHS_BY_NAME[name].label} on the CPU runs at {s['rate_ratio']:.2f} "
                         f"of uint8's images/s ({s['cpu_rate_ratio']:.2f} per CPU-second; "
                         f"{goal_verdict(RATIO_GOAL, ok, '')})")
    if not parts:
        return "**Nothing was measured.**"
    text = "; ".join(parts)
    return f"**{text[0].upper()}{text[1:]}.**"


def handoff_rows(summary: dict[str, dict[str, Any]],
                 outcomes: dict[str, Outcome]) -> list[list[str]]:
    rows = []
    for name in HANDOFF:
        s, label = summary.get(name), PATHS_BY_NAME[name].label
        if s is None:
            rows.append([name, label, outcomes[name].status, "", "", "", ""])
            continue
        runs = " / ".join(f"{r['cpu']['median']:.3f}" for r in outcomes[name].runs)
        rows.append([name, label, f"{s['cpu_median']:.3f}", f"{s['cpu_p95']:.3f}",
                     f"{s['wall_median']:.3f}", f"{s['wall_p95']:.3f}", runs])
    return rows


def rate_rows(summary: dict[str, dict[str, Any]],
              outcomes: dict[str, Outcome]) -> list[list[str]]:
    rows = []
    for name in RATES:
        s, label = summary.get(name), PATHS_BY_NAME[name].label
        if s is None:
            rows.append([label, outcomes[name].status, "", "", ""])
            continue
        ratio = f"{s['rate_ratio']:.2f}" if "rate_ratio" in s else "1.00"
        cpu_ratio = f"{s['cpu_rate_ratio']:.2f}" if "cpu_rate_ratio" in s else "1.00"
        rows.append([label, f"{s['rate']:,.0f}", ratio, f"{s['cpu_rate']:,.0f}", cpu_ratio])
    return rows


def render(info: dict[str, Any], meta: dict[str, Any], outcomes: dict[str, Outcome]) -> str:
    summary = summarise(outcomes)
    warning = busy_warning(outcomes)
    return "\n".join([
        "# Training-thread cost of next(), and Normalize on the CPU", "",
        headline(summary, meta["batch_size"]), "",
        f"Machine: {machine_line(info)}; torch {meta['torch']}; code {meta['revision']}.", "",
        f"Hand-off: RandomResizedCrop({CROP}) | HorizontalFlip, batches of "
        f"{meta['batch_size']}, {meta['workers']} workers / DALI threads; {meta['batches']} "
        f"next() calls per run, each once every batch in flight was built; median of "
        f"{meta['repeats']} runs of each figure. ms per next().", "",
        markdown_table(["path", "loader", "CPU ms (median)", "CPU ms (p95)",
                        "wall ms (median)", "wall ms (p95)", "runs: CPU ms"],
                       handoff_rows(summary, outcomes)), "",
        f"Throughput on the CPU: batches of {meta['rate_batch']}, {meta['rate_workers']} "
        f"workers, {meta['epochs']} epochs after a warm-up one.", "",
        markdown_table(["batch", "images/s", "÷ uint8", "images/CPU-s", "÷ uint8"],
                       rate_rows(summary, outcomes)), "",
        "- CPU ms: `time.thread_time()` of the thread that calls next(): what the training "
        "thread pays. Wall ms also counts time that thread waited (for the GIL, for a core).",
        *([f"- {warning}"] if warning else []),
    ])


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT, "
        "made with tools/make_photos.py if missing), converted once and cached")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--shards", type=Path, help="an existing `datapipe convert images` output")
    add("--batch-size", type=int, default=256, help="images per batch, hand-off (256)")
    add("--workers", type=int, default=cores(), help="processes / DALI threads, hand-off "
        "(all cores)")
    add("--batches", type=int, default=40, help="timed next() calls per run (40)")
    add("--wait", type=float, default=0.5, help="seconds to wait before each timed next() "
        "where the queue cannot be seen (DALI) (0.5)")
    add("--rate-batch", type=int, default=64, help="images per batch, throughput (64)")
    add("--rate-workers", type=int, default=2, help="processes, throughput (2)")
    add("--epochs", type=int, default=2, help="measured epochs per throughput run (2)")
    add("--repeats", type=int, default=2, help="rounds; the median counts (2)")
    add("--settle", type=float, default=10.0, help="wait up to this many seconds for other "
        "work on the machine to stop before each run (10)")
    add("--skip", default="", help="comma-separated: " + ", ".join(PATHS_BY_NAME))
    add("--one", help=argparse.SUPPRESS)  # internal: measure one run in this process
    add("--job", help=argparse.SUPPRESS)
    add("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.count, args.batch_size, args.workers, args.batches, args.rate_batch,
           args.rate_workers, args.epochs, args.repeats) < 1 or min(args.wait, args.settle) < 0:
        parser.error("counts, sizes, workers, batches, epochs and repeats must be positive; "
                     "--wait and --settle zero or more")
    check_skip(parser, args.skip, PATHS_BY_NAME)
    return args


def collect(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Every tool measured as `args` say: the Markdown report and the results' data (machine,
    meta with prepare_s and benchmark_s, summary, outcomes, jobs). Shared by main and the suite."""
    outcomes = initial_outcomes(skip_names(args.skip), cuda_available())
    for name, outcome in outcomes.items():
        if outcome.status.startswith("skipped: no CUDA"):
            print(f"{name}: skipped (needs a CUDA device)", flush=True)
    info = announce_machine()
    (shards, data), prep_s = timed(lambda: prepare_shards(args))
    meta = {"data": data, "batch_size": args.batch_size, "workers": args.workers,
            "batches": args.batches, "rate_batch": args.rate_batch,
            "rate_workers": args.rate_workers, "epochs": args.epochs, "repeats": args.repeats,
            "torch": installed("torch"), "revision": git_revision()}
    _, bench_s = timed(lambda: run_all(args, shards, outcomes))
    meta.update(prepare_s=round(prep_s, 1), benchmark_s=round(bench_s, 1))
    summary = summarise(outcomes)
    return render(info, meta, outcomes), {
        "machine": info, "meta": meta, "headline": headline(summary, args.batch_size),
        "summary": summary, "outcomes": outcomes_data(outcomes),
        "jobs": {name: asdict(job_for(p, shards, args)) for name, p in PATHS_BY_NAME.items()}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        child_main(args.one, args.job, args.result)
        return 0
    report, data = collect(args)
    publish("handoff", report, data, data["meta"]["prepare_s"], data["meta"]["benchmark_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
