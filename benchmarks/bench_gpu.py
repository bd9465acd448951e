"""GPU loader throughput (nvJPEG decode + device augmentation) and the host-to-device overlap.

    .venv/bin/python -m benchmarks.bench_gpu [--photos DIR | --shards DIR] [--workers N]
        [--batches 30] [--repeats 3] [--step-ms 100] [--dtype bfloat16] [--require-cuda]

Runs wherever torch sees a CUDA device. Without one it prints "no CUDA device: GPU benchmark
skipped" and exits 0, or 2 with --require-cuda; it then imports nothing but torch.

The job: the photos of bench_loader.py (tools/make_photos.py) converted by `datapipe convert
images` (the same cached shards), RandomResizedCrop(224) | HorizontalFlip while decoding, then
ColorJitter(0.4, 0.4, 0.4, 0.1) and Normalize(dtype=--dtype) on the GPU; batches of 256,
every one full (drop_last). Three kinds of run, each --repeats times in a fresh process:

  dali  Loader(decode="dali", device="cuda"): DALI's mixed decoder (nvJPEG) decodes the crop on
        the GPU, so only JPEG bytes cross PCIe; jitter and normalise run on the GPU.
  cpu   Loader(decode="cpu", device="cuda"): worker processes decode on the CPU; the uint8
        crops cross PCIe (pinned memory, side-stream copy); jitter and normalise on the GPU.
  copy  no loader and no decoding: the H2D copy alone against a synthetic step.

The synthetic step stands in for training: it reads the batch (so it cannot start before the
batch is there), then runs a chain of 2048 x 2048 fp32 matmuls on the current stream, as many
as take the wanted time by a CUDA-event calibration made first in the same process.

Every "ms per step" is wall-clock time over a loop of --batches steps, after one untimed
step, with the GPU drained (torch.cuda.synchronize) at both ends, so queued GPU work counts.
Each loop runs twice: "async", where the host never waits for the GPU and queues work ahead,
and "synced", where every step ends by waiting for the current stream, as a loop that reads
`loss.item()` does. What the numbers mean:

  images/s       loader alone, no step: batch_size / (b). Device augmentation included.
  (a) step       the synthetic step alone, on a batch already on the GPU.
  (b) loader     ms per batch of the loader alone.
  (c) both       ms per step when every loader batch feeds one step.
  overlap        (a + b - c) / min(a, b), clipped to [0, 1]: the share of the shorter of the
                 two that ran hidden under the other. 1: c = max(a, b); 0: c = a + b.
  copy ms        H2D copy of one uint8 batch of the loader's shape and memory layout, alone:
                 pinned memory, non_blocking, on a side stream, timed with CUDA events. GB/s is
                 its bytes over that time.
  step + copy    ms per step when every step consumes a batch brought over by datapipe's own
                 prefetch_to_device from pre-made pinned batches (the step is sized to
                 --copy-factor times the copy, so that the copy's share can be read off).
  hidden         1 - (step + copy - step) / copy, clipped to [0, 1]: the share of the copy that
                 did not lengthen the step. Python hand-over costs count as not hidden.

Each figure in the tables is the median over the runs; the derived ones (overlap, hidden) are
computed from those medians, so they can be checked from the table. Saves bench-results/gpu.md
and .json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from benchmarks.common import (
    BENCH_DATA,
    announce_machine,
    cores,
    installed,
    machine_line,
    markdown_table,
    median,
    publish,
    timed,
)
from benchmarks.fixtures import BATCH, CROP, prepare_shards
from benchmarks.runs import (
    BUSY_ELSEWHERE,
    Outcome,
    Record,
    busiest,
    check_skip,
    initial_outcome,
    outcomes_data,
    run_one,
    run_rounds,
    skip_names,
    write_child_result,
)

if TYPE_CHECKING:
    import torch

T = TypeVar("T")
SKIP_LINE = "no CUDA device: GPU benchmark skipped"
NO_CUDA_EXIT = 2  # with --require-cuda
MATMUL_SIZE = 2048
PROBE_MATMULS = 10  # per calibration timing
COPY_ROUNDS = 5  # step-alone and step+copy loops alternate this often (drift hits both)
JITTER = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
LOOPS = ("async", "synced")


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    shards: str
    workers: int
    batches: int  # timed steps per loop
    batch_size: int = BATCH
    step_ms: float = 100.0
    dtype: str = "bfloat16"
    copy_factor: float = 3.0
    seed: int = 0


@dataclass(frozen=True)
class Kind:
    name: str  # for --skip and the child's --one
    label: str
    modules: tuple[str, ...]  # checked for without importing them


KINDS = (
    Kind("dali", 'decode="dali": nvJPEG (DALI mixed) + GPU augmentation', ("nvidia.dali",
                                                                             "kornia")),
    Kind("cpu", 'decode="cpu": CPU decode, uint8 over PCIe, GPU augmentation', ("kornia",)),
    Kind("copy", "H2D copy against a synthetic step (no decoding)", ()),
)
KINDS_BY_NAME = {k.name: k for k in KINDS}
LOADERS = ("dali", "cpu")


# ---------------------------------------------------------------- arithmetic (pure)


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


def overlap_fraction(step_ms: float, loader_ms: float, both_ms: float) -> float:
    """Share of the shorter of step and loader that ran hidden under the other: 1 when the
    loop takes max(step, loader), 0 when it takes their sum."""
    shorter = min(step_ms, loader_ms)
    if not shorter > 0:
        return math.nan
    return _clip01((step_ms + loader_ms - both_ms) / shorter)


def hidden_fraction(step_ms: float, both_ms: float, copy_ms: float) -> float:
    """Share of the copy that did not lengthen the step: 1 - (added time) / (copy alone)."""
    if not copy_ms > 0:
        return math.nan
    return _clip01(1.0 - (both_ms - step_ms) / copy_ms)


def matmuls_for(target_ms: float, ms_per_matmul: float) -> int:
    """How many matmuls make a step of about target_ms (at least one)."""
    if not ms_per_matmul > 0:
        return 1
    return max(1, round(target_ms / ms_per_matmul))


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per key of the first run: the median over the runs for numbers, else the first value."""
    out: dict[str, Any] = {}
    for key, first in (runs[0].items() if runs else ()):
        if isinstance(first, (int, float)) and not isinstance(first, bool):
            out[key] = median([r[key] for r in runs if key in r])
        else:
            out[key] = first
    return out


