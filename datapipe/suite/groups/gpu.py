"""Loading onto the GPU (nvJPEG decode + device augmentation) and the host-to-device overlap,
where torch sees a CUDA device, on the suite's photos converted by `datapipe convert images`.
Three kinds of run (gpu_peers): Loader(decode="dali", device="cuda"), DALI's mixed decoder
(nvJPEG) decoding the crop on the GPU, only JPEG bytes crossing PCIe; Loader(decode="cpu",
device="cuda"), workers decoding on the CPU, uint8 crops crossing PCIe; and "copy", the H2D copy
alone against a synthetic step. The report's notes say what each figure means.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, datapipe_shards, list_photos
from datapipe.suite.groups.gpu_peers import JITTER, LOOPS, Job, copy_run, loader_run
from datapipe.suite.groups.recipe_peers import BUILT_IN, missing
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, markdown_table
from datapipe.suite.runner import BEFORE, Group, GroupResult, Outcome, Peer, Record, cuda_missing

LOADERS = ("dali", "cpu")
ROWS = (*LOADERS, "recipe")  # the panel's: every loader run


def overlap_fraction(step_ms: float, loader_ms: float, both_ms: float) -> float:
    """Share of the shorter of step and loader that ran hidden under the other: 1 when the
    loop takes max(step, loader), 0 when it takes their sum."""
    shorter = min(step_ms, loader_ms)
    return min(1.0, max(0.0, (step_ms + loader_ms - both_ms) / shorter)) if shorter > 0 \
        else math.nan


def hidden_fraction(step_ms: float, both_ms: float, copy_ms: float) -> float:
    """Share of the copy that did not lengthen the step: 1 - (added time) / (copy alone)."""
    return min(1.0, max(0.0, 1.0 - (both_ms - step_ms) / copy_ms)) if copy_ms > 0 else math.nan


def medians(runs: list[Record]) -> dict[str, Any]:
    """Per key of the first run: the median over the runs for numbers, else the first value."""
    over = Outcome("ok", runs)
    return {key: over.median(key) if isinstance(first, (int, float))
            and not isinstance(first, bool) else first
            for key, first in (runs[0].items() if runs else ())}


def summarise(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """Medians of every kind's runs plus the derived fractions, computed from those medians."""
    out = {name: medians(o.runs) for name, o in outcomes.items() if o.status == "ok" and o.runs}
    for s in out.values():
        for loop in LOOPS:
            step, both = s[f"step_{loop}_ms"], s[f"both_{loop}_ms"]
            if "loader_ms" in s:
                s[f"overlap_{loop}"] = overlap_fraction(step, s["loader_ms"], both)
            else:  # the copy run
                s[f"hidden_{loop}"] = hidden_fraction(step, both, s["copy_ms"])
    return out


class GpuGroup(Group):
    name, title, report = "gpu", "Loading onto the GPU", "gpu"
    job_type = Job
    peers = (
        Peer("dali", 'datapipe Loader, decode="dali" (nvJPEG)',
             functools.partial(loader_run, decode="dali"), ("nvidia.dali", "kornia"), ours=True),
        Peer("cpu", 'datapipe Loader, decode="cpu", device="cuda"',
             functools.partial(loader_run, decode="cpu"), ("kornia",), ours=True),
        Peer("copy", "H2D copy against a synthetic step (no decoding)", copy_run, ours=True),
        Peer("recipe", 'datapipe Loader, device="cuda", timm recipe (built-in steps)',
             functools.partial(loader_run, decode="cpu", recipe=True), ("kornia",), ours=True),
    )

    def available(self, opts: Options) -> str | None:
        return cuda_missing()

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        for name in [n for n in outcomes if n.removesuffix(BEFORE) == "recipe"]:
            if outcomes[name].status == "ok":
                outcomes[name].status = missing(BUILT_IN) or "ok"
        shards, data = datapipe_shards(opts.data, opts.photos, opts.workers)
        smoke = {"batches": 3, "batch_size": 16} if opts.smoke else {}
        classes = 1 + max(label for _, label in list_photos(Path(data["path"])))
        job = Job(str(shards), opts.workers, classes=classes, **smoke)
        return {"data": data, **asdict(job), "repeats": opts.repeats}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        return Job(**{f.name: meta[f.name] for f in fields(Job)})

    def progress(self, peer: Peer, run: Record) -> str:
        if peer.name.removesuffix(BEFORE) == "copy":
            return f"copy {run['copy_ms']:.2f} ms ({run['copy_gbps']:.1f} GB/s)"
        return (f"{run['images_per_s']:,.0f} images/s (other work: {run['others_cores']:.2f} "
                "cores)")

    def panels(self, result: GroupResult) -> list[Panel]:
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["images_per_s"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers if p.name.removesuffix(BEFORE) in ROWS]
        return [Panel("gpu", self.title, "images/s", entries, "dali", "cpu")]

    def details(self, result: GroupResult) -> list[str]:
        meta, outcomes = result.meta, result.outcomes
        return [
            headline(summarise(outcomes), outcomes), "",
            f"Job: {meta['data']['count']} photos, datapipe shards → RandomResizedCrop({CROP}) "
            f"| HorizontalFlip, then ColorJitter{JITTER} and Normalize({meta['dtype']}) on the "
            f"GPU; batches of {meta['batch_size']}, {meta['workers']} workers / DALI threads. "
            "recipe: RandomResizedCrop | HorizontalFlip in the workers, then RandAugment(2, 9), "
            "Normalize, RandomErasing 0.25 and Mixup/CutMix on the GPU (datapipe's built-in "
            "steps, their batch forms). "
            f"Each figure: median of {meta['repeats']} fresh processes, {meta['batches']} timed "
            "steps per loop.", "", *tables(summarise(outcomes)),
            "- async: the host never waits for the GPU; synced: every step ends waiting for "
            "the current stream (as `loss.item()` does). Each loop: wall clock over the steps "
            "after an untimed one, GPU drained at both ends.",
            "- (a) step: the synthetic step alone (reads the batch, then fp32 matmuls, as many "
            "as a CUDA-event calibration says); (b) loader: ms per batch with no step (images/s "
            "= batch ÷ b, device augmentation included); (c) both: ms per step fed by the "
            "loader; ideal = max(a, b); overlap = (a + b − c) / min(a, b), clipped to [0, 1]: "
            "the share of the shorter hidden under the other.",
            "- copy: one uint8 batch of the loader's shape and layout over PCIe alone (pinned, "
            "non_blocking, side stream, CUDA events), GB/s from it; step + copy: steps fed by "
            "datapipe's prefetch_to_device from pinned batches; hidden = 1 − (step + copy − "
            "step) / copy, clipped to [0, 1] (Python hand-over costs count as not hidden). The "
            f"copy run's step is sized to {meta['copy_factor']:g}× the copy.",
        ]


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.0%}"


