"""Which stage the waiting is blamed on: the critical path at each request, not summed CPU time.

What kept a request waiting depends on the prefetch queue at that moment. With batches ready,
the workers were not the problem: the wait was the main process handing the batch over (the
loader's per-batch `main` stages: collate, pin, copy, batch transforms, whatever it reports).
With the queue empty, the loop waited for the workers, and that wall time is split by the
workers' own stage mix; summed worker seconds would count 16 workers' parallel work 16 times.
With no workers the stages ran in the training process itself and count as they are.

Each step's blame adds up to its wait: host-side, or, where the device was timed, the device's
idle time for want of data (the host stages scaled down to it, and any device idle beyond the
host's wait put on the device-side input work: the copy and device transforms).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from datapipe.profiling.batch_report import EMPTY, INLINE, READY, BatchReport

LOADER = "loader"              # producer time no stage accounts for (DALI, plain iterables)
HANDOFF = "hand-off"           # main-process time, batch ready, that no stage accounts for
DEVICE_INPUT = "device input"  # the device waiting for the copy or running input transforms
MAIN = " (main)"               # suffix of a main-process stage, as the report shows it


def culprits(report: BatchReport, host_wait: float) -> dict[str, float]:
    """Host seconds of one request's wait per stage."""
    weights = {f"{k}{MAIN}": v for k, v in report.main.items()}
    worker, kind = report.worker, report.kind
    rest = max(0.0, host_wait - sum(weights.values()))
    if kind == INLINE and worker:
        for stage, seconds in worker.items():
            weights[stage] = weights.get(stage, 0.0) + seconds
        rest = max(0.0, rest - sum(worker.values()))
    elif kind == READY:  # the batch was there: the rest is receiving it, in this process
        if rest > 0:
            weights[f"{HANDOFF}{MAIN}"] = rest
        rest = 0.0
    elif kind == EMPTY and worker:
        mix = sum(worker.values())
        for stage, seconds in worker.items():
            weights[stage] = weights.get(stage, 0.0) + rest * seconds / mix
        rest = 0.0
    if rest > 0:
        weights[LOADER] = weights.get(LOADER, 0.0) + rest
    return weights


def _scaled(weights: dict[str, float], host_wait: float, wait: float) -> dict[str, float]:
    """The weights made to add up to `wait` (the device's idle time where it was timed)."""
    total = sum(weights.values())
    covered = min(wait, host_wait) if total else 0.0
    out = {k: v * covered / total for k, v in weights.items()} if total else {}
    if wait > covered:  # the device idled longer than the host waited
        out[DEVICE_INPUT] = wait - covered
    return out


def critical_path(reports: list[BatchReport], host_waits: list[float],
                  waits: list[float]) -> dict[str, Any]:
    """Seconds of waiting per stage over the steps, and how much of it each kind of request
    (queue ready, empty, inline, unknown) accounts for."""
    seconds: dict[str, float] = defaultdict(float)
    by_kind: dict[str, float] = defaultdict(float)
    for report, host_wait, wait in zip(reports, host_waits, waits, strict=True):
        if wait <= 0:
            continue
        for stage, share in _scaled(culprits(report, host_wait), host_wait, wait).items():
            seconds[stage] += share
        by_kind[report.kind] += wait
    total = sum(seconds.values())
    return {"seconds": dict(seconds), "total": total,
            "by_request": {k: v / total for k, v in by_kind.items()} if total else {}}


def top_stage(path: dict[str, Any]) -> dict[str, Any] | None:
    """The stage most of the waiting is blamed on, with its side and share."""
    if not path["total"]:
        return None
    key = max(path["seconds"], key=path["seconds"].get)
    side = "main" if key.endswith(MAIN) else "device" if key == DEVICE_INPUT else \
        "loader" if key == LOADER else "workers"
    return {"stage": key.removesuffix(MAIN), "key": key, "side": side,
            "share": path["seconds"][key] / path["total"]}


def worker_parallelism(spans: list[tuple[float, float]]) -> float:
    """How many workers ran at once on average: busy seconds over the time any was busy."""
    busy = sum(end - start for start, end in spans if end > start)
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return busy / covered if covered > 0 else 1.0
