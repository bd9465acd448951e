"""The profile's outputs: a terminal report (verdict first), JSON, a trace and a page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datapipe.profiling.settings import ProfileSettings
from datapipe.profiling.verdict import mark_incomplete

BLAMED_STAGES_SHOWN = 4


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _seconds(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g} s" for k, v in values.items())


def _three(stats: dict[str, float]) -> str:
    return f"{_ms(stats['p50'])} / {_ms(stats['p95'])} / {_ms(stats['max'])}"


def render_text(r: dict[str, Any]) -> str:
    lines = [f"datapipe profile: {r['verdict']['text']}"]
    oracle = r["probes"].get("oracle")
    if oracle and not r["incomplete"]:
        lines.append(f"  {oracle['text']}")
    rows = _timing_rows(r) + _loader_rows(r) + _probe_rows(r)
    width = max(len(k) for k, _ in rows)
    lines += [""] + [f"  {k:<{width}}  {v}" for k, v in rows]
    lines += [f"  note: {n}" for n in r["notes"]]
    return "\n".join(lines)


def _timing_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    frac = r["exposed_input_fraction_per_step"]
    on_device = r["timing"] == "device"
    of = "GPU time idle for want of data" if on_device else "step time"
    rows = [
        ("steps measured", f"{r['steps']} ({r['source']})"),
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


def _loader_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    path = r["critical_path"]
    if path["total"]:
        shares = sorted(((v / path["total"], k) for k, v in path["seconds"].items()),
                        reverse=True)[:BLAMED_STAGES_SHOWN]
        rows.append(("waiting blamed on", ", ".join(f"{k} {share:.0%}" for share, k in shares
                                                    if share >= 0.005)))
    stages = r["stages"]
    if stages["built_in_training_process"]:
        rows.append(("batch stages (no workers)", _seconds(stages["worker_seconds"])))
    elif stages["worker_wall_seconds"]:
        rows.append(("worker stages, wall time", _seconds(stages["worker_wall_seconds"]) +
                     f" ({stages['worker_parallelism']:.1f} busy at once)"))
    if stages["main_seconds"]:
        rows.append(("main-process stages", _seconds(stages["main_seconds"])))
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


def save_outputs(results: dict[str, Any], settings: ProfileSettings) -> None:
    if settings.report:
        Path(settings.report).write_text(json.dumps(results, indent=1, default=float) + "\n")
    if settings.trace:
        from datapipe.profiling.trace import chrome_trace

        Path(settings.trace).write_text(json.dumps(chrome_trace(results)))
    if settings.html:
        from datapipe.profiling.plot import timeline_page

        Path(settings.html).write_text(timeline_page(results))


def withdraw_verdict(settings: ProfileSettings, text_path: Path, reason: str) -> str | None:
    """Rewrite a saved profile as partial (the run did not finish): the verdict withdrawn in
    every file. Returns the terminal report, or None when no profile was saved."""
    try:
        results = json.loads(Path(settings.report).read_text()) if settings.report else None
    except (OSError, ValueError):
        return None
    if not isinstance(results, dict) or "verdict" not in results:
        return None
    if results.get("incomplete"):  # what the script itself saw: "raised RuntimeError"
        reason = f"{reason}: {results['incomplete']}"
    results = mark_incomplete(results, reason)
    save_outputs(results, settings)
    text = render_text(results)
    text_path.write_text(text + "\n")
    return text