def per_step_ms(items: Iterator[T], steps: int, body: Callable[[T], object],
                wait: Callable[[], None], drain: Callable[[], None]) -> float:
    """Wall-clock ms per item over `steps` items, after one untimed warm-up item.

    `drain` empties the device's queue before the clock starts and before it stops, so work
    still queued counts; `wait` runs after every step (the synced loop's per-step wait)."""
    body(next(items))
    drain()
    start = time.perf_counter()
    for _ in range(steps):
        body(next(items))
        wait()
    drain()
    return (time.perf_counter() - start) * 1e3 / steps


# ---------------------------------------------------------------- on the GPU (in the child)


def _nothing() -> None:
    pass


def _ignore(_: object) -> None:
    pass


def loop_waits() -> dict[str, Callable[[], None]]:
    """The per-step wait of each loop. Only the current stream is waited for, as
    `loss.item()` does: a prefetch copy on a side stream may still be running."""
    import torch

    return {"async": _nothing, "synced": lambda: torch.cuda.current_stream().synchronize()}


def cuda_device() -> torch.device:
    """The current CUDA device, with its index (DALI wants one)."""
    import torch

    return torch.device("cuda", torch.cuda.current_device())


def gpu_ms(fn: Callable[[], object], repeats: int = 5) -> float:
    """Median GPU time of fn's work on the current stream, by CUDA events (after a warm-up)."""
    import torch

    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return median(times)


class SyntheticStep:
    """Reads the batch, then `matmuls` chained fp32 matmuls, all on the current stream."""

    def __init__(self, device: torch.device, matmuls: int = 1) -> None:
        import torch

        gen = torch.Generator(device=device).manual_seed(0)
        scale = MATMUL_SIZE ** -0.5  # keeps the products' values ordinary
        shape = (MATMUL_SIZE, MATMUL_SIZE)
        self.a = torch.randn(shape, device=device, generator=gen) * scale
        self.b = torch.randn(shape, device=device, generator=gen) * scale
        self.c = torch.empty_like(self.a)
        self.seen = torch.zeros((), device=device)
        self.matmuls = matmuls

    def burn(self, matmuls: int) -> None:
        import torch

        for _ in range(matmuls):
            torch.mm(self.a, self.b, out=self.c)

    def __call__(self, images: torch.Tensor) -> None:
        import torch

        # The read orders the step after the batch's arrival, as a model's first layer would.
        self.seen += images.sum(dtype=torch.float32)
        self.burn(self.matmuls)


