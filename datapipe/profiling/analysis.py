"""From a recording to figures and a verdict: input-, compute- or overhead-bound."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from datapipe.profiling.recorder import Recording, StepRecord
from datapipe.profiling.settings import ProfileSettings

ADVICE = {
    "decode": "decode on the GPU (decode='dali', device='cuda'), store raw pixels "
              "(--encoding raw) or a smaller --short-side, or add workers",
    "read": "put shards on local disk or in the page cache, or add workers",
    "collate": "use fewer extra columns, or larger batches",
    "transform": "run batch transforms on the GPU (device='cuda')",
    "transfer": "keep pinned memory and non-blocking copies (device='cuda' does both)",
    "loader": "add workers or raise prefetch",
}


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0, "mean": 0.0}
    a = np.asarray(values)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
            "max": float(a.max()), "mean": float(a.mean())}


def _duration(r: StepRecord) -> float:
    return (r.end - r.start) if r.end is not None else 0.0


def _stage_totals(steps: list[StepRecord]) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per stage summed over batches: worker-side and main-process-side."""
    worker: dict[str, float] = defaultdict(float)
    main: dict[str, float] = defaultdict(float)
    for r in steps:
        if not r.loader:
            continue
        for stage, seconds in ((r.loader.get("worker") or {}).get("stages") or {}).items():
            worker[stage] += seconds
        for stage, seconds in (r.loader.get("main") or {}).items():
            main[stage] += seconds
    return dict(worker), dict(main)


def _queue(steps: list[StepRecord]) -> dict[str, Any] | None:
    depths = [r.loader["queue"]["ready"] for r in steps if r.loader and r.loader.get("queue")
              and r.loader["queue"]["capacity"]]
    if not depths:
        return None
    capacity = max(r.loader["queue"]["capacity"] for r in steps if r.loader and
                   r.loader.get("queue"))
    return {"mean_ready": float(np.mean(depths)), "capacity": capacity,
            "empty_fraction": float(np.mean([d == 0 for d in depths])),
            "full_fraction": float(np.mean([d >= capacity for d in depths]))}


def _slowest_stage(worker: dict[str, float], main: dict[str, float]) -> tuple[str, float] | None:
    combined = dict(worker)
    for stage, seconds in main.items():
        combined[stage] = combined.get(stage, 0.0) + seconds
    total = sum(combined.values())
    if not total:
        return None
    stage = max(combined, key=combined.get)
    return stage, combined[stage] / total


def _probe(steps: list[StepRecord], kind: str) -> float | None:
    durations = [_duration(r) for r in steps if r.kind == kind]
    return float(np.median(durations[1:] or durations)) if durations else None


def analyse(rec: Recording, settings: ProfileSettings) -> dict[str, Any]:
    normal = [r for r in rec.steps if r.kind == "normal" and r.end is not None]
    first, steady = (normal[0], normal[1:]) if normal else (None, [])
    waits = [r.wait for r in steady]
    durations = [_duration(r) for r in steady]
    fractions = [w / d for w, d in zip(waits, durations, strict=True) if d > 0]
    exposed = sum(waits) / sum(durations) if sum(durations) else 0.0
    worker, main = _stage_totals(normal)
    result: dict[str, Any] = {
        "source": rec.source, "steps": len(normal), "notes": list(rec.notes),
        "step_seconds": _stats(durations), "wait_seconds": _stats(waits),
        "exposed_input_fraction": exposed, "exposed_input_fraction_per_step": _stats(fractions),
        "first_step": {"wait": first.wait, "seconds": _duration(first)} if first else None,
        "worker_startup_seconds": (first.start + first.wait - rec.loader_started)
        if first and rec.loader_started else None,
        "stages": {"worker_seconds": worker, "main_seconds": main},
        "slowest_stage": None, "queue": _queue(normal),
        "device_step_seconds": _stats([r.device_seconds for r in steady
                                       if r.device_seconds is not None]) if any(
            r.device_seconds is not None for r in steady) else None,
        "gpu_utilization": _stats(rec.gpu_utilization) if rec.gpu_utilization else None,
        "timeline": [{"step": r.index, "kind": r.kind, "start": r.start - rec.started,
                      "wait": r.wait, "seconds": _duration(r),
                      "queue": (r.loader or {}).get("queue", {}).get("ready")} for r in rec.steps],
        "workers": _worker_spans(rec),
    }
    slowest = _slowest_stage(worker, main)
    if slowest:
        result["slowest_stage"] = {"stage": slowest[0], "share": slowest[1]}
    result["probes"] = _probes(rec.steps, durations)
    result["verdict"] = verdict(result, settings)
    return result


def _worker_spans(rec: Recording) -> list[dict[str, Any]]:
    spans = []
    for r in rec.steps:
        timing = (r.loader or {}).get("worker")
        if timing:
            spans.append({"batch": r.loader["batch"], "pid": timing["pid"],
                          "start": timing["start"] - rec.started,
                          "end": timing["end"] - rec.started, "stages": timing["stages"]})
    return spans


def _probes(steps: list[StepRecord], durations: list[float]) -> dict[str, Any]:
    oracle, scaled = _probe(steps, "oracle"), _probe(steps, "scaled")
    measured = float(np.median(durations)) if durations else None
    out: dict[str, Any] = {}
    if oracle:
        out["oracle_step_seconds"] = oracle
        out["speedup_with_perfect_input"] = measured / oracle if measured else None
    if oracle and scaled:
        out["scaled_step_seconds"] = scaled
        out["growth_at_2x_batch"] = scaled / oracle
    return out


def verdict(result: dict[str, Any], settings: ProfileSettings) -> dict[str, Any]:
    exposed = result["exposed_input_fraction"]
    stage = result["slowest_stage"]
    if exposed >= settings.moderately_input_bound:
        severity = "highly" if exposed >= settings.highly_input_bound else "moderately"
        name = stage["stage"] if stage else "loader"
        queue = result["queue"]
        why = (f"; the prefetch queue was empty at {queue['empty_fraction']:.0%} of requests, "
               "so the workers cannot keep up") if queue and queue["empty_fraction"] > 0.5 else ""
        blame = f"slowest stage: {name} ({stage['share']:.0%} of loader time)" if stage else \
            "no stage times for this iterable"
        return {"regime": "input-bound", "severity": severity, "stage": name,
                "text": f"{severity} input-bound: {exposed:.0%} of step time is spent waiting for "
                        f"data; {blame}{why}. Try: {ADVICE.get(name, ADVICE['loader'])}."}
    growth = result["probes"].get("growth_at_2x_batch")
    if growth is not None and growth < settings.overhead_growth:
        return {"regime": "overhead-bound", "severity": None, "stage": None,
                "text": f"overhead-bound: twice the batch took only {growth:.2f}x the step time, "
                        "so per-step overhead (Python, kernel launches) dominates. Try larger "
                        "batches, torch.compile or CUDA graphs."}
    tail = f" (2x batch took {growth:.2f}x the time)" if growth is not None else \
        " (run the scaling test to rule out per-step overhead)"
    return {"regime": "compute-bound", "severity": None, "stage": None,
            "text": f"compute-bound: only {exposed:.1%} of step time waits for data{tail}. "
                    "The input pipeline is not what limits this run."}
