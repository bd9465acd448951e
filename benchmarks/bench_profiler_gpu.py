"""The profiler against the truth on a GPU: its starvation figure beside 1 - img/s / synthetic.

    python -m benchmarks.bench_profiler_gpu [--photos DIR | --shards DIR]
        [--models resnet18,resnet50] [--decoders cpu,dali] [--steps 200] [--batch-size 256]
        [--workers N] [--sync-every 10] [--require-cuda]

Per torchvision model (channels-last, bf16 autocast, SGD with momentum, the loss read every
--sync-every steps as a training log does) and per decoder, three runs in this process:

  synthetic  the step on one batch already on the GPU, no loader: the rate of a perfect input
             pipeline (measured once per model)
  real       the step fed by dp.Loader(decode=D, device="cuda"): images/s
  profiled   the same under dp.profile(oracle=True): the profiler's starvation figure (GPU
             idle time for want of data, CUDA events), its verdict, blame and oracle line

truth = 1 - real images/s / synthetic images/s: the share of the run the GPU was starved.
Goal: the profiler within 3 points of the truth, and its verdict compute-bound where the
truth is under its 5% threshold (resnet50 with decode="cpu" on an H100 is ~1%). Rates are over
--steps steps after the first (start-up, which the profiler also leaves out), with the GPU
drained at both ends. The host-side figure (what the profiler said before it read the GPU)
is shown beside them.

The job: the suite's photos converted by `datapipe convert images` (the images group's cached
shards), RandomResizedCrop(224) | HorizontalFlip | Normalize(bfloat16), full batches.
Without CUDA it prints "no CUDA device: profiler GPU check skipped" and exits 0 (2 with
--require-cuda), importing neither torchvision nor DALI. Saves bench-results/profiler-gpu.md
and .json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.scripts import BENCH_DATA, photos, publish
from datapipe.suite.fixtures import BATCH, CROP, ensure_form, photo_stats, warm_page_cache
from datapipe.suite.machine import describe, machine_line
from datapipe.suite.report import markdown_table
from datapipe.suite.runner import one_line, timed
from datapipe.system import available_cores

SKIP_LINE = "no CUDA device: profiler GPU check skipped"
NO_CUDA_EXIT = 2  # with --require-cuda
GOAL_POINTS = 0.03
COMPUTE_BOUND_BELOW = 0.05  # the profiler's default "moderately input-bound" threshold
NUM_CLASSES = 1000


@dataclass(frozen=True)
class Job:
    shards: str
    workers: int
    steps: int
    batch_size: int = BATCH
    sync_every: int = 10
    seed: int = 0


# ---------------------------------------------------------------- arithmetic (pure)


def truth_fraction(real_ips: float, synthetic_ips: float) -> float:
    """The share of the run the GPU was starved: 1 - real rate / rate with perfect input."""
    return 1.0 - real_ips / synthetic_ips


def judge(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its truth, the profiler's error in points, and whether the goals hold."""
    truth = truth_fraction(row["real_ips"], row["synthetic_ips"])
    error = row["profiler"] - truth
    verdict_ok = row["regime"] == ("compute-bound" if truth < COMPUTE_BOUND_BELOW else
                                   "input-bound")
    return {**row, "truth": truth, "error": error,
            "within_goal": abs(error) <= GOAL_POINTS and verdict_ok}


# ---------------------------------------------------------------- the GPU runs


class TrainStep:
    """One training step of a torchvision model on a batch dict (image, label) on the GPU."""

    def __init__(self, model_name: str, sync_every: int) -> None:
        import torch
        import torchvision

        torch.backends.cudnn.benchmark = True
        model = getattr(torchvision.models, model_name)(num_classes=NUM_CLASSES)
        self.model = model.cuda().to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.sync_every, self.steps = sync_every, 0

    def __call__(self, batch: dict[str, Any]) -> None:
        import torch

        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.model(batch["image"])
            loss = torch.nn.functional.cross_entropy(logits, batch["label"] % NUM_CLASSES)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        if self.sync_every and self.steps % self.sync_every == 0:
            loss.item()  # as a training log does: the host waits for the GPU here


