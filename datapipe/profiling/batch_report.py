"""What a loader says of each batch it hands out (`LoaderBase._record` / `_report`), read once
and defensively: loaders differ (decode="dali" reports no queue nor worker timings; a plain
iterable nothing) and a missing or odd field reads as absent, never as a crash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# How the batch was obtained at the request (the queue depth the loader reported).
READY, EMPTY, INLINE, UNKNOWN = "ready", "empty", "inline", "unknown"


@dataclass(frozen=True)
class BatchReport:
    """What a loader said of one batch, checked once: missing or odd fields read as absent."""

    kind: str                       # READY, EMPTY, INLINE or UNKNOWN
    ready: float | None             # batches ready at the request
    capacity: float | None
    main: dict[str, float]          # main-process stage -> seconds
    worker: dict[str, float]        # worker stage -> seconds
    span: tuple[Any, float, float] | None  # (pid, start, end) of the worker's build
    batch: Any = None


NO_REPORT = BatchReport(UNKNOWN, None, None, {}, {}, None)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def stage_seconds(values: Any) -> dict[str, float]:
    """A stage -> seconds mapping, whatever the loader put there (None, missing, odd values)."""
    if not isinstance(values, dict):
        return {}
    return {str(k): float(v) for k, v in values.items() if _number(v) and v > 0}


def _kind(ready: Any, capacity: Any) -> str:
    if not _number(ready) or not _number(capacity):
        return UNKNOWN
    if capacity == 0:  # no workers: batches built on request, in this process
        return INLINE
    return READY if ready > 0 else EMPTY


def read_report(loader: dict[str, Any] | None) -> BatchReport:
    if not isinstance(loader, dict):
        return NO_REPORT
    queue = loader.get("queue") if isinstance(loader.get("queue"), dict) else {}
    timing = loader.get("worker") if isinstance(loader.get("worker"), dict) else {}
    ready, capacity = queue.get("ready"), queue.get("capacity")
    kind = _kind(ready, capacity)
    span = (timing["pid"], timing["start"], timing["end"]) \
        if all(_number(timing.get(k)) for k in ("pid", "start", "end")) else None
    return BatchReport(kind, ready if _number(ready) else None,
                       capacity if _number(capacity) else None,
                       stage_seconds(loader.get("main")), stage_seconds(timing.get("stages")),
                       span, loader.get("batch"))
