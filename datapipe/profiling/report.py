"""The profile's outputs: a terminal report (verdict first), JSON, a trace and a page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datapipe.profiling.recorder import Recording
from datapipe.profiling.settings import ProfileSettings


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def render_text(r: dict[str, Any]) -> str:
    lines = [f"datapipe profile: {r['verdict']['text']}", ""]
    step, wait, frac = r["step_seconds"], r["wait_seconds"], r["exposed_input_fraction_per_step"]
    rows = [
        ("steps measured", f"{r['steps']} ({r['source']})"),
        ("step time p50 / p95 / max", f"{_ms(step['p50'])} / {_ms(step['p95'])} / "
                                      f"{_ms(step['max'])}"),
        ("waiting for data p50 / p95 / max", f"{_ms(wait['p50'])} / {_ms(wait['p95'])} / "
                                             f"{_ms(wait['max'])}"),
        ("exposed input fraction", f"{r['exposed_input_fraction']:.1%} of step time (per step "
                                   f"p50 {frac['p50']:.1%}, p95 {frac['p95']:.1%}, "
                                   f"max {frac['max']:.1%})"),
    ]
    if r["first_step"]:
        rows.append(("first step (reported apart)", f"{_ms(r['first_step']['seconds'])}, of "
                     f"which waiting {_ms(r['first_step']['wait'])}"))
    if r["worker_startup_seconds"] is not None:
        rows.append(("worker start-up to first batch", _ms(r["worker_startup_seconds"])))
    if r["slowest_stage"]:
        rows.append(("slowest loader stage", f"{r['slowest_stage']['stage']} "
                     f"({r['slowest_stage']['share']:.0%} of loader time)"))
    stages = {**r["stages"]["worker_seconds"], **{f"{k} (main)": v for k, v in
                                                  r["stages"]["main_seconds"].items()}}
    if stages:
        rows.append(("loader seconds by stage", ", ".join(f"{k} {v:.2f}" for k, v in
                                                          stages.items())))
    q = r["queue"]
    if q:
        rows.append(("prefetch queue", f"{q['mean_ready']:.1f} of {q['capacity']} ready on "
                     f"average; empty at {q['empty_fraction']:.0%}, full at "
                     f"{q['full_fraction']:.0%} of requests"))
    probes = r["probes"]
    if "speedup_with_perfect_input" in probes:
        rows.append(("perfect input pipeline (oracle)", f"{_ms(probes['oracle_step_seconds'])} "
                     f"per step: at most {probes['speedup_with_perfect_input']:.2f}x faster"))
    if "growth_at_2x_batch" in probes:
        rows.append(("scaling test", f"2x batch -> {probes['growth_at_2x_batch']:.2f}x step "
                     "time"))
    rows.append(("GPU (CUDA events, NVML)", "absent: no CUDA device" if
                 r["device_step_seconds"] is None else
                 f"device step p50 {_ms(r['device_step_seconds']['p50'])}" + (
                     f", utilisation p50 {r['gpu_utilization']['p50']:.0f}%"
                     if r["gpu_utilization"] else "")))
    width = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    lines += [f"  note: {n}" for n in r["notes"]]
    return "\n".join(lines)


def save_outputs(rec: Recording, results: dict[str, Any], settings: ProfileSettings) -> None:
    if settings.report:
        Path(settings.report).write_text(json.dumps(results, indent=1, default=float) + "\n")
    if settings.trace:
        from datapipe.profiling.trace import chrome_trace

        Path(settings.trace).write_text(json.dumps(chrome_trace(results)))
    if settings.html:
        from datapipe.profiling.plot import timeline_page

        Path(settings.html).write_text(timeline_page(results))