def calibrated_step(device: torch.device, target_ms: float) -> SyntheticStep:
    step = SyntheticStep(device)
    per_matmul = gpu_ms(lambda: step.burn(PROBE_MATMULS)) / PROBE_MATMULS
    step.matmuls = matmuls_for(target_ms, per_matmul)
    return step


def step_alone_ms(step: SyntheticStep, resident: torch.Tensor, steps: int,
                  loop: str) -> float:
    import torch

    return per_step_ms(itertools.repeat(resident), steps, step, loop_waits()[loop],
                       torch.cuda.synchronize)


def pinned_batch(batch_size: int, seed: int) -> torch.Tensor:
    """uint8 N x 3 x 224 x 224 in pinned memory, channels-last like the loader's host batches."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    nhwc = torch.randint(0, 256, (batch_size, CROP, CROP, 3), dtype=torch.uint8, generator=gen)
    return nhwc.pin_memory().permute(0, 3, 1, 2)


def copy_alone_ms(host: torch.Tensor, device: torch.device, repeats: int) -> float:
    """GPU time of one H2D copy on a side stream, nothing else running (median)."""
    import torch

    stream = torch.cuda.Stream(device=device)
    times = []
    for _ in range(repeats + 1):  # the first pays the allocator's and the driver's warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            moved = host.to(device, non_blocking=True)
            end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        del moved
    return median(times[1:])


def prefetched_images(hosts: list[torch.Tensor], device: torch.device) -> Iterator[Any]:
    """Endless device batches through datapipe's own side-stream prefetch."""
    from datapipe.loader.device import prefetch_to_device

    batches = ((b, {"image": hosts[b % len(hosts)]}) for b in itertools.count())
    for _, batch in prefetch_to_device(batches, device):
        yield batch["image"]


def copy_run(job: Job) -> dict[str, Any]:
    """Copy alone; then the step alone and fed by prefetch_to_device, in alternating rounds."""
    import torch

    device = cuda_device()
    hosts = [pinned_batch(job.batch_size, seed) for seed in range(2)]
    copy_ms = copy_alone_ms(hosts[0], device, job.batches)
    step = calibrated_step(device, job.copy_factor * copy_ms)
    resident = hosts[0].to(device)
    loops: dict[str, dict[str, list[float]]] = {loop: {"step": [], "both": []} for loop in LOOPS}
    for _ in range(COPY_ROUNDS):
        for loop, times in loops.items():
            times["step"].append(step_alone_ms(step, resident, job.batches, loop))
            times["both"].append(per_step_ms(prefetched_images(hosts, device), job.batches, step,
                                             loop_waits()[loop], torch.cuda.synchronize))
    nbytes = hosts[0].numel() * hosts[0].element_size()
    result = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "cuda": torch.version.cuda or "", "batch_mb": nbytes / 1e6, "copy_ms": copy_ms,
              "copy_gbps": nbytes / copy_ms / 1e6, "matmuls": step.matmuls}
    for loop, times in loops.items():
        result[f"step_{loop}_ms"] = median(times["step"])
        result[f"both_{loop}_ms"] = median(times["both"])
    return result


def gpu_transform(dtype: str) -> Any:
    import datapipe as dp

    return (dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
            | dp.image.ColorJitter(*JITTER) | dp.image.Normalize(dtype=dtype))


def endless(loader: Any) -> Iterator[dict[str, Any]]:
    if len(loader) == 0:
        raise RuntimeError("the dataset holds fewer images than one batch")
    while True:
        yield from loader  # a finished epoch moves on to the next by itself


