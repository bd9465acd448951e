"""A Chrome / Perfetto trace (JSON "traceEvents") of steps, waits, the GPU, worker batches and
the queue.

The GPU lane places device times on the host's timeline from the run's first device mark,
taken as completing when the host recorded it: close, not exact.
"""

from __future__ import annotations

import os
from typing import Any

_US = 1e6
HOST_TID, GPU_TID = 1, 2


def _thread(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _step_events(step: dict[str, Any], pid: int) -> list[dict[str, Any]]:
    start = step["start"] * _US
    label = "first step (start-up)" if step.get("first") else f"step {step['step']}"
    events = [
        {"ph": "X", "name": f"wait for batch ({step['kind']})", "cat": "input", "pid": pid,
         "tid": HOST_TID, "ts": start, "dur": step["wait"] * _US},
        {"ph": "X", "name": label, "cat": "compute", "pid": pid, "tid": HOST_TID,
         "ts": start + step["wait"] * _US,
         "dur": max(0.0, step["seconds"] - step["wait"]) * _US, "args": {"kind": step["kind"]}},
    ]
    device = step.get("device")
    if device:
        at = device["start"] * _US
        events.append({"ph": "X", "name": "GPU idle for data", "cat": "input", "pid": pid,
                       "tid": GPU_TID, "ts": at, "dur": device["wait"] * _US})
        events.append({"ph": "X", "name": f"GPU {label}", "cat": "compute", "pid": pid,
                       "tid": GPU_TID, "ts": at + device["wait"] * _US,
                       "dur": max(0.0, device["seconds"] - device["wait"]) * _US})
    if step["queue"] is not None:
        events.append({"ph": "C", "name": "ready batches", "pid": pid, "ts": start,
                       "args": {"ready": step["queue"]}})
    return events


def chrome_trace(r: dict[str, Any]) -> dict[str, Any]:
    pid = os.getpid()
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "training loop"}},
        _thread(pid, HOST_TID, "host")]
    if any(step.get("device") for step in r["timeline"]):
        events.append(_thread(pid, GPU_TID, "GPU (CUDA events)"))
    for step in r["timeline"]:
        events += _step_events(step, pid)
    for span in r["workers"]:
        events.append({"ph": "X", "name": f"build batch {span['batch']}", "cat": "loader",
                       "pid": span["pid"], "tid": span["pid"], "ts": span["start"] * _US,
                       "dur": (span["end"] - span["start"]) * _US, "args": span["stages"]})
    for worker_pid in sorted({s["pid"] for s in r["workers"]} - {pid}):
        events.append({"ph": "M", "name": "process_name", "pid": worker_pid,
                       "args": {"name": f"loader worker {worker_pid}"}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"verdict": r["verdict"]["text"]}}