def images_per_second(source: Iterator[dict[str, Any]], step: TrainStep, job: Job,
                      after: Callable[[], None] = lambda: None) -> float:
    """Rate over job.steps steps after the first (start-up), the GPU drained at both ends."""
    import torch

    step(next(source))
    after()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(job.steps):
        step(next(source))
        after()
    torch.cuda.synchronize()
    return job.steps * job.batch_size / (time.perf_counter() - started)


def synthetic_batch(job: Job) -> dict[str, Any]:
    """What the loader hands over, already on the GPU: bf16 N x 3 x H x W, channels-last."""
    import torch

    image = torch.randn(job.batch_size, 3, CROP, CROP, device="cuda").to(torch.bfloat16)
    return {"image": image.contiguous(memory_format=torch.channels_last),
            "label": torch.randint(0, NUM_CLASSES, (job.batch_size,), device="cuda")}


def make_loader(job: Job, decode: str) -> Any:
    import datapipe as dp

    transform = (dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
                 | dp.image.Normalize(dtype="bfloat16"))
    loader = dp.Loader(job.shards, batch_size=job.batch_size, shuffle=True, seed=job.seed,
                       num_workers=job.workers, decode=decode, transform=transform,
                       device="cuda", drop_last=True)
    if len(loader) == 0:
        loader.close()
        raise RuntimeError(f"{job.shards} holds fewer images than one batch")
    return loader


def epochs(loader: Any, wrap: Callable[[Any], Iterator[Any]] = iter) -> Iterator[Any]:
    """The loader's batches over as many epochs as asked for (each epoch wrapped)."""
    while True:
        yield from wrap(loader)


def real_run(job: Job, decode: str, step: TrainStep) -> float:
    with make_loader(job, decode) as loader:
        source = epochs(loader)
        rate = images_per_second(source, step, job)
        source.close()
    return rate


def profiled_run(job: Job, decode: str, step: TrainStep) -> dict[str, Any]:
    import datapipe as dp

    with make_loader(job, decode) as loader, dp.profile(oracle=True) as prof:
        source = epochs(loader, prof.wrap)
        images_per_second(source, step, job, after=prof.step)
        source.close()  # ends the profiled iteration before the profile is read
    r = prof.results()
    oracle = r["probes"].get("oracle") or {}
    return {"profiler": r["exposed_input_fraction"], "host": r["host_exposed_input_fraction"],
            "timing": r["timing"], "regime": r["verdict"]["regime"],
            "verdict": r["verdict"]["text"], "oracle": oracle.get("text"), "blame": r["blame"]}


def measure_model(model_name: str, decoders: list[str], job: Job) -> list[dict[str, Any]]:
    """The synthetic rate once, then a real and a profiled run per decoder."""
    step = TrainStep(model_name, job.sync_every)
    synthetic = images_per_second(itertools.repeat(synthetic_batch(job)), step, job)
    print(f"{model_name}: synthetic {synthetic:,.0f} images/s", flush=True)
    rows = []
    for decode in decoders:
        row: dict[str, Any] = {"model": model_name, "decode": decode, "synthetic_ips": synthetic}
        try:
            row["real_ips"] = real_run(job, decode, step)
            row.update(profiled_run(job, decode, step))
            row = judge(row)
            print(f"  decode={decode}: truth {row['truth']:.1%}, profiler {row['profiler']:.1%}"
                  f" ({row['regime']})", flush=True)
        except Exception as exc:  # one failed decoder (DALI missing, say) leaves the rest
            row["error_text"] = f"{type(exc).__name__}: {one_line(exc)}"
            print(f"  decode={decode}: failed: {row['error_text']}", flush=True)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the report


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    def figures(r: dict[str, Any]) -> list[str]:
        if "error_text" in r:
            return [*["–"] * 5, f"failed: {r['error_text']}", "–"]
        return [f"{r['real_ips']:,.0f}", f"{r['truth']:.1%}", f"{r['profiler']:.1%}",
                f"{r['error'] * 100:+.1f}", f"{r['host']:.1%}", r["regime"],
                "yes" if r["within_goal"] else "NO"]

    return [[r["model"], r["decode"], f"{r['synthetic_ips']:,.0f}", *figures(r)] for r in rows]


