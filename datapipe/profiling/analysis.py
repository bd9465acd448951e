"""From a recording to figures and a verdict: input-, compute- or overhead-bound.

Starvation is measured on the device where it was timed (its idle time for want of data over
the steady state's device time) and from host-side waiting otherwise. The first step (worker
start-up, lazy initialisation) is reported apart and counts in neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.profiling.batch_report import EMPTY, INLINE, READY, BatchReport, read_report
from datapipe.profiling.blame import critical_path, top_stage, worker_parallelism
from datapipe.profiling.recording import Recording, StepRecord
from datapipe.profiling.settings import ProfileSettings
from datapipe.profiling.verdict import oracle_agreement, verdict
from datapipe.system import available_cores


@dataclass
class _Measure:
    """Per-step waits and step times, from the device where it was timed, else the host."""

    source: str  # "device" or "host"
    steps: list[StepRecord]
    waits: list[float]
    seconds: list[float]


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0, "mean": 0.0}
    a = np.asarray(values)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
            "max": float(a.max()), "mean": float(a.mean())}


def _fraction(waits: list[float], seconds: list[float]) -> float:
    total = sum(seconds)
    return sum(waits) / total if total > 0 else 0.0


def _duration(r: StepRecord) -> float:
    return (r.end - r.start) if r.end is not None else 0.0


def _measure(steps: list[StepRecord], rec: Recording) -> _Measure:
    timed = [r for r in steps if r.device is not None]
    if rec.device_clock and timed:
        return _Measure("device", timed, [r.device.wait for r in timed],
                        [r.device.seconds for r in timed])
    return _Measure("host", steps, [r.wait for r in steps], [_duration(r) for r in steps])


def analyse(rec: Recording, settings: ProfileSettings) -> dict[str, Any]:
    normal = [r for r in rec.steps if r.kind == "normal" and r.end is not None]
    first, steady = (normal[0], normal[1:]) if normal else (None, [])
    reports = [read_report(r.loader) for r in rec.steps]  # by step index
    m = _measure(steady, rec)
    exposed = _fraction(m.waits, m.seconds)
    path = critical_path([reports[r.index] for r in m.steps], [r.wait for r in m.steps],
                         m.waits)
    host_waits, host_seconds = [r.wait for r in steady], [_duration(r) for r in steady]
    on_device = m.source == "device"
    result: dict[str, Any] = {
        "source": rec.source, "steps": len(normal), "measured_steps": len(m.steps),
        "notes": list(rec.notes), "incomplete": rec.incomplete, "sources": rec.sources,
        "timing": m.source, "device_clock": rec.device_clock,
        "num_workers": rec.num_workers, "cores": _cores_per_rank(),
        "command": settings.command,
        "step_seconds": _stats(host_seconds), "wait_seconds": _stats(host_waits),
        "exposed_input_fraction": exposed,
        "exposed_input_fraction_per_step": _stats(
            [w / s for w, s in zip(m.waits, m.seconds, strict=True) if s > 0]),
        "host_exposed_input_fraction": _fraction(host_waits, host_seconds),
        "device_wait_seconds": _stats(m.waits) if on_device else None,
        "device_step_seconds": _stats(m.seconds) if on_device else None,
        "first_step": _first_step(first),
        "worker_startup_seconds": (first.start + first.wait - rec.loader_started)
        if first and rec.loader_started else None,
        "stages": _stage_summary([reports[r.index] for r in normal]),
        "critical_path": path, "blame": top_stage(path),
        "queue": _queue([reports[r.index] for r in steady]),
        "gpu_utilization": _stats(rec.gpu_utilization) if rec.gpu_utilization else None,
        "timeline": _timeline(rec, reports, first), "workers": _worker_spans(rec, reports),
    }
    result["probes"] = _probes(rec.steps, m, exposed, settings)
    result["verdict"] = verdict(result, settings)
    return result


def _cores_per_rank() -> int:
    """The cores this process's loader may take: the machine's share of one rank, where
    torchrun runs several on it."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return max(1, available_cores() // (int(local) if local.isdigit() and int(local) else 1))