def check_images(images: torch.Tensor, job: Job) -> None:
    """Proof of the whole job: a full batch of 224 x 224 crops in --dtype on the GPU."""
    import torch

    shape = (job.batch_size, 3, CROP, CROP)
    wrong_dtype = images.dtype != getattr(torch, job.dtype)
    if tuple(images.shape) != shape or not images.is_cuda or wrong_dtype:
        raise RuntimeError(f"first batch is {tuple(images.shape)} {images.dtype} on "
                           f"{images.device}, expected {shape} torch.{job.dtype} on cuda")


def loader_run(job: Job, decode: str) -> dict[str, Any]:
    """The step alone (before any loader exists), then the loader alone, then both."""
    import torch

    import datapipe as dp

    device = cuda_device()
    step = calibrated_step(device, job.step_ms)
    # What the loader hands out: N x 3 x H x W in channels-last memory.
    resident = torch.empty(job.batch_size, 3, CROP, CROP, device=device,
                           dtype=getattr(torch, job.dtype),
                           memory_format=torch.channels_last).zero_()
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(device),
                              "matmuls": step.matmuls}
    for loop in LOOPS:
        result[f"step_{loop}_ms"] = step_alone_ms(step, resident, job.batches, loop)
    created = time.perf_counter()
    with dp.Loader(job.shards, batch_size=job.batch_size, shuffle=True, seed=job.seed,
                   num_workers=job.workers, decode=decode, transform=gpu_transform(job.dtype),
                   device=device, drop_last=True) as loader:
        batches = (batch["image"] for batch in endless(loader))
        check_images(next(batches), job)
        torch.cuda.synchronize()
        result["start_s"] = time.perf_counter() - created
        result["loader_ms"] = per_step_ms(batches, job.batches, _ignore, _nothing,
                                          torch.cuda.synchronize)
        for loop, wait in loop_waits().items():
            result[f"both_{loop}_ms"] = per_step_ms(batches, job.batches, step, wait,
                                                    torch.cuda.synchronize)
    result["images_per_s"] = job.batch_size * 1e3 / result["loader_ms"]
    return result


def child_main(name: str, job_json: str, result_file: Path) -> None:
    """Measure one run in this (fresh) process; a failure becomes one line for the table."""
    job = Job(**json.loads(job_json))
    write_child_result(result_file, lambda: copy_run(job) if name == "copy"
                       else loader_run(job, decode=name))


# ---------------------------------------------------------------- running (the parent)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def run_all(args: argparse.Namespace, job: Job, outcomes: dict[str, Outcome]) -> None:
    """`args.repeats` rounds, each running every kind once, so drift spreads over all."""
    run_rounds(args.repeats, list(KINDS_BY_NAME), outcomes, BENCH_DATA / "gpu-runs",
               args.settle,
               lambda name, run_dir: run_one("benchmarks.bench_gpu", name, job, run_dir),
               progress_line, brief_failures=True)


def progress_line(name: str, run: Record) -> str:
    if name == "copy":
        return f"copy {run['copy_ms']:.2f} ms ({run['copy_gbps']:.1f} GB/s)"
    return f"{run['images_per_s']:,.0f} images/s (other work: {run['others_cores']:.2f} cores)"


# ---------------------------------------------------------------- the report


def summarise(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """Medians of every kind's runs plus the derived fractions, computed from those medians."""
    out = {}
    for name, outcome in outcomes.items():
        if outcome.status != "ok" or not outcome.runs:
            continue
        s = medians(outcome.runs)
        for loop in LOOPS:
            step, both = s[f"step_{loop}_ms"], s[f"both_{loop}_ms"]
            if name == "copy":
                s[f"hidden_{loop}"] = hidden_fraction(step, both, s["copy_ms"])
            else:
                s[f"overlap_{loop}"] = overlap_fraction(step, s["loader_ms"], both)
        out[name] = s
    return out


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.0%}"


def gpu_name(summary: dict[str, dict[str, Any]]) -> str:
    return next((s["gpu"] for s in summary.values() if s.get("gpu")), "a CUDA GPU")


