"""The profile's figures as (name, value) rows, in words and units people read: the terminal
report prints them and the page shows the same rows."""

from __future__ import annotations

from typing import Any

from datapipe.profiling.stage_words import stage_words
from datapipe.wording import format_duration, plural

BLAMED_STAGES_SHOWN = 4


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _seconds(values: dict[str, float]) -> str:
    return ", ".join(f"{stage_words(k)} {format_duration(v)}" for k, v in values.items())


def _three(stats: dict[str, float]) -> str:
    return f"{_ms(stats['p50'])} / {_ms(stats['p95'])} / {_ms(stats['max'])}"


def figure_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's figures as (name, value) rows: the terminal report and the page show
    these same rows."""
    return _timing_rows(r) + _loader_rows(r) + _probe_rows(r)


def _timing_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    frac = r["exposed_input_fraction_per_step"]
    on_device = r["timing"] == "device"
    of = "GPU time idle for want of data" if on_device else "step time"
    rows = [
        ("steps measured", _steps_measured(r)),
        ("exposed input fraction", f"{r['exposed_input_fraction']:.1%} of {of} (per step "
                                   f"p50 {frac['p50']:.1%}, p95 {frac['p95']:.1%}, "
                                   f"max {frac['max']:.1%})"),
    ]
    if on_device:
        host = r["host_exposed_input_fraction"]
        hidden = " (the GPU ran queued work meanwhile)" if \
            host > r["exposed_input_fraction"] + 0.01 else ""
        rows.append(("host waiting, for comparison", f"{host:.1%} of step time{hidden}"))
        rows.append(("GPU step p50 / p95 / max", _three(r["device_step_seconds"])))
        rows.append(("GPU idle for data p50 / p95 / max", _three(r["device_wait_seconds"])))
    rows.append(("step time p50 / p95 / max", _three(r["step_seconds"])))
    rows.append(("waiting for data p50 / p95 / max", _three(r["wait_seconds"])))
    first = r["first_step"]
    if first:
        rows.append(("first step (reported apart)", f"{_ms(first['seconds'])}, of which "
                     f"waiting {_ms(first['wait'])}"))
    if r["worker_startup_seconds"] is not None:
        rows.append(("worker start-up to first batch", _ms(r["worker_startup_seconds"])))
    return rows


def _steps_measured(r: dict[str, Any]) -> str:
    """How many steps the figures cover, of how many the loop ran, and the probes beside."""
    text = f"{r['measured_steps']:,} of {plural(r['steps'], 'step')} ({r['source']})"
    if r["first_step"]:
        text += "; the first, start-up, is reported apart"
    probes = sum(s["kind"] != "normal" for s in r["timeline"])
    if probes:
        text += f"; {plural(probes, 'probe step')} beside them"
    return text


def _loader_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    path = r["critical_path"]
    if path["total"]:
        shares = sorted(((v / path["total"], k) for k, v in path["seconds"].items()),
                        reverse=True)[:BLAMED_STAGES_SHOWN]
        rows.append(("waiting blamed on", ", ".join(f"{stage_words(k)} {share:.0%}"
                                                    for share, k in shares if share >= 0.005)))
    stages = r["stages"]
    if stages["built_in_training_process"]:
        rows.append(("batch stages (no workers)", _seconds(stages["worker_seconds"])))
    elif stages["worker_wall_seconds"]:
        rows.append(("worker stages, wall time", _seconds(stages["worker_wall_seconds"]) +
                     f" ({stages['worker_parallelism']:.1f} busy at once)"))
    if stages["main_seconds"]:
        rows.append(("training-process stages", _seconds(stages["main_seconds"])))
    q = r["queue"]
    if r.get("sources"):
        rows.append(("drawn per source", _per_source(r["sources"])))
    if q:
        rows.append(("prefetch queue", f"{q['mean_ready']:.1f} of {q['capacity']} ready on "
                     f"average; empty at {q['empty_fraction']:.0%}, full at "
                     f"{q['full_fraction']:.0%} of requests"))
    return rows


def _per_source(sources: dict[str, dict[str, int]]) -> str:
    """Each source's share of what the mixture drew: by tokens for text, else by samples."""
    unit = "tokens" if all("tokens" in c for c in sources.values()) else "samples"
    total = sum(c[unit] for c in sources.values()) or 1
    return ", ".join(f"{name} {c[unit] / total:.1%} ({c[unit]:,} {unit})"
                     for name, c in sources.items())


def _probe_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    probes = r["probes"]
    if "speedup_with_perfect_input" in probes:
        rows.append(("perfect input pipeline (oracle)", f"{_ms(probes['oracle_step_seconds'])} "
                     f"per step: at most {probes['speedup_with_perfect_input']:.2f}x faster"))
    if "growth_at_2x_batch" in probes:
        rows.append(("scaling test", f"2x batch -> {probes['growth_at_2x_batch']:.2f}x step "
                     "time"))
    gpu = "absent: no CUDA device"
    if r["device_clock"]:
        gpu = f"timed by {r['device_clock']}"
        if r["gpu_utilization"]:
            gpu += f", NVML utilisation p50 {r['gpu_utilization']['p50']:.0f}%"
    rows.append(("GPU", gpu))
    return rows