def _first_step(first: StepRecord | None) -> dict[str, Any] | None:
    if first is None:
        return None
    device = first.device
    return {"wait": first.wait, "seconds": _duration(first),
            "device_seconds": device.seconds if device else None}


def _stage_summary(reports: list[BatchReport]) -> dict[str, Any]:
    """Seconds per stage summed over batches, worker-side and main-process-side, and the
    worker side in wall time (divided by how many workers ran at once)."""
    worker: dict[str, float] = {}
    main: dict[str, float] = {}
    for report in reports:
        for stage, seconds in report.worker.items():
            worker[stage] = worker.get(stage, 0.0) + seconds
        for stage, seconds in report.main.items():
            main[stage] = main.get(stage, 0.0) + seconds
    spans = [(r.span[1], r.span[2]) for r in reports if r.span and r.kind != INLINE]
    parallel = worker_parallelism(spans) if spans else 1.0
    inline = bool(worker) and all(r.kind != READY and r.kind != EMPTY for r in reports)
    return {"worker_seconds": worker, "main_seconds": main, "worker_parallelism": parallel,
            "worker_wall_seconds": {k: v / parallel for k, v in worker.items()},
            "built_in_training_process": inline}


def _queue(reports: list[BatchReport]) -> dict[str, Any] | None:
    """Prefetch queue depth at the requests, where the loader reported one (workers)."""
    queued = [r for r in reports if r.kind in (READY, EMPTY)]
    if not queued:
        return None
    capacity = max(r.capacity for r in queued)
    depths = [r.ready for r in queued]
    return {"mean_ready": float(np.mean(depths)), "capacity": capacity,
            "empty_fraction": float(np.mean([d == 0 for d in depths])),
            "full_fraction": float(np.mean([d >= capacity for d in depths]))}


def _timeline(rec: Recording, reports: list[BatchReport],
              first: StepRecord | None) -> list[dict[str, Any]]:
    out = []
    for r in rec.steps:
        device = None
        if r.device is not None and rec.device_origin is not None:
            device = {"start": rec.device_origin - rec.started + r.device.request,
                      "wait": r.device.wait, "seconds": r.device.seconds}
        report = reports[r.index]
        out.append({"step": r.index, "kind": r.kind, "start": r.start - rec.started,
                    "wait": r.wait, "seconds": _duration(r),
                    "queue": report.ready if report.kind in (READY, EMPTY) else None,
                    "first": r is first, "device": device})
    return out


def _worker_spans(rec: Recording, reports: list[BatchReport]) -> list[dict[str, Any]]:
    spans = []
    for report in reports:
        if report.span is not None:
            pid, start, end = report.span
            spans.append({"batch": report.batch, "pid": pid, "start": start - rec.started,
                          "end": end - rec.started, "stages": report.worker})
    return spans


def _probe_cycles(steps: list[StepRecord], kind: str, on_device: bool) -> float | None:
    if on_device:
        cycles = [r.device.seconds for r in steps if r.kind == kind and r.device is not None]
    else:
        cycles = [_duration(r) for r in steps if r.kind == kind and r.end is not None]
    return float(np.median(cycles[1:] or cycles)) if cycles else None


def _probes(steps: list[StepRecord], m: _Measure, exposed: float,
            settings: ProfileSettings) -> dict[str, Any]:
    """Oracle (cached batch) and scaling-test step times, from the same source as the steady
    steps, and what the oracle says of the measured starvation."""
    on_device = m.source == "device"
    oracle, scaled = _probe_cycles(steps, "oracle", on_device), \
        _probe_cycles(steps, "scaled", on_device)
    out: dict[str, Any] = {}
    if oracle and sum(m.seconds) > 0:
        # The mean step, as the starvation figure (summed waits over summed steps) uses.
        mean = float(np.mean(m.seconds))
        out["oracle_step_seconds"] = oracle
        out["speedup_with_perfect_input"] = mean / oracle
        out["oracle"] = oracle_agreement(1 - oracle / mean, exposed, settings)
    if oracle and scaled:
        out["scaled_step_seconds"] = scaled
        out["growth_at_2x_batch"] = scaled / oracle
    return out
