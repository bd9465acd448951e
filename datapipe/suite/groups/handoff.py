"""What the training thread pays per batch, `next(loader)` with batches already waiting, on
each path through the Loader and through PatchLoader (its float32 `pixel_values`, read in place
from the shared batch buffers, are the largest host batches datapipe hands to a GPU); and the
Loader's images/s on the CPU with and without Normalize. Paths that need CUDA are skipped where
there is none (the suite runs the group only where there is).
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, datapipe_shards
from datapipe.suite.groups.gpu_peers import endless
from datapipe.suite.groups.patch_peers import QWEN_MAX_PATCHES, SIGLIP_BATCH
from datapipe.suite.isolated.clock import tree_cpu_seconds
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table
from datapipe.suite.runner import Group, GroupResult, Outcome, Peer, Record, cuda_missing

RATIO_GOAL = 0.8  # Normalize on the CPU: at least this fraction of the uint8 images/s
NEXT_GOAL_MS = 1.0  # training-thread ms per next() with batches waiting, batch of 256
QUEUE_WAIT_LIMIT_S = 30.0


@dataclass(frozen=True)
class Variant:
    """One way through the Loader, timed one way (hand-off, or throughput when `rate`)."""

    label: str
    decode: str = "cpu"  # "dali" needs nvidia.dali
    device: str = "cpu"
    normalize: str | None = None  # Normalize's dtype, or no Normalize
    rate: bool = False
    patches: str | None = None  # a PatchLoader preset instead of the Loader


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    shards: str
    batch_size: int
    workers: int
    batches: int = 40  # timed next() calls (hand-off) or measured epochs (throughput)
    wait_s: float = 0.5  # before each timed next() where the queue cannot be seen
    seed: int = 0


PATHS = {
    "cpu": Variant('device="cpu", uint8'),
    "cpu-float32": Variant('device="cpu" + Normalize(float32)', normalize="float32"),
    "cpu-bfloat16": Variant('device="cpu" + Normalize(bfloat16)', normalize="bfloat16"),
    "cuda": Variant('device="cuda", uint8', device="cuda"),
    "cuda-normalize": Variant('device="cuda" + Normalize(bfloat16)', device="cuda",
                              normalize="bfloat16"),
    "dali": Variant('decode="dali", device="cuda"', "dali", "cuda"),
    "dali-cpu": Variant('decode="dali", device="cpu" (CPU mode)', "dali"),
    "patches-siglip2": Variant('PatchLoader("siglip2"), device="cpu"', patches="siglip2"),
    "patches-siglip2-cuda": Variant('PatchLoader("siglip2"), device="cuda"', device="cuda",
                                    patches="siglip2"),
    "patches-qwen2_vl-cuda": Variant('PatchLoader("qwen2_vl"), device="cuda"', device="cuda",
                                     patches="qwen2_vl"),
    "rate-uint8": Variant("uint8", rate=True),
    "rate-float32": Variant("Normalize(float32)", normalize="float32", rate=True),
    "rate-bfloat16": Variant("Normalize(bfloat16)", normalize="bfloat16", rate=True),
}
HANDOFF = [name for name, v in PATHS.items() if not v.rate]
RATES = [name for name, v in PATHS.items() if v.rate]
HANDOFF_KEYS = ("cpu_median", "cpu_p95", "wall_median", "wall_p95")  # each run's, ms


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), by linear interpolation between the nearest ranks."""
    if not values:
        return float("nan")
    ordered, position = sorted(values), (len(values) - 1) * q / 100
    low, high = int(position), min(int(position) + 1, len(values) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# ---------------------------------------------------------------- the child's side


def make_loader(path: Variant, job: Job) -> Any:
    import datapipe as dp

    if path.patches:  # the patches group's batches: 32 SigLIP2 images, 16,384 Qwen2-VL patches
        size = ({"batch_size": SIGLIP_BATCH} if path.patches == "siglip2"
                else {"max_patches": QWEN_MAX_PATCHES})
        return dp.PatchLoader(job.shards, path.patches, num_workers=job.workers,
                              device=path.device, seed=job.seed, **size)
    transform = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    if path.normalize:
        transform = transform | dp.image.Normalize(dtype=path.normalize)
    return dp.Loader(job.shards, batch_size=job.batch_size, num_workers=job.workers,
                     decode=path.decode, device=path.device, transform=transform,
                     seed=job.seed, drop_last=not path.rate)


def wait_until_waiting(loader: Any, wait_s: float) -> None:
    """Until every batch in flight is built, as the Loader's worker pool tells; wait_s seconds
    where that cannot be seen (DALI, no workers, or a Loader whose internals differ)."""
    producer = getattr(loader, "_producer", None)
    pool = getattr(producer, "_pool", None)
    if pool is None or not hasattr(producer, "_in_flight") or not hasattr(pool, "ready_count"):
        time.sleep(wait_s)
        return
    deadline = time.perf_counter() + QUEUE_WAIT_LIMIT_S
    while time.perf_counter() < deadline:
        if pool.ready_count() >= producer._in_flight:
            return
        time.sleep(0.002)
    raise RuntimeError(f"batches still in flight after {QUEUE_WAIT_LIMIT_S:.0f} s")


def handoff_run(path: Variant, job: Job) -> Record:
    """`batches` timed next() calls, each with the queue full before it."""
    import torch

    ms: dict[str, list[float]] = {"wall": [], "cpu": []}
    with make_loader(path, job) as loader:
        batches = endless(loader)
        first = next(batches)["pixel_values" if path.patches else "image"]
        shape = first.shape if path.patches else (job.batch_size, 3, CROP, CROP)
        if tuple(first.shape) != tuple(shape) or first.is_cuda != (path.device == "cuda"):
            raise RuntimeError(f"first batch is {tuple(first.shape)} on {first.device}")
        for _ in range(job.batches):
            wait_until_waiting(loader, job.wait_s)
            wall, cpu = time.perf_counter(), time.thread_time()
            batch = next(batches)
            ms["cpu"].append((time.thread_time() - cpu) * 1e3)
            ms["wall"].append((time.perf_counter() - wall) * 1e3)
            del batch
            if path.device == "cuda":
                torch.cuda.synchronize()  # outside the clock: no GPU work left queued
    return {"wall_ms": ms["wall"], "cpu_ms": ms["cpu"], "dtype": str(first.dtype),
            "batch_mb": first.numel() * first.element_size() / 1e6,
            **{f"{clock}_{stat}": fn(values) for clock, values in ms.items()
               for stat, fn in (("median", statistics.median),
                                ("p95", functools.partial(percentile, q=95)))}}


def rate_run(path: Variant, job: Job) -> Record:
    """Images/s, and images per CPU-second of the whole process tree, over job.batches
    epochs after a warm-up one."""
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


def variant(name: str) -> Variant:
    return PATHS[name.removesuffix("-before")]


class HandoffGroup(Group):
    name = report = "handoff"
    title = "Training-thread cost of next(), and Normalize on the CPU"
    job_type = Job
    peers = tuple(Peer(name, v.label, functools.partial(rate_run if v.rate else handoff_run, v),
                       ("nvidia.dali",) if v.decode == "dali" else (), ours=True)
                  for name, v in PATHS.items())

    def available(self, opts: Options) -> str | None:
        return cuda_missing()

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The shards; the paths that need CUDA skipped where there is none (run alone)."""
        no_cuda = cuda_missing()
        for name, outcome in outcomes.items():
            if no_cuda and outcome.status == "ok" and variant(name).device == "cuda":
                outcome.status = no_cuda
                print(f"{name}: skipped (needs a CUDA device)", flush=True)
        shards, data = datapipe_shards(opts.data, opts.photos, opts.workers)
        smoke = {"batch_size": 16, "batches": 3, "rate_batch": 16, "epochs": 1, "wait_s": 0.1}
        return {"data": data, "shards": str(shards), "batch_size": 256, "workers": opts.workers,
                "batches": 40, "wait_s": 0.5, "rate_batch": 64, "rate_workers": 2, "epochs": 2,
                "repeats": opts.repeats, **(smoke if opts.smoke else {})}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        if variant(peer.name).rate:
            return Job(meta["shards"], meta["rate_batch"], meta["rate_workers"], meta["epochs"])
        return Job(meta["shards"], meta["batch_size"], meta["workers"], meta["batches"],
                   meta["wait_s"])

    def progress(self, peer: Peer, run: Record) -> str:
        if variant(peer.name).rate:
            return f"{run['rate']:,.0f} images/s, {run['cpu_rate']:,.0f} per CPU-second"
        return (f"next() {run['cpu_median']:.3f} ms CPU, {run['wall_median']:.3f} ms wall "
                f"(other work: {run['others_cores']:.2f} cores)")

    def panels(self, result: GroupResult) -> list[Panel]:
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["cpu_median"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers if not variant(p.name).rate]
        return [Panel("handoff", "Training-thread CPU per next()", "ms", entries, "cuda",
                      higher_is_better=False)]

    def details(self, result: GroupResult) -> list[str]:
        meta, summary = result.meta, summarise(result.outcomes)
        handoffs, rates = [], []
        for name, outcome in result.outcomes.items():
            s, path = summary.get(name), variant(name)
            if path.rate:
                rates.append([path.label, outcome.status, "", "", ""] if s is None else [
                    path.label, f"{s['rate']:,.0f}", f"{s.get('rate_ratio', 1.0):.2f}",
                    f"{s['cpu_rate']:,.0f}", f"{s.get('cpu_rate_ratio', 1.0):.2f}"])
            else:
                handoffs.append([name, path.label, outcome.status, "", "", "", "", ""]
                                if s is None else
                                [name, path.label, *[f"{s[k]:.3f}" for k in HANDOFF_KEYS],
                                 f"{s['batch_mb']:.1f}" if s.get("batch_mb") else "–",
                                 " / ".join(f"{r['cpu_median']:.3f}" for r in outcome.runs)])
        return [
            headline(summary, meta["batch_size"]), "",
            f"Hand-off: RandomResizedCrop({CROP}) | HorizontalFlip, batches of "
            f"{meta['batch_size']}, {meta['workers']} workers / DALI threads; {meta['batches']} "
            f"next() calls per run, each once every batch in flight was built; median of "
            f"{meta['repeats']} runs of each figure. ms per next(). PatchLoader: the same "
            f"photos at their stored size, SigLIP2 batches of {SIGLIP_BATCH} images (padded to "
            f"256 patches each), Qwen2-VL batches of up to {QWEN_MAX_PATCHES:,} patches.", "",
            markdown_table(["path", "loader", "CPU ms (median)", "CPU ms (p95)",
                            "wall ms (median)", "wall ms (p95)", "batch MB",
                            "runs: CPU ms"], handoffs), "",
            f"Throughput on the CPU: batches of {meta['rate_batch']}, {meta['rate_workers']} "
            f"workers, {meta['epochs']} epochs after a warm-up one; images/CPU-s counts the "
            "CPU of the whole process tree, which other work on the machine disturbs less.", "",
            markdown_table(["batch", "images/s", "÷ uint8", "images/CPU-s", "÷ uint8"], rates),
            "", "- CPU ms: `time.thread_time()` of the thread that calls next(): what the "
            "training thread pays. Wall ms also counts time that thread waited (for the GIL, "
            "for a core).",
        ]


def summarise(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """Per path that ran: medians over the rounds of each run's figures; the throughput
    paths' ratios to uint8's."""
    out: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        if outcome.status == "ok" and outcome.runs:
            keys = ("rate", "cpu_rate") if variant(name).rate else (*HANDOFF_KEYS, "batch_mb")
            out[name] = {"dtype": outcome.runs[0].get("dtype"),  # hand-off runs: the batch's
                         **{key: outcome.median(key) for key in keys}}
    for name in RATES[1:]:
        if name in out and RATES[0] in out:
            for key in ("rate", "cpu_rate"):
                base = out[RATES[0]][key]  # 0: a run too short for the CPU clock's ticks
                out[name][f"{key}_ratio"] = out[name][key] / base if base else float("nan")
    return out


def headline(summary: dict[str, dict[str, Any]], batch_size: int) -> str:
    measured, parts = [name for name in HANDOFF if name in summary], []
    images = [name for name in measured if not PATHS[name].patches]
    if images:
        worst = max(images, key=lambda n: summary[n]["cpu_median"])
        ms = summary[worst]["cpu_median"]
        parts.append(f"the training thread spends at most {ms:.2f} ms of CPU per next() "
                     f"(median, batch of {batch_size}; worst path: {worst}; goal ≤ "
                     f"{NEXT_GOAL_MS:g} ms: {'met' if ms <= NEXT_GOAL_MS else 'NOT met'})")
    patches = [name for name in measured if PATHS[name].patches]
    if patches:
        worst = max(patches, key=lambda n: summary[n]["cpu_median"])
        parts.append(f"PatchLoader's at most {summary[worst]['cpu_median']:.2f} ms "
                     f"({worst}, {summary[worst]['batch_mb']:.0f} MB of pixel_values)")
    parts += [f"{PATHS[name].label} on the CPU runs at {s['rate_ratio']:.2f} of uint8's "
              f"images/s ({s['cpu_rate_ratio']:.2f} per CPU-second; "
              f"{goal_verdict(RATIO_GOAL, s['rate_ratio'] >= RATIO_GOAL, '')})"
              for name in RATES[1:] if "rate_ratio" in (s := summary.get(name, {}))]
    text = "; ".join(parts) or "nothing was measured"
    return f"**{text[0].upper()}{text[1:]}.**"


GROUP = HandoffGroup()
