"""A Chrome / Perfetto trace (JSON "traceEvents") of steps, waits, worker batches, queue."""

from __future__ import annotations

import os
from typing import Any

_US = 1e6


def chrome_trace(r: dict[str, Any]) -> dict[str, Any]:
    pid = os.getpid()
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "training loop"}}]
    for step in r["timeline"]:
        start = step["start"] * _US
        events.append({"ph": "X", "name": f"wait for batch ({step['kind']})", "cat": "input",
                       "pid": pid, "tid": 1, "ts": start, "dur": step["wait"] * _US})
        compute = step["seconds"] - step["wait"]
        events.append({"ph": "X", "name": f"step {step['step']}", "cat": "compute", "pid": pid,
                       "tid": 1, "ts": start + step["wait"] * _US, "dur": max(0.0, compute) * _US,
                       "args": {"kind": step["kind"]}})
        if step["queue"] is not None:
            events.append({"ph": "C", "name": "ready batches", "pid": pid, "ts": start,
                           "args": {"ready": step["queue"]}})
    for span in r["workers"]:
        events.append({"ph": "X", "name": f"build batch {span['batch']}", "cat": "loader",
                       "pid": span["pid"], "tid": span["pid"], "ts": span["start"] * _US,
                       "dur": (span["end"] - span["start"]) * _US, "args": span["stages"]})
    for worker_pid in sorted({s["pid"] for s in r["workers"]} - {pid}):
        events.append({"ph": "M", "name": "process_name", "pid": worker_pid,
                       "args": {"name": f"loader worker {worker_pid}"}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"verdict": r["verdict"]["text"]}}