def headline(summary: dict[str, dict[str, Any]], outcomes: dict[str, Outcome]) -> str:
    """The answer in one sentence: both loaders' images/s, then how much of the copy hides."""
    rates = {name: summary[name]["images_per_s"] for name in LOADERS if name in summary}
    parts = [f'decode="{name}" {rates[name]:,.0f} images/s' if name in rates
             else f'decode="{name}": {outcomes[name].status}' for name in LOADERS]
    if len(rates) == len(LOADERS):
        parts[0] += f" ({rates['dali'] / rates['cpu']:.2f}× the CPU decode)"
    copy = summary.get("copy")
    if copy:
        parts.append(f"a {copy['batch_mb']:.0f} MB uint8 batch crosses to the GPU in "
                     f"{copy['copy_ms']:.2f} ms ({copy['copy_gbps']:.1f} GB/s), "
                     f"{_pct(copy['hidden_async'])} of it hidden behind compute when the loop "
                     f"runs ahead, {_pct(copy['hidden_synced'])} when every step waits")
    else:
        parts.append(f"copy overlap: {outcomes['copy'].status}")
    return f"**On {gpu_name(summary)}: " + "; ".join(parts) + ".**"


def throughput_rows(summary: dict[str, dict[str, Any]],
                    outcomes: dict[str, Outcome]) -> list[list[str]]:
    rows = []
    for name in LOADERS:
        s, outcome = summary.get(name), outcomes[name]
        if s is None:
            rows.append([KINDS_BY_NAME[name].label, outcome.status, "", "", ""])
            continue
        runs = " / ".join(f"{r['images_per_s']:,.0f}" for r in outcome.runs)
        rows.append([KINDS_BY_NAME[name].label, f"{s['images_per_s']:,.0f}",
                     f"{s['loader_ms']:.1f}", f"{s['start_s']:.1f}", runs])
    return rows