def headline(summary: dict[str, dict[str, Any]], outcomes: dict[str, Outcome]) -> str:
    """The answer in one sentence: both loaders' images/s, then how much of the copy hides."""
    rates = {name: summary[name]["images_per_s"] for name in LOADERS if name in summary}
    parts = [f'decode="{name}" {rates[name]:,.0f} images/s' if name in rates
             else f'decode="{name}": {outcomes[name].status}' for name in LOADERS]
    if len(rates) == len(LOADERS):
        parts[0] += f" ({rates['dali'] / rates['cpu']:.2f}× the CPU decode)"
    copy = summary.get("copy")
    parts.append(f"a {copy['batch_mb']:.0f} MB uint8 batch crosses to the GPU in "
                 f"{copy['copy_ms']:.2f} ms ({copy['copy_gbps']:.1f} GB/s), "
                 f"{_pct(copy['hidden_async'])} of it hidden behind compute when the loop "
                 f"runs ahead, {_pct(copy['hidden_synced'])} when every step waits" if copy
                 else f"copy overlap: {outcomes['copy'].status}")
    gpu = next((s["gpu"] for s in summary.values() if s.get("gpu")), "a CUDA GPU")
    return f"**On {gpu}: " + "; ".join(parts) + ".**"


def run_label(name: str) -> str:
    """A loader run as the tables name it: decode="dali", decode="cpu", recipe."""
    return f'decode="{name}"' if name in LOADERS else name


def tables(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Each loader's start-up; the loaders' overlap with the step, and the copy's (images/s and
    its runs are the panel's)."""
    overlaps, copies = [], []
    for name, s in summary.items():
        for loop in LOOPS:
            step, both = s[f"step_{loop}_ms"], s[f"both_{loop}_ms"]
            if "loader_ms" in s:
                overlaps.append([run_label(name), loop, f"{step:.1f}", f"{s['loader_ms']:.1f}",
                                 f"{both:.1f}", f"{max(step, s['loader_ms']):.1f}",
                                 f"{both - step:+.1f}", _pct(s[f"overlap_{loop}"])])
            else:
                copies.append([loop, f"{s['copy_ms']:.2f}", f"{s['copy_gbps']:.1f}",
                               f"{step:.2f}", f"{both:.2f}", f"{both - step:+.2f}",
                               _pct(s[f"hidden_{loop}"])])
    starts = "; ".join(f'{run_label(n)} {s["start_s"]:.1f} s' for n, s in summary.items()
                       if "start_s" in s)
    return [f"Start-up, from creating the Loader to its first batch on the GPU: {starts or '–'}.",
            "", markdown_table(["loader", "loop", "(a) step ms", "(b) loader ms = ms/batch",
                                "(c) both ms", "ideal ms", "c − a ms", "overlap"], overlaps),
            "", markdown_table(["loop", "copy ms", "GB/s", "step ms", "step + copy ms",
                                "added ms", "copy hidden"], copies), ""]


GROUP = GpuGroup()