def render(info: dict[str, Any], job: Job, rows: list[dict[str, Any]]) -> str:
    judged = [r for r in rows if "error_text" not in r]
    met = sum(r["within_goal"] for r in judged)
    lines = [
        "# Profiler on the GPU against the truth", "",
        f"**{met} of {len(judged)} runs within {GOAL_POINTS * 100:.0f} points of the truth "
        f"with the right verdict** ({len(rows) - len(judged)} failed).", "",
        f"Machine: {info['cpu']}, {info['cores']} cores; GPU: {info['gpu']}", "",
        f"{job.steps} steps of batch {job.batch_size} per run, {job.workers} workers, loss read "
        f"every {job.sync_every} steps. truth = 1 - real / synthetic images/s.", "",
        markdown_table(["model", "decode", "synthetic img/s", "real img/s", "truth",
                        "profiler (GPU)", "error, points", "host-side", "verdict",
                        "within goal"], table_rows(rows)), ""]
    for r in judged:
        lines.append(f"- {r['model']} decode={r['decode']}: {r['verdict']}")
        if r["oracle"]:
            lines.append(f"  {r['oracle']}")
        if r["timing"] != "device":
            lines.append("  (the profiler did not time the device: CUDA events were not used)")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT, "
        "made if missing), converted once and cached")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--shards", type=Path, help="an existing `datapipe convert images` output")
    add("--models", default="resnet18,resnet50", help="torchvision models, comma-separated")
    add("--decoders", default="cpu,dali", help="comma-separated: cpu, dali")
    add("--steps", type=int, default=200, help="timed steps per run (200)")
    add("--batch-size", type=int, default=BATCH, help=f"images per batch ({BATCH})")
    add("--workers", type=int, default=available_cores(), help="loader processes or DALI threads "
        "(all cores)")
    add("--sync-every", type=int, default=10, help="read the loss every N steps; 0: never (10)")
    add("--require-cuda", action="store_true", help=f"exit {NO_CUDA_EXIT} instead of 0 "
        "when there is no CUDA device")
    args = parser.parse_args(argv)
    if min(args.count, args.steps, args.batch_size, args.workers) < 1 or args.sync_every < 0:
        parser.error("--count, --steps, --batch-size and --workers must be positive, "
                     "--sync-every >= 0")
    if not set(_names(args.decoders)) <= {"cpu", "dali"} or not _names(args.models):
        parser.error("--decoders takes cpu and/or dali; --models at least one model")
    return args


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def prepare_shards(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """--shards, or the cached `datapipe convert images` of the photos; page-cached."""
    if args.shards is not None:
        if not args.shards.is_dir():
            raise SystemExit(f"--shards {args.shards}: not a directory")
        shards, about = args.shards, {"path": str(args.shards)}
    else:
        src = photos(args.photos, args.count)
        record = ensure_form("images", "datapipe", src, BENCH_DATA, args.workers)
        shards, about = Path(record["path"]), {**photo_stats(src), "shards": record["path"]}
    warm_page_cache(sorted(shards.rglob("*")))
    return shards, about


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(SKIP_LINE, file=sys.stderr if args.require_cuda else sys.stdout)
        return NO_CUDA_EXIT if args.require_cuda else 0
    info = describe()  # with the GPU's name
    print(f"Machine: {machine_line(info)}", flush=True)
    (shards, data), prep_s = timed(lambda: prepare_shards(args))
    job = Job(str(shards), args.workers, args.steps, args.batch_size, args.sync_every)
    rows, bench_s = timed(lambda: [row for model in _names(args.models)
                                   for row in measure_model(model, _names(args.decoders), job)])
    publish("profiler-gpu", render(info, job, rows), {
        "machine": info, "job": asdict(job), "data": data, "rows": rows}, (prep_s, bench_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