def overlap_rows(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for name in LOADERS:
        s = summary.get(name)
        for loop in LOOPS if s else ():
            a, b, c = s[f"step_{loop}_ms"], s["loader_ms"], s[f"both_{loop}_ms"]
            rows.append([f'decode="{name}"', loop, f"{a:.1f}", f"{b:.1f}", f"{c:.1f}",
                         f"{max(a, b):.1f}", f"{c - a:+.1f}", _pct(s[f"overlap_{loop}"])])
    return rows


def copy_rows(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    s = summary.get("copy")
    rows = []
    for loop in LOOPS if s else ():
        step, both = s[f"step_{loop}_ms"], s[f"both_{loop}_ms"]
        rows.append([loop, f"{s['copy_ms']:.2f}", f"{s['copy_gbps']:.1f}", f"{step:.2f}",
                     f"{both:.2f}", f"{both - step:+.2f}", _pct(s[f"hidden_{loop}"])])
    return rows


def notes(meta: dict[str, Any], outcomes: dict[str, Outcome]) -> list[str]:
    lines = [
        "async: the host never waits for the GPU; synced: every step ends waiting for the "
        "current stream (as `loss.item()` does). Each loop: wall clock over the steps, GPU "
        "drained at both ends.",
        "(a) step: the synthetic step alone (reads the batch, then fp32 matmuls); (b) loader: "
        "ms per batch with no step; (c) both: ms per step fed by the loader; ideal = max(a, b); "
        "overlap = (a + b − c) / min(a, b).",
        "copy: one batch over PCIe alone (pinned, non_blocking, side stream, CUDA events); "
        "step + copy: steps fed by datapipe's prefetch_to_device from pinned batches; "
        "hidden = 1 − (step + copy − step) / copy. The copy run's step is sized to "
        f"{meta['copy_factor']:g}× the copy.",
    ]
    most = busiest(outcomes)
    if most > BUSY_ELSEWHERE:
        lines.append(f"Warning: other processes used up to {most:.1f} cores during some "
                     "runs; the CPU-decode figures are lower than this machine can do.")
    return lines


def render(info: dict[str, Any], meta: dict[str, Any], outcomes: dict[str, Outcome]) -> str:
    summary = summarise(outcomes)
    data = meta["data"]
    photos = (f"{data['count']} photos of bench_loader.py, " if "count" in data else "")
    return "\n".join([
        "# GPU loader throughput and host-to-device overlap", "", headline(summary, outcomes), "",
        f"Machine: {machine_line(info)}; GPU: {gpu_name(summary)} (torch {meta['torch']}, "
        f"DALI {meta['dali'] or '–'}, kornia {meta['kornia'] or '–'}).", "",
        f"Job: {photos}datapipe shards → RandomResizedCrop({CROP}) | HorizontalFlip, then "
        f"ColorJitter{JITTER} and Normalize({meta['dtype']}) on the GPU; batches of "
        f"{meta['batch_size']}, {meta['workers']} workers / DALI threads. Each figure: median "
        f"of {meta['repeats']} fresh processes, {meta['batches']} timed steps per loop.", "",
        markdown_table(["loader", "images/s", "ms/batch", "start-up s", "runs images/s"],
                       throughput_rows(summary, outcomes)), "",
        markdown_table(["loader", "loop", "(a) step ms", "(b) loader ms", "(c) both ms",
                        "ideal ms", "c − a ms", "overlap"], overlap_rows(summary)), "",
        markdown_table(["loop", "copy ms", "GB/s", "step ms", "step + copy ms", "added ms",
                        "copy hidden"], copy_rows(summary)), "",
        *[f"- {line}" for line in notes(meta, outcomes)],
    ])


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT, "
        "made with tools/make_photos.py if missing), converted once and cached")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--shards", type=Path, help="an existing `datapipe convert images` output to read "
        "instead of converting photos")
    add("--workers", type=int, default=cores(), help="loader processes or DALI threads "
        "(all cores)")
    add("--batches", type=int, default=30, help="timed steps per loop (30)")
    add("--batch-size", type=int, default=BATCH, help=f"images per batch ({BATCH})")
    add("--repeats", type=int, default=3, help="runs per kind; the median counts (3)")
    add("--step-ms", type=float, default=100.0, help="synthetic step length in the loader "
        "runs, ms (100)")
    add("--copy-factor", type=float, default=3.0, help="the copy run's step, in multiples of "
        "the copy time (3)")
    add("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16",
        help="Normalize's output dtype (bfloat16)")
    add("--settle", type=float, default=10.0, help="wait up to this many seconds for other "
        "work on the machine to stop before each run (10)")
    add("--skip", default="", help="comma-separated: " + ", ".join(KINDS_BY_NAME))
    add("--require-cuda", action="store_true", help=f"exit {NO_CUDA_EXIT} instead of 0 "
        "when there is no CUDA device")
    add("--one", help=argparse.SUPPRESS)  # internal: measure one run in this process
    add("--job", help=argparse.SUPPRESS)
    add("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.count, args.workers, args.batches, args.batch_size, args.repeats) < 1:
        parser.error("--count, --workers, --batches, --batch-size and --repeats must be "
                     "positive")
    if min(args.step_ms, args.copy_factor) <= 0:
        parser.error("--step-ms and --copy-factor must be positive")
    check_skip(parser, args.skip, KINDS_BY_NAME)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        child_main(args.one, args.job, args.result)
        return 0
    if not cuda_available():
        print(SKIP_LINE, file=sys.stderr if args.require_cuda else sys.stdout)
        return NO_CUDA_EXIT if args.require_cuda else 0
    report, data = collect(args)
    publish("gpu", report, data, data["meta"]["prepare_s"], data["meta"]["benchmark_s"])
    return 0


def collect(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Every tool measured as `args` say: the Markdown report and the results' data (machine,
    meta with prepare_s and benchmark_s, summary, outcomes). Shared by main and the suite."""
    skip = skip_names(args.skip)
    outcomes = {k.name: initial_outcome((k.name,), skip, k.modules) for k in KINDS}
    info = announce_machine()
    (shards, data), prep_s = timed(lambda: prepare_shards(args))
    job = Job(str(shards), args.workers, args.batches, args.batch_size, args.step_ms, args.dtype,
              args.copy_factor)
    meta = {"data": data, **asdict(job), "repeats": args.repeats, "prepare_s": round(prep_s, 1),
            "torch": installed("torch"), "kornia": installed("kornia"),
            "dali": installed("nvidia-dali-cuda130") or installed("nvidia-dali-cuda120")}
    _, bench_s = timed(lambda: run_all(args, job, outcomes))
    meta["benchmark_s"] = round(bench_s, 1)
    summary = summarise(outcomes)
    return render(info, meta, outcomes), {
        "machine": info, "meta": meta, "headline": headline(summary, outcomes),
        "summary": summary, "outcomes": outcomes_data(outcomes)}


if __name__ == "__main__":
    sys.exit(main())
